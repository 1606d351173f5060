package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
	"github.com/gemini-proxy/gemini-proxy/upstream"
)

// HeaderSession is the request header that opts a client that sends no
// history (N3) into session mode: successive requests with the same value
// (per tenant and model) continue one stored interaction. Like every
// X-Gemini-Proxy-* header it is never forwarded.
const HeaderSession = "X-Gemini-Proxy-Session"

// InteractionStore keeps the proxy's Interactions API state (interaction
// ids and session state) per tenant, with a TTL; cache.Store satisfies it.
// Keys are hex hashes, never text. Implementations must be safe for
// concurrent use and may forget entries at any time.
//
// Conversations returns the values of keys (nil where missing) in one
// lookup: the proxy makes one call per request, so a shared store should
// answer it in one round trip.
type InteractionStore interface {
	Conversations(tenant string, keys []string) [][]byte
	SetConversation(tenant, key string, value []byte) bool
}

// InteractionsOptions configures continuing conversations server-side
// through the Interactions API (issue 8, upstream_state.interactions).
type InteractionsOptions struct {
	// Enabled turns continuation on. It needs Store and applies only to
	// generate requests whose body the proxy read and rewrote (rewrite
	// enabled, mode on: dry-run forwards the original, DESIGN §3). False
	// sends every request as is.
	Enabled bool
	// Store holds the interaction ids. Nil disables continuation.
	Store InteractionStore
	// MaxLookups bounds the interaction ids one request looks up, one per
	// earlier model turn from the newest back, all in one
	// InteractionStore.Conversations call. Zero means 8.
	MaxLookups int
}

// apiRevision pins the Interactions schema the upstream package writes
// (the steps schema of May 2026, gemini-api.md §7.1); the Go and Python
// SDKs send the same header.
const apiRevision = "2026-05-20"

// maxInteractionBytes bounds a unary interaction response read for
// translation.
const maxInteractionBytes = 64 << 20

// interactions decides, sends and translates interaction requests. A nil
// *interactions does nothing.
type interactions struct {
	store   InteractionStore
	m       *metrics.Metrics
	lookups int
	rwOpts  rewrite.Options
	// elide is rewrite.Elide, which audits its own output; tests wrap it.
	elide func(body []byte, opts rewrite.Options, sent func(string) bool) ([]byte, []rewrite.Replacement, error)
}

func newInteractions(o InteractionsOptions, rw rewrite.Options, m *metrics.Metrics) *interactions {
	if !o.Enabled || o.Store == nil {
		return nil
	}
	x := &interactions{store: o.Store, m: m, lookups: o.MaxLookups, rwOpts: rw, elide: rewrite.Elide}
	if x.lookups <= 0 {
		x.lookups = 8
	}
	return x
}

// ixState is what one request did with the Interactions API.
type ixState struct {
	session  string // X-Gemini-Proxy-Session value
	kind     string // metrics.Interaction*; "" when not considered
	fallback string // metrics.Fallback*, "" when none
}

// capture remembers the session header of the incoming request before the
// ReverseProxy strips the proxy's headers.
func (x *interactions) capture(st *reqState, in *http.Request) {
	if x == nil || st == nil || !st.info.route.isGenerate() || st.info.vertex {
		return
	}
	st.ix = &ixState{session: strings.TrimSpace(in.Header.Get(HeaderSession))}
}

// appendLog adds the access-log field of the request's interaction use.
func (s *ixState) appendLog(attrs []slog.Attr) []slog.Attr {
	if s == nil || s.kind == "" {
		return attrs
	}
	v := s.kind
	if s.fallback != "" {
		v += "; fallback=" + s.fallback
	}
	return append(attrs, slog.String("interaction", v))
}

// Canonical form of contents, for the hash chain (see the README section
// "Upstream state: Interactions continuation"):
//
//   - a content is {"parts":[…],"role":r} with r "user" when omitted, plus
//     any other member it has;
//   - every object is written compactly with its keys sorted; field names
//     of the API schema are camelCase whichever spelling the client used
//     (thought_signature = thoughtSignature), but the free-form values of
//     functionCall.args, functionResponse.response and partMetadata keep
//     their keys as sent; strings are re-encoded (escapes do not matter),
//     numbers keep their digits;
//   - consecutive model contents are one turn, and in a model turn
//     adjacent parts made only of "text" are joined and empty ones dropped:
//     SDK chat helpers re-send a streamed answer one content per chunk,
//     while the upstream stored it as one model output.
//
// Anything else that differs (a byte of text, a part, a role, a user
// turn's split into parts, base64 spelling) gives another hash.

