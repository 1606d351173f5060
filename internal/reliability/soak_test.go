package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// soakConfig comes from the environment (not GEMINI_PROXY_*, which the
// proxy would reject as unknown settings):
//
//	SOAK_DURATION  how long to run the fixed-rate phase (e.g. 10m); unset runs a 4s smoke test at 40/s
//	SOAK_RATE      requests per second; unset measures capacity first and uses SOAK_LOAD of it
//	SOAK_LOAD      fraction of the measured capacity (default 0.8)
//	SOAK_TENANTS   number of API keys (default 4)
//	SOAK_CACHE     cache.max_bytes of the proxy (default 32MiB, small so that it fills)
//	SOAK_PPROF_DIR when set, the proxy's heap profile is saved there after each interval (heap-N.pb.gz)
type soakConfig struct {
	pprofDir string
	duration time.Duration
	rate     float64
	load     float64
	tenants  int
	cache    string
	smoke    bool
}

func soakFromEnv(t *testing.T) soakConfig {
	c := soakConfig{load: 0.8, tenants: 4, cache: "32MiB"}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		c.duration = d
	} else {
		c.duration, c.rate, c.smoke = 4*time.Second, 40, true
	}
	if v := os.Getenv("SOAK_RATE"); v != "" {
		c.rate, _ = strconv.ParseFloat(v, 64)
	}
	if v := os.Getenv("SOAK_LOAD"); v != "" {
		c.load, _ = strconv.ParseFloat(v, 64)
	}
	if v := os.Getenv("SOAK_TENANTS"); v != "" {
		c.tenants, _ = strconv.Atoi(v)
	}
	c.pprofDir = os.Getenv("SOAK_PPROF_DIR")
	if v := os.Getenv("SOAK_CACHE"); v != "" {
		c.cache = v
	}
	return c
}

// soakReq is one request of the mix and what its outcome must be.
type soakReq struct {
	path   string
	header http.Header
	body   []byte
	stream bool
	// fault is the injected upstream fault: "" (none), a status code, or
	// "cut" (the upstream disconnects mid-body).
	fault  string
	direct bool // also sent straight to the emulator as the latency control
}

// soakDoc is a source file of about 2 KiB, re-sent by naive clients.
var soakDoc = strings.Repeat("func handle(w http.ResponseWriter, r *http.Request) { /* serve one request */ }\n", 26)

// makeSoakReq draws request n of the mix: unary 50%, SSE 25%, JSON array
// 25%; a naive re-sending conversation (rewritten) 40%, a flattened
// transcript 10%, a small unique prompt 50% (10% of all with rewriting
// off); 10% with a faulty upstream answer (429, 500, 503 or a cut).
func makeSoakReq(n int, tenants int, r *rand.Rand) soakReq {
	q := soakReq{header: jsonHeader("X-Goog-Api-Key", tenantKey(r.IntN(tenants)))}
	switch x := r.IntN(4); x {
	case 0, 1:
		q.path = generatePath
	case 2:
		q.path, q.stream = streamPath, true
	default:
		q.path, q.stream = arrayPath, true
	}
	switch x := r.IntN(10); {
	case x < 4:
		turns := 3 + 2*r.IntN(3)
		texts := make([]string, turns)
		for i := range texts {
			if i%2 == 0 {
				texts[i] = fmt.Sprintf("Here is the file again (request %d, turn %d):\n```go\n%s```\nWhat changed?", n, i, soakDoc)
			} else {
				texts[i] = fmt.Sprintf("Answer %d to turn %d: nothing much changed in the handler.", n, i)
			}
		}
		q.body = contents(texts...)
	case x < 5:
		q.body = contents(fmt.Sprintf("User: question %d about the handler\nAssistant: an answer nobody served, %d\nUser: and the follow-up?", n, n))
	default:
		q.body = prompt(fmt.Sprintf("request number %d, with a unique tail %x", n, r.Uint64()))
		if x == 9 {
			q.header.Set("X-Gemini-Proxy-Rewrite", "off")
		}
	}
	if r.IntN(10) == 0 {
		switch r.IntN(4) {
		case 0:
			q.fault = "429"
			q.header.Set("X-Emulator-Fault", "status=429, retry-after=1")
		case 1:
			q.fault = "500"
			q.header.Set("X-Emulator-Fault", "status=500")
		case 2:
			q.fault = "503"
			q.header.Set("X-Emulator-Fault", "status=503")
		default:
			q.fault = "cut"
			q.header.Set("X-Emulator-Fault", "disconnect-after=2")
		}
	}
	q.direct = q.fault == "" && !q.stream && n%10 == 0
	return q
}

