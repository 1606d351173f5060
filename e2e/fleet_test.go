package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// fleetSecret is the tenant secret every replica of a fleet shares.
const fleetSecret = "fleet-tenant-secret-shared-by-replicas"

// fleet is an emulator, n proxy replicas wired as serve wires them (one
// cache.Store each: the Verifier, the served-response recorder, the
// ledger's store and, in shared mode, the context-cache registry), and a
// round-robin front: each request goes to the next replica.
type fleet struct {
	emu     *emulator.Server
	emuURL  string
	front   string
	hs      []*proxy.Handler
	stores  []*cache.Store
	regs    []*prometheus.Registry
	clk     *testutil.Clock
	creates sync.Map // SHA-256 of a cachedContents create body → count
	nCreate atomic.Int64
}

// newFleet starts n replicas sharing redisURL ("" for a lone replica with
// a local cache), with Redis time-outs far above a loopback round trip on
// a loaded machine: a slow call must not make a replica decide alone.
func newFleet(t *testing.T, n int, redisURL string) *fleet {
	t.Helper()
	return newFleetTimeout(t, n, redisURL, 3*time.Second)
}

// newFleetTimeout is newFleet with each Redis call bounded by timeout.
func newFleetTimeout(t *testing.T, n int, redisURL string, timeout time.Duration) *fleet {
	t.Helper()
	return newFleetWith(t, n, redisURL, timeout, nil)
}