// unit is one canonical turn of a request.
type unit struct {
	role        string
	first, last int // indices into contents
	sum         [sha256.Size]byte
}

// freeForm are the members whose value is data, not API schema.
var freeForm = map[string]bool{"args": true, "response": true, "partMetadata": true}

// canonValue returns v with schema keys camelCased (unless verbatim).
func canonValue(v any, verbatim bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, c := range x {
			if !verbatim {
				k = camelKey(k)
			}
			out[k] = canonValue(c, verbatim || freeForm[k])
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, c := range x {
			out[i] = canonValue(c, verbatim)
		}
		return out
	}
	return v
}

// camelKey turns a snake_case name into camelCase.
func camelKey(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_':
			up = true
			continue
		case up && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		up = false
		b.WriteByte(c)
	}
	return b.String()
}

// decodeAny decodes JSON keeping numbers as written.
func decodeAny(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

var errShape = errors.New("proxy: content is not an object with a parts list")

// turnOf decodes one content into its role, canonical parts and other
// members.
func turnOf(raw []byte) (role string, parts []any, rest map[string]any, err error) {
	v, err := decodeAny(raw)
	if err != nil {
		return "", nil, nil, err
	}
	obj, ok := canonValue(v, false).(map[string]any)
	if !ok {
		return "", nil, nil, errShape
	}
	role, _ = obj["role"].(string)
	if role == "" {
		role = "user"
	}
	if p, ok := obj["parts"]; ok {
		if parts, ok = p.([]any); !ok {
			return "", nil, nil, errShape
		}
	}
	delete(obj, "role")
	delete(obj, "parts")
	return role, parts, obj, nil
}

// mergeText joins adjacent text-only parts and drops empty ones.
func mergeText(parts []any) []any {
	out := make([]any, 0, len(parts))
	for _, p := range parts {
		m, ok := p.(map[string]any)
		t, isText := m["text"].(string)
		if !ok || !isText || len(m) != 1 {
			out = append(out, p)
			continue
		}
		if t == "" {
			continue
		}
		if n := len(out); n > 0 {
			if prev, ok := out[n-1].(map[string]any); ok && len(prev) == 1 {
				if pt, ok := prev["text"].(string); ok {
					out[n-1] = map[string]any{"text": pt + t}
					continue
				}
			}
		}
		out = append(out, map[string]any{"text": t})
	}
	return out
}

// unitSum hashes a canonical turn.
func unitSum(role string, parts []any, rest map[string]any) ([sha256.Size]byte, error) {
	obj := make(map[string]any, len(rest)+2)
	for k, v := range rest {
		obj[k] = v
	}
	if role == "model" {
		parts = mergeText(parts)
	}
	obj["role"], obj["parts"] = role, parts
	if obj["parts"] == nil {
		obj["parts"] = []any{}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// canonUnits turns contents into canonical turns.
func canonUnits(contents []json.RawMessage) ([]unit, error) {
	var units []unit
	var role string
	var parts []any
	var rest map[string]any
	first := 0
	flush := func(last int) error {
		sum, err := unitSum(role, parts, rest)
		if err != nil {
			return err
		}
		units = append(units, unit{role: role, first: first, last: last, sum: sum})
		return nil
	}
	for i, raw := range contents {
		r, p, o, err := turnOf(raw)
		if err != nil {
			return nil, err
		}
		if i > 0 && r == "model" && role == "model" && len(o) == 0 && len(rest) == 0 {
			parts = append(parts, p...)
			continue
		}
		if i > 0 {
			if err := flush(i - 1); err != nil {
				return nil, err
			}
		}
		role, parts, rest, first = r, p, o, i
	}
	if len(contents) > 0 {
		if err := flush(len(contents) - 1); err != nil {
			return nil, err
		}
	}
	return units, nil
}

// chainSeed starts the hash chain of a model's conversations.
func chainSeed(model string) [sha256.Size]byte {
	return sha256.Sum256([]byte("gemini-proxy/interactions/v1\x00" + model))
}

// chainNext extends the chain h by one turn.
func chainNext(h, turn [sha256.Size]byte) [sha256.Size]byte {
	var b [2 * sha256.Size]byte
	copy(b[:], h[:])
	copy(b[sha256.Size:], turn[:])
	return sha256.Sum256(b[:])
}

// chainKey is the store key of the interaction covering the chain h.
func chainKey(h [sha256.Size]byte) string { return "ix:" + hex.EncodeToString(h[:]) }

// sessionKey is the store key of a session's state.
func sessionKey(model, session string) string {
	sum := sha256.Sum256([]byte("gemini-proxy/session/v1\x00" + model + "\x00" + session))
	return "ixs:" + hex.EncodeToString(sum[:])
}

// maxSessionBlocks bounds the block hashes a session remembers (oldest go
// first).
const maxSessionBlocks = 256

// sessionState is what the store holds for a session.
type sessionState struct {
	ID     string   `json:"id"`
	Blocks []string `json:"blocks,omitempty"`
}

// ixPlan is the decision for one request.
type ixPlan struct {
	kind   string // metrics.InteractionContinued, Session or Started; "" sends as is
	prev   string
	stale  []string // store keys to forget when prev is gone: its prefix and older ones
	body   []byte   // the interaction request body
	full   int      // size of the generateContent body it replaces
	chain  [sha256.Size]byte
	blocks []string // session: block hashes of the new turn as sent in full
	sess   *sessionState
	// sessKey is the store key of the request's session, "" without one.
	sessKey string
}

// ixRequest is the part of a generate request body decide reads.
type ixRequest struct {
	Contents      []json.RawMessage `json:"contents"`
	CachedContent json.RawMessage   `json:"cachedContent"`
	CachedSnake   json.RawMessage   `json:"cached_content"`
}

// decide chooses how to send body (the generate request body after
// rewriting) for tenant on apiModel (the model id of the request path,
// which the interaction names and which seeds the hash chain, so that
// gemini-2.0-flash-001 and gemini-2.0-flash never share a conversation):
// as a continuation of a stored interaction whose chain the contents begin
// with, as a session continuation, as a new stored interaction, or as is
// (kind ""). It does no I/O besides store lookups.
func (x *interactions) decide(body []byte, tenant, apiModel string, stream bool, session string) ixPlan {
	none := ixPlan{}
	var req ixRequest
	if err := json.Unmarshal(body, &req); err != nil || len(req.Contents) == 0 {
		return none
	}
	if len(req.CachedContent) > 0 || len(req.CachedSnake) > 0 {
		return none
	}
	units, err := canonUnits(req.Contents)
	if err != nil || len(units) == 0 || units[len(units)-1].role == "model" {
		return none
	}
	hs := make([][sha256.Size]byte, len(units)+1)
	hs[0] = chainSeed(apiModel)
	for i, u := range units {
		hs[i+1] = chainNext(hs[i], u.sum)
	}
	plan := ixPlan{full: len(body), chain: hs[len(units)]}
	if session != "" {
		plan.sessKey = sessionKey(apiModel, session)
	}

	// The longest stored prefix that ends with a model turn: the chains
	// of up to x.lookups model turns, newest first, and the session's
	// state, all in one store call (one Redis round trip in shared mode).
	var keys []string
	var at []int // units index of keys[i]
	for j := len(units) - 2; j >= 0 && len(keys) < x.lookups; j-- {
		if units[j].role == "model" {
			keys = append(keys, chainKey(hs[j+1]))
			at = append(at, j)
		}
	}
	if session != "" {
		keys = append(keys, plan.sessKey)
	}
	if len(keys) == 0 {
		return x.start(body, apiModel, len(req.Contents), stream, plan)
	}
	vals := x.store.Conversations(tenant, keys)
	if len(vals) != len(keys) {
		return none
	}
	if session != "" {
		if v := vals[len(vals)-1]; len(v) > 0 {
			var s sessionState
			if json.Unmarshal(v, &s) == nil && s.ID != "" {
				plan.sess = &s
			}
		}
	}
	for i, j := range at {
		id := vals[i]
		if len(id) == 0 {
			continue
		}
		// Interactions expire oldest first: when this one is gone, the
		// older ones of the same conversation are too.
		for k, n := j, 0; k >= 0 && n < x.lookups; k-- {
			if units[k].role == "model" {
				plan.stale = append(plan.stale, chainKey(hs[k+1]))
				n++
			}
		}
		newTurns := len(req.Contents) - units[j].last - 1
		out, ok, err := upstream.ToInteraction(body, apiModel, string(id), newTurns, stream)
		if err != nil || !ok {
			return none
		}
		plan.kind, plan.prev, plan.body = metrics.InteractionContinued, string(id), out
		x.sentBlocks(&plan, body)
		return plan
	}

	if s := plan.sess; s != nil {
		send := body
		if len(s.Blocks) > 0 {
			sent := make(map[string]bool, len(s.Blocks))
			for _, h := range s.Blocks {
				sent[h] = true
			}
			// Elide audits its references (each names the hash of the
			// bytes it replaced, and the session sent that hash); when
			// the audit fails the body goes as Request made it, which
			// its own audit accepted.
			out, _, err := x.elide(body, x.rwOpts, func(h string) bool { return sent[h] })
			var ae *rewrite.AuditError
			switch {
			case err == nil:
				send = out
			case errors.As(err, &ae):
				x.m.RewriteAuditFails.WithLabelValues(string(ae.Reason)).Inc()
			}
		}
		out, ok, err := upstream.ToInteraction(send, apiModel, s.ID, len(req.Contents), stream)
		if err != nil || !ok {
			return none
		}
		plan.kind, plan.prev, plan.body = metrics.InteractionSession, s.ID, out
		x.sentBlocks(&plan, send)
		return plan
	}

	return x.start(body, apiModel, len(req.Contents), stream, plan)
}

// start completes plan as a new stored interaction holding all n contents
// of body, or returns the empty plan when body does not translate exactly.
func (x *interactions) start(body []byte, apiModel string, n int, stream bool, plan ixPlan) ixPlan {
	out, ok, err := upstream.ToInteraction(body, apiModel, "", n, stream)
	if err != nil || !ok {
		return ixPlan{}
	}
	plan.kind, plan.body = metrics.InteractionStarted, out
	x.sentBlocks(&plan, body)
	return plan
}

// sentBlocks sets, for a session request, plan.blocks to the hashes of the
// blocks whose full copy is in the new turn of sent, the body the
// interaction carries. Not Report.Blocks: that also lists blocks the
// rewrite replaced in the same turn (an older version of a file turned
// into a superseded reference), which the upstream never saw, and a later
// request of the session would refer to them (issue 8 review).
func (x *interactions) sentBlocks(plan *ixPlan, sent []byte) {
	if plan.sessKey == "" {
		return
	}
	bs, err := rewrite.SessionBlocks(sent, x.rwOpts)
	if err != nil {
		return
	}
	for _, b := range bs {
		plan.blocks = append(plan.blocks, b.SHA256)
	}
}

// pathModel returns the model id of a generate path (…/models/{m}:method)
// and the path up to the version segment's end, where /interactions goes.
func pathModel(p string) (model, prefix string, ok bool) {
	i := strings.LastIndex(p, "/models/")
	if i < 0 {
		return "", "", false
	}
	rest := p[i+len("/models/"):]
	m, _, found := strings.Cut(rest, ":")
	if !found || m == "" || strings.Contains(m, "/") {
		return "", "", false
	}
	return m, p[:i], true
}

// roundTrip sends req as an interaction when the plan says so. handled is
// false when the caller must send req as is: the request is not eligible,
// or the interaction failed before any byte reached the client (a
// fallback, counted in st.ix.fallback; the caller then makes that one
// generateContent call and no other, so a client request costs at most two
// upstream calls). When handled, res or err is the answer.
//
// Only the rewrite mode "on" goes as an interaction: dry-run and off
// forward the client's request as is (DESIGN §3).
func (x *interactions) roundTrip(base http.RoundTripper, req *http.Request, st *reqState) (res *http.Response, handled bool, err error) {
	if x == nil || st == nil || st.ix == nil || st.mode != metrics.ModeOn || st.holdout || st.info.vertex || !st.info.route.isGenerate() || st.orig == nil || req.Method != http.MethodPost {
		return nil, false, nil
	}
	q := req.URL.Query()
	alt := q.Get("alt")
	sse := alt == "sse"
	if _, dollar := q["$alt"]; dollar || (alt != "" && !sse && alt != "json") || (sse && !st.stream) {
		return nil, false, nil
	}
	model, prefix, ok := pathModel(req.URL.Path)
	if !ok {
		return nil, false, nil
	}
	body := st.orig
	if st.rewritten {
		body = st.sentBody
	}
	plan := x.decide(body, st.tenant, model, st.stream, st.ix.session)
	// The decision is the proxy's own time (proxy_overhead_seconds).
	st.upstreamStart = time.Now()
	st.ix.kind = metrics.InteractionFull
	if plan.kind == "" {
		x.m.InteractionRequests.WithLabelValues(metrics.InteractionFull).Inc()
		return nil, false, nil
	}

	out := req.Clone(req.Context())
	u := *req.URL
	u.Path, u.RawPath = prefix+"/interactions", ""
	u.RawQuery = removeQueryParam(req.URL.RawQuery, "alt")
	out.URL = &u
	out.Body = io.NopCloser(bytes.NewReader(plan.body))
	out.ContentLength = int64(len(plan.body))
	out.GetBody = nil
	out.Header.Set("Content-Type", "application/json")
	out.Header.Del("Content-Length")
	out.Header.Del("Accept-Encoding") // plain bytes to translate
	out.Header.Set("Api-Revision", apiRevision)
	st.sent += out.ContentLength

	fail := func(reason string) (*http.Response, bool, error) {
		st.ix.fallback = reason
		x.m.InteractionFallbacks.WithLabelValues(reason).Inc()
		x.m.InteractionRequests.WithLabelValues(metrics.InteractionFull).Inc()
		return nil, false, nil
	}
	// forget drops the previous interaction the upstream no longer has
	// (and, as interactions expire oldest first, the older ones of the
	// same conversation), so that the next request starts a new one.
	forget := func() {
		for _, k := range plan.stale {
			x.store.SetConversation(st.tenant, k, nil)
		}
		if plan.kind == metrics.InteractionSession {
			x.store.SetConversation(st.tenant, plan.sessKey, []byte("{}"))
		}
	}
	up, err := base.RoundTrip(out)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, true, err // the client is gone: no fallback
		}
		return fail(metrics.FallbackTransport)
	}
	x.m.UpstreamResponses.WithLabelValues(string(st.info.route), statusLabel(up.StatusCode)).Inc()
	if up.StatusCode < 200 || up.StatusCode > 299 {
		msg, _ := io.ReadAll(io.LimitReader(up.Body, maxErrorBytes+1))
		io.CopyN(io.Discard, up.Body, 64<<10) //nolint:errcheck // only to reuse the connection
		up.Body.Close()
		switch {
		case up.StatusCode == http.StatusNotFound:
			forget()
			return fail(metrics.FallbackNotFound)
		case up.StatusCode == http.StatusBadRequest:
			if plan.prev != "" && aboutPrevious(msg, plan.prev) {
				forget()
				return fail(metrics.FallbackRejected)
			}
			// The new turn was refused, not the conversation: keep its
			// ids. The rewritten body may be at fault as well as the
			// translation, so the one generateContent call carries the
			// client's original body (the rewrite's fail-open, which
			// the transport does not repeat after a fallback).
			if st.rewritten {
				req.Body.Close()
				req.Body = io.NopCloser(bytes.NewReader(st.orig))
				req.ContentLength = int64(len(st.orig))
				req.GetBody = nil
				st.fallback = true
				x.m.RewriteFallbacks.Inc()
			}
			return fail(metrics.FallbackRejected)
		case up.StatusCode >= 500:
			return fail(metrics.FallbackUpstreamError)
		}
		// 401, 403, 429 and the other client errors concern the key,
		// the quota or the request, not the interaction: a
		// generateContent call would get the same, and only multiply the
		// load. The client gets the upstream's error in the shape of a
		// generateContent error.
		req.Body.Close()
		st.ix.kind = plan.kind
		x.m.InteractionRequests.WithLabelValues(plan.kind).Inc()
		return asGeminiError(up, msg, req), true, nil
	}
	done := func(id string, parts []any) {
		x.record(st, plan, id, parts)
	}
	var translated *http.Response
	if st.stream {
		translated, err = x.stream(up, model, !sse, st.sdk == SDKGenerativeAIJS, done)
	} else {
		translated, err = x.unary(up, model, done)
	}
	if err != nil {
		if req.Context().Err() != nil {
			return nil, true, req.Context().Err()
		}
		return fail(metrics.FallbackUntranslatable)
	}
	req.Body.Close()
	translated.Request = req
	st.ix.kind = plan.kind
	x.m.InteractionRequests.WithLabelValues(plan.kind).Inc()
	if plan.kind != metrics.InteractionStarted && plan.full > len(plan.body) {
		x.m.InteractionSavedBytes.Add(float64(plan.full - len(plan.body)))
	}
	return translated, true, nil
}

// maxErrorBytes bounds the error body of an interaction read to decide
// and translate it.
const maxErrorBytes = 64 << 10

// aboutPrevious reports whether the error body of a refused interaction
// names its previous interaction (the id, or previous_interaction_id):
// the conversation is gone, rather than the new turn refused.
func aboutPrevious(body []byte, prev string) bool {
	msg := strings.ToLower(string(errorMessage(body)))
	return strings.Contains(msg, strings.ToLower(prev)) ||
		strings.Contains(msg, "previous_interaction") || strings.Contains(msg, "previous interaction")
}

// errorMessage returns the message of an error body
// {"error":{"message":…}}, or the body itself when it has none.
func errorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return string(body)
}

