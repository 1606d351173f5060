package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestBodyLimitLyingLength checks the limit when http.MaxBytesReader is
// skipped for a known Content-Length: a request whose body is longer than
// its Content-Length sends the upstream no byte past Content-Length, in
// process (no net/http server to cut it) and over a connection.
func TestBodyLimitLyingLength(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{MaxBodyBytes: 100, Rewrite: RewriteOptions{Enabled: true}})
	big := strings.Repeat("x", 1000)
	for _, target := range []string{"/v1beta/models/m:countTokens", "/v1beta/models/m:generateContent", "/upload/v1beta/files"} {
		r := httptest.NewRequest("POST", target, strings.NewReader(big))
		r.ContentLength = 50
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Errorf("%s in process: %d", target, w.Code)
		}
	}
	// Over a connection: the server reads 50 bytes as the body and the
	// rest as the next request, which is not one.
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))                                                                                   //nolint:errcheck // test
	io.WriteString(conn, "POST /v1beta/models/m:countTokens HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 50\r\n\r\n"+big) //nolint:errcheck // read below
	io.ReadAll(conn)                                                                                                                     //nolint:errcheck // the server closes it
	if n := len(be.requests()); n != 4 {
		t.Errorf("upstream got %d requests, want 4 (each cut at its Content-Length)", n)
	}
	for _, s := range be.requests() {
		if len(s.Body) > 50 {
			t.Errorf("upstream got %d bytes of a body sent with Content-Length 50", len(s.Body))
		}
	}
}

// TestBodyLimitChunked checks that a body of unknown length over the limit
// is still refused with 413 at every size around the limit, and one at the
// limit goes through.
func TestBodyLimitChunked(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{MaxBodyBytes: 100, Rewrite: RewriteOptions{Enabled: true}})
	c := rawClient()
	for _, n := range []int{99, 100, 101, 4096} {
		for _, target := range []string{"/v1beta/models/m:countTokens", "/v1beta/models/m:generateContent", "/upload/v1beta/files"} {
			req, _ := http.NewRequest("POST", f.front.URL+target, io.MultiReader(strings.NewReader(strings.Repeat("x", n))))
			res, body := do(t, c, req)
			if n > 100 {
				checkGeminiError(t, res, body, 413, "INVALID_ARGUMENT")
			} else if res.StatusCode == 413 {
				t.Errorf("%s, %d bytes chunked: 413 under the limit", target, n)
			}
		}
	}
	for _, s := range be.requests() {
		if len(s.Body) > 100 {
			t.Errorf("upstream got %d bytes over the limit", len(s.Body))
		}
	}
}
