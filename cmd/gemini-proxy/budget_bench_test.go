package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/config"
)

// BenchmarkRewriteLiveHeap measures what the memory budget's
// rewriteBudgetFactor (proxy/budget.go) stands for: the live heap that
// concurrent rewritten requests hold, per byte of their bodies. Each
// iteration sends conc copies of the bench's 1 MB conversation
// (bench.Sizes' large) at once through serveConfig with rewriting on and
// no memory budget or in-flight bound (nothing is turned away); the fake
// upstream holds every request until all conc arrived, so that all are
// rewritten and in flight together, then answers them together, so that
// their responses, served recordings and ledger settles overlap too.
//
// The collector runs at GOGC=5 meanwhile and a sampler keeps the largest
// /gc/heap/live:bytes it sees (the live heap as of each collection),
// minus the live heap before the round (after a warm-up round, so that
// the caches and the ledger's memo are in the baseline, but after two
// collections, so that the pooled body buffers are not). Reported:
//
//	peak-live/body: that peak ÷ (conc × body bytes), the whole lifetime;
//	held-live/body: the live heap after a forced collection while every
//	                request is held at the upstream, ÷ (conc × body).
//
// Client and fake upstream share the process; the client sends one
// shared body slice, the upstream discards what it reads, so neither
// holds a copy per request.
//
//	go test ./cmd/gemini-proxy -run '^$' -bench RewriteLiveHeap -benchtime 5x -count 3
func BenchmarkRewriteLiveHeap(b *testing.B) {
	const conc = 32
	body := bench.Sizes()[len(bench.Sizes())-1].Body
	if len(body) < 1<<20 {
		b.Fatalf("large body is %d bytes, want 1 MB", len(body))
	}
	fake := bench.FakeGemini()
	var mu sync.Mutex
	var arrived int
	release := make(chan struct{})
	held := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is read by the fake; hold before answering.
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		mu.Lock()
		arrived++
		rel := release
		if arrived == conc {
			close(held)
		}
		mu.Unlock()
		<-rel
		r.Body = io.NopCloser(bytes.NewReader(b[:0]))
		r.ContentLength = 0
		fake.ServeHTTP(w, r)
	}))
	defer up.Close()

	c := config.Default()
	c.Server.Listen, c.Admin.Listen = "127.0.0.1:0", ""
	c.Server.ShutdownGrace = time.Second
	c.Upstream.URL = up.URL
	c.Rewrite.Enabled = true
	c.Rewrite.MaxInflightBytes = 0
	c.Memory.LimitBytes = 0
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveConfig(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)), func(p, _ string) { addrs <- p })
	}()
	defer func() { cancel(); <-done }()
	var proxyURL string
	select {
	case a := <-addrs:
		proxyURL = "http://" + a + "/v1beta/models/gemini-2.5-flash:generateContent"
	case err := <-done:
		b.Fatalf("serveConfig: %v", err)
	case <-time.After(10 * time.Second):
		b.Fatal("serveConfig did not start")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.DisableCompression = 2*conc, true
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var rewritten atomic.Int64
	round := func() {
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, proxyURL, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Goog-Api-Key", "bench-budget")
				res, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Errorf("status %d", res.StatusCode)
				}
				if shrank(res.Header.Get("X-Gemini-Proxy-Report")) {
					rewritten.Add(1)
				}
			})
		}
		wg.Wait()
	}
	reset := func() {
		mu.Lock()
		arrived, release, held = 0, make(chan struct{}), make(chan struct{})
		mu.Unlock()
	}
	// Warm-up: let the upstream answer at once.
	mu.Lock()
	close(release)
	arrived = -1 << 30
	mu.Unlock()
	round()
	reset()

	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	old := debug.SetGCPercent(5)
	defer debug.SetGCPercent(old)
	var peakSum, heldSum float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Twice: the second empties sync.Pool's victim cache, so that the
		// pooled body buffers of the last round are not in the baseline.
		runtime.GC()
		runtime.GC()
		base := live()
		var peak atomic.Uint64
		stop := make(chan struct{})
		var sw sync.WaitGroup
		sw.Go(func() {
			for {
				if v := live(); v > peak.Load() {
					peak.Store(v)
				}
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond):
				}
			}
		})
		b.StartTimer()
		rewritten.Store(0)
		mu.Lock()
		h, rel := held, release
		mu.Unlock()
		go func() {
			<-h
			runtime.GC()
			v := live()
			heldSum += float64(v-min(v, base)) / float64(conc*len(body))
			close(rel)
		}()
		round()
		close(stop)
		sw.Wait()
		b.StopTimer()
		peakSum += float64(peak.Load()-min(peak.Load(), base)) / float64(conc*len(body))
		if n := rewritten.Load(); n != conc {
			b.Fatalf("%d of %d requests were rewritten with savings, want all", n, conc)
		}
		reset()
	}
	b.ReportMetric(peakSum/float64(b.N), "peak-live/body")
	b.ReportMetric(heldSum/float64(b.N), "held-live/body")
	b.ReportMetric(float64(len(body)), "body-bytes")
}

// shrank reports whether a report header ("bytes=A->B; …") says the
// rewrite sent fewer bytes than it got.
func shrank(rep string) bool {
	s, ok := strings.CutPrefix(rep, "bytes=")
	if !ok {
		return false
	}
	s, _, _ = strings.Cut(s, ";")
	a, c, ok := strings.Cut(s, "->")
	before, err1 := strconv.Atoi(a)
	after, err2 := strconv.Atoi(c)
	return ok && err1 == nil && err2 == nil && after < before
}