// newFleetWith is newFleetTimeout; opts, when not nil, adjusts replica
// i's cache options (shared mode only).
func newFleetWith(t *testing.T, n int, redisURL string, timeout time.Duration, opts func(i int, o *cache.Options)) *fleet {
	t.Helper()
	f := &fleet{clk: testutil.NewClock(fixedNow)}
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cachedContents") {
				body := readAll(t, r)
				sum := sha256.Sum256(body)
				v, _ := f.creates.LoadOrStore(sum, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				f.nCreate.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
	var es *httptest.Server
	f.emu, es = testutil.StartEmulator(t, emulator.Options{Reply: ccReply, Now: f.clk.Now, ImplicitCacheMinTokens: 1 << 30}, count)
	f.emuURL = es.URL
	up, _ := url.Parse(es.URL)
	var targets []*url.URL
	for i := range n {
		co := cache.Options{}
		if redisURL != "" {
			co = cache.Options{RedisURL: redisURL, Secret: []byte(fleetSecret), RedisTimeout: timeout, RedisBudget: 10 * timeout, RedisFlush: time.Minute}
			if opts != nil {
				opts(i, &co)
			}
		}
		store, err := cache.New(co)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		cc := &proxy.ContextCacheOptions{Now: f.clk.Now}
		if reg := store.ContextCacheRegistry(); reg != nil {
			cc.Shared = reg
		}
		po := proxy.Options{
			Upstream:     up,
			Rewrite:      proxy.RewriteOptions{Enabled: true},
			TenantSecret: []byte(fleetSecret),
			Prices:       map[string]proxy.Price{"gemini-2.5-flash": flashPrice},
			ContextCache: cc,
			Verifier:     func(tenant string) rewrite.Verifier { return store.Verifier(tenant) },
			OnServed:     store.RecordServed,
			Ledger:       proxy.LedgerOptions{Store: store},
		}
		reg := prometheus.NewRegistry()
		h, err := proxy.New(po, slog.New(slog.DiscardHandler), metrics.New(reg))
		if err != nil {
			t.Fatal(err)
		}
		ps := httptest.NewServer(h)
		t.Cleanup(ps.Close)
		u, _ := url.Parse(ps.URL)
		targets = append(targets, u)
		f.hs, f.stores, f.regs = append(f.hs, h), append(f.stores, store), append(f.regs, reg)
	}
	// The front is testutil.RoundRobin, not a bare httputil.ReverseProxy:
	// the bare one cut a streamed answer now and then under load
	// (TestFleetSentinel's "unexpected EOF", RELIABILITY.md), a cut no
	// replica made. RoundRobin still passes on any cut a replica makes.
	fs := httptest.NewServer(testutil.RoundRobin(t, targets))
	t.Cleanup(fs.Close)
	f.front = fs.URL
	return f
}

// readAll reads r's body and puts it back, for the next handler.
func readAll(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading a create body: %v", err)
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// sum adds counter name over every replica.
func (f *fleet) sum(t *testing.T, name string) float64 {
	t.Helper()
	total := 0.0
	for _, reg := range f.regs {
		total += counterSum(t, reg, name, nil)
	}
	return total
}

// settle waits until the fleet accounted n requests in its ledgers and
// context caching, and every background write (Redis queue, cache calls)
// made so far is done, so that the next request, whichever replica gets
// it, sees what this one left.
func (f *fleet) settle(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for f.sum(t, "gemini_proxy_ledger_requests_total") < float64(n) || f.sum(t, "gemini_proxy_context_cache_requests_total") < float64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("fleet accounted %v ledger and %v context-cache requests, want %d",
				f.sum(t, "gemini_proxy_ledger_requests_total"), f.sum(t, "gemini_proxy_context_cache_requests_total"), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, h := range f.hs {
		h.WaitContextCache()
	}
	for _, s := range f.stores {
		s.Wait()
	}
}

// flatSession is a naive client that flattens its history into one user
// text with "User:"/"Assistant:" labels, quoting the answers it got, and
// re-sends buffer.go in its first question.
type flatSession struct {
	client *genai.Client
	hist   [][2]string
}

func (s *flatSession) turn(t *testing.T, q string) string {
	t.Helper()
	text := transcriptFormats[0].build(s.hist, q)
	resp, err := s.client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text(text), nil)
	if err != nil {
		t.Fatalf("GenerateContent (flattened, turn %d): %v", len(s.hist), err)
	}
	s.hist = append(s.hist, [2]string{q, resp.Text()})
	return resp.Text()
}

// fleetRun is what a run of the fleet sessions gave.
type fleetRun struct {
	answers []string
}

// runFleetSessions plays a context-cached file session (ccSession:
// system instruction, tools, buffer.go in every turn) and a flattened
// transcript session, interleaved, turns 30 s apart on the fleet's clock,
// waiting after each request until the fleet settled it. after, when not
// nil, runs after turn i.
func runFleetSessions(t *testing.T, f *fleet, turns int, after func(i int)) fleetRun {
	t.Helper()
	var run fleetRun
	cc := newCCSession(t, f.front, testKey)
	flat := &flatSession{client: testutil.NewClient(t, f.front, testKey)}
	n := 0
	for i := range turns {
		f.clk.Advance(30 * time.Second)
		q := ccQuestions[i%len(ccQuestions)]
		run.answers = append(run.answers, cc.turn(t, q).Text())
		n++
		f.settle(t, n)
		fq := q
		if i == 0 {
			fq = "Here is my file:\n\n" + fenced(bufferGo) + "\n\n" + q
		}
		run.answers = append(run.answers, flat.turn(t, fq))
		n++
		f.settle(t, n)
		if after != nil {
			after(i)
		}
	}
	return run
}

// compareFleet checks that the first n generate requests the fleet's
// emulator received are byte for byte those the lone replica's received.
func compareFleet(t *testing.T, one, fl *fleet, n int) {
	t.Helper()
	a, b := testutil.GenerateRequests(one.emu.Received()), testutil.GenerateRequests(fl.emu.Received())
	if len(a) < n || len(b) < n {
		t.Fatalf("emulators received %d and %d generate requests, want %d", len(a), len(b), n)
	}
	for i := range n {
		if string(a[i].Body) != string(b[i].Body) {
			t.Errorf("request %d: fleet sent %d bytes (cache %q), one replica %d (cache %q)", i, len(b[i].Body), b[i].CachedContent, len(a[i].Body), a[i].CachedContent)
		}
		if b[i].Status != 200 {
			t.Errorf("request %d: fleet got %d %s", i, b[i].Status, b[i].Error)
		}
	}
}

// fleetCounters are the counters a fleet must sum like one replica:
// savings, ledger, context caching.
var fleetCounters = []string{
	"gemini_proxy_saved_dollars_total",
	"gemini_proxy_cost_increase_dollars_total",
	"gemini_proxy_rewrite_saved_bytes_total",
	"gemini_proxy_ledger_billed_dollars_total",
	"gemini_proxy_ledger_counterfactual_dollars_total",
	"gemini_proxy_context_cache_created_total",
	"gemini_proxy_context_cache_cached_tokens_total",
	"gemini_proxy_context_cache_saved_dollars_total",
	"gemini_proxy_context_cache_fallbacks_total",
}

// counters returns f's fleetCounters, summed over its replicas.
func (f *fleet) counters(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, name := range fleetCounters {
		out[name] = f.sum(t, name)
	}
	return out
}

// compareCounters checks that the fleet's counters (got) sum to the lone
// replica's (want), taken after the same turn.
func compareCounters(t *testing.T, want, got map[string]float64) {
	t.Helper()
	for _, name := range fleetCounters {
		if w, g := want[name], got[name]; math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s: fleet %v, one replica %v", name, g, w)
		}
	}
	if want["gemini_proxy_context_cache_created_total"] == 0 || want["gemini_proxy_rewrite_saved_bytes_total"] == 0 {
		t.Error("the lone replica made no cache or saved no bytes: the sessions test nothing")
	}
}

// checkOneCreatePerPrefix checks that no cachedContents create body (one
// prefix) reached the fleet's emulator twice, and that the fleet created
// as many caches as the lone replica (want).
func checkOneCreatePerPrefix(t *testing.T, want int64, fl *fleet) {
	t.Helper()
	fl.creates.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n != 1 {
			sum := k.([32]byte)
			t.Errorf("prefix %x: %d cachedContents creates, want 1", sum[:6], n)
		}
		return true
	})
	if a, b := want, fl.nCreate.Load(); a != b || b == 0 {
		t.Errorf("cachedContents creates: fleet %d, one replica %d", b, a)
	}
}

