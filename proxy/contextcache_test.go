package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/metrics"
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
	emu := emulator.New(emulator.Options{ImplicitCacheMinTokens: 1 << 30})
	up := httptest.NewServer(emu)
	t.Cleanup(up.Close)
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