// rpcStatus names the google.rpc.Code of an HTTP status as the Gemini API
// reports it (gemini-api.md §5.4).
var rpcStatus = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
	500: "INTERNAL", 501: "NOT_IMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}

// asGeminiError is the upstream's error answer to an interaction (body is
// what was read of it) as the generateContent error a client's SDK
// expects: {"error":{"code":<int>,"message","status"[,"details"]}}, the
// upstream's status, message, details and headers (Retry-After …) kept.
// The Interactions API writes {"error":{"code":"<string>","message"}}
// (gemini-api.md §5.4); a body already in the Gemini shape (a numeric
// code) is passed as is.
func asGeminiError(up *http.Response, body []byte, req *http.Request) *http.Response {
	var e struct {
		Error struct {
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
			Details json.RawMessage `json:"details"`
		} `json:"error"`
	}
	code := up.StatusCode
	out := body
	if err := json.Unmarshal(body, &e); err != nil || len(body) > maxErrorBytes || !isNumber(e.Error.Code) {
		status := rpcStatus[code]
		switch {
		case status != "":
		case code >= 500:
			status = "INTERNAL"
		default:
			status = "FAILED_PRECONDITION"
		}
		msg := e.Error.Message
		if msg == "" {
			msg = http.StatusText(code)
		}
		type gemini struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Status  string          `json:"status"`
			Details json.RawMessage `json:"details,omitempty"`
		}
		g := gemini{Code: code, Message: msg, Status: status}
		if d := bytes.TrimSpace(e.Error.Details); len(d) > 0 && d[0] == '[' {
			g.Details = d
		}
		out, _ = json.MarshalIndent(map[string]gemini{"error": g}, "", "  ")
		out = append(out, '\n')
	}
	res := &http.Response{
		Status: strconv.Itoa(code) + " " + http.StatusText(code), StatusCode: code,
		Proto: up.Proto, ProtoMajor: up.ProtoMajor, ProtoMinor: up.ProtoMinor,
		Header:        translatedHeader(up.Header, "application/json; charset=UTF-8"),
		Body:          io.NopCloser(bytes.NewReader(out)),
		ContentLength: int64(len(out)),
		Request:       req,
	}
	res.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return res
}

