package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/goenv"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// testKey is the API key every client sends; the emulator accepts any key.
const testKey = "e2e-test-key"

// fixedNow is the emulators' clock, so that timestamps in resources
// (caches, files, interactions) are equal in the direct and proxied runs.
var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// bufferGo is a real 500-line Go source file, bytes/buffer.go of the Go
// installation that runs the tests (read at run time: the repository holds
// no copy).
var bufferGo = goSource("src/bytes/buffer.go")

// readerGo is a second file of the same package, for a tool session that
// reads two different files.
var readerGo = goSource("src/bytes/reader.go")

// goSource returns the file rel of the Go installation (go env GOROOT).
func goSource(rel string) string {
	env, err := goenv.Lookup()
	if err != nil {
		panic(fmt.Sprintf("e2e: %v", err))
	}
	b, err := os.ReadFile(env.File(rel))
	if err != nil {
		panic(fmt.Sprintf("e2e: reading %s of the Go installation: %v", rel, err))
	}
	return string(b)
}

// stack is one emulator with a proxy in front of it, both on loopback.
type stack struct {
	emu      *emulator.Server
	emuURL   string
	proxyURL string
	h        *proxy.Handler
	reg      *prometheus.Registry
	m        *metrics.Metrics
}

// stackConfig is what the stackOptions of newStack set.
type stackConfig struct {
	rewrite      rewrite.Options                           // the zero value means rewrite.DefaultOptions()
	interactions func(*cache.Store) proxy.InteractionStore // nil: Interactions continuation off
	upstream     func(http.Handler) http.Handler           // nil: the emulator serves directly
	proxy        func(*proxy.Options)                      // nil: no further proxy options
}

// stackOption configures newStack.
type stackOption func(*stackConfig)

// withRewrite sets the proxy's rewrite options to rw.
func withRewrite(rw rewrite.Options) stackOption {
	return func(c *stackConfig) { c.rewrite = rw }
}

// withInteractions turns Interactions continuation on, with the proxy's
// InteractionStore made by wrap from a fresh real cache.Store, which also
// verifies the rewrite's references (waiting is the usual wrap).
func withInteractions(wrap func(*cache.Store) proxy.InteractionStore) stackOption {
	return func(c *stackConfig) { c.interactions = wrap }
}

// withUpstream wraps the emulator's handler in wrap.
func withUpstream(wrap func(http.Handler) http.Handler) stackOption {
	return func(c *stackConfig) { c.upstream = wrap }
}

// withProxy lets edit change the proxy's options last.
func withProxy(edit func(*proxy.Options)) stackOption {
	return func(c *stackConfig) { c.proxy = edit }
}

// newStack starts a fresh emulator configured by opts (with the fixed
// clock unless opts.Now is set) and, in front of it, a proxy with
// rewriting enabled on a fresh registry, configured further by with.
func newStack(t *testing.T, opts emulator.Options, with ...stackOption) *stack {
	t.Helper()
	var c stackConfig
	for _, o := range with {
		o(&c)
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	var wrap []func(http.Handler) http.Handler
	if c.upstream != nil {
		wrap = append(wrap, c.upstream)
	}
	emu, es := testutil.StartEmulator(t, opts, wrap...)
	up, err := url.Parse(es.URL)
	if err != nil {
		t.Fatal(err)
	}
	po := proxy.Options{
		Upstream: up,
		Rewrite:  proxy.RewriteOptions{Enabled: true, Options: c.rewrite},
	}
	if c.interactions != nil {
		store, err := cache.New(cache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		po.Verifier = func(tenant string) rewrite.Verifier { return store.Verifier(tenant) }
		po.Interactions = proxy.InteractionsOptions{Enabled: true, Store: c.interactions(store)}
	}
	if c.proxy != nil {
		c.proxy(&po)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	h, err := proxy.New(po, slog.New(slog.DiscardHandler), m)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	ps := httptest.NewServer(h)
	t.Cleanup(ps.Close)
	return &stack{emu: emu, emuURL: es.URL, proxyURL: ps.URL, h: h, reg: reg, m: m}
}

// pair is two identical stacks: the direct run talks to direct.emuURL,
// the proxied run to proxied.proxyURL. Fresh emulators start from the same
// state and hand out the same ids for the same sequence of calls.
type pair struct {
	direct, proxied *stack
}

func newPair(t *testing.T, opts emulator.Options) pair {
	t.Helper()
	return pair{direct: newStack(t, opts), proxied: newStack(t, opts)}
}

// clients returns a client for the direct run and one for the proxied run.
func (p pair) clients(t *testing.T) (direct, proxied *genai.Client) {
	t.Helper()
	return newClient(t, p.direct.emuURL), newClient(t, p.proxied.proxyURL)
}

// newClient returns a Gemini API client with its base URL set to baseURL.
func newClient(t *testing.T, baseURL string) *genai.Client {
	t.Helper()
	return testutil.NewClient(t, baseURL, testKey)
}

// ignoreSDKHTTPResponse ignores the SDK's copy of the HTTP response headers
// (Date, X-Gemini-Proxy-Report and Content-Length legitimately differ).
var ignoreSDKHTTPResponse = cmp.FilterPath(func(p cmp.Path) bool {
	sf, ok := p.Last().(cmp.StructField)
	return ok && sf.Name() == "SDKHTTPResponse"
}, cmp.Ignore())

// exportAll lets cmp look into unexported fields of SDK types.
var exportAll = cmp.Exporter(func(reflect.Type) bool { return true })

// counterSum sums the counter name over the series whose labels include
// every pair in match.
func counterSum(t *testing.T, reg prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range mt.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue series
				}
			}
			sum += mt.GetCounter().GetValue()
		}
	}
	return sum
}

// sha12 is the first 12 hex digits of the SHA-256 of b, as references
// name them.
func sha12(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:6])
}

// jsonValue round-trips v through JSON, for comparing SDK types whose
// internals are unions.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%T): %v", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	return out
}

// sameWire reports differences between what two emulators received:
// method, path, query and body must be byte-identical.
func sameWire(t *testing.T, direct, proxied []emulator.Received) {
	t.Helper()
	if len(direct) != len(proxied) {
		t.Fatalf("emulator received %d requests through the proxy, %d directly", len(proxied), len(direct))
	}
	for i := range direct {
		d, p := direct[i], proxied[i]
		if d.Method != p.Method || d.Path != p.Path || d.RawQuery != p.RawQuery {
			t.Errorf("request %d: through the proxy %s %s?%s, directly %s %s?%s", i, p.Method, p.Path, p.RawQuery, d.Method, d.Path, d.RawQuery)
		}
		if string(d.Body) != string(p.Body) {
			t.Errorf("request %d (%s): upstream body through the proxy differs from the client's bytes:\n%s", i, d.API, cmp.Diff(string(d.Body), string(p.Body)))
		}
		if d.Status != 200 || p.Status != 200 {
			t.Errorf("request %d (%s): status direct %d (%s), proxied %d (%s)", i, d.API, d.Status, d.Error, p.Status, p.Error)
		}
	}
}

// testImage returns a deterministic 3 KiB "PNG" (a PNG signature followed
// by pseudo-random bytes): large enough to be replaced by a reference, and
// its standard base64 contains '+' and '/', so the URL-safe form differs.
func testImage() []byte {
	out := []byte("\x89PNG\r\n\x1a\n")
	block := sha256.Sum256([]byte("e2e image"))
	for len(out) < 3072 {
		out = append(out, block[:]...)
		block = sha256.Sum256(block[:])
	}
	return out[:3072]
}
