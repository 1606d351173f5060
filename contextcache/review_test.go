package contextcache

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// offline returns a Manager whose cache calls all fail, for tests of its
// bookkeeping alone.
func offline(t testing.TB, opts Options) (*Manager, *metrics.Metrics) {
	t.Helper()
	mt := metrics.New(prometheus.NewRegistry())
	opts.Transport, opts.Metrics = nopTransport{}, mt
	if opts.Prices == nil {
		opts.Prices = prices
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, mt
}

func offlineCall(scope string, body []byte) Call {
	col, _ := url.Parse("http://127.0.0.1:1/v1beta/cachedContents")
	return Call{Scope: scope, Model: model, ModelID: model, Collection: col, Body: body}
}

// TestManagerScopesBounded: a request too small to cache makes no scope
// (the scope hash includes the credential, so rotating tokens would
// otherwise leak one per token), and the scopes of cacheable requests are
// bounded by MaxScopes whatever MaxPrefixes allows.
func TestManagerScopesBounded(t *testing.T) {
	t.Run("small requests", func(t *testing.T) {
		m, _ := offline(t, Options{MaxPrefixes: 10})
		small := conversation(2, "short")
		for i := range 50_000 {
			u := m.Plan(offlineCall(fmt.Sprintf("s%d", i), small))
			m.Settle(u, Usage{PromptTokens: 40}, true)
		}
		if len(m.scopes) != 0 || m.prefixes != 0 || m.lru.Len() != 0 {
			t.Errorf("scopes=%d prefixes=%d lru=%d after 50,000 small requests, want 0", len(m.scopes), m.prefixes, m.lru.Len())
		}
	})
	t.Run("max scopes", func(t *testing.T) {
		m, _ := offline(t, Options{MaxScopes: 100, MinTokens: map[string]int{model: 10}})
		body := conversation(2, "short")
		for i := range 2_000 {
			u := m.Plan(offlineCall(fmt.Sprintf("s%d", i), body))
			m.Settle(u, Usage{PromptTokens: 40}, true)
			if len(m.scopes) > 100 || m.lru.Len() != len(m.scopes) {
				t.Fatalf("after %d scopes: %d kept, lru %d", i+1, len(m.scopes), m.lru.Len())
			}
		}
		if m.prefixes == 0 || m.prefixes > 100*5 {
			t.Errorf("prefixes = %d for 100 scopes of 5", m.prefixes)
		}
	})
}

// TestManagerScopePrefixes: a scope keeps at most maxScopePrefixes
// prefixes, drops the least recently seen first and never one that is
// cached.
func TestManagerScopePrefixes(t *testing.T) {
	m, _ := offline(t, Options{MinTokens: map[string]int{model: 10}})
	s := m.newScopeLocked(offlineCall("s", nil))
	var keys []Key
	for i := range maxScopePrefixes + 10 {
		var k Key
		k[0], k[1] = byte(i), byte(i>>8)
		keys = append(keys, k)
		m.prefixLocked(s, k)
		if i == 0 {
			s.caches[k] = &entry{key: k}
		}
		if i == maxScopePrefixes-1 {
			m.prefixLocked(s, keys[1]) // seen again: newest
		}
	}
	if len(s.prefixes) != maxScopePrefixes || m.prefixes != maxScopePrefixes {
		t.Fatalf("prefixes = %d (total %d), want %d", len(s.prefixes), m.prefixes, maxScopePrefixes)
	}
	var gone []int
	for i, k := range keys {
		if s.prefixes[k] == nil {
			gone = append(gone, i)
		}
	}
	// 0 is cached and 1 was seen again: 2..11 went, oldest first.
	if diff := cmp.Diff([]int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, gone); diff != "" {
		t.Errorf("dropped prefixes (-want +got):\n%s", diff)
	}
	n := 0
	for p := s.recent.next; p != &s.recent; p = p.next {
		n++
	}
	if n != maxScopePrefixes {
		t.Errorf("recency list holds %d, want %d", n, maxScopePrefixes)
	}
}

// liveCache gives scope the cache name of the prefix of body with k
// contents, with the implicit-cache share given, as if it had been made
// at now.
func liveCache(m *Manager, c Call, k int, name string, share float64, now time.Time) *entry {
	req, _ := Parse(c.Body, c.ModelID)
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.scopes[c.Scope]
	if s == nil {
		s = m.newScopeLocked(c)
	}
	p := m.prefixLocked(s, req.Key(k))
	p.share, p.shareSeen = share, true
	e := &entry{name: name, key: req.Key(k), k: k, size: req.Size(k), tokens: 3000, created: now, lastUse: now, expire: now.Add(m.ttl)}
	s.caches[e.key] = e
	if mt := m.opts.Metrics; mt != nil {
		mt.ContextCacheLive.WithLabelValues(model).Inc()
	}
	return e
}

// TestManagerSavedShare: a request served by a cache is credited only the
// part implicit caching would not have billed at the cached rate, the
// share the decision to create it subtracted.
func TestManagerSavedShare(t *testing.T) {
	for _, share := range []float64{0, 0.5, 1} {
		t.Run(fmt.Sprint(share), func(t *testing.T) {
			now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			m, mt := offline(t, Options{Now: func() time.Time { return now }, MaxPrefixes: 1000})
			c := offlineCall("s", conversation(2, doc))
			liveCache(m, c, 1, "cachedContents/x", share, now)
			u := m.Plan(c)
			if u.Cache() != "cachedContents/x" {
				t.Fatalf("Plan named %q", u.Cache())
			}
			m.Settle(u, Usage{PromptTokens: 3100, CachedTokens: 3000}, true)
			got := testutil.ToFloat64(mt.ContextCacheSavedDollars.WithLabelValues(model))
			want := 3000 * (flash.Input - flash.CachedInput) * (1 - share) / 1e6
			if diff := got - want; diff > 1e-12 || diff < -1e-12 {
				t.Errorf("saved = %v, want %v", got, want)
			}
		})
	}
}

// TestManagerFallbackReasons: a cache the upstream refused (400 about it)
// is forgotten and deleted with the request's credential, and its storage
// counted to the delete; a gone one (403, 404) is forgotten and counted
// to its expiry at the latest; a 5xx keeps it.
func TestManagerFallbackReasons(t *testing.T) {
	e := newEnv(t, Options{}, emulator.Options{})
	turn := 0
	for ; turn < 5; turn++ {
		e.clk.Advance(10 * time.Second)
		e.send(e.call("k1", conversation(turn, doc)))
	}
	if n := len(e.caches("k1")); n != 1 {
		t.Fatalf("caches = %d, want 1", n)
	}
	storage := func() float64 { return testutil.ToFloat64(e.mt.ContextCacheStorageTokenSeconds.WithLabelValues(model)) }
	tokensOf := func(u *Use) float64 { return u.entry.tokens }

	// 5xx: kept.
	u := e.m.Plan(e.call("k1", conversation(turn, doc)))
	if u.Cache() == "" {
		t.Fatal("no cache planned")
	}
	e.m.Fallback(u, Failed)
	e.m.Wait()
	if u.Body() != nil || u.Cache() != "" {
		t.Errorf("after Fallback the use still names %q", u.Cache())
	}
	if u2 := e.m.Plan(e.call("k1", conversation(turn, doc))); u2.Cache() == "" {
		t.Errorf("cache forgotten after a 5xx")
	}

	// Refused: deleted upstream at the time of the delete.
	u = e.m.Plan(e.call("k1", conversation(turn, doc)))
	created := u.entry.created
	tokens := tokensOf(u)
	e.clk.Advance(40 * time.Second)
	e.m.Fallback(u, Refused)
	e.m.Wait()
	if got := e.ops(metrics.CacheOpDelete, metrics.CacheResultOK); got != 1 {
		t.Errorf("deletes = %v, want 1", got)
	}
	if n := len(e.caches("k1")); n != 0 {
		t.Errorf("emulator still holds %d caches after a refused cache", n)
	}
	if got, want := storage(), tokens*e.clk.Now().Sub(created).Seconds(); got != want {
		t.Errorf("storage token-seconds = %v, want %v (to the delete)", got, want)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheLive.WithLabelValues(model)); got != 0 {
		t.Errorf("live = %v", got)
	}

	// Gone after its expiry: counted to the expiry, not to now.
	for i := 0; i < 8 && len(e.caches("k1")) == 0; i++ {
		turn++
		e.clk.Advance(10 * time.Second)
		e.send(e.call("k1", conversation(turn, doc)))
	}
	turn++
	u = e.m.Plan(e.call("k1", conversation(turn, doc)))
	if u.Cache() == "" {
		t.Fatal("no new cache")
	}
	before, ent := storage(), u.entry
	e.clk.Advance(time.Hour)
	e.m.Fallback(u, Gone)
	if got, want := storage()-before, ent.tokens*ent.expire.Sub(ent.created).Seconds(); got != want {
		t.Errorf("storage of an expired cache = %v, want %v (to its expiry)", got, want)
	}
	if got := testutil.ToFloat64(e.mt.ContextCacheFallbacks.WithLabelValues(model)); got != 3 {
		t.Errorf("fallbacks = %v, want 3", got)
	}
}

// TestCandidatesFunctionCalls: no boundary parts a functionCall turn from
// the functionResponse turn after it.
func TestCandidatesFunctionCalls(t *testing.T) {
	text := func(role, s string) string { return fmt.Sprintf(`{"role":%q,"parts":[{"text":%q}]}`, role, s) }
	call := `{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"c2ln"}]}`
	resp := `{"role":"user","parts":[{"function_response" : {"name":"f","response":{"output":1}}}]}`
	mention := text("model", `a "functionCall": in text`)
	for _, tc := range []struct {
		name     string
		contents []string
		want     []int
	}{
		{"plain", []string{text("user", "a"), text("model", "b"), text("user", "c")}, []int{2, 1, 0}},
		{"tool loop", []string{text("user", "a"), call, resp, call, resp}, []int{3, 1, 0}},
		{"call then text", []string{text("user", "a"), call, text("user", "c")}, []int{1, 0}},
		{"text mentions", []string{text("user", "a"), mention, text("user", "c")}, []int{2, 1, 0}},
		{"starts with a response", []string{resp, text("user", "c")}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"contents":[` + strings.Join(tc.contents, ",") + `]}`
			req, err := Parse([]byte(body), model)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, candidates(req, 0)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}