// isNumber reports whether raw is a JSON number.
func isNumber(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '-' || ('0' <= raw[0] && raw[0] <= '9'))
}

// translatedHeader is the header of a translated response: the upstream's,
// without what described the interaction body.
func translatedHeader(h http.Header, contentType string) http.Header {
	out := h.Clone()
	for _, k := range []string{"Content-Length", "Content-Encoding", "Content-Type", "Etag", "Last-Modified"} {
		out.Del(k)
	}
	out.Set("Content-Type", contentType)
	return out
}

// unary reads and translates a unary interaction.
func (x *interactions) unary(up *http.Response, model string, done func(string, []any)) (*http.Response, error) {
	defer up.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(up.Body, maxInteractionBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxInteractionBytes {
		return nil, upstream.ErrUntranslatable
	}
	b, err := upstream.FromInteraction(raw, model)
	if err != nil {
		return nil, err
	}
	id, parts := responseParts(b)
	done(id, parts)
	b = append(b, '\n')
	res := &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: up.Proto, ProtoMajor: up.ProtoMajor, ProtoMinor: up.ProtoMinor,
		Header:        translatedHeader(up.Header, "application/json; charset=UTF-8"),
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
	}
	res.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return res, nil
}

// responseParts reads the responseId and candidate 0's parts of a
// GenerateContentResponse.
func responseParts(b []byte) (string, []any) {
	v, err := decodeAny(b)
	if err != nil {
		return "", nil
	}
	m, _ := v.(map[string]any)
	id, _ := m["responseId"].(string)
	cands, _ := m["candidates"].([]any)
	if len(cands) == 0 {
		return id, nil
	}
	c, _ := cands[0].(map[string]any)
	content, _ := c["content"].(map[string]any)
	parts, _ := content["parts"].([]any)
	return id, parts
}