// TestFleetCluster runs the naive sessions through three replicas behind a
// round-robin front on a 3-node Redis Cluster, and through one replica
// alone: the emulator receives the same bodies, the fleet's savings,
// ledger and context-cache counters sum to the lone replica's, and each
// prefix's cachedContents is created once. Then one Redis node is killed
// and the sessions go on: every request is still answered.
func TestFleetCluster(t *testing.T) {
	cl := cachetest.StartCluster(t, 3)
	const turns, killAfter = 10, 6
	one := newFleet(t, 1, "")
	fl := newFleet(t, 3, cl.URL())
	var ref map[string]float64
	var creates int64
	want := runFleetSessions(t, one, turns, func(i int) {
		if i == killAfter-1 {
			ref, creates = one.counters(t), one.nCreate.Load()
		}
	})
	got := runFleetSessions(t, fl, turns, func(i int) {
		if i == killAfter-1 {
			compareFleet(t, one, fl, 2*killAfter)
			compareCounters(t, ref, fl.counters(t))
			checkOneCreatePerPrefix(t, creates, fl)
			cl.Nodes[1].Stop()
		}
	})
	if len(got.answers) != len(want.answers) {
		t.Fatalf("fleet answered %d requests, one replica %d", len(got.answers), len(want.answers))
	}
	rec := testutil.GenerateRequests(fl.emu.Received())
	for i, r := range rec {
		if r.Status != 200 && r.CachedContent == "" {
			t.Errorf("request %d failed upstream after the kill: %d %s", i, r.Status, r.Error)
		}
	}
	for i, a := range got.answers {
		if a == "" {
			t.Errorf("answer %d empty", i)
		}
	}
	down := 0
	for _, s := range fl.stores {
		if st := s.Stats().Redis; !st.Up || st.ReadErrors+st.WriteErrors > 0 {
			down++
		}
	}
	t.Logf("after the kill: %d of 3 replicas saw Redis errors (they went on locally)", down)
}

// TestFleetSentinel is TestFleetCluster's parity check on Redis behind a
// Sentinel (redis-sentinel:// URL).
func TestFleetSentinel(t *testing.T) {
	s := cachetest.StartSentinel(t)
	const turns = 8
	one := newFleet(t, 1, "")
	fl := newFleet(t, 3, s.URL())
	runFleetSessions(t, one, turns, nil)
	runFleetSessions(t, fl, turns, nil)
	compareFleet(t, one, fl, 2*turns)
	compareCounters(t, one.counters(t), fl.counters(t))
	checkOneCreatePerPrefix(t, one.nCreate.Load(), fl)
	for i, st := range fl.stores {
		if r := st.Stats().Redis; r.Mode != cache.RedisModeSentinel || !r.Up {
			t.Errorf("replica %d redis stats %+v, want sentinel and up", i, r)
		}
	}
}

