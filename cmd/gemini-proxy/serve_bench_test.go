package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/config"
)

// BenchmarkServe measures the real serve path (serveConfig: the cache
// store, the Verifier and OnExchange wired as serve wires them, the access
// log formatted as text) in front of the overhead runner's fake Gemini, next
// to the plain httputil.ReverseProxy the bench compares with, on the bench's
// request shapes (bench.Sizes). Every request goes over loopback. cpu-ms/op
// is the CPU time of the whole process (client, fake upstream and the
// proxy under test) per request; compare the targets' figures within one
// run. c64 runs 64 concurrent clients, c1 one.
//
//	go test ./cmd/gemini-proxy -run '^$' -bench Serve -benchmem -count 5
func BenchmarkServe(b *testing.B) {
	up := httptest.NewServer(bench.FakeGemini())
	defer up.Close()
	upURL, _ := url.Parse(up.URL)
	plain := httptest.NewServer(bench.PlainProxy(upURL))
	defer plain.Close()
	targets := []struct{ name, url string }{
		{"plain", plain.URL},
		{"off", startServe(b, up.URL, false)},
		{"on", startServe(b, up.URL, true)},
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.DisableCompression = 256, true
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, size := range bench.Sizes() {
		for _, mode := range []string{"unary", "sse"} {
			path := "/v1beta/models/gemini-2.5-flash:generateContent"
			if mode == "sse" {
				path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
			}
			for _, conc := range []int{1, 64} {
				for _, t := range targets {
					name := size.Name + "/" + mode + "/c" + strconv.Itoa(conc) + "/" + t.name
					b.Run(name, func(b *testing.B) {
						benchServe(b, client, t.url+path, size.Body, conc, t.name == "plain")
					})
				}
			}
		}
	}
}

// BenchmarkServeAnswers is BenchmarkServe's small request at concurrency
// 1 with long answers (bench.LongAnswers): a 256 KB unary answer and a
// 100-event SSE stream, next to the fake's own 6-event stream, so that
// the proxy's cost per chunk above the plain proxy is
// ((sse100 - plain sse100) - (sse6 - plain sse6)) / 94, all from one run.
//
//	go test ./cmd/gemini-proxy -run '^$' -bench ServeAnswers -benchmem -count 5
func BenchmarkServeAnswers(b *testing.B) {
	unary, stream := bench.LongAnswers(256<<10, 100)
	small := bench.Sizes()[0].Body
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.DisableCompression = 256, true
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, set := range []struct {
		name     string
		upstream http.Handler
		answers  []string
	}{
		{"short", bench.FakeGemini(), []string{"sse6"}},
		{"long", bench.FakeGeminiWith(unary, stream), []string{"unary256K", "sse100"}},
	} {
		up := httptest.NewServer(set.upstream)
		upURL, _ := url.Parse(up.URL)
		plain := httptest.NewServer(bench.PlainProxy(upURL))
		targets := []struct{ name, url string }{
			{"plain", plain.URL},
			{"off", startServe(b, up.URL, false)},
			{"on", startServe(b, up.URL, true)},
		}
		for _, a := range set.answers {
			path := "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
			if a == "unary256K" {
				path = "/v1beta/models/gemini-2.5-flash:generateContent"
			}
			for _, t := range targets {
				b.Run(a+"/c1/"+t.name, func(b *testing.B) {
					benchServe(b, client, t.url+path, small, 1, t.name == "plain")
				})
			}
		}
		b.Cleanup(func() { plain.Close(); up.Close() })
	}
}

// startServe runs serveConfig against upstream and returns the proxy URL;
// the server stops when b ends.
func startServe(b *testing.B, upstream string, rewrite bool) string {
	c := config.Default()
	c.Server.Listen, c.Admin.Listen = "127.0.0.1:0", ""
	c.Server.ShutdownGrace = time.Second
	c.Upstream.URL = upstream
	c.Rewrite.Enabled = rewrite
	ctx, cancel := context.WithCancel(context.Background())
	// As the bench's children log: text at info, one line per request.
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serveConfig(ctx, c, logger, func(p, _ string) { addrs <- p }) }()
	b.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addrs:
		return "http://" + a
	case err := <-done:
		b.Fatalf("serveConfig: %v", err)
	case <-time.After(10 * time.Second):
		b.Fatal("serveConfig did not start")
	}
	return ""
}

// benchServe sends requests to url. A failed request fails the benchmark,
// except for the plain Go proxy, which cuts a response now and then (the
// net/http race countingBody in proxy/proxy.go avoids): those are counted
// as cuts/op.
func benchServe(b *testing.B, c *http.Client, url string, body []byte, conc int, plain bool) {
	var cuts atomic.Int64
	do := func() {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Goog-Api-Key", "bench-overhead")
		res, err := c.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if err == nil && res.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
		}
		switch {
		case err != nil && plain:
			cuts.Add(1)
		case err != nil:
			b.Error(err)
		}
	}
	for range 4 {
		do() // warm the connection pools
	}
	b.ReportAllocs()
	cpu0, sw0, g0 := cpuTime(), contextSwitches(), goroutinesCreated()
	b.ResetTimer()
	if conc == 1 {
		for b.Loop() {
			do()
		}
	} else {
		b.SetParallelism(max(conc/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				do()
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(contextSwitches()-sw0)/float64(b.N), "ctxsw/op")
	b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
	if plain {
		b.ReportMetric(float64(cuts.Load())/float64(b.N), "cuts/op")
	}
}

// contextSwitches is the number of voluntary and involuntary context
// switches of this process's threads so far: a hand-off from one goroutine
// to another that finds no other work to run parks a thread, and waking
// it costs a switch.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// goroutinesCreated is the number of goroutines this process created so
// far (runtime/metrics).
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// cpuTime is the user+system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
