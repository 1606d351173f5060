package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// TestHandlerAllocs bounds what the handler allocates per generate request
// above a plain httputil.ReverseProxy on the same transport (issue 17 item
// 4), for the bench's small request (one the rewrite cannot change) with
// rewriting off and on. The bounds are the counts after the request's
// state became one allocation (its context, URL copy, ResponseWriter,
// counting body and tap body are its fields), the copy buffer pool
// stopped allocating on Put, and the report header of an unchanged
// request stopped using fmt; before, they were 18 (off) and 33 (on).
func TestHandlerAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	up := mustURL(t, "http://upstream.invalid")
	tr := &fixedTransport{body: benchBody(1700), header: http.Header{"Content-Type": {"application/json; charset=UTF-8"}}}
	plain := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }, Transport: tr, BufferPool: bufferPool{}}
	body := bench.Sizes()[0].Body
	allocs := func(h http.Handler) float64 {
		return testing.AllocsPerRun(200, func() {
			req, _ := http.NewRequest(http.MethodPost, "http://proxy.test/v1beta/models/gemini-2.5-flash:generateContent", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Goog-Api-Key", "alloc-key")
			w := &discardWriter{h: http.Header{}}
			h.ServeHTTP(w, req)
			if w.n < 1700 {
				t.Fatalf("answer of %d bytes", w.n)
			}
		})
	}
	base := allocs(plain)
	for _, tc := range []struct {
		name string
		on   bool
		max  float64
	}{
		{"off", false, 12},
		{"on", true, 25},
	} {
		h, err := New(Options{Upstream: up, Transport: tr, Rewrite: RewriteOptions{Enabled: tc.on}, OnServed: func(string, string, bool) {}, BodyIdleTimeout: time.Minute},
			slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		got := allocs(h) - base
		t.Logf("rewrite %s: %v allocations a request above the plain proxy's %v", tc.name, got, base)
		if got > tc.max {
			t.Errorf("rewrite %s: %v allocations a request above the plain proxy's %v, want at most %v", tc.name, got, base, tc.max)
		}
	}
}

// TestReportHeaderAsHeader checks reportHeader against Report.Header on
// reports of requests left as they came and of rewritten ones.
func TestReportHeaderAsHeader(t *testing.T) {
	sizes := bench.Sizes()
	reps := []*rewrite.Report{{}, {BytesBefore: 1, BytesAfter: 1}, {BytesBefore: 1048576, BytesAfter: 99}}
	for _, s := range sizes {
		_, rep, err := rewrite.Request(s.Body, rewrite.DefaultOptions(), nil)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		reps = append(reps, rep)
	}
	changed := 0
	for _, rep := range reps {
		if rep.Changed() {
			changed++
		}
		if got, want := reportHeader(rep), rep.Header(); got != want {
			t.Errorf("reportHeader = %q, want %q (Header)", got, want)
		}
	}
	if changed == 0 || changed == len(reps) {
		t.Errorf("%d of %d reports changed: want both kinds", changed, len(reps))
	}
	if n := testing.AllocsPerRun(20, func() { reportHeader(reps[1]) }); n > 1 {
		t.Errorf("reportHeader of an unchanged report: %v allocations, want at most 1", n)
	}
}

// TestStateCtx checks the request context that carries the state: it
// gives the state under stateKey and the parent's values, deadline and
// cancellation otherwise, and a context made under it is cancelled with
// the parent.
func TestStateCtx(t *testing.T) {
	type otherKey struct{}
	parent, cancel := context.WithCancel(context.WithValue(t.Context(), otherKey{}, "v"))
	st := &reqState{}
	st.ctx = stateCtx{Context: parent, st: st}
	ctx := context.Context(&st.ctx)
	if stateFrom(ctx) != st {
		t.Error("stateFrom does not find the state")
	}
	if got := ctx.Value(otherKey{}); got != "v" {
		t.Errorf("parent's value = %v, want v", got)
	}
	if ctx.Done() != parent.Done() {
		t.Error("Done is not the parent's")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if stateFrom(child) != st {
		t.Error("stateFrom does not find the state under a child context")
	}
	cancel()
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a child context was not cancelled with the parent")
	}
	if ctx.Err() != context.Canceled {
		t.Errorf("Err = %v, want context.Canceled", ctx.Err())
	}
}

// TestBufferPool checks the copy buffers: full size, reused, and Put
// allocates nothing (it allocated a slice header every request); a
// buffer too small is not pooled.
func TestBufferPool(t *testing.T) {
	var p bufferPool
	if b := p.Get(); len(b) != copyBufferSize {
		t.Fatalf("len(Get()) = %d, want %d", len(b), copyBufferSize)
	}
	p.Put(make([]byte, 10)) // dropped
	if b := p.Get(); len(b) != copyBufferSize {
		t.Fatalf("after a short Put: len(Get()) = %d, want %d", len(b), copyBufferSize)
	}
	if raceEnabled {
		return // sync.Pool drops items at random under the race detector
	}
	b := p.Get()
	if n := testing.AllocsPerRun(100, func() { p.Put(b); b = p.Get() }); n != 0 {
		t.Errorf("Put and Get: %v allocations, want 0", n)
	}
}

// TestChildCacheConcurrent checks that concurrent first uses of a label
// set all get a child the vector exports, and later uses the remembered
// one, under the race detector too.
func TestChildCacheConcurrent(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := hotMetrics{m: m}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				h.rewriteBytes([]string{metrics.StageBefore, metrics.StageAfter}[(i+j)%2]).Add(1)
				h.rewrite(metrics.ModeOn, metrics.OutcomeUnchanged).Inc()
			}
		}()
	}
	wg.Wait()
	for _, stage := range []string{metrics.StageBefore, metrics.StageAfter} {
		if got := testutil.ToFloat64(m.RewriteBytes.WithLabelValues(stage)); got != 800 {
			t.Errorf("rewrite bytes %s = %v, want 800", stage, got)
		}
	}
	if got := testutil.ToFloat64(m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeUnchanged)); got != 1600 {
		t.Errorf("rewrite requests = %v, want 1600", got)
	}
}
