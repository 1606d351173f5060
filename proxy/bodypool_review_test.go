package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// poisonReleased makes every pooled body buffer that goes back to its pool
// be overwritten with 'X' until the test ends: a read of a body after its
// buffer was released then sees X's instead of the request's bytes, as it
// would see another request's (another tenant's) once the buffer is
// reused. Tests that call it must not run in parallel.
func poisonReleased(t *testing.T) {
	t.Helper()
	poison := func(b []byte) {
		for i := range b {
			b[i] = 'X'
		}
	}
	releasedHook.Store(&poison)
	t.Cleanup(func() { releasedHook.Store(nil) })
}

// poisoned reports whether b holds a run of the bytes poisonReleased
// writes.
func poisoned(b []byte) bool { return bytes.Contains(b, []byte("XXXXXXXXXXXXXXXX")) }

// memShared is an in-memory contextcache.Shared for one test. Its Lock
// waits (bounded) until no request is inside the proxy's ServeHTTP
// (inflight): the shared registry's round trips make the Manager settle a
// request on a goroutine of its own (contextcache.Manager.Settle), which
// may run only once the request is over, and the test makes it do so.
type memShared struct {
	inflight *atomic.Int32

	mu     sync.Mutex
	states map[string][]byte
	leases map[string][]byte
}

func (s *memShared) key(tenant, scope string) string { return tenant + "\x00" + scope }

func (s *memShared) Load(tenant, scope string) ([]byte, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.states[s.key(tenant, scope)]
	return bytes.Clone(v), ok, true
}

func (s *memShared) Lock(tenant, scope string, _ time.Duration) ([]byte, string, bool) {
	for deadline := time.Now().Add(5 * time.Second); s.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.states[s.key(tenant, scope)]), "token", true
}

func (s *memShared) Unlock(tenant, scope, _ string, state []byte, _ time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[s.key(tenant, scope)] = bytes.Clone(state)
	return true
}

func (s *memShared) Claim(tenant, scope string, key [sha256.Size]byte, _ time.Duration) (bool, []byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(tenant, scope) + hex.EncodeToString(key[:])
	if v, ok := s.leases[k]; ok {
		return false, bytes.Clone(v), true
	}
	s.leases[k] = nil
	return true, nil, true
}

func (s *memShared) Publish(tenant, scope string, key [sha256.Size]byte, val []byte, _ time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases[s.key(tenant, scope)+hex.EncodeToString(key[:])] = bytes.Clone(val)
	return true
}

// spacedInto is spaced written into the memory of Options.Buffer, as the
// rewriter writes a changed body: the body sent lies in a pooled buffer
// of the proxy's (outBuffer).
func spacedInto(body []byte, opts rewrite.Options, _ rewrite.Verifier) ([]byte, *rewrite.Report, error) {
	var out []byte
	if opts.Buffer != nil {
		out = opts.Buffer(len(body) + 1)[:0]
	}
	out = append(append(out, body...), ' ')
	return out, &rewrite.Report{BytesBefore: len(body), BytesAfter: len(out)}, nil
}

