package proxy

import (
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gemini-proxy/gemini-proxy/contextcache"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// ContextCacheOptions configures explicit context caching
// (upstream_state.context_cache): see package contextcache.
type ContextCacheOptions struct {
	// TTL is the lifetime of each cache and renewal. Zero means
	// contextcache.DefaultTTL.
	TTL time.Duration
	// MinTokens maps model names to the smallest cache the API accepts, in
	// tokens. Nil means contextcache.DefaultMinTokensByModel.
	MinTokens map[string]int
	// DefaultMinTokens applies to other models. Zero means
	// contextcache.DefaultMinTokens.
	DefaultMinTokens int
	// MaxPrefixes bounds the prefixes tracked. Zero means
	// contextcache.DefaultMaxPrefixes.
	MaxPrefixes int
	// MaxScopes bounds the scopes (tenant, credential, model) tracked.
	// Zero means contextcache.DefaultMaxScopes.
	MaxScopes int
	// Workers bounds the cachedContents calls in flight. Zero means
	// contextcache.DefaultWorkers.
	Workers int
	// Now is the clock of the cache bookkeeping. Nil means time.Now.
	Now func() time.Time
	// Shared, when not nil, is the registry the replicas of a fleet share
	// (cache.Store.ContextCacheRegistry in shared mode): one cache per
	// prefix for the whole fleet, made by one replica. Nil keeps the
	// bookkeeping per replica.
	Shared contextcache.Shared
}

// ccState is what context caching knows of one request.
type ccState struct {
	use      *contextcache.Use
	fellBack bool
}

// newContextCache builds the Manager over the upstream transport, or
// returns nil when context caching is off. Prices come from
// Options.Prices; a model without a Storage price is never cached.
func (h *Handler) newContextCache(base http.RoundTripper) (*contextcache.Manager, error) {
	o := h.opts.ContextCache
	if o == nil {
		return nil, nil
	}
	prices := make(map[string]contextcache.Price, len(h.opts.Prices))
	for name, p := range h.opts.Prices {
		prices[normalizeModel(name)] = contextcache.Price{Input: p.Input, CachedInput: p.CachedInput, Storage: p.Storage}
	}
	var minTokens map[string]int
	if o.MinTokens != nil {
		minTokens = make(map[string]int, len(o.MinTokens))
		for name, n := range o.MinTokens {
			minTokens[normalizeModel(name)] = n
		}
	}
	return contextcache.New(contextcache.Options{
		Transport:        base,
		TTL:              o.TTL,
		MinTokens:        minTokens,
		DefaultMinTokens: o.DefaultMinTokens,
		Prices:           prices,
		MaxPrefixes:      o.MaxPrefixes,
		MaxScopes:        o.MaxScopes,
		Workers:          o.Workers,
		Metrics:          h.m,
		Label:            h.modelLabel,
		Logger:           h.log.With("component", "context_cache"),
		Now:              o.Now,
		Shared:           o.Shared,
	})
}

// contextCacheRequest runs in the transport before the upstream call. For
// a generate request whose body the proxy holds, it asks the Manager for a
// plan and, when a live cache of the caller holds a prefix, returns a copy
// of req whose body names it. Vertex paths, requests that are not rewritten
// in mode on (off, dry-run, disabled, skipped), bodies naming a cache and
// callers without a credential pass unchanged.
func (h *Handler) contextCacheRequest(req *http.Request, st *reqState) *http.Request {
	if h.cc == nil || st.cc != nil || st.holdout || !st.info.route.isGenerate() || st.info.vertex || st.mode != metrics.ModeOn || st.orig == nil || req.Method != http.MethodPost {
		return req
	}
	body := st.orig
	if st.rewritten {
		body = st.sentBody
	}
	model, collection, ok := cacheTarget(req.URL)
	if !ok {
		return req
	}
	header := http.Header{}
	var material string
	switch {
	case req.Header.Get("X-Goog-Api-Key") != "":
		header.Set("X-Goog-Api-Key", req.Header.Get("X-Goog-Api-Key"))
		material = "key:" + req.Header.Get("X-Goog-Api-Key")
	case queryKey(req.URL.RawQuery) != "":
		collection.RawQuery = "key=" + url.QueryEscape(queryKey(req.URL.RawQuery))
		material = "key:" + queryKey(req.URL.RawQuery)
	case req.Header.Get("Authorization") != "":
		header.Set("Authorization", req.Header.Get("Authorization"))
		material = "auth:" + req.Header.Get("Authorization")
	default:
		return req
	}
	// The scope binds tenant, upstream credential and model: a cache is
	// made with one credential and only that credential may use it.
	mac := hmac.New(sha256.New, h.secret)
	mac.Write([]byte("contextcache\x00" + st.tenant + "\x00" + material + "\x00" + st.info.model))
	use := h.cc.Plan(contextcache.Call{
		Tenant:     st.tenant,
		Scope:      hex.EncodeToString(mac.Sum(nil)),
		Model:      st.info.model,
		ModelID:    model,
		Collection: collection,
		Header:     header,
		Body:       body,
	})
	if use == nil {
		return req
	}
	st.cc = &ccState{use: use}
	// use keeps body, not a copy, and in shared mode Settle reads it on a
	// goroutine that may run after the request (contextCacheSettle clears
	// st.cc before releaseBody could see it).
	st.keepBodies()
	cached := use.Body()
	if cached == nil {
		return req
	}
	out := req.WithContext(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(cached))
	out.ContentLength = int64(len(cached))
	out.GetBody = nil
	return out
}

// cacheTarget returns the model id of a Gemini API generate URL and its
// cachedContents collection URL ({base}/{version}/cachedContents).
func cacheTarget(u *url.URL) (model string, collection *url.URL, ok bool) {
	p := u.Path
	i := strings.LastIndexByte(p, ':')
	j := strings.LastIndex(p, "/models/")
	if i < 0 || j < 0 || j > i {
		return "", nil, false
	}
	model = p[j+len("/models/") : i]
	base := p[:j]
	v := strings.LastIndexByte(base, '/')
	if v < 0 || !isVersion(base[v+1:]) || model == "" || strings.Contains(model, "/") {
		return "", nil, false
	}
	c := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: base + "/cachedContents"}
	return model, c, true
}

