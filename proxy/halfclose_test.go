package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTruncatedBodyHalfClose sends a generate request whose body is shorter
// than its Content-Length and half-closes the connection. The proxy must
// not answer 200 with an empty body (it used to: nothing was written for a
// gone client and the server filled in a 200); the client sees the
// connection dropped, and the request is counted as 499.
func TestTruncatedBodyHalfClose(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{}`))
	}))
	defer up.Close()
	f := newFixture(t, up.URL, Options{Rewrite: RewriteOptions{Enabled: true}})

	conn, err := net.Dial("tcp", strings.TrimPrefix(f.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"contents\":")
	conn.(*net.TCPConn).CloseWrite()

	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode == http.StatusOK {
			t.Fatalf("truncated body answered 200 with %q; want the connection dropped", body)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(f.m.ClientCancels) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(f.m.ClientCancels); got != 1 {
		t.Errorf("client_cancels_total = %v, want 1", got)
	}
}

// TestUploadURLPublicURL: behind a TLS-terminating load balancer the proxy
// sees plain http; with Options.PublicURL the upload URL points at the
// public https address (and its path prefix), not at http://<Host>.
func TestUploadURLPublicURL(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Goog-Upload-Url", "http://"+r.Host+"/upload/v1beta/files?upload_id=AB%2Fc&upload_protocol=resumable")
	})
	f := newFixture(t, be.URL, Options{BasePath: "/gemini", PublicURL: mustURL(t, "https://gemini-proxy.example.com/gemini/")})
	req, _ := http.NewRequest("POST", f.front.URL+"/gemini/upload/v1beta/files", strings.NewReader(`{}`))
	res, _ := do(t, rawClient(), req)
	want := "https://gemini-proxy.example.com/gemini/upload/v1beta/files?upload_id=AB%2Fc&upload_protocol=resumable"
	if got := res.Header.Get("X-Goog-Upload-Url"); got != want {
		t.Errorf("X-Goog-Upload-Url = %q, want %q", got, want)
	}
}
