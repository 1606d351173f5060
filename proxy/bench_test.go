package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// benchBody returns a generateContent-shaped JSON body of about n bytes.
func benchBody(n int) []byte {
	head := `{"candidates":[{"content":{"parts":[{"text":"`
	tail := `"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":9,"totalTokenCount":16},"modelVersion":"gemini-2.5-flash"}`
	return []byte(head + strings.Repeat("x", max(n-len(head)-len(tail), 0)) + tail)
}

// benchSetup starts a loopback backend answering with resp and two fronts
// on it: a bare httputil.ReverseProxy with the same transport settings
// ("plain") and our Handler ("proxy").
func benchSetup(tb testing.TB, resp []byte) (plain, ours string, client *http.Client, cleanup func()) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.Write(resp)
	}))
	up := mustURL(tb, be.URL)
	opts := Options{Upstream: up, MaxIdleConnsPerHost: 64}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
		Transport: newTransport(opts),
	}
	h, err := New(opts, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		tb.Fatal(err)
	}
	fp := httptest.NewServer(rp)
	fo := httptest.NewServer(h)
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	return fp.URL, fo.URL, &http.Client{Transport: tr}, func() {
		tr.CloseIdleConnections()
		fp.Close()
		fo.Close()
		be.Close()
	}
}

// benchRoundTrip makes one request and reports whether the response was
// complete. A bare ReverseProxy sometimes cuts a large response (see
// TestLargeBodiesNoCut); the caller counts those instead of failing.
func benchRoundTrip(tb testing.TB, c *http.Client, url string, body []byte, want int) bool {
	res, err := c.Post(url+"/v1beta/models/gemini-2.5-flash:generateContent", "application/json", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		tb.Fatalf("status %d", res.StatusCode)
	}
	return err == nil && int(n) == want
}

// BenchmarkPassThrough compares a bare httputil.ReverseProxy with the
// proxy (rewrite off; tap, metrics and access log on a discard handler) on
// one loopback backend, unary, request and response of the same size.
//
//	go test ./proxy -run '^$' -bench PassThrough -benchmem
func BenchmarkPassThrough(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"1MB", 1 << 20}} {
		body := benchBody(size.n)
		plain, ours, c, cleanup := benchSetup(b, body)
		for _, front := range []struct{ name, url string }{{"plain", plain}, {"proxy", ours}} {
			b.Run(size.name+"/"+front.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(2 * len(body)))
				cuts := 0
				for b.Loop() {
					if !benchRoundTrip(b, c, front.url, body, len(body)) {
						cuts++
					}
				}
				b.ReportMetric(float64(cuts), "cuts")
				if front.name == "proxy" && cuts > 0 {
					b.Errorf("proxy cut %d responses", cuts)
				}
			})
		}
		cleanup()
	}
}

// TestOverheadRatio alternates plain and proxy requests in one run and logs
// latency percentiles and CPU per request of each. It is a measurement, not
// a check:
//
//	GEMINI_PROXY_BENCH=1 go test ./proxy -run TestOverheadRatio -v -count=1
func TestOverheadRatio(t *testing.T) {
	if testing.Short() || os.Getenv("GEMINI_PROXY_BENCH") != "1" {
		t.Skip("set GEMINI_PROXY_BENCH=1 (and no -short) to measure")
	}
	for _, size := range []int{1 << 10, 1 << 20} {
		body := benchBody(size)
		plain, ours, c, cleanup := benchSetup(t, body)
		const rounds = 2000
		lat := map[string][]time.Duration{}
		cuts := map[string]int{}
		fronts := []struct{ name, url string }{{"plain", plain}, {"proxy", ours}}
		for i := range 200 { // warm up both
			benchRoundTrip(t, c, fronts[i%2].url, body, len(body))
		}
		// Latency: alternate request by request, so that noise from other
		// processes hits both sides alike.
		for i := range 2 * rounds {
			f := fronts[(i+i/2)%2] // plain,proxy,proxy,plain,… : neither always goes first
			start := time.Now()
			if !benchRoundTrip(t, c, f.url, body, len(body)) {
				cuts[f.name]++
			}
			lat[f.name] = append(lat[f.name], time.Since(start))
		}
		// CPU: process CPU time over alternating blocks of each.
		cpu := map[string]time.Duration{}
		const blocks, perBlock = 20, 50
		for blk := range 2 * blocks {
			f := fronts[blk%2]
			before := cpuTime()
			for range perBlock {
				benchRoundTrip(t, c, f.url, body, len(body))
			}
			cpu[f.name] += cpuTime() - before
		}
		cleanup()
		p := func(name string, q float64) time.Duration {
			d := slices.Clone(lat[name])
			slices.Sort(d)
			return d[int(q*float64(len(d)-1))]
		}
		n := time.Duration(blocks * perBlock)
		_ = rounds
		t.Logf("%7d B: plain p50 %v p99 %v | proxy p50 %v p99 %v | ratio p50 %.3f p99 %.3f | added p50 %v | CPU/request plain %v proxy %v (whole process: client, proxy, backend) | cut responses plain %d proxy %d",
			size, p("plain", .5), p("plain", .99), p("proxy", .5), p("proxy", .99),
			float64(p("proxy", .5))/float64(p("plain", .5)), float64(p("proxy", .99))/float64(p("plain", .99)),
			p("proxy", .5)-p("plain", .5), cpu["plain"]/n, cpu["proxy"]/n, cuts["plain"], cuts["proxy"])
		if cuts["proxy"] > 0 {
			t.Errorf("proxy cut %d responses", cuts["proxy"])
		}
	}
}

// cpuTime is the user+system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
