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
