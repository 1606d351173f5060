package contextcache

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

var _ Shared = (*cache.ContextCacheRegistry)(nil)

// registry returns the context-cache registry of a fresh Store on srv,
// as one replica has it.
func registry(t *testing.T, url string) *cache.ContextCacheRegistry {
	t.Helper()
	s, err := cache.New(cache.Options{RedisURL: url, Secret: []byte("fleet-secret-of-the-replicas"),
		RedisTimeout: 5 * time.Second, RedisBudget: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.ContextCacheRegistry()
}

// fleet is n Managers on one emulator and clock, each with its own
// registry client on one Redis (n replicas).
func newFleet(t *testing.T, url string, n int) (*env, []*Manager, []*metrics.Metrics) {
	t.Helper()
	e := newEnv(t, Options{Shared: registry(t, url)}, emulator.Options{})
	ms, mts := []*Manager{e.m}, []*metrics.Metrics{e.mt}
	for range n - 1 {
		mt := metrics.New(prometheus.NewRegistry())
		m, err := New(Options{Transport: http.DefaultTransport, Now: e.clk.Now, Metrics: mt, Prices: prices, Shared: registry(t, url)})
		if err != nil {
			t.Fatal(err)
		}
		ms, mts = append(ms, m), append(mts, mt)
	}
	return e, ms, mts
}

// TestSharedFleetSession: a session whose turns go round-robin to three
// Managers sharing one Redis sends exactly the bodies one Manager sends
// (the same turn names the same cache), and the fleet creates one cache,
// as one Manager does.
func TestSharedFleetSession(t *testing.T) {
	srv := cachetest.StartRedis(t)
	one := newEnv(t, Options{}, emulator.Options{})
	fl, ms, mts := newFleet(t, srv.URL(), 3)
	cached := 0
	for turn := range 12 {
		one.clk.Advance(10 * time.Second)
		fl.clk.Advance(10 * time.Second)
		want := one.send(one.call("k1", conversation(turn, doc)))
		fl.m = ms[turn%len(ms)]
		got := fl.send(fl.call("k1", conversation(turn, doc)))
		if !bytes.Equal(got.sent, want.sent) || got.cache != want.cache {
			t.Fatalf("turn %d on replica %d: sent %d bytes naming %q, want %d naming %q", turn, turn%len(ms), len(got.sent), got.cache, len(want.sent), want.cache)
		}
		if got.usage != want.usage {
			t.Errorf("turn %d: usage %+v, want %+v", turn, got.usage, want.usage)
		}
		if got.cache != "" {
			cached++
		}
	}
	if cached < 6 {
		t.Errorf("%d turns named a cache, want most", cached)
	}
	creates, live := 0.0, 0.0
	for _, mt := range mts {
		creates += testutil.ToFloat64(mt.ContextCacheOperations.WithLabelValues(metrics.CacheOpCreate, metrics.CacheResultOK))
		live += testutil.ToFloat64(mt.ContextCacheLive.WithLabelValues(model))
	}
	if wantCreates := one.ops(metrics.CacheOpCreate, metrics.CacheResultOK); creates != wantCreates || creates != 1 {
		t.Errorf("fleet creates = %v, one replica %v; want 1", creates, wantCreates)
	}
	if live != 1 {
		t.Errorf("fleet live caches = %v, want 1 (counted by its creator only)", live)
	}
	if n := len(fl.caches("k1")); n != 1 {
		t.Errorf("emulator holds %d caches, want 1", n)
	}
}

// settleAtOnce sends turns 0-2 of the session to ms in turn, then plans
// turn 3 on every Manager of ms, sends it once and settles it on all of
// them at the same moment, as replicas that each served the request would.
func settleAtOnce(t *testing.T, e *env, ms []*Manager) {
	t.Helper()
	for turn := range 3 {
		e.clk.Advance(time.Second)
		e.m = ms[turn%len(ms)]
		if r := e.send(e.call("k1", conversation(turn, doc))); r.cache != "" {
			t.Fatalf("turn %d named %s already", turn, r.cache)
		}
	}
	e.clk.Advance(time.Second)
	c := e.call("k1", conversation(3, doc))
	uses := make([]*Use, len(ms))
	for i, m := range ms {
		uses[i] = m.Plan(c)
	}
	_, usage, _ := e.generate(c, c.Body)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { m.Settle(uses[i], usage, true) })
	}
	wg.Wait()
	for _, m := range ms {
		m.Wait()
	}
}

