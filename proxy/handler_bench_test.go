package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// fixedTransport answers every request with one fixed response after
// draining the request body, without a network: what remains of a request
// is the proxy's own work.
type fixedTransport struct {
	body   []byte
	header http.Header
}

func (f *fixedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: f.header.Clone(), Body: io.NopCloser(bytes.NewReader(f.body)),
		ContentLength: -1, Request: req, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct {
	h http.Header
	n int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// SetReadDeadline accepts the body's idle deadline, as the server's
// writer does.
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }

// storeHandler is a Handler wired to a local cache.Store as serve wires
// it (cmd/gemini-proxy/serve.go): the Verifier, the served recorder, the
// ledger's and Interactions' store, an OnExchange that reads no text.
func storeHandler(b *testing.B, up *url.URL, tr http.RoundTripper, on bool) http.Handler {
	b.Helper()
	store, err := cache.New(cache.Options{MaxBytes: 64 << 20, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	o := Options{Upstream: up, Transport: tr, Rewrite: RewriteOptions{Enabled: on}, BodyIdleTimeout: time.Minute}
	o.Verifier = func(tenant string) rewrite.Verifier { return store.Verifier(tenant) }
	o.Interactions = InteractionsOptions{Store: store}
	o.Ledger = LedgerOptions{Store: store}
	if on {
		// As serve wires it (servedRecordsRead): a local store with
		// rewriting off records no answer, since nothing would read it.
		o.ServedText = func(tenant string) ServedWriter { return store.ServedRecorder(tenant) }
	}
	o.ExchangeWithoutText = true
	o.OnExchange = func(ex Exchange) {
		if ex.Complete && ex.Status == http.StatusOK && ex.Report != nil && len(ex.Report.Blocks) > 0 {
			store.RecordBlocks(ex.Tenant, ex.Report.ConversationID(), ex.Report.Blocks)
		}
	}
	h, err := New(o, benchLogger(), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// benchLogger logs as serve does (cmd/gemini-proxy/server.go): text lines
// through NewLogHandler, here to io.Discard.
func benchLogger() *slog.Logger {
	return slog.New(NewLogHandler(io.Discard, false, nil))
}

// sseAnswer returns a stream of n events of about 200 bytes each, the
// last with usageMetadata.
func sseAnswer(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		b.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":"chunk ` + strconv.Itoa(i) + ` of the answer, with a few words of text in it, as a model streams them"}],"role":"model"},"index":0}]`)
		if i == n-1 {
			b.WriteString(`,"usageMetadata":{"promptTokenCount":70,"candidatesTokenCount":900,"totalTokenCount":970},"modelVersion":"gemini-2.5-flash"`)
		}
		b.WriteString("}\r\n\r\n")
	}
	return b.Bytes()
}

// BenchmarkHandler runs one request through the handler in process, with
// no network (fixedTransport, discardWriter), next to the fair baseline:
// an httputil.ReverseProxy with a BufferPool on the same transport. What
// differs is the proxy's own CPU and allocations per request. Request
// shapes are the bench's (small, medium 70 KB, large 1 MB); answers are
// the fake Gemini's unary answer, a 100-chunk SSE stream and a 256 KB
// unary answer (issue 17's per-chunk and large-answer targets). Targets:
// plain, off (rewrite disabled), on (rewrite on, as serve runs it, without
// the cache and its Verifier).
//
//	go test ./proxy -run '^$' -bench Handler -benchmem -count 5
func BenchmarkHandler(b *testing.B) {
	sizes := bench.Sizes()
	answers := []struct {
		name, path, ctype string
		body              []byte
	}{
		{"unary", ":generateContent", "application/json; charset=UTF-8", benchBody(1700)},
		{"sse100", ":streamGenerateContent?alt=sse", "text/event-stream", sseAnswer(100)},
		{"unary256K", ":generateContent", "application/json; charset=UTF-8", benchBody(256 << 10)},
	}
	up := mustURL(b, "http://upstream.invalid")
	for _, a := range answers {
		tr := &fixedTransport{body: a.body, header: http.Header{"Content-Type": {a.ctype}}}
		plain := &httputil.ReverseProxy{
			Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
			Transport:  tr,
			BufferPool: bufferPool{},
		}
		if a.ctype == "text/event-stream" {
			plain.FlushInterval = -1
		}
		handlers := []struct {
			name string
			h    http.Handler
		}{{"plain", plain}}
		for _, on := range []bool{false, true} {
			h, err := New(Options{Upstream: up, Transport: tr, Rewrite: RewriteOptions{Enabled: on}, OnServed: func(string, string, bool) {}, BodyIdleTimeout: time.Minute},
				benchLogger(), metrics.New(prometheus.NewRegistry()))
			if err != nil {
				b.Fatal(err)
			}
			handlers = append(handlers, struct {
				name string
				h    http.Handler
			}{map[bool]string{false: "off", true: "on"}[on], h})
		}
		for _, on := range []bool{false, true} {
			handlers = append(handlers, struct {
				name string
				h    http.Handler
			}{map[bool]string{false: "store-off", true: "store-on"}[on], storeHandler(b, up, tr, on)})
		}
		for _, size := range sizes {
			if a.name != "unary" && size.Name != "small" {
				continue
			}
			for _, hd := range handlers {
				b.Run(size.Name+"/"+a.name+"/"+hd.name, func(b *testing.B) {
					b.ReportAllocs()
					target := "http://proxy.test/v1beta/models/gemini-2.5-flash" + a.path
					for b.Loop() {
						req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(size.Body))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("X-Goog-Api-Key", "bench-key")
						w := &discardWriter{h: http.Header{}}
						hd.h.ServeHTTP(w, req)
						if w.n < len(a.body) || strings.Contains(w.h.Get("Content-Type"), "json") && a.ctype != w.h.Get("Content-Type") {
							b.Fatalf("answer of %d bytes, want %d", w.n, len(a.body))
						}
					}
				})
			}
		}
	}
}