// soakOutcome classifies one reply: "ok", "fault" (the injected fault
// reached the client as it would have directly), or "proxy_error" (the
// proxy made it worse: an error on a healthy upstream answer, a changed
// fault, a stream cut short).
func soakOutcome(q soakReq, r reply) string {
	switch q.fault {
	case "":
		if r.Err != nil || r.Status != 200 {
			return "proxy_error"
		}
		if !bytes.Contains(r.Body, []byte(`"finishReason"`)) {
			return "proxy_error"
		}
		return "ok"
	case "cut":
		// The upstream cut the body: the client must see an error, never a
		// clean end of a partial answer.
		if r.Err == nil && r.Status == 200 {
			return "proxy_error"
		}
		return "fault"
	default:
		if r.Err != nil || strconv.Itoa(r.Status) != q.fault {
			return "proxy_error"
		}
		return "fault"
	}
}

// interval is what one reporting interval measured.
type interval struct {
	mu        sync.Mutex
	sent      int
	outcomes  map[string]int
	proxied   []time.Duration // healthy unary requests through the proxy
	direct    []time.Duration // control twins of some of them, sent straight to the emulator
	added     []time.Duration // proxied minus direct time of each twin pair
	streams   []time.Duration // healthy streams through the proxy
	saturated int             // ticks skipped because too many requests were in flight
	examples  []string
}