// TestFleetSentinelFailover runs the naive sessions through three
// replicas on a master and its replica behind a Sentinel (named both
// ways: redis-sentinel:// and RedisMasterName), kills the master
// mid-run and goes on once the sentinel promoted the replica: every
// request is answered, and the fleet still matches one replica byte for
// byte, in savings, ledger and creates. The turns after the failover
// alternate replicas, so each one's un-flattening verifies an answer
// another replica wrote to the new master, and its ledger reads state
// another replica left there.
func TestFleetSentinelFailover(t *testing.T) {
	s := cachetest.StartSentinelReplicated(t)
	const turns, failAfter = 8, 4
	one := newFleet(t, 1, "")
	// Replicas 0 and 1 name the master in a redis-sentinel:// URL, replica
	// 2 with cache.redis_sentinel_master and a redis:// URL of the sentinel.
	fl := newFleetWith(t, 3, s.URL(), 3*time.Second, func(i int, o *cache.Options) {
		if i == 2 {
			o.RedisURL, o.RedisMasterName = "redis://"+s.Sentinel.Addr, s.MasterName
		}
	})
	runFleetSessions(t, one, turns, nil)
	var keysAtFailover int64
	got := runFleetSessions(t, fl, turns, func(i int) {
		if i != failAfter-1 {
			return
		}
		compareFleet(t, one, fl, 2*failAfter)
		old := s.Master.Addr
		s.KillMaster(t)
		keysAtFailover = dbSize(t, s.Master.Addr)
		t.Logf("master %s killed; the sentinel promoted %s, which holds %d keys", old, s.Master.Addr, keysAtFailover)
		if keysAtFailover == 0 {
			t.Error("the promoted replica holds no keys: nothing was shared before the failover")
		}
	})
	if len(got.answers) != 2*turns {
		t.Fatalf("fleet answered %d requests, want %d", len(got.answers), 2*turns)
	}
	for i, a := range got.answers {
		if a == "" {
			t.Errorf("answer %d empty", i)
		}
	}
	compareFleet(t, one, fl, 2*turns)
	compareCounters(t, one.counters(t), fl.counters(t))
	checkOneCreatePerPrefix(t, one.nCreate.Load(), fl)
	if n := dbSize(t, s.Master.Addr); n <= keysAtFailover {
		t.Errorf("the new master holds %d keys after the sessions, %d at the failover: nothing was written to it", n, keysAtFailover)
	}
	for i, st := range fl.stores {
		r := st.Stats().Redis
		t.Logf("replica %d: %d read and %d write errors, %d writes, %d hits", i, r.ReadErrors, r.WriteErrors, r.Writes, r.Hits)
		if r.Mode != cache.RedisModeSentinel || !r.Up {
			t.Errorf("replica %d redis stats %+v, want sentinel and up", i, r)
		}
	}
}

// TestFleetSlowRedis runs the naive sessions through three replicas whose
// Redis is behind a relay that delays every third chunk past the
// production time-out (50 ms per call): the replicas time out, pause
// Redis and go on locally, and every request, streams included, is
// answered in full (a cut answer fails the client's call).
func TestFleetSlowRedis(t *testing.T) {
	r := cachetest.StartRedis(t)
	addr := slowRelay(t, r.Addr, func(chunk int) time.Duration {
		if chunk%3 == 0 {
			return 80 * time.Millisecond
		}
		return 5 * time.Millisecond
	})
	const turns = 6
	fl := newFleetTimeout(t, 3, "redis://"+addr+"/0", 50*time.Millisecond)
	run := runFleetSessions(t, fl, turns, nil)
	if len(run.answers) != 2*turns {
		t.Fatalf("fleet answered %d requests, want %d", len(run.answers), 2*turns)
	}
	for i, a := range run.answers {
		if a == "" {
			t.Errorf("answer %d empty", i)
		}
	}
	for i, r := range testutil.GenerateRequests(fl.emu.Received()) {
		if r.Status != 200 && r.CachedContent == "" {
			t.Errorf("request %d failed upstream: %d %s", i, r.Status, r.Error)
		}
	}
	var errs uint64
	for i, st := range fl.stores {
		rs := st.Stats().Redis
		t.Logf("replica %d: %d read and %d write errors, %d hits", i, rs.ReadErrors, rs.WriteErrors, rs.Hits)
		errs += rs.ReadErrors + rs.WriteErrors
	}
	if errs == 0 {
		t.Error("no Redis call timed out: the relay did not slow Redis down, the test shows nothing")
	}
}

