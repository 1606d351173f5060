package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// logHandlers are the two ways a configured logger writes the access log:
// slog's handler (what finish did before the encoder, and still does for a
// handler NewLogHandler did not build) and NewLogHandler's.
func logHandlers(w io.Writer, json bool) []struct {
	name string
	h    slog.Handler
} {
	var ref slog.Handler = slog.NewTextHandler(w, nil)
	if json {
		ref = slog.NewJSONHandler(w, nil)
	}
	return []struct {
		name string
		h    slog.Handler
	}{{"slog", ref}, {"encoder", NewLogHandler(w, json, nil)}}
}

// BenchmarkAccessLog formats and writes one access-log line of the usual
// shape (14 attributes) through slog's handler and through the encoder,
// to a writer that keeps nothing.
//
//	go test ./proxy -run '^$' -bench AccessLog -benchmem -count 6
func BenchmarkAccessLog(b *testing.B) {
	attrs := accessAttrs()
	for _, json := range []bool{false, true} {
		for _, lh := range logHandlers(discard{}, json) {
			b.Run(map[bool]string{false: "text", true: "json"}[json]+"/"+lh.name, func(b *testing.B) {
				b.ReportAllocs()
				ctx := b.Context()
				for b.Loop() {
					logAccess(ctx, lh.h, time.Now(), slog.LevelInfo, "request", attrs[:])
				}
			})
		}
	}
}

// BenchmarkAccessLogRequest is BenchmarkHandler's small unary request with
// rewriting on (as serve runs it) logged through slog's text handler and
// through the encoder: the whole request's cost of the access log.
//
//	go test ./proxy -run '^$' -bench AccessLogRequest -benchmem -count 6
func BenchmarkAccessLogRequest(b *testing.B) {
	up := mustURL(b, "http://upstream.invalid")
	answer := benchBody(1700)
	tr := &fixedTransport{body: answer, header: http.Header{"Content-Type": {"application/json; charset=UTF-8"}}}
	body := bench.Sizes()[0].Body
	for _, json := range []bool{false, true} {
		for _, lh := range logHandlers(discard{}, json) {
			h, err := New(Options{Upstream: up, Transport: tr, Rewrite: RewriteOptions{Enabled: true}, OnServed: func(string, string, bool) {}, BodyIdleTimeout: time.Minute},
				slog.New(lh.h), metrics.New(prometheus.NewRegistry()))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(map[bool]string{false: "text", true: "json"}[json]+"/"+lh.name, func(b *testing.B) {
				b.ReportAllocs()
				target := "http://proxy.test/v1beta/models/gemini-2.5-flash:generateContent"
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Goog-Api-Key", "bench-key")
					w := &discardWriter{h: http.Header{}}
					h.ServeHTTP(w, req)
					if w.n < len(answer) {
						b.Fatalf("answer of %d bytes, want %d", w.n, len(answer))
					}
				}
			})
		}
	}
}