func (iv *interval) add(q soakReq, r reply, d time.Duration, outcome string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.outcomes[outcome]++
	if outcome == "ok" {
		if q.stream {
			iv.streams = append(iv.streams, d)
		} else {
			iv.proxied = append(iv.proxied, d)
		}
	}
	if outcome == "proxy_error" && len(iv.examples) < 5 {
		iv.examples = append(iv.examples, fmt.Sprintf("%s fault=%q: status %d err %v body %.200s", q.path, q.fault, r.Status, r.Err, r.Body))
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// rssBytes returns the resident set size of process pid.
func rssBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestSoak drives mixed traffic through the real binary at a fixed rate
// and reports, per interval, the outcomes, latency through the proxy and
// straight to the emulator, and the proxy's RSS, goroutines and cache
// size. It fails on any proxy-caused error, on goroutines that stay above
// the baseline after the load, and on RSS that keeps growing once the
// cache is full. Without SOAK_DURATION it is a 4-second smoke test of the
// same code. Run it without -race for meaningful figures: make soak.
func TestSoak(t *testing.T) {
	cfg := soakFromEnv(t)
	if !cfg.smoke && raceEnabled {
		t.Log("note: running the soak with -race; latency and RSS figures are not representative")
	}
	up := newUpstream(t, emulator.Options{})
	env := []string{
		"GEMINI_PROXY_LOG_LEVEL=error",
		"GEMINI_PROXY_CACHE_MAX_BYTES=" + cfg.cache,
		"GEMINI_PROXY_SERVER_SHUTDOWN_GRACE=10s",
		"GEMINI_PROXY_UPSTREAM_RESPONSE_HEADER_TIMEOUT=30s",
	}
	if cfg.pprofDir != "" {
		env = append(env, "GEMINI_PROXY_ADMIN_PPROF=true")
	}
	s := startStack(t, up.URL, env...)
	pid := s.cmd.Process.Pid
	up.noRecord.Store(true)
	for i := range 20 {
		send(t.Context(), "POST", s.proxyURL+generatePath, jsonHeader(), prompt(fmt.Sprintf("warm up %d", i)))
	}
	baseG := s.goroutines(t)
	baseRSS := rssBytes(pid)
	var seq atomic.Int64

	do := func(q soakReq) (reply, time.Duration) {
		start := time.Now()
		r := send(context.Background(), "POST", s.proxyURL+q.path, q.header, q.body)
		return r, time.Since(start)
	}

	if cfg.rate == 0 {
		// Capacity: a closed loop of 64 clients for a tenth of the run
		// (at most 20s); the soak then runs open-loop at SOAK_LOAD of it.
		measure := min(20*time.Second, max(5*time.Second, cfg.duration/10))
		var done atomic.Int64
		end := time.Now().Add(measure)
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for time.Now().Before(end) {
					n := int(seq.Add(1))
					q := makeSoakReq(n, cfg.tenants, rand.New(rand.NewPCG(uint64(n), 7)))
					do(q)
					done.Add(1)
				}
			})
		}
		wg.Wait()
		capacity := float64(done.Load()) / measure.Seconds()
		cfg.rate = capacity * cfg.load
		fmt.Printf("soak: measured capacity %.0f req/s (64 closed-loop clients, %v); running at %.0f req/s (%.0f%%)\n", capacity, measure, cfg.rate, 100*cfg.load)
		// Let the goroutines of the capacity run settle.
		time.Sleep(2 * time.Second)
	}
	fmt.Printf("soak: %v at %.0f req/s, %d tenants, cache.max_bytes %s, baseline RSS %.1f MiB, goroutines %v\n",
		cfg.duration, cfg.rate, cfg.tenants, cfg.cache, float64(baseRSS)/(1<<20), baseG)

	step := cfg.duration / 10
	if cfg.smoke {
		step = cfg.duration / 2
	}
	step = max(step, time.Second)
	const maxInFlight = 1024
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	var ivs []*interval
	cur := &interval{outcomes: map[string]int{}}
	var curMu sync.Mutex
	// A ticker drops ticks it cannot deliver, so each tick sends however
	// many requests the schedule is behind: the rate stays fixed unless
	// maxInFlight is reached.
	period := max(time.Duration(float64(time.Second)/cfg.rate), time.Millisecond)
	tick := time.NewTicker(period)
	dispatched := 0
	defer tick.Stop()
	report := time.NewTicker(step)
	defer report.Stop()
	start := time.Now()
	end := start.Add(cfg.duration)
	fmt.Printf("%8s %8s %6s %6s %6s %8s %8s %8s %8s %8s %8s %9s %9s %6s %9s\n",
		"t", "req/s", "ok", "fault", "proxy", "p50", "p99", "p99dir", "add p50", "add p99", "p99strm", "rss MiB", "heap MiB", "gor", "cache MiB")
	var rss []int64
	flush := func() {
		curMu.Lock()
		iv := cur
		cur = &interval{outcomes: map[string]int{}}
		curMu.Unlock()
		ivs = append(ivs, iv)
		// The emulator keeps every request it received; forget them so
		// that the load generator's memory stays flat too.
		up.emu.Reset()
		text := s.metrics(t)
		r := rssBytes(pid)
		rss = append(rss, r)
		if cfg.pprofDir != "" {
			res, err := http.Get(s.adminURL + "/debug/pprof/heap")
			if err == nil {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				os.WriteFile(filepath.Join(cfg.pprofDir, fmt.Sprintf("heap-%d.pb.gz", len(rss))), b, 0o644)
			}
		}
		iv.mu.Lock()
		defer iv.mu.Unlock()
		p99, p99d := quantile(iv.proxied, 0.99), quantile(iv.direct, 0.99)
		fmt.Printf("%8s %8.0f %6d %6d %6d %8s %8s %8s %8s %8s %8s %9.1f %9.1f %6.0f %9.1f\n",
			time.Since(start).Round(time.Second), float64(iv.sent)/step.Seconds(), iv.outcomes["ok"], iv.outcomes["fault"], iv.outcomes["proxy_error"],
			quantile(iv.proxied, 0.5).Round(10*time.Microsecond), p99.Round(10*time.Microsecond), p99d.Round(10*time.Microsecond),
			quantile(iv.added, 0.5).Round(10*time.Microsecond), quantile(iv.added, 0.99).Round(10*time.Microsecond), quantile(iv.streams, 0.99).Round(10*time.Microsecond),
			float64(r)/(1<<20), metric(text, "go_memstats_heap_inuse_bytes")/(1<<20), metric(text, "go_goroutines"), metric(text, "gemini_proxy_cache_bytes")/(1<<20))
		if iv.saturated > 0 {
			fmt.Printf("         %d requests not sent: %d were in flight\n", iv.saturated, maxInFlight)
		}
		for _, e := range iv.examples {
			fmt.Printf("         proxy error: %s\n", e)
		}
	}
	dispatch := func(iv *interval) {
		n := int(seq.Add(1))
		q := makeSoakReq(n, cfg.tenants, rand.New(rand.NewPCG(uint64(n), 7)))
		iv.mu.Lock()
		iv.sent++
		iv.mu.Unlock()
		wg.Go(func() {
			defer func() { <-sem }()
			r, d := do(q)
			iv.add(q, r, d, soakOutcome(q, r))
			if q.direct {
				// The control twin: the same request straight to the
				// emulator, right after; added latency is the difference.
				start := time.Now()
				dr := send(context.Background(), "POST", up.URL+q.path, q.header, q.body)
				dd := time.Since(start)
				if dr.Err == nil && dr.Status == 200 {
					iv.mu.Lock()
					iv.direct = append(iv.direct, dd)
					iv.added = append(iv.added, d-dd)
					iv.mu.Unlock()
				}
			}
		})
	}
