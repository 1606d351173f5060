package testutil

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
)

// RoundRobin returns a load balancer in front of targets: each request goes
// to the next one, streamed responses are flushed as they come, and the
// front's own errors are logged to t. It cannot cut a response itself
// (EOFAtLength), so a response the client sees cut short was cut by a
// target.
func RoundRobin(t testing.TB, targets []*url.URL) http.Handler {
	return EOFAtLength(roundRobin(t, targets, nil))
}

// roundRobin is RoundRobin's stock httputil.ReverseProxy; outBody, when
// not nil, wraps each forwarded body (a test's hook into the transport's
// reads).
func roundRobin(t testing.TB, targets []*url.URL, outBody func(io.ReadCloser) io.ReadCloser) *httputil.ReverseProxy {
	var next atomic.Int64
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[int(next.Add(1)-1)%len(targets)])
			if outBody != nil && r.Out.Body != nil {
				r.Out.Body = outBody(r.Out.Body)
			}
		},
		FlushInterval: -1,
		ErrorLog:      log.New(tWriter{t}, "front: ", 0),
	}
}

// tWriter writes log lines to a test's log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}

// EOFAtLength gives h request bodies that report io.EOF with their last
// byte, as the proxy's countingBody does. Without it a stock
// httputil.ReverseProxy now and then cuts a response short on a loaded
// machine: when it writes the response headers, the server closes the
// request body, while the transport's write loop may still make its last
// read to confirm EOF; that read gets http.ErrBodyReadAfterClose, the
// transport closes the target's connection, and the client sees
// "unexpected EOF" (TestRoundRobinLateEOFRead).
func EOFAtLength(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 0 {
			r.Body = &lengthBody{ReadCloser: r.Body, left: r.ContentLength}
		}
		h.ServeHTTP(w, r)
	})
}

// lengthBody ends at its Content-Length without reading past it.
type lengthBody struct {
	io.ReadCloser
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left <= 0 && (err == nil || err == io.EOF) {
		return n, io.EOF
	}
	return n, err
}