// stream translates a streamed interaction. It reads until the first
// translated chunk exists, so that a failure before it is a fallback; the
// rest is translated as the client reads. bare is chunkSink.bare.
func (x *interactions) stream(up *http.Response, model string, array, bare bool, done func(string, []any)) (*http.Response, error) {
	s := &ixStream{up: up.Body, buf: make([]byte, 32<<10), done: done}
	s.sink = &chunkSink{array: array, bare: bare, out: &s.out}
	s.tr = upstream.NewStreamTranslator(model, s.sink)
	for s.out.Len() == 0 && s.err == nil {
		s.fill()
	}
	if s.out.Len() == 0 || (s.err != nil && s.err != io.EOF) {
		up.Body.Close()
		if s.err == nil || s.err == io.EOF {
			return nil, upstream.ErrIncomplete
		}
		return nil, s.err
	}
	ct := "text/event-stream"
	if array {
		ct = "application/json; charset=UTF-8"
	}
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: up.Proto, ProtoMajor: up.ProtoMajor, ProtoMinor: up.ProtoMinor,
		Header:        translatedHeader(up.Header, ct),
		Body:          s,
		ContentLength: -1,
	}, nil
}

// ixStream is the body of a translated stream: it reads the interaction
// stream, translates it, and hands out the translated bytes.
type ixStream struct {
	up   io.ReadCloser
	tr   *upstream.StreamTranslator
	sink *chunkSink
	out  bytes.Buffer
	buf  []byte
	err  error // sticky; io.EOF once the translation completed
	done func(string, []any)
}