// TestReviewContextCacheSharedSettleAfterRelease: in shared mode
// (ContextCacheOptions.Shared) the Manager settles a request on a
// goroutine of its own, and the cache it decides to create is built from
// the body it planned (contextcache.Request keeps that body, not a copy):
// the body sent, which lies in a pooled buffer (the client body's, or the
// rewritten body's from outBuffer). That goroutine may run after
// ServeHTTP returned; the buffer must not be back in its pool by then, or
// the cachedContents create carries whatever the buffer holds next:
// another request's, another tenant's, bytes, stored upstream as this
// tenant's cache. With released buffers poisoned, every create the
// upstream gets must hold the conversation's document and no poison.
func TestReviewContextCacheSharedSettleAfterRelease(t *testing.T) {
	for _, rewritten := range []bool{false, true} {
		name := "client body"
		if rewritten {
			name = "rewritten body"
		}
		t.Run(name, func(t *testing.T) {
			poisonReleased(t)
			var (
				mu      sync.Mutex
				creates [][]byte
			)
			capture := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cachedContents") {
						b, _ := io.ReadAll(r.Body)
						mu.Lock()
						creates = append(creates, b)
						mu.Unlock()
						r.Body = io.NopCloser(bytes.NewReader(b))
					}
					next.ServeHTTP(w, r)
				})
			}
			_, up := tu.StartEmulator(t, emulator.Options{ImplicitCacheMinTokens: 1 << 30}, capture)
			var inflight atomic.Int32
			var opts Options
			opts.Rewrite.Enabled = true
			opts.Prices = map[string]Price{"gemini-2.5-flash": {Input: 0.30, CachedInput: 0.03, Output: 2.5, Storage: 1}}
			opts.ContextCache = &ContextCacheOptions{Shared: &memShared{inflight: &inflight, states: map[string][]byte{}, leases: map[string][]byte{}}}
			f := newFixture(t, up.URL, opts)
			if rewritten {
				f.h.rewriteFn = spacedInto
				f.h.auditFn = noAudit // a fake rewrite keeps no records
			}
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inflight.Add(1)
				defer inflight.Add(-1)
				f.h.ServeHTTP(w, r)
			}))
			t.Cleanup(front.Close)
			for turn := range 6 {
				before := counterTotal(f.m)
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL+genPath, strings.NewReader(ccBody(turn)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Goog-Api-Key", "k")
				if res, raw := do(t, rawClient(), req); res.StatusCode != 200 {
					t.Fatalf("turn %d: %d %s", turn, res.StatusCode, raw)
				}
				waitFor(t, "settle", func() bool { return counterTotal(f.m) > before })
				f.h.WaitContextCache()
			}
			mu.Lock()
			defer mu.Unlock()
			if len(creates) == 0 {
				t.Fatal("no cache was created in 6 turns: the test shows nothing")
			}
			doc := "Every line of this document is the same so that it is large."
			for i, b := range creates {
				if poisoned(b) || !bytes.Contains(b, []byte(doc)) {
					t.Errorf("create %d of %d holds bytes that are not the request's (a body read after its buffer went back to the pool): %.120q", i+1, len(creates), b)
				}
			}
		})
	}
}

// reviewTenantBody is request id of TestReviewPoisonedTenants: a session
// whose file, a function of id (its tenant's), is sent again in the last
// turn, so that the real rewriter replaces the copy by a reference; its
// size varies over several of the pool's classes.
func reviewTenantBody(id int) []byte {
	var file strings.Builder
	fmt.Fprintf(&file, "```go t%d.go\n", id)
	for i := range 60 + (id*37)%900 {
		fmt.Fprintf(&file, "\tx%d := tenant%d(%d) // only tenant %d has this line\n", i, id, i, id)
	}
	file.WriteString("```\n")
	turn := func(role, text string) string {
		q, _ := json.Marshal(text)
		return `{"role":"` + role + `","parts":[{"text":` + string(q) + `}]}`
	}
	return []byte(`{"contents":[` + turn("user", file.String()+"What does it do?") + "," + turn("model", "It calls tenant functions.") + "," +
		turn("user", file.String()+fmt.Sprintf("And now, for request %d?", id)) + `]}`)
}

// reviewIDOf returns the id of a reviewTenantBody, rewritten or not.
func reviewIDOf(b []byte) (int, bool) {
	_, rest, ok := bytes.Cut(b, []byte("```go t"))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, '.')
	if end < 0 {
		return 0, false
	}
	id, err := strconv.Atoi(string(rest[:end]))
	return id, err == nil
}

