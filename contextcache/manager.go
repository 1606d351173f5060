package contextcache

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultTTL is the lifetime of a cache the Manager creates, renewed by
	// use. Short lifetimes need fewer reuses to pay for their storage.
	DefaultTTL = 5 * time.Minute
	// DefaultMaxPrefixes bounds the prefixes tracked over all scopes.
	DefaultMaxPrefixes = 100_000
	// DefaultMaxScopes bounds the scopes (tenant, credential, model)
	// tracked at once.
	DefaultMaxScopes = 10_000
	// DefaultWorkers bounds the cache calls (create, renew, delete) in
	// flight at once.
	DefaultWorkers = 2
)

// Internal bounds.
const (
	// maxScopePrefixes bounds the prefixes tracked for one scope; the least
	// recently seen goes first.
	maxScopePrefixes = 512
	// maxScopeCaches bounds the live caches of one scope.
	maxScopeCaches = 8
	// maxCandidates bounds the prefixes of one request that are tracked:
	// the longest ones large enough to be cached.
	maxCandidates = 32
	// callTimeout bounds one cachedContents call.
	callTimeout = 30 * time.Second
	// maxResponse bounds the cachedContents response read.
	maxResponse = 1 << 20
	// sweepEvery is how often expired caches of every scope are forgotten.
	sweepEvery = time.Minute
	// priorTokensPerByte estimates tokens before a scope measured its own
	// ratio (gemini-api.md §8.3: 3.1–4.9 bytes per token).
	priorTokensPerByte = 1 / 3.5
)

// Options configures a Manager. Transport is required.
type Options struct {
	// Transport carries the cachedContents calls to the upstream. Required.
	Transport http.RoundTripper
	// TTL is the lifetime of a created cache and of each renewal. Zero
	// means DefaultTTL.
	TTL time.Duration
	// MinTokens maps normalised model names to the smallest cache the API
	// accepts for them, in tokens. Nil means DefaultMinTokensByModel.
	MinTokens map[string]int
	// DefaultMinTokens applies to models not in MinTokens. Zero means
	// DefaultMinTokens.
	DefaultMinTokens int
	// Prices maps normalised model names to their prices. A model without
	// a price, or without a storage price, is never cached.
	Prices map[string]Price
	// MaxPrefixes bounds the prefixes tracked over all scopes; the least
	// recently used scope is forgotten first (its caches expire upstream
	// by their TTL). Zero means DefaultMaxPrefixes.
	MaxPrefixes int
	// MaxScopes bounds the scopes tracked; the least recently used is
	// forgotten first, as for MaxPrefixes. Only a request with a prefix
	// large enough to cache makes a scope. Zero means DefaultMaxScopes.
	MaxScopes int
	// Workers bounds the cachedContents calls in flight; a call that finds
	// no free worker is dropped and tried again on a later request. Zero
	// means DefaultWorkers.
	Workers int
	// Metrics receives the gemini_proxy_context_cache_* metrics. Nil
	// records none.
	Metrics *metrics.Metrics
	// Label maps a normalised model name to its metrics label. Nil uses
	// the name.
	Label func(model string) string
	// Logger receives failures of cache calls at Debug (never a body or a
	// credential). Nil discards.
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Shared, when not nil, is the registry the Managers of a fleet share
	// (see the package doc): scope state, live caches and one create lease
	// per prefix. Nil keeps every decision in this process.
	Shared Shared
}

// Call is one generate request as the Manager sees it.
type Call struct {
	// Tenant is the caller's tenant id; the shared registry keys its
	// entries by it.
	Tenant string
	// Scope identifies who may share caches: one tenant, one upstream
	// credential, one model. Caches never cross scopes.
	Scope string
	// Model is the normalised model name (prices, minimum sizes, metrics).
	Model string
	// ModelID is the model id as in the request path; caches are created
	// for "models/" + ModelID.
	ModelID string
	// Collection is the cachedContents collection URL of the request's
	// upstream and API version ({base}/{version}/cachedContents), with the
	// key query parameter when the credential travels in it.
	Collection *url.URL
	// Header holds the credential headers for cache calls. It is kept only
	// until the calls this request starts are done; never logged.
	Header http.Header
	// Body is the request body to be sent (after rewriting).
	Body []byte
}

// Usage is what the upstream reported for one request.
type Usage struct {
	// PromptTokens is usageMetadata.promptTokenCount (cached included).
	PromptTokens int64
	// CachedTokens is usageMetadata.cachedContentTokenCount.
	CachedTokens int64
}