// fill reads one piece of the interaction stream and translates it.
func (s *ixStream) fill() {
	n, err := s.up.Read(s.buf)
	if n > 0 {
		if _, werr := s.tr.Write(s.buf[:n]); werr != nil {
			s.err = werr
			return
		}
	}
	switch {
	case err == io.EOF:
		if cerr := s.tr.Close(); cerr != nil {
			s.err = cerr
			return
		}
		s.sink.close()
		s.done(s.sink.id, s.sink.parts)
		s.err = io.EOF
	case err != nil:
		s.err = err
	}
}

func (s *ixStream) Read(p []byte) (int, error) {
	for s.out.Len() == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.fill()
	}
	return s.out.Read(p)
}

func (s *ixStream) Close() error { return s.up.Close() }

// chunkSink receives the translator's Gemini SSE chunks (one Write each),
// keeps candidate 0's parts and the responseId for the hash chain, and
// writes SSE as is or, for a client that asked for the JSON-array stream
// (no alt), "[" obj ",\r\n" obj … "]" (gemini-api.md §1.3.2).
type chunkSink struct {
	array bool
	// bare drops the content of the final chunk when it holds only an
	// empty text part: the deprecated @google/generative-ai JS SDK
	// aggregates a stream one part per chunk and, finding an empty text
	// part, leaves the whole turn out of a chat's history. The Gemini API
	// puts the last text piece and finishReason in one chunk; the
	// translator cannot know a piece is the last when it writes it. The
	// current SDKs need every chunk to have content (@google/genai's chat
	// records an empty answer otherwise), so only that SDK gets it.
	bare  bool
	out   *bytes.Buffer
	n     int
	id    string
	parts []any
}