// TestReviewPoisonedTenants sends sessions of distinct tenants at once
// through the proxy with the real rewriter, every released buffer
// poisoned (poisonReleased), and checks every byte that leaves the
// request: each upstream attempt carries exactly the rewritten body of
// its own request (in a pooled buffer of outBuffer) or, after the
// upstream rejected that body with 400 INVALID_ARGUMENT having read only
// its start, the client's own body (the fallback retry); the body
// OnExchange gets is the client's; the savings and the ledger, which read
// the bodies in finish, run on all of them. A buffer released while any
// of these still reads it, or shared by two requests, shows as poison or
// as another request's bytes (and to the race detector as a race).
func TestReviewPoisonedTenants(t *testing.T) {
	poisonReleased(t)
	const workers, perWorker = 6, 8
	n := workers * perWorker
	origs, rewrites := make([][]byte, n), make([][]byte, n)
	attempts := make([]atomic.Int32, n)
	var bad atomic.Int32
	var badMsg atomic.Value
	fail := func(format string, args ...any) {
		bad.Add(1)
		badMsg.Store(fmt.Sprintf(format, args...))
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head := make([]byte, 4<<10)
		k, _ := io.ReadFull(r.Body, head)
		head = head[:k]
		id, ok := reviewIDOf(head)
		if !ok || id >= n {
			fail("upstream: a body of no request: %.80q", head)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.Header.Get("X-Review-Id") != strconv.Itoa(id) {
			fail("upstream: request %s carries the body of request %d", r.Header.Get("X-Review-Id"), id)
		}
		attempt := attempts[id].Add(1)
		if id%2 == 1 && attempt == 1 {
			// The rewritten body, rejected before it was read in full.
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"code":400,"message":"rejected","status":"INVALID_ARGUMENT"}}`))
			return
		}
		rest, err := io.ReadAll(r.Body)
		body := append(head, rest...)
		want := rewrites[id]
		if id%2 == 1 {
			want = origs[id] // the retry
		}
		if attempt > 2 || id%2 == 0 && attempt > 1 {
			fail("upstream: request %d: attempt %d", id, attempt)
		}
		if err != nil || !bytes.Equal(body, want) {
			fail("upstream: request %d: %d bytes (want %d), poisoned %v, read error %v", id, len(body), len(want), poisoned(body), err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP"}],` +
			`"usageMetadata":{"promptTokenCount":3000,"candidatesTokenCount":1,"totalTokenCount":3001},"modelVersion":"gemini-2.5-flash"}`))
	}))
	t.Cleanup(up.Close)
	var exchanges atomic.Int32
	var opts Options
	opts.Rewrite.Enabled = true
	opts.TenantHeader = "X-Tenant"
	opts.Prices = map[string]Price{"gemini-2.5-flash": {Input: 0.30, CachedInput: 0.03, Output: 2.5}}
	opts.OnExchange = func(ex Exchange) {
		exchanges.Add(1)
		id, ok := reviewIDOf(ex.Request)
		if !ok || id >= n || !bytes.Equal(ex.Request, origs[id]) || ex.Tenant == "" {
			fail("OnExchange: Request of %d bytes is not its client's (poisoned %v)", len(ex.Request), poisoned(ex.Request))
		}
	}
	f := newFixture(t, up.URL, opts)
	for id := range n {
		origs[id] = reviewTenantBody(id)
		out, rep, err := rewrite.Request(origs[id], f.h.rwOpts, nil)
		if err != nil || len(rep.Replacements) == 0 || bytes.Equal(out, origs[id]) {
			t.Fatalf("request %d: the rewriter does not change it (%v)", id, err)
		}
		rewrites[id] = out
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := rawClient()
			defer c.CloseIdleConnections()
			for i := range perWorker {
				id := w*perWorker + i
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, f.front.URL+genPath, bytes.NewReader(origs[id]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Tenant", fmt.Sprintf("tenant-%d", id))
				req.Header.Set("X-Review-Id", strconv.Itoa(id))
				res, err := c.Do(req)
				if err != nil {
					fail("client: request %d: %v", id, err)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					fail("client: request %d: status %d", id, res.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every exchange", func() bool { return exchanges.Load() == int32(n) })
	if k := bad.Load(); k > 0 {
		t.Errorf("%d bodies were not their request's; last: %v", k, badMsg.Load())
	}
	if got, want := testutil.ToFloat64(f.m.RewriteFallbacks), float64(n/2); got != want {
		t.Errorf("rewrite_fallbacks_total = %v, want %v", got, want)
	}
}