// Use is the plan for one request: the body to send and what to learn
// from its answer. Build it with Manager.Plan, finish it with Settle.
type Use struct {
	call  Call
	req   *Request
	entry *entry // the cache the body names; nil: the full body goes out
	body  []byte
}

// Body returns the body naming a cache, or nil when the request goes out
// unchanged.
func (u *Use) Body() []byte {
	if u == nil {
		return nil
	}
	return u.body
}

// Cache returns the name of the cache the body names, or "".
func (u *Use) Cache() string {
	if u == nil || u.entry == nil {
		return ""
	}
	return u.entry.name
}

// Manager tracks the prefixes of generate requests per scope and creates,
// renews and deletes cachedContents when the price model says so. State
// is in memory and bounded (one replica's view; see the package doc).
// Safe for concurrent use.
type Manager struct {
	opts   Options
	ttl    time.Duration
	margin time.Duration // a cache this close to its expiry is not used
	now    func() time.Time
	label  func(string) string
	log    *slog.Logger
	sem    chan struct{}
	calls  calls
	shared Shared // nil: this replica alone

	mu        sync.Mutex
	scopes    map[string]*scope
	lru       *list.List // *scope, most recently used first
	prefixes  int
	lastSweep time.Time
}

type scope struct {
	key      string
	model    string
	elem     *list.Element
	prefixes map[Key]*prefix
	recent   prefix // sentinel of the prefixes by last sighting: recent.next is the newest
	caches   map[Key]*entry
	ratio    float64  // prompt tokens per byte, last measured; 0: none yet
	ended    []string // names of caches ended lately (shared mode)
}

// prefix is what is known of one prefix of one scope.
type prefix struct {
	key         Key
	prev, next  *prefix // the scope's recency list
	n           int     // sightings since first
	first, last time.Time
	tokens      float64 // estimated (exact once cached)
	share       float64 // implicit-cache share, smoothed
	shareSeen   bool
	creating    bool
	// creatingUntil bounds creating in the shared state: a replica that
	// died while creating does not block the prefix longer.
	creatingUntil time.Time
	retryAt       time.Time // after a failed create
	tooSmall      bool      // the API refused it as below its minimum
}

// entry is a live cache.
type entry struct {
	name            string
	key             Key
	k               int // leading contents it holds
	size            int // bytes of the prefix
	tokens          float64
	created, expire time.Time
	lastUse         time.Time // created until first used
	uses            int
	renewing        bool
	gone            bool
	// own is set on a cache this replica created: only its creator counts
	// it live and, when it expires, its storage (shared mode).
	own bool
}

