package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUpstreamCutResetsClient: when the upstream cuts a response without
// Content-Length mid-body, an HTTP/1.0 client of the proxy (nginx proxies
// with HTTP/1.0 by default) must see the cut: for such a response a clean
// close means "complete", so the proxy resets the connection (issue 16
// item 1). The client still gets the bytes that were sent before the cut.
func TestUpstreamCutResetsClient(t *testing.T) {
	for _, tc := range []struct {
		name, path, ctype string
	}{
		{"unary", "/v1beta/models/gemini-2.5-flash:generateContent", "application/json"},
		{"sse", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "text/event-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const part = `{"candidates":[{"content":{"parts":[{"text":"half an answ`
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(200)
				io.WriteString(w, part)
				http.NewResponseController(w).Flush()
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close() // mid-chunk: the proxy's transport sees an unexpected EOF
				}
			})
			f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
			conn, err := net.Dial("tcp", strings.TrimPrefix(f.front.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
			io.WriteString(conn, "POST "+tc.path+" HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(len(body))+"\r\n\r\n"+body)
			got, err := io.ReadAll(conn)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("HTTP/1.0 client read %q, then %v; want a connection reset", got, err)
			}
			if !strings.Contains(string(got), part) {
				t.Errorf("HTTP/1.0 client read %q, want the part sent before the cut", got)
			}
		})
	}
}
