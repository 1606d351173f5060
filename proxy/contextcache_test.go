package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// ccBody is turn n of a session whose first turn holds a large document.
func ccBody(n int) string {
	doc := strings.Repeat("Every line of this document is the same so that it is large. ", 300)
	var cs []string
	for i := 0; i <= n; i++ {
		q := fmt.Sprintf("question %d", i)
		if i == 0 {
			q = doc + q
		}
		cs = append(cs, fmt.Sprintf(`{"role":"user","parts":[{"text":%q}]}`, q))
		if i < n {
			cs = append(cs, fmt.Sprintf(`{"role":"model","parts":[{"text":"answer %d"}]}`, i))
		}
	}
	return `{"systemInstruction":{"parts":[{"text":"be brief"}]},"tools":[{"codeExecution":{}}],"contents":[` + strings.Join(cs, ",") + `]}`
}

type ccFixture struct {
	*fixture
	emu *emulator.Server
}

func newCCFixture(t *testing.T, opts Options) *ccFixture {
	t.Helper()
	return newCCFixtureWrapped(t, opts, nil)
}

// newCCFixtureWrapped is newCCFixture with wrap, when not nil, between the
// proxy and the emulator.
func newCCFixtureWrapped(t *testing.T, opts Options, wrap func(http.Handler) http.Handler) *ccFixture {
	t.Helper()
	var wraps []func(http.Handler) http.Handler
	if wrap != nil {
		wraps = append(wraps, wrap)
	}
	emu, up := tu.StartEmulator(t, emulator.Options{ImplicitCacheMinTokens: 1 << 30}, wraps...)
	opts.Rewrite.Enabled = true
	opts.Prices = map[string]Price{"gemini-2.5-flash": {Input: 0.30, CachedInput: 0.03, Output: 2.5, Storage: 1}}
	opts.ContextCache = &ContextCacheOptions{}
	return &ccFixture{fixture: newFixture(t, up.URL, opts), emu: emu}
}

// post sends one generate request and waits until the proxy has settled it.
func (f *ccFixture) post(t *testing.T, path, body string, hdr map[string]string) int {
	t.Helper()
	before := counterTotal(f.m)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.front.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, raw := do(t, rawClient(), req)
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d %s", path, res.StatusCode, raw)
	}
	if strings.Contains(path, ":generateContent") && hdr[HeaderRewrite] == "" && !strings.Contains(path, "/projects/") && !strings.Contains(body, "cachedContent") {
		waitFor(t, "settle", func() bool { return counterTotal(f.m) > before })
	}
	f.h.WaitContextCache()
	return res.StatusCode
}

func counterTotal(m *metrics.Metrics) float64 {
	return testutil.ToFloat64(m.ContextCacheRequests.WithLabelValues("gemini-2.5-flash", metrics.CacheOutcomeCached)) +
		testutil.ToFloat64(m.ContextCacheRequests.WithLabelValues("gemini-2.5-flash", metrics.CacheOutcomeFull))
}

// lastCached returns the cachedContent of the last generate request the
// emulator received, and its key id.
func (f *ccFixture) lastCached() (string, string) {
	rs := f.emu.Received()
	r := rs[len(rs)-1]
	return r.CachedContent, r.KeyID
}

const genPath = "/v1beta/models/gemini-2.5-flash:generateContent"

// TestContextCacheCredentials: a cache is made and used with the
// credential that reaches the upstream: the client's key as header or
// query parameter, or the proxy's own key when it swaps keys.
func TestContextCacheCredentials(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		path    string
		hdr     map[string]string
		wantKey string
	}{
		{"header key", Options{}, genPath, map[string]string{"X-Goog-Api-Key": "client-key"}, "client-key"},
		{"query key", Options{}, genPath + "?key=query-key", nil, "query-key"},
		{"swapped key", Options{APIKey: "server-key"}, genPath, map[string]string{"X-Goog-Api-Key": "client-key"}, "server-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCCFixture(t, tc.opts)
			for turn := range 6 {
				f.post(t, tc.path, ccBody(turn), tc.hdr)
			}
			name, key := f.lastCached()
			if name == "" {
				t.Fatal("no request named a cache after 6 turns")
			}
			if key != emulator.KeyID(tc.wantKey) {
				t.Errorf("cache used with key %s, want %s's", key, tc.wantKey)
			}
		})
	}
}

