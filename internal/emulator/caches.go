package emulator

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultCacheTTL applies when a cachedContents create names no expiration.
const defaultCacheTTL = time.Hour

// maxExpiredCaches bounds the ids of expired caches remembered to answer
// them with 404 rather than 403.
const maxExpiredCaches = 4096

type cachedContent struct {
	id, keyID, displayName, model string
	contents                      []Content
	system                        *Content
	counts                        modalityCounts
	created, updated, expire      time.Time
}

// errCacheNotFound answers a cache id that never existed, belongs to
// another key or was deleted: 403 PERMISSION_DENIED, as the API answers an
// id it cannot show the caller (gemini-api.md §5.4: "file/cache of another
// project").
func errCacheNotFound() *apiError {
	return newError(403, "CachedContent not found (or permission denied)")
}

// errCacheExpired answers a cache of the caller that expired: 404
// NOT_FOUND (gemini-api.md §5.4: "expired cache/file" [R]).
func errCacheExpired(id string) *apiError {
	return newError(404, fmt.Sprintf("CachedContent not found: cachedContents/%s (it has expired).", id))
}

// expireLocked forgets an expired cache, remembering its id and key so
// that its owner is told it expired. s.mu must be held.
func (s *Server) expireLocked(id string, cc *cachedContent) {
	delete(s.caches, id)
	if s.expiredCaches == nil || len(s.expiredCaches) >= maxExpiredCaches {
		s.expiredCaches = map[string]string{}
	}
	s.expiredCaches[id] = cc.keyID
}

// routeCaches serves {v}/cachedContents[/{id}].
func (s *Server) routeCaches(c *call) {
	rest, m := c.rest, c.r.Method
	switch {
	case len(rest) == 1 && m == http.MethodPost:
		s.createCache(c)
	case len(rest) == 1 && m == http.MethodGet:
		s.listCaches(c)
	case len(rest) == 2 && m == http.MethodGet:
		cc, e := s.lookupCache(c, rest[1])
		if e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		s.writeCache(c, cc)
	case len(rest) == 2 && m == http.MethodPatch:
		s.updateCache(c, rest[1])
	case len(rest) == 2 && m == http.MethodDelete:
		if _, e := s.lookupCache(c, rest[1]); e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		s.mu.Lock()
		delete(s.caches, strings.TrimPrefix(rest[1], "cachedContents/"))
		s.mu.Unlock()
		writeJSON(c.w, c.r, 200, []byte("{}\n"))
	default:
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
	}
}

// lookupCache finds a live cache of the caller by id or "cachedContents/{id}".
func (s *Server) lookupCache(c *call, name string) (*cachedContent, *apiError) {
	id := strings.TrimPrefix(name, "cachedContents/")
	s.mu.Lock()
	defer s.mu.Unlock()
	cc := s.caches[id]
	if cc != nil && !s.now().Before(cc.expire) {
		s.expireLocked(id, cc)
		cc = nil
	}
	if cc == nil {
		if key, ok := s.expiredCaches[id]; ok && key == c.keyID {
			return nil, errCacheExpired(id)
		}
		return nil, errCacheNotFound()
	}
	if cc.keyID != c.keyID {
		return nil, errCacheNotFound()
	}
	return cc, nil
}

func (s *Server) createCache(c *call) {
	_, v, e := readBody(c)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	norm, e := s.validator(c).message(v, msgCached, "")
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	model, _ := norm["model"].(string)
	if model == "" {
		writeError(c.w, c.r, errInvalid("* CreateCachedContentRequest.cached_content.model: model is required\n"), modeUnary)
		return
	}
	model = strings.TrimPrefix(model, "models/")
	if !s.models[model] || isEmbedding(model) {
		writeError(c.w, c.r, errModelNotFound(model, c.version, "createCachedContent"), modeUnary)
		return
	}
	cc := &cachedContent{keyID: c.keyID, model: model, created: s.now()}
	cc.updated = cc.created
	cc.displayName, _ = norm["displayName"].(string)
	list, _ := norm["contents"].([]any)
	cc.contents = toContents(list)
	where := "CreateCachedContentRequest.cached_content"
	if e := s.checkContents(c, cc.contents, where, "contents"); e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	fileText := func(uri string) (string, string, bool) { return s.fileText(c.keyID, uri) }
	cc.counts = contentsTokens(cc.contents, fileText)
	if si, ok := norm["systemInstruction"].(map[string]any); ok {
		sc := toContent(si)
		if e := s.checkParts(c, sc.Parts, where, "system_instruction"); e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		cc.system = &sc
		cc.counts.add(contentsTokens([]Content{sc}, fileText))
		cc.counts["TEXT"]--
	}
	cc.counts["TEXT"] += jsonTokens(norm["tools"]) + jsonTokens(norm["toolConfig"])
	min := s.opts.CacheMinTokens
	if n, ok := s.opts.CacheMinTokensByModel[model]; ok {
		min = n
	}
	if min > 0 && cc.counts.total() < min {
		writeError(c.w, c.r, errInvalid(fmt.Sprintf("Cached content is too small. total_token_count=%d, min_total_token_count=%d", cc.counts.total(), min)), modeUnary)
		return
	}
	exp, e := s.expiration(norm, cc.created)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	cc.expire = exp
	cc.id = s.nextID("cache", 16)
	s.mu.Lock()
	s.caches[cc.id] = cc
	s.mu.Unlock()
	s.writeCache(c, cc)
}