func (c *chunkSink) Write(p []byte) (int, error) {
	n := len(p)
	js := bytes.TrimSuffix(bytes.TrimPrefix(p, []byte("data: ")), []byte("\r\n\r\n"))
	if c.bare {
		if b, ok := withoutEmptyContent(js); ok {
			js = b
			p = append(append([]byte("data: "), b...), "\r\n\r\n"...)
		}
	}
	id, parts := responseParts(js)
	if id != "" {
		c.id = id
	}
	c.parts = append(c.parts, parts...)
	if !c.array {
		c.out.Write(p)
		return n, nil
	}
	if c.n == 0 {
		c.out.WriteByte('[')
	} else {
		c.out.WriteString(",\r\n")
	}
	c.out.Write(js)
	c.n++
	return n, nil
}

// withoutEmptyContent returns the chunk js without candidate 0's content
// when that candidate has a finishReason and its content holds exactly
// one part, {"text":""}; ok is false (and js is kept) otherwise.
func withoutEmptyContent(js []byte) ([]byte, bool) {
	if !bytes.Contains(js, []byte(`"finishReason"`)) {
		return nil, false
	}
	v, err := decodeAny(js)
	if err != nil {
		return nil, false
	}
	m, _ := v.(map[string]any)
	cands, _ := m["candidates"].([]any)
	if len(cands) == 0 {
		return nil, false
	}
	c, _ := cands[0].(map[string]any)
	if _, ok := c["finishReason"]; !ok {
		return nil, false
	}
	content, _ := c["content"].(map[string]any)
	parts, _ := content["parts"].([]any)
	if len(parts) != 1 {
		return nil, false
	}
	if p, _ := parts[0].(map[string]any); len(p) != 1 || p["text"] != "" {
		return nil, false
	}
	delete(c, "content")
	b, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	return b, true
}

