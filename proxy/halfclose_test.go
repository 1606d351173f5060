package proxy

import (
	"bufio"
	"fmt"
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

// TestBodyIdleTimeout: a client that sends headers and part of its body,
// then stalls, gets 408 after Options.BodyIdleTimeout on a rewritten route
// and on a pass-through route; a slow body that keeps moving, and a
// response streamed for longer than the timeout after the body ended, are
// not cut.
func TestBodyIdleTimeout(t *testing.T) {
	// Generous against scheduling delays on a loaded machine: the moving
	// body below writes every idle/10.
	const idle = time.Second
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.Contains(r.URL.Path, "stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 4 {
				fmt.Fprintf(w, "data: {\"n\":%d}\r\n\r\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(idle / 2)
			}
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer up.Close()
	f := newFixture(t, up.URL, Options{BodyIdleTimeout: idle, Rewrite: RewriteOptions{Enabled: true}})
	addr := strings.TrimPrefix(f.front.URL, "http://")

	for _, path := range []string{"/v1beta/models/gemini-2.5-flash:generateContent", "/v1beta/models/gemini-2.5-flash:countTokens"} {
		t.Run("stalled "+path, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			start := time.Now()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"contents\":", path)
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no response to a stalled body: %v", err)
			}
			if res.StatusCode != http.StatusRequestTimeout {
				t.Errorf("status = %d, want 408", res.StatusCode)
			}
			if d := time.Since(start); d < idle || d > 5*time.Second {
				t.Errorf("answered after %v, want about %v", d, idle)
			}
		})
	}

	t.Run("slow but moving body, then a long stream", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			body := `{"contents":[{"role":"user","parts":[{"text":"hello there"}]}]}`
			for i := range len(body) / 8 {
				pw.Write([]byte(body[i*8 : i*8+8]))
				time.Sleep(idle / 10)
			}
			pw.Write([]byte(body[len(body)/8*8:]))
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", pr)
		res, body := do(t, rawClient(), req)
		if res.StatusCode != http.StatusOK || strings.Count(string(body), "data: ") != 4 {
			t.Errorf("status %d, body %q: want 200 and all 4 events", res.StatusCode, body)
		}
	})
}