// expiration computes the expiry from ttl or expireTime (default one hour).
func (s *Server) expiration(norm map[string]any, from time.Time) (time.Time, *apiError) {
	if ttl, ok := norm["ttl"].(string); ok {
		secs, _ := strconv.ParseFloat(strings.TrimSuffix(ttl, "s"), 64)
		if secs <= 0 {
			return time.Time{}, errInvalid("* CachedContent.ttl: ttl must be positive\n")
		}
		return from.Add(time.Duration(secs * float64(time.Second))), nil
	}
	if et, ok := norm["expireTime"].(string); ok {
		t, _ := time.Parse(time.RFC3339Nano, et)
		if !t.After(s.now()) {
			return time.Time{}, errInvalid("* CachedContent.expire_time: expire_time must be in the future\n")
		}
		return t, nil
	}
	return from.Add(defaultCacheTTL), nil
}

func (s *Server) updateCache(c *call, id string) {
	_, v, e := readBody(c)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	norm, e := s.validator(c).message(v, msgCached, "")
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	for k := range norm {
		if k != "ttl" && k != "expireTime" && k != "name" {
			writeError(c.w, c.r, errInvalid(fmt.Sprintf("* UpdateCachedContentRequest.cached_content.%s: only the expiration (ttl or expire_time) can be updated\n", toSnake(k))), modeUnary)
			return
		}
	}
	if mask := c.r.URL.Query().Get("updateMask"); mask != "" {
		for _, p := range strings.Split(mask, ",") {
			if p = toCamel(strings.TrimSpace(p)); p != "ttl" && p != "expireTime" {
				writeError(c.w, c.r, errInvalid(fmt.Sprintf("Invalid update mask path %q.", p)), modeUnary)
				return
			}
		}
	}
	cc, e := s.lookupCache(c, id)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	now := s.now()
	_, hasTTL := norm["ttl"]
	_, hasET := norm["expireTime"]
	if hasTTL || hasET {
		exp, e := s.expiration(norm, now)
		if e != nil {
			writeError(c.w, c.r, e, modeUnary)
			return
		}
		s.mu.Lock()
		cc.expire, cc.updated = exp, now
		s.mu.Unlock()
	}
	s.writeCache(c, cc)
}

func (s *Server) listCaches(c *call) {
	now := s.now()
	s.mu.Lock()
	var all []*cachedContent
	for id, cc := range s.caches {
		if !now.Before(cc.expire) {
			s.expireLocked(id, cc)
			continue
		}
		if cc.keyID == c.keyID {
			all = append(all, cc)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b *cachedContent) int { return a.created.Compare(b.created) })
	writeList(c, "cachedContents", all, 100, 1000, s.cacheJSON)
}

// writeList answers a list call with one page of all (the request's
// pageSize, default def, at most max; pageToken), each item rendered by
// render, under key, with nextPageToken when more remain.
func writeList[T any](c *call, key string, all []T, def, max int, render func(T) any) {
	page, next, e := paginate(c.r, len(all), def, max)
	if e != nil {
		writeError(c.w, c.r, e, modeUnary)
		return
	}
	out := map[string]any{}
	if len(page) > 0 {
		items := make([]any, 0, len(page))
		for _, i := range page {
			items = append(items, render(all[i]))
		}
		out[key] = items
	}
	if next != "" {
		out["nextPageToken"] = next
	}
	b, _ := marshalIndent(out)
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

func (s *Server) cacheJSON(cc *cachedContent) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	type usage struct {
		TotalTokenCount int `json:"totalTokenCount"`
	}
	type out struct {
		Name          string `json:"name"`
		DisplayName   string `json:"displayName"`
		Model         string `json:"model"`
		CreateTime    string `json:"createTime"`
		UpdateTime    string `json:"updateTime"`
		ExpireTime    string `json:"expireTime"`
		UsageMetadata usage  `json:"usageMetadata"`
	}
	return out{"cachedContents/" + cc.id, cc.displayName, "models/" + cc.model, s.timestamp(cc.created),
		s.timestamp(cc.updated), cc.expire.UTC().Format("2006-01-02T15:04:05.000000000Z"), usage{cc.counts.total()}}
}

func (s *Server) writeCache(c *call, cc *cachedContent) {
	b, _ := marshalIndent(s.cacheJSON(cc))
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

// paginate returns the indexes of the requested page of n items and the
// next page token. Tokens are opaque base64 offsets.
func paginate(r *http.Request, n, def, max int) ([]int, string, *apiError) {
	q := r.URL.Query()
	size := def
	if ps := q.Get("pageSize"); ps != "" {
		v, err := strconv.Atoi(ps)
		if err != nil || v < 0 {
			return nil, "", errInvalid(fmt.Sprintf("Invalid value at 'page_size' (TYPE_INT32), %q", ps))
		}
		if v > 0 {
			size = min(v, max)
		}
	}
	off := 0
	if tok := q.Get("pageToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		v, err2 := strconv.Atoi(strings.TrimPrefix(string(b), "offset:"))
		if err != nil || err2 != nil || !strings.HasPrefix(string(b), "offset:") || v < 0 || v > n {
			return nil, "", errInvalid("Invalid page token.")
		}
		off = v
	}
	end := min(off+size, n)
	var idx []int
	for i := off; i < end; i++ {
		idx = append(idx, i)
	}
	next := ""
	if end < n {
		next = base64.RawURLEncoding.EncodeToString([]byte("offset:" + strconv.Itoa(end)))
	}
	return idx, next, nil
}