// New returns a Manager. It starts no goroutine of its own: cache calls
// run on at most Options.Workers goroutines, started per call.
func New(opts Options) (*Manager, error) {
	if opts.Transport == nil {
		return nil, errors.New("contextcache: transport is required")
	}
	if opts.TTL < 0 || opts.MaxPrefixes < 0 || opts.MaxScopes < 0 || opts.Workers < 0 || opts.DefaultMinTokens < 0 {
		return nil, errors.New("contextcache: negative option")
	}
	m := &Manager{opts: opts, ttl: opts.TTL, now: opts.Now, label: opts.Label, log: opts.Logger,
		scopes: map[string]*scope{}, lru: list.New(), shared: opts.Shared}
	if m.ttl == 0 {
		m.ttl = DefaultTTL
	}
	if m.ttl < 2*time.Second {
		return nil, fmt.Errorf("contextcache: ttl %v is below 2s", m.ttl)
	}
	m.margin = min(10*time.Second, m.ttl/10)
	if m.now == nil {
		m.now = time.Now
	}
	if m.label == nil {
		m.label = func(s string) string { return s }
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.opts.MinTokens == nil {
		m.opts.MinTokens = DefaultMinTokensByModel
	}
	if m.opts.DefaultMinTokens == 0 {
		m.opts.DefaultMinTokens = DefaultMinTokens
	}
	if m.opts.MaxPrefixes == 0 {
		m.opts.MaxPrefixes = DefaultMaxPrefixes
	}
	if m.opts.MaxScopes == 0 {
		m.opts.MaxScopes = DefaultMaxScopes
	}
	w := m.opts.Workers
	if w == 0 {
		w = DefaultWorkers
	}
	m.sem = make(chan struct{}, w)
	if mt := m.opts.Metrics; mt != nil {
		// Series start at zero for every cacheable model, so that rate()
		// and the dashboard have a value before the first cache.
		for model, p := range m.opts.Prices {
			if l := m.label(model); l == model && p.known() {
				mt.ContextCacheCreated.WithLabelValues(l)
				mt.ContextCacheLive.WithLabelValues(l)
				mt.ContextCacheStorageTokenSeconds.WithLabelValues(l)
				mt.ContextCacheCachedTokens.WithLabelValues(l)
				mt.ContextCacheSavedDollars.WithLabelValues(l)
				mt.ContextCacheCostDollars.WithLabelValues(l, metrics.CacheCostCreation)
				mt.ContextCacheCostDollars.WithLabelValues(l, metrics.CacheCostStorage)
				mt.ContextCacheFallbacks.WithLabelValues(l)
				mt.ContextCacheRequests.WithLabelValues(l, metrics.CacheOutcomeCached)
				mt.ContextCacheRequests.WithLabelValues(l, metrics.CacheOutcomeFull)
			}
		}
		for _, op := range []string{metrics.CacheOpCreate, metrics.CacheOpRenew, metrics.CacheOpDelete} {
			for _, r := range []string{metrics.CacheResultOK, metrics.CacheResultError, metrics.CacheResultDropped} {
				mt.ContextCacheOperations.WithLabelValues(op, r)
			}
		}
	}
	return m, nil
}

// minTokens returns the smallest cache the API accepts for model.
func (m *Manager) minTokens(model string) int {
	if n, ok := m.opts.MinTokens[model]; ok {
		return n
	}
	return m.opts.DefaultMinTokens
}

// Plan parses c.Body and returns what to send: Use.Body names the longest
// live cache of c.Scope that holds a prefix of the request, with that
// prefix removed. It returns nil when the request cannot be planned
// (invalid JSON, no contents, already naming a cache); such a request is
// forwarded unchanged and teaches nothing.
func (m *Manager) Plan(c Call) *Use {
	req, err := Parse(c.Body, c.ModelID)
	if err != nil {
		return nil
	}
	u := &Use{call: c, req: req}
	if m.shared != nil && len(candidates(req, m.minTokens(c.Model))) > 0 {
		// Another replica may have made a cache of this prefix: one GET,
		// bounded, only for a request with a prefix large enough to cache.
		m.loadShared(c)
	}
	now := m.now()
	m.mu.Lock()
	if s := m.scopes[c.Scope]; s != nil && len(s.caches) > 0 {
		m.lru.MoveToFront(s.elem)
		for k := req.Len() - 1; k >= 0; k-- {
			if e := s.caches[req.Key(k)]; e != nil && now.Before(e.expire.Add(-m.margin)) && !req.splitsCall(k) {
				u.entry = e
				break
			}
		}
	}
	m.mu.Unlock()
	if u.entry != nil {
		u.body = req.Apply(u.entry.k, u.entry.name)
	}
	return u
}

// Reason says why a request naming a cache was resent without it.
type Reason int

const (
	// Gone is a 403 or 404: the upstream does not know the cache (it
	// expired, was deleted, or is not the caller's). The cache is
	// forgotten; there is nothing to delete.
	Gone Reason = iota
	// Refused is a 400 about the cached content: the cache may still
	// exist but the upstream will not use it. The cache is forgotten and
	// deleted with the request's credential.
	Refused
	// Failed is a 5xx or a 400 not about the cache: not known to be the
	// cache's fault. The cache is kept; only this request goes without it.
	Failed
)

// Fallback records that the request of u was resent without its cache
// for reason r (see Reason); u becomes a full request.
func (m *Manager) Fallback(u *Use, r Reason) {
	if u == nil || u.entry == nil {
		return
	}
	now := m.now()
	fall := func(s *scope) {
		if s == nil || r == Failed {
			return
		}
		c := u.entry
		if c.gone {
			// Replaced or forgotten meanwhile; the registry's copy, if
			// it is the same cache, ends all the same.
			if sc := s.caches[c.key]; sc != nil && sc.name == c.name {
				c = sc
			} else {
				return
			}
		}
		if r == Refused {
			m.forgetLocked(s, c)
			m.startDelete(u.call, s.model, c)
		} else {
			// Ended at its expiry or at some unknown time before now.
			m.dropLocked(s, c, minTime(now, c.expire))
		}
	}
	if m.shared != nil && r != Failed {
		m.sharedUpdate(u.call, false, fall)
	} else {
		m.mu.Lock()
		fall(m.scopes[u.call.Scope])
		m.mu.Unlock()
	}
	if mt := m.opts.Metrics; mt != nil {
		mt.ContextCacheFallbacks.WithLabelValues(m.label(u.call.Model)).Inc()
	}
	u.entry, u.body = nil, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// createJob is a create decided under the lock and started after it: the
// create body can be megabytes, built without holding m.mu.
type createJob struct {
	p    *prefix
	key  Key
	k    int
	size int
	est  float64
}

// Settle learns from the answer to u: ok reports a 2xx answer with usage.
// It counts the sighting of each of the request's prefixes, estimates
// their tokens from usage, and starts, in the background, the cache calls
// that pay: create the best new prefix, renew the cache used, delete
// caches of the scope that no longer pay for their storage. It never
// blocks on the upstream.
func (m *Manager) Settle(u *Use, usage Usage, ok bool) {
	if u == nil {
		return
	}
	if m.shared != nil && ok {
		// The registry's lock and write are round trips to Redis: made
		// off the request, like the cache calls (Wait waits for them).
		now := m.now()
		m.calls.add()
		go func() {
			defer m.calls.done()
			m.settle(u, usage, ok, now)
		}()
		return
	}
	m.settle(u, usage, ok, m.now())
}

// settle is Settle at now.
func (m *Manager) settle(u *Use, usage Usage, ok bool, now time.Time) {
	price, priced := m.opts.Prices[u.call.Model]
	priced = priced && price.known()

	var (
		job   *createJob
		share float64
	)
	if m.shared != nil && ok {
		// Under the registry's lock: the sightings of every replica count,
		// and what this request decides is seen by all.
		m.sharedUpdate(u.call, false, func(*scope) {
			m.sweepLocked(now)
			job, share = m.settleLocked(u, usage, price, priced, now)
		})
	} else {
		m.mu.Lock()
		m.sweepLocked(now)
		if !ok {
			m.mu.Unlock()
			return
		}
		job, share = m.settleLocked(u, usage, price, priced, now)
		m.mu.Unlock()
	}
	if job != nil {
		body := u.req.CreateBody(job.k, u.call.ModelID, m.ttl)
		call := u.call
		call.Body = nil
		if !m.spawn(metrics.CacheOpCreate, func(ctx context.Context) { m.create(ctx, call, job, body) }) {
			m.mu.Lock()
			job.p.creating = false
			m.mu.Unlock()
		}
	}
	// Counted last, after the calls this request starts were spawned, so
	// that whoever sees the count can Wait for them.
	if mt := m.opts.Metrics; mt != nil {
		label := m.label(u.call.Model)
		outcome := metrics.CacheOutcomeFull
		if u.entry != nil {
			outcome = metrics.CacheOutcomeCached
			mt.ContextCacheCachedTokens.WithLabelValues(label).Add(float64(usage.CachedTokens))
			if priced {
				// Only what implicit caching would not have billed at the
				// cached rate anyway: the share the decision subtracts.
				mt.ContextCacheSavedDollars.WithLabelValues(label).Add(float64(usage.CachedTokens) * price.saving(share) / 1e6)
			}
		}
		mt.ContextCacheRequests.WithLabelValues(label, outcome).Inc()
	}
}

// settleLocked is Settle under m.mu. It returns the create to start, if
// any, and the implicit-cache share of the prefix of the cache u used.
func (m *Manager) settleLocked(u *Use, usage Usage, price Price, priced bool, now time.Time) (*createJob, float64) {
	req := u.req
	minTok := m.minTokens(u.call.Model)
	cands := candidates(req, minTok)
	s := m.scopes[u.call.Scope]
	if s == nil {
		// A scope is made only for a request with something to track: a
		// caller whose requests are all too small costs no memory.
		if len(cands) == 0 {
			return nil, 0
		}
		s = m.newScopeLocked(u.call)
	} else {
		m.lru.MoveToFront(s.elem)
	}
	var share float64
	if u.entry != nil {
		if p := s.prefixes[u.entry.key]; p != nil {
			share = p.share
		}
	}
	e := u.entry
	if e != nil && e.gone {
		e = nil
	}

	usedK, usedSize, usedTokens := -1, 0, 0.0
	if e != nil {
		e.uses++
		e.lastUse = now
		usedK, usedSize, usedTokens = e.k, e.size, e.tokens
	}
	if den := float64(req.Total() - usedSize); den > 0 && float64(usage.PromptTokens) > usedTokens {
		s.ratio = (float64(usage.PromptTokens) - usedTokens) / den
	}
	ratio := s.ratio
	if ratio == 0 {
		ratio = priorTokensPerByte
	}
	tokensOf := func(k int) float64 {
		if c := s.caches[req.Key(k)]; c != nil {
			return c.tokens
		}
		if e != nil && k > usedK {
			return usedTokens + float64(req.Size(k)-usedSize)*ratio
		}
		return float64(req.Size(k)) * ratio
	}

	var best *prefix
	bestK, bestNet := -1, 0.0
	for _, k := range cands {
		p := m.prefixLocked(s, req.Key(k))
		if p.n > 0 && now.Sub(p.last) > m.ttl {
			p.n = 0 // a gap longer than a cache would live: start again
		}
		if p.n == 0 {
			p.first = now
		}
		p.n++
		p.last = now
		p.tokens = tokensOf(k)
		if e == nil && p.tokens > 0 {
			sh := min(float64(usage.CachedTokens)/p.tokens, 1)
			if p.shareSeen {
				sh = (p.share + sh) / 2
			}
			p.share, p.shareSeen = sh, true
		}
		if !priced || k <= usedK || p.creating || now.Before(p.creatingUntil) || p.tooSmall || now.Before(p.retryAt) || s.caches[req.Key(k)] != nil || p.tokens < float64(minTok) {
			continue
		}
		est := estimate{tokens: p.tokens, covered: max(usedTokens, 0), reuses: ExpectedReuses(p.n, p.first, p.last, m.ttl), share: p.share, ttl: m.ttl}
		if v := price.net(est); v > bestNet {
			best, bestK, bestNet = p, k, v
		}
	}
	var job *createJob
	if best != nil && len(s.caches) < maxScopeCaches {
		best.creating, best.creatingUntil = true, now.Add(callTimeout+lockLease)
		job = &createJob{p: best, key: best.key, k: bestK, size: req.Size(bestK), est: best.tokens}
	}
	if e != nil && !e.renewing && e.expire.Sub(now) < m.ttl/2 && price.keeps(usesPerHour(e, now), m.shareOf(s, e)) {
		m.startRenew(u.call, e)
	}
	for _, c := range s.caches {
		if c == e || price.keeps(usesPerHour(c, now), m.shareOf(s, c)) {
			continue
		}
		m.forgetLocked(s, c)
		m.startDelete(u.call, s.model, c)
	}
	m.evictLocked(s)
	return job, share
}

// usesPerHour estimates a cache's use rate from now on: (uses + 1) over
// its age, counting its creation as a use so that a new cache is not
// judged before its first reuse could come, and at most one use per time
// it has been idle, so that a cache nobody uses any more loses its rate
// even if it was busy once.
func usesPerHour(e *entry, now time.Time) float64 {
	age := max(now.Sub(e.created), time.Second).Hours()
	idle := max(now.Sub(e.lastUse), time.Second).Hours()
	return min(float64(e.uses+1)/age, 1/idle)
}

func (m *Manager) shareOf(s *scope, e *entry) float64 {
	if p := s.prefixes[e.key]; p != nil {
		return p.share
	}
	return 0
}

// candidates returns the prefix lengths of req worth tracking: those whose
// bytes reach the model's minimum in tokens (a token is at least a byte
// of JSON), at most maxCandidates, the longest ones. A boundary that could
// part a function call from its response is never a candidate (see
// Request.splitsCall).
func candidates(req *Request, minTokens int) []int {
	var out []int
	for k := req.Len() - 1; k >= 0 && len(out) < maxCandidates; k-- {
		if req.Size(k) < minTokens {
			break // sizes only shrink from here
		}
		if req.splitsCall(k) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// newScopeLocked creates c's scope, most recently used.
func (m *Manager) newScopeLocked(c Call) *scope {
	s := &scope{key: c.Scope, model: c.Model, prefixes: map[Key]*prefix{}, caches: map[Key]*entry{}}
	s.recent.next, s.recent.prev = &s.recent, &s.recent
	s.elem = m.lru.PushFront(s)
	m.scopes[c.Scope] = s
	return s
}

// prefixLocked returns the record of key in s, newest in the scope's
// recency list, creating it and making room: the least recently seen
// prefix that is neither being cached nor cached goes. Those are at most
// maxScopeCaches plus the workers, so the walk from the oldest end is
// short.
func (m *Manager) prefixLocked(s *scope, key Key) *prefix {
	p := s.prefixes[key]
	if p != nil {
		p.unlink()
		s.recent.pushFront(p)
		return p
	}
	if len(s.prefixes) >= maxScopePrefixes {
		for q := s.recent.prev; q != &s.recent; q = q.prev {
			if q.creating || s.caches[q.key] != nil {
				continue
			}
			q.unlink()
			delete(s.prefixes, q.key)
			m.prefixes--
			break
		}
	}
	p = &prefix{key: key}
	s.recent.pushFront(p)
	s.prefixes[key] = p
	m.prefixes++
	return p
}

// pushFront links p right after the sentinel head.
func (head *prefix) pushFront(p *prefix) {
	p.prev, p.next = head, head.next
	head.next.prev = p
	head.next = p
}

// unlink takes p out of its list.
func (p *prefix) unlink() {
	p.prev.next, p.next.prev = p.next, p.prev
	p.prev, p.next = nil, nil
}

// evictLocked forgets least recently used scopes other than keep while
// more than MaxPrefixes prefixes or MaxScopes scopes are tracked. Their
// caches are not deleted (no credential of theirs is at hand): they
// expire upstream by their TTL, and their storage until then is counted.
func (m *Manager) evictLocked(keep *scope) {
	for m.prefixes > m.opts.MaxPrefixes || len(m.scopes) > m.opts.MaxScopes {
		el := m.lru.Back()
		if el == nil || el.Value.(*scope) == keep {
			return
		}
		s := el.Value.(*scope)
		for _, c := range s.caches {
			m.expireLocked(s, c)
		}
		m.prefixes -= len(s.prefixes)
		m.lru.Remove(el)
		delete(m.scopes, s.key)
	}
}

// sweepLocked forgets expired caches, at most once per sweepEvery.
func (m *Manager) sweepLocked(now time.Time) {
	if now.Sub(m.lastSweep) < sweepEvery {
		return
	}
	m.lastSweep = now
	for _, s := range m.scopes {
		for _, c := range s.caches {
			if !now.Before(c.expire) {
				m.expireLocked(s, c)
			}
		}
	}
}

// expireLocked forgets a cache that ends at its expiry; its creator
// counts its storage (a cache another replica made is counted there).
func (m *Manager) expireLocked(s *scope, c *entry) {
	if c.own {
		m.dropLocked(s, c, c.expire)
	} else {
		m.forgetLocked(s, c)
	}
}

// dropLocked forgets a cache whose storage ended at end, and counts the
// storage it was billed for.
func (m *Manager) dropLocked(s *scope, c *entry, end time.Time) {
	if m.forgetLocked(s, c) {
		m.billStorage(s.model, c.tokens, c.created, end)
	}
}

// forgetLocked forgets a live cache: it reports false when c was gone
// already. The caller counts its storage.
func (m *Manager) forgetLocked(s *scope, c *entry) bool {
	if c.gone {
		return false
	}
	c.gone = true
	if s.caches[c.key] == c {
		delete(s.caches, c.key)
	}
	if m.shared != nil {
		noteEndedLocked(s, c.name)
	}
	if mt := m.opts.Metrics; mt != nil && c.own {
		mt.ContextCacheLive.WithLabelValues(m.label(s.model)).Dec()
	}
	return true
}

// billStorage counts the storage of a cache of tokens tokens of model
// from created to end.
func (m *Manager) billStorage(model string, tokens float64, created, end time.Time) {
	mt := m.opts.Metrics
	if mt == nil {
		return
	}
	label := m.label(model)
	ts := tokens * max(end.Sub(created), 0).Seconds()
	mt.ContextCacheStorageTokenSeconds.WithLabelValues(label).Add(ts)
	if p, ok := m.opts.Prices[model]; ok {
		mt.ContextCacheCostDollars.WithLabelValues(label, metrics.CacheCostStorage).Add(ts / 3600 * p.Storage / 1e6)
	}
}

// spawn runs job on a free worker, or reports false when none is free.
func (m *Manager) spawn(op string, job func(context.Context)) bool {
	select {
	case m.sem <- struct{}{}:
	default:
		m.count(op, metrics.CacheResultDropped)
		return false
	}
	m.calls.add()
	go func() {
		defer m.calls.done()
		defer func() { <-m.sem }()
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		job(ctx)
	}()
	return true
}

// Wait blocks until every cache call started so far has finished. It may
// run while requests start new calls (a sync.WaitGroup may not).
func (m *Manager) Wait() { m.calls.wait() }

// calls counts the cache calls in flight.
type calls struct {
	mu   sync.Mutex
	n    int
	zero *sync.Cond // signalled when n drops to zero; made on first use
}

func (c *calls) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *calls) done() {
	c.mu.Lock()
	if c.n--; c.n == 0 && c.zero != nil {
		c.zero.Broadcast()
	}
	c.mu.Unlock()
}

func (c *calls) wait() {
	c.mu.Lock()
	for c.n > 0 {
		if c.zero == nil {
			c.zero = sync.NewCond(&c.mu)
		}
		c.zero.Wait()
	}
	c.mu.Unlock()
}

func (m *Manager) count(op, result string) {
	if mt := m.opts.Metrics; mt != nil {
		mt.ContextCacheOperations.WithLabelValues(op, result).Inc()
	}
}

// create makes the cache of job's prefix; it is used from the next
// request on.
func (m *Manager) create(ctx context.Context, call Call, job *createJob, body []byte) {
	if m.shared != nil && !m.claim(call, job) {
		return
	}
	status, raw, err := m.do(ctx, http.MethodPost, call.Collection, call.Header, body)
	now := m.now()
	var out struct {
		Name          string `json:"name"`
		UsageMetadata struct {
			TotalTokenCount float64 `json:"totalTokenCount"`
		} `json:"usageMetadata"`
	}
	if err == nil && status/100 == 2 && (json.Unmarshal(raw, &out) != nil || !strings.HasPrefix(out.Name, "cachedContents/")) {
		err = errors.New("create response has no cache name")
	}
	m.mu.Lock()
	s := m.scopes[call.Scope]
	job.p.creating = false
	if err != nil || status/100 != 2 {
		failed := func(s *scope) {
			if s == nil {
				return
			}
			if p := s.prefixes[job.key]; p != nil {
				p.creating, p.creatingUntil = false, time.Time{}
				p.retryAt = now.Add(m.ttl)
				p.tooSmall = status == http.StatusBadRequest && tooSmall(raw)
			}
		}
		if m.shared != nil {
			m.mu.Unlock()
			m.sharedUpdate(call, false, failed)
		} else {
			failed(s)
			m.mu.Unlock()
		}
		m.count(metrics.CacheOpCreate, metrics.CacheResultError)
		m.log.Debug("context cache create failed", "upstream_status", status, "error", errText(err))
		return
	}
	m.count(metrics.CacheOpCreate, metrics.CacheResultOK)
	tokens := out.UsageMetadata.TotalTokenCount
	if tokens <= 0 {
		tokens = job.est
	}
	e := &entry{name: out.Name, key: job.key, k: job.k, size: job.size, tokens: tokens, created: now, lastUse: now, expire: now.Add(m.ttl), own: true}
	if mt := m.opts.Metrics; mt != nil {
		if pr, ok := m.opts.Prices[call.Model]; ok {
			mt.ContextCacheCostDollars.WithLabelValues(m.label(call.Model), metrics.CacheCostCreation).Add(tokens * pr.Input / 1e6)
		}
	}
	if m.shared != nil {
		m.mu.Unlock()
		// The lease's holders wait for this entry; then the scope's state
		// lists it for every replica's plans.
		val, _ := json.Marshal(e.shared())
		m.shared.Publish(call.Tenant, call.Scope, job.key, val, m.ttl)
		installed := false
		m.sharedUpdate(call, false, func(s *scope) { installed = m.installLocked(call, job, e, s) })
		if installed {
			m.countCreated(call.Model)
		}
		return
	}
	if !m.installLocked(call, job, e, s) {
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.countCreated(call.Model)
}

// installLocked makes the new cache e live in s, the scope of call, and
// reports true; or, when the scope was forgotten or another cache took the
// place while e was being made, deletes it and reports false.
func (m *Manager) installLocked(call Call, job *createJob, e *entry, s *scope) bool {
	if s == nil || s.caches[job.key] != nil || len(s.caches) >= maxScopeCaches {
		// The scope was forgotten, or another cache took the place, while
		// this one was being made: it will never be used. It was billed
		// all the same, and is stored until the delete.
		e.gone = true
		m.startDelete(call, call.Model, e)
		return false
	}
	s.caches[job.key] = e
	if p := s.prefixes[job.key]; p != nil {
		p.tokens = e.tokens
		p.creating, p.creatingUntil = false, time.Time{}
	}
	return true
}

// countCreated counts a cache this replica created and made live.
func (m *Manager) countCreated(model string) {
	if mt := m.opts.Metrics; mt != nil {
		label := m.label(model)
		mt.ContextCacheCreated.WithLabelValues(label).Inc()
		mt.ContextCacheLive.WithLabelValues(label).Inc()
	}
}

// startRenew extends e's life by the TTL in the background.
func (m *Manager) startRenew(call Call, e *entry) {
	e.renewing = true
	call.Body = nil
	body := []byte(`{"ttl":"` + ttlString(m.ttl) + `"}`)
	if !m.spawn(metrics.CacheOpRenew, func(ctx context.Context) {
		status, _, err := m.do(ctx, http.MethodPatch, resourceURL(call.Collection, e.name), call.Header, body)
		now := m.now()
		ok := err == nil && status/100 == 2
		if ok {
			m.count(metrics.CacheOpRenew, metrics.CacheResultOK)
		} else {
			m.count(metrics.CacheOpRenew, metrics.CacheResultError)
		}
		gone := status == http.StatusNotFound || status == http.StatusForbidden
		apply := func(sc *scope) {
			e.renewing = false
			c := e
			if sc != nil && e.gone {
				// The registry's copy of the same cache, in shared mode.
				if x := sc.caches[e.key]; x != nil && x.name == e.name {
					c = x
				}
			}
			switch {
			case ok && !c.gone:
				c.expire = now.Add(m.ttl)
			case !ok && gone && sc != nil:
				m.dropLocked(sc, c, minTime(now, c.expire))
			}
		}
		if m.shared != nil && (ok || gone) {
			m.sharedUpdate(call, false, apply)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		apply(m.scopes[call.Scope])
	}) {
		e.renewing = false
	}
}

// startDelete deletes the forgotten cache c of model in the background
// with the credential of call, a current request of c's scope, and then
// counts its storage up to when it ended: the delete if it succeeded, its
// expiry if the delete failed or found no worker. Called with m.mu held
// (c's fields are read here, not in the call).
func (m *Manager) startDelete(call Call, model string, c *entry) {
	call.Body = nil
	name, tokens, created, expire := c.name, c.tokens, c.created, c.expire
	if !m.spawn(metrics.CacheOpDelete, func(ctx context.Context) {
		status, _, err := m.do(ctx, http.MethodDelete, resourceURL(call.Collection, name), call.Header, nil)
		now := m.now()
		switch {
		case err == nil && status/100 == 2:
			m.count(metrics.CacheOpDelete, metrics.CacheResultOK)
			m.billStorage(model, tokens, created, minTime(now, expire))
		case err == nil && (status == http.StatusNotFound || status == http.StatusForbidden):
			// Already gone, which is what a delete wants; when is not
			// known, at the latest now.
			m.count(metrics.CacheOpDelete, metrics.CacheResultOK)
			m.billStorage(model, tokens, created, minTime(now, expire))
		default:
			m.count(metrics.CacheOpDelete, metrics.CacheResultError)
			m.billStorage(model, tokens, created, expire)
		}
	}) {
		m.billStorage(model, tokens, created, expire)
	}
}

// do makes one cachedContents call and returns its status and body.
func (m *Manager) do(ctx context.Context, method string, u *url.URL, header http.Header, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := m.opts.Transport.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxResponse))
	return res.StatusCode, raw, err
}

// resourceURL returns the URL of the cache called name (cachedContents/…)
// next to its collection URL, keeping the query.
func resourceURL(collection *url.URL, name string) *url.URL {
	u := *collection
	u.Path = strings.TrimSuffix(u.Path, "cachedContents") + name
	u.RawPath = ""
	return &u
}

// tooSmall reports whether an error body says the cache is below the
// model's minimum size.
func tooSmall(raw []byte) bool {
	s := strings.ToLower(string(raw))
	return strings.Contains(s, "too small") || strings.Contains(s, "min_total_token_count")
}

// errText describes an error for the log without a URL (which may carry
// the key parameter).
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if err == nil {
		return ""
	}
	return err.Error()
}