// slowRelay forwards loopback TCP connections to target, holding the
// n-th chunk read from either side (counted per direction) for delay(n)
// before passing it on. It returns its address; its listener and
// connections are closed when the test ends.
func slowRelay(t *testing.T, target string, delay func(n int) time.Duration) string {
	t.Helper()
	return cachetest.Relay(t, target, func(_ bool, n int) (time.Duration, bool) { return delay(n), false })
}

// dbSize returns the number of keys the Redis server at addr holds.
func dbSize(t *testing.T, addr string) int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := rc.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE on %s: %v", addr, err)
	}
	return n
}

// TestFleetLatency reports what shared mode adds to a request: the same
// naive sessions (context caching, ledger, verified un-flattening on)
// through one replica with a local cache, one on a single Redis and one
// on a 3-node Redis Cluster, at the production time-outs (50 ms per call),
// turns interleaved across the three so that the machine's load falls on
// each alike. Every request must be answered, with the same answers in
// every mode; the client-side latency percentiles are logged, never
// asserted (BENCHMARKS.md "Shared mode latency").
func TestFleetLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("latency figures: not in -short")
	}
	single := cachetest.StartRedis(t)
	cl := cachetest.StartCluster(t, 3)
	modes := []struct {
		name string
		url  string
	}{{"local", ""}, {"redis", single.URL()}, {"cluster", cl.URL()}}
	const sessions, turns = 3, 10
	type lane struct {
		f     *fleet
		cc    *ccSession
		flat  *flatSession
		n     int
		times []time.Duration
	}
	lanes := make([]*lane, len(modes))
	for i, m := range modes {
		f := newFleetTimeout(t, 1, m.url, cache.DefaultRedisTimeout)
		lanes[i] = &lane{f: f}
	}
	for s := range sessions {
		for _, l := range lanes {
			l.cc = newCCSession(t, l.f.front, fmt.Sprintf("latency-key-%d", s))
			l.flat = &flatSession{client: testutil.NewClient(t, l.f.front, fmt.Sprintf("latency-key-%d", s))}
		}
		for i := range turns {
			q := ccQuestions[i%len(ccQuestions)]
			var answers []string
			for _, l := range lanes {
				l.f.clk.Advance(30 * time.Second)
				start := time.Now()
				a := l.cc.turn(t, q).Text()
				l.times = append(l.times, time.Since(start))
				l.n++
				l.f.settle(t, l.n)
				fq := q
				if i == 0 {
					fq = "Here is my file:\n\n" + fenced(bufferGo) + "\n\n" + q
				}
				start = time.Now()
				a += l.flat.turn(t, fq)
				l.times = append(l.times, time.Since(start))
				l.n++
				l.f.settle(t, l.n)
				answers = append(answers, a)
			}
			for j := 1; j < len(answers); j++ {
				if answers[j] != answers[0] {
					t.Errorf("session %d turn %d: %s answered differently from local", s, i, modes[j].name)
				}
			}
		}
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	base50, base99 := pct(lanes[0].times, 0.5), pct(lanes[0].times, 0.99)
	t.Logf("client latency over %d requests per mode (sessions with context caching, ledger, verified un-flattening):", len(lanes[0].times))
	for i, l := range lanes {
		p50, p99 := pct(l.times, 0.5), pct(l.times, 0.99)
		t.Logf("  %-8s p50 %7.2f ms (%+.2f ms, %.2fx)  p99 %7.2f ms (%+.2f ms, %.2fx)", modes[i].name,
			ms(p50), ms(p50)-ms(base50), ms(p50)/ms(base50), ms(p99), ms(p99)-ms(base99), ms(p99)/ms(base99))
		if i > 0 {
			st := l.f.stores[0].Stats().Redis
			t.Logf("           redis errors read %d write %d, lock timeouts %d", st.ReadErrors, st.WriteErrors, st.LockTimeouts)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