// close ends a JSON-array stream.
func (c *chunkSink) close() {
	if c.array {
		if c.n == 0 {
			c.out.WriteByte('[')
		}
		c.out.WriteByte(']')
	}
}

// record stores the id of the interaction that now covers the request's
// contents plus the answer the client received, and a session's state.
func (x *interactions) record(st *reqState, plan ixPlan, id string, parts []any) {
	if id == "" {
		return
	}
	cp, _ := canonValue(parts, false).([]any)
	sum, err := unitSum("model", cp, nil)
	if err != nil {
		return
	}
	x.store.SetConversation(st.tenant, chainKey(chainNext(plan.chain, sum)), []byte(id))
	if plan.sessKey == "" {
		return
	}
	s := sessionState{ID: id}
	if plan.sess != nil && plan.prev == plan.sess.ID {
		// The new interaction continues the session's: what that one
		// holds, it holds too. (A chained continuation of another
		// interaction would not, so the list starts over then.)
		s.Blocks = slices.Clone(plan.sess.Blocks)
	}
	for _, h := range plan.blocks {
		if !slices.Contains(s.Blocks, h) {
			s.Blocks = append(s.Blocks, h)
		}
	}
	if n := len(s.Blocks); n > maxSessionBlocks {
		s.Blocks = s.Blocks[n-maxSessionBlocks:]
	}
	if b, err := json.Marshal(s); err == nil {
		// Visible to the other replicas before the client has the answer:
		// a session's next turn may reach any of them at once, and one
		// that found the previous state would continue the interaction
		// before this one, without this turn.
		if now, ok := x.store.(interface {
			SetConversationNow(tenant, key string, value []byte) bool
		}); ok {
			now.SetConversationNow(st.tenant, plan.sessKey, b)
		} else {
			x.store.SetConversation(st.tenant, plan.sessKey, b)
		}
	}
}