loop:
	for {
		select {
		case now := <-tick.C:
			if now.After(end) {
				break loop
			}
			curMu.Lock()
			iv := cur
			curMu.Unlock()
			due := int(now.Sub(start).Seconds()*cfg.rate) - dispatched
			for range due {
				dispatched++
				select {
				case sem <- struct{}{}:
				default:
					iv.mu.Lock()
					iv.saturated++
					iv.mu.Unlock()
					continue
				}
				dispatch(iv)
			}
		case <-report.C:
			flush()
		}
	}
	wg.Wait()
	flush()

	// Totals and checks.
	total := map[string]int{}
	var sent, saturated int
	for _, iv := range ivs {
		for k, v := range iv.outcomes {
			total[k] += v
		}
		sent += iv.sent
		saturated += iv.saturated
	}
	fmt.Printf("soak: %d requests in %v (%.0f req/s): ok %d, upstream faults passed through %d, proxy-caused errors %d, requests not sent because %d were in flight: %d\n",
		sent, time.Since(start).Round(time.Second), float64(sent)/time.Since(start).Seconds(), total["ok"], total["fault"], total["proxy_error"], maxInFlight, saturated)
	if total["proxy_error"] > 0 {
		t.Errorf("%d proxy-caused errors", total["proxy_error"])
	}
	// Goroutines back to baseline once the load is gone. Pooled keep-alive
	// connections hold goroutines until their idle time-outs (2m client
	// side, 90s upstream side); close them from both ends, as those
	// time-outs would, and allow a few for the scrapes.
	client.CloseIdleConnections()
	up.CloseClientConnections()
	s.waitGoroutines(t, baseG, 16)
	fmt.Printf("soak: goroutines %v after the load, baseline %v; RSS %.1f MiB\n", s.goroutines(t), baseG, float64(rssBytes(pid))/(1<<20))
	text := s.metrics(t)
	fmt.Printf("soak: proxy counted requests %v, client cancels %v, upstream errors %v, rewrite errors %v, fallbacks %v, served responses %v\n",
		metric(text, "gemini_proxy_requests_total"), metric(text, "gemini_proxy_client_cancels_total"),
		metric(text, "gemini_proxy_upstream_errors_total"), metric(text, "gemini_proxy_rewrite_errors_total"),
		metric(text, "gemini_proxy_rewrite_fallbacks_total"), metric(text, "gemini_proxy_cache_served_responses_total"))
	// Under overload (requests not sent) RSS follows the number of requests
	// in flight, not the cache; the check only means something below it.
	if saturated > 0 {
		t.Logf("RSS check skipped: the run was saturated (%d requests not sent); lower SOAK_RATE", saturated)
	} else if !cfg.smoke && len(rss) >= 6 {
		// Flat once the cache is full: the second half grows less than 25%.
		half := rss[len(rss)/2:]
		if lo, hi := slices.Min(half), slices.Max(half); float64(hi) > 1.25*float64(lo) {
			t.Errorf("RSS grew from %.1f to %.1f MiB in the second half of the soak", float64(lo)/(1<<20), float64(hi)/(1<<20))
		}
	}
	var enc bytes.Buffer
	json.NewEncoder(&enc).Encode(total)
	t.Logf("outcomes %s", enc.String())
}