// creates sums the successful create calls of mts.
func creates(mts []*metrics.Metrics) float64 {
	n := 0.0
	for _, mt := range mts {
		n += testutil.ToFloat64(mt.ContextCacheOperations.WithLabelValues(metrics.CacheOpCreate, metrics.CacheResultOK))
	}
	return n
}

// TestSharedFleetSettlesOnce: three replicas settling one request at the
// same moment never create a prefix twice: the shared state says which
// prefix is being created, so each settle picks another or none. Every
// cache made is live upstream and listed in the shared state; none had to
// be deleted as a duplicate.
func TestSharedFleetSettlesOnce(t *testing.T) {
	srv := cachetest.StartRedis(t)
	fl, ms, mts := newFleet(t, srv.URL(), 3)
	settleAtOnce(t, fl, ms)
	got := creates(mts)
	deletes := 0.0
	for _, mt := range mts {
		deletes += testutil.ToFloat64(mt.ContextCacheOperations.WithLabelValues(metrics.CacheOpDelete, metrics.CacheResultOK))
	}
	raw, found, ok := ms[0].shared.Load("", "scope-k1")
	var st sharedState
	if !found || !ok || json.Unmarshal(raw, &st) != nil {
		t.Fatalf("no shared state: found %v ok %v", found, ok)
	}
	if got < 1 || len(fl.caches("k1")) != int(got) || deletes != 0 || len(st.Caches) != int(got) {
		t.Errorf("creates = %v, emulator caches %v, deletes %v, shared state lists %d", got, fl.caches("k1"), deletes, len(st.Caches))
	}
}

// noLock is a registry whose scope lock is never taken (always held
// elsewhere): every settle decides alone, from what it last loaded.
type noLock struct{ Shared }

func (noLock) Lock(string, string, time.Duration) ([]byte, string, bool) { return nil, "", false }

// TestSharedFleetOneCreator: with the scope lock unavailable, three
// replicas that settle one request at the same moment all decide to
// create the same prefix; the create lease (SET NX) lets one make it,
// the others wait for its entry and adopt it, so the next request on
// every replica names that one cache.
func TestSharedFleetOneCreator(t *testing.T) {
	srv := cachetest.StartRedis(t)
	fl, ms, mts := newFleet(t, srv.URL(), 3)
	for _, m := range ms {
		m.shared = noLock{m.shared}
	}
	// Every replica sees every sighting, as through a shared state.
	for turn := range 3 {
		fl.clk.Advance(time.Second)
		c := fl.call("k1", conversation(turn, doc))
		_, usage, _ := fl.generate(c, c.Body)
		for _, m := range ms {
			m.Settle(m.Plan(c), usage, true)
		}
	}
	fl.clk.Advance(time.Second)
	c := fl.call("k1", conversation(3, doc))
	uses := make([]*Use, len(ms))
	for i, m := range ms {
		uses[i] = m.Plan(c)
	}
	_, usage, _ := fl.generate(c, c.Body)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { m.Settle(uses[i], usage, true) })
	}
	wg.Wait()
	for _, m := range ms {
		m.Wait()
	}
	if got := creates(mts); got != 1 || len(fl.caches("k1")) != 1 {
		t.Fatalf("creates = %v, emulator caches %v; want exactly one", got, fl.caches("k1"))
	}
	names := map[string]bool{}
	for i, m := range ms {
		u := m.Plan(fl.call("k1", conversation(4, doc)))
		if u.Cache() == "" {
			t.Errorf("replica %d names no cache", i)
		}
		names[u.Cache()] = true
	}
	if len(names) != 1 {
		t.Errorf("replicas name caches %v, want one", names)
	}
}

// TestSharedRedisDown: with the registry unreachable every replica works
// as a single one, from its own sightings.
func TestSharedRedisDown(t *testing.T) {
	srv := cachetest.StartRedis(t)
	e := newEnv(t, Options{Shared: registry(t, srv.URL())}, emulator.Options{})
	srv.Stop()
	first := -1
	for turn := range 8 {
		e.clk.Advance(10 * time.Second)
		if r := e.send(e.call("k1", conversation(turn, doc))); r.cache != "" && first < 0 {
			first = turn
		}
	}
	if first != 4 {
		t.Errorf("first cached turn with Redis down = %d, want 4 as a single replica", first)
	}
}