// TestContextCachePassesUnchanged: requests that name their own cache,
// Vertex paths, countTokens and requests with rewriting off are forwarded
// as sent and never planned.
func TestContextCachePassesUnchanged(t *testing.T) {
	f := newCCFixture(t, Options{})
	hdr := map[string]string{"X-Goog-Api-Key": "k"}
	for turn := range 6 {
		f.post(t, genPath, ccBody(turn), hdr)
	}
	if name, _ := f.lastCached(); name == "" {
		t.Fatal("session did not reach a cache")
	}
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
	}{
		{"rewrite off", genPath, ccBody(6), map[string]string{"X-Goog-Api-Key": "k", HeaderRewrite: "off"}},
		{"count tokens", "/v1beta/models/gemini-2.5-flash:countTokens", `{"generateContentRequest":` + strings.Replace(ccBody(6), `{`, `{"model":"models/gemini-2.5-flash",`, 1) + `}`, hdr},
		{"vertex", "/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent", ccBody(6), map[string]string{"Authorization": "Bearer k"}},
	} {
		f.post(t, tc.path, tc.body, tc.hdr)
		rs := f.emu.Received()
		r := rs[len(rs)-1]
		if string(r.Body) != tc.body {
			t.Errorf("%s: body changed:\n%s", tc.name, r.Body)
		}
	}
	// A request naming a cache of the client's own is not touched either.
	name, _ := f.lastCachedOf(t)
	own := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"cachedContent":"` + name + `"}`
	f.post(t, genPath, own, hdr)
	rs := f.emu.Received()
	if got := string(rs[len(rs)-1].Body); got != own {
		t.Errorf("request naming a cache changed:\n%s", got)
	}
}

// lastCachedOf returns the most recent cache a request named.
func (f *ccFixture) lastCachedOf(t *testing.T) (string, string) {
	t.Helper()
	rs := f.emu.Received()
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].CachedContent != "" {
			return rs[i].CachedContent, rs[i].KeyID
		}
	}
	t.Fatal("no request named a cache")
	return "", ""
}

// spaced is a rewrite that changes the body (a trailing space) without
// changing its prefixes, so that a rewritten request can name a cache.
func spaced(body []byte, _ rewrite.Options, _ rewrite.Verifier) ([]byte, *rewrite.Report, error) {
	out := append(bytes.Clone(body), ' ')
	return out, &rewrite.Report{BytesBefore: len(body), BytesAfter: len(out)}, nil
}

// TestContextCacheFailOpen: whatever the upstream answers a request that
// named a proxy-made cache with (400, 403, 404, 5xx), the client's own
// body is sent once more before any byte reached the client, and never a
// third time, rewritten or not. A 400 about the cache deletes it
// upstream; a 5xx keeps it.
func TestContextCacheFailOpen(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		message   string
		rewritten bool
		deleted   bool // the cache is deleted upstream
		kept      bool // and still used by the next request
	}{
		{"500", 500, "internal", false, false, true},
		{"503 rewritten", 503, "overloaded", true, false, true},
		{"400 unrelated", 400, "Invalid value at 'generation_config'", false, false, true},
		{"400 unrelated rewritten", 400, "Invalid value at 'generation_config'", true, false, true},
		{"400 about the cache", 400, "Tool config, tools and system instruction should not be set in the request when using cached content.", false, true, false},
		{"404 rewritten", 404, "CachedContent not found", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &failOnce{}
			f := newCCFixtureWrapped(t, Options{}, func(next http.Handler) http.Handler { fl.next = next; return fl })
			if tc.rewritten {
				f.h.rewriteFn = spaced
				f.h.auditFn = noAudit // a fake rewrite keeps no records
			}
			hdr := map[string]string{"X-Goog-Api-Key": "k"}
			for turn := range 6 {
				f.post(t, genPath, ccBody(turn), hdr)
			}
			name, _ := f.lastCachedOf(t)
			fl.arm(tc.status, tc.message)
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.front.URL+genPath, strings.NewReader(ccBody(6)))
			req.Header.Set("X-Goog-Api-Key", "k")
			res, raw := do(t, rawClient(), req)
			if res.StatusCode != 200 {
				t.Fatalf("client got %d %s", res.StatusCode, raw)
			}
			f.h.WaitContextCache()
			gen := fl.taken()
			deleted := fl.deleted(name)
			if len(gen) != 2 {
				t.Fatalf("upstream saw %d generate requests, want 2", len(gen))
			}
			if gen[0].Status != tc.status || gen[0].CachedContent != name {
				t.Errorf("first attempt: %d naming %q, want %d naming %s", gen[0].Status, gen[0].CachedContent, tc.status, name)
			}
			if gen[1].Status != 200 || string(gen[1].Body) != ccBody(6) {
				t.Errorf("second attempt: %d, body is the client's: %v", gen[1].Status, string(gen[1].Body) == ccBody(6))
			}
			if deleted != tc.deleted {
				t.Errorf("cache deleted upstream: %v, want %v", deleted, tc.deleted)
			}
			if got := strings.HasSuffix(res.Header.Get(HeaderReport), "; fallback"); got != tc.rewritten {
				t.Errorf("report %q: fallback %v, want %v", res.Header.Get(HeaderReport), got, tc.rewritten)
			}
			if got := testutil.ToFloat64(f.m.ContextCacheFallbacks.WithLabelValues("gemini-2.5-flash")); got != 1 {
				t.Errorf("context cache fallbacks = %v, want 1", got)
			}
			if got := testutil.ToFloat64(f.m.RewriteFallbacks); got != 0 {
				t.Errorf("rewrite fallbacks = %v, want 0 (the rewrite was not at fault)", got)
			}
			// Let the settle of that request finish before the next one.
			waitFor(t, "settle", func() bool { return counterTotal(f.m) >= 7 })
			f.post(t, genPath, ccBody(7), hdr)
			rs := f.emu.Received()
			used := rs[len(rs)-1].CachedContent == name
			if used != tc.kept {
				t.Errorf("next request named the cache: %v, want %v", used, tc.kept)
			}
		})
	}
}

// failOnce answers the first request naming a cache after arm with an
// error, and records the generate attempts from arm on.
type failOnce struct {
	next http.Handler

	mu       sync.Mutex
	status   int
	message  string
	attempts []emulator.Received
	deletes  []string // paths
	on       bool
}

func (f *failOnce) deleted(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.deletes {
		if strings.HasSuffix(p, "/"+name) {
			return true
		}
	}
	return false
}

func (f *failOnce) arm(status int, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.message, f.on = status, message, true
}

func (f *failOnce) taken() []emulator.Received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

func (f *failOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, ":generateContent") {
		if r.Method == http.MethodDelete {
			f.mu.Lock()
			f.deletes = append(f.deletes, r.URL.Path)
			f.mu.Unlock()
		}
		f.next.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct{ CachedContent string }
	json.Unmarshal(body, &req)
	f.mu.Lock()
	on, status, message := f.on, f.status, f.message
	if on && req.CachedContent != "" {
		f.status = 0
	}
	f.mu.Unlock()
	rec := emulator.Received{Body: body, CachedContent: req.CachedContent, Status: 200}
	if on && status != 0 && req.CachedContent != "" {
		rec.Status = status
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"status":"FAILED"}}`, status, message)
	} else {
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusRecorder{ResponseWriter: w, status: 200}
		f.next.ServeHTTP(sw, r)
		rec.Status = sw.status
	}
	if on {
		f.mu.Lock()
		f.attempts = append(f.attempts, rec)
		f.mu.Unlock()
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