// contextCacheFallback runs in the transport after the upstream answered a
// request that named a proxy-made cache. A cache substitution is treated
// like a rewrite (DESIGN §3 fail-open): on a 400, 403, 404 or 5xx, before
// any byte reached the client, the client's original body is sent once
// more and that answer is the client's. At most two upstream calls per
// client request: the cached attempt, then the client's own bytes. Not
// the full rewritten body, which would need a third call when it fails
// too; so a request that was rewritten as well loses its rewrite
// (st.fallback, as after a rewrite fallback) and teaches the Manager
// nothing. The Manager is told why (contextcache.Reason): 403 or 404 (the
// cache is gone) and a 400 about the cached content (deleted upstream)
// forget the cache; a 5xx or another 400 keeps it. A 403 for another
// reason (a bad key) costs one more request that gets the same 403.
func (h *Handler) contextCacheFallback(base http.RoundTripper, req *http.Request, res *http.Response, st *reqState) (*http.Response, error) {
	cs := st.cc
	if cs == nil || cs.use.Cache() == "" || cs.fellBack {
		return res, nil
	}
	var reason contextcache.Reason
	switch {
	case res.StatusCode == http.StatusForbidden || res.StatusCode == http.StatusNotFound:
		reason = contextcache.Gone
	case res.StatusCode == http.StatusBadRequest:
		head, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		reason = contextcache.Failed
		if namesCache(head, res.Header.Get("Content-Encoding")) {
			reason = contextcache.Refused
		}
	case res.StatusCode >= 500:
		reason = contextcache.Failed
	default:
		return res, nil
	}
	io.CopyN(io.Discard, res.Body, 64<<10) //nolint:errcheck // only to reuse the connection
	res.Body.Close()
	cs.fellBack = true
	h.cc.Fallback(cs.use, reason)
	if st.rewritten {
		st.fallback = true
	}
	retry := req.Clone(req.Context())
	retry.Body = io.NopCloser(bytes.NewReader(st.orig))
	retry.ContentLength = int64(len(st.orig))
	retry.GetBody = nil
	st.sent += retry.ContentLength
	res, err := base.RoundTrip(retry)
	if err == nil {
		h.m.UpstreamResponses.WithLabelValues(string(st.info.route), statusLabel(res.StatusCode)).Inc()
	}
	return res, err
}

// namesCache reports whether an upstream error body (gzip-compressed when
// the client accepted it) is about the cached content.
func namesCache(body []byte, encoding string) bool {
	if strings.EqualFold(encoding, "gzip") {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return false
		}
		body, _ = io.ReadAll(io.LimitReader(zr, 64<<10))
	}
	b := bytes.ToLower(body)
	return bytes.Contains(b, []byte("cachedcontent")) || bytes.Contains(b, []byte("cached content")) || bytes.Contains(b, []byte("cached_content"))
}

// contextCacheSettle hands the answer's usage to the Manager, after the
// response reached the client. A request resent with the original body
// after a rewrite (by either fallback) teaches nothing about the body that
// was planned; answered, it is counted as a full request.
func (h *Handler) contextCacheSettle(st *reqState, u *Usage) {
	if st.cc == nil {
		return
	}
	ok := u != nil && !st.fallback && st.upStatus >= 200 && st.upStatus <= 299
	var usage contextcache.Usage
	if u != nil {
		usage = contextcache.Usage{PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens}
	}
	h.cc.Settle(st.cc.use, usage, ok)
	if st.fallback && u != nil && st.upStatus >= 200 && st.upStatus <= 299 {
		// Answered, in full, but with the client's bytes: counted, not
		// learnt from.
		h.m.ContextCacheRequests.WithLabelValues(h.modelLabel(st.info.model), metrics.CacheOutcomeFull).Inc()
	}
	st.cc = nil // the credential it holds is not needed any more
}

// WaitContextCache blocks until the cache calls started so far (create,
// renew, delete) have finished. For tests and benchmarks.
func (h *Handler) WaitContextCache() {
	if h.cc != nil {
		h.cc.Wait()
	}
}
