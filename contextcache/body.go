package contextcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// Errors of Parse. A request that fails to parse is forwarded unchanged.
var (
	// ErrInvalidJSON reports a body that is not one JSON object.
	ErrInvalidJSON = errors.New("contextcache: body is not a JSON object")
	// ErrNoContents reports a body without a non-empty contents array.
	ErrNoContents = errors.New("contextcache: request has no contents")
	// ErrNamesCache reports a request that already names a cachedContent;
	// it is never changed.
	ErrNamesCache = errors.New("contextcache: request already names a cachedContent")
	// ErrDuplicateField reports a field the planner reads given twice.
	ErrDuplicateField = errors.New("contextcache: duplicate field")
)

// Key identifies a prefix: the SHA-256 chain of the model, the raw bytes
// of systemInstruction, tools and toolConfig, and the raw bytes of each
// leading content.
type Key [sha256.Size]byte

// span is a byte range [start, end) of the body.
type span struct{ start, end int }

// member is one top-level field: lead is the range from just after the
// preceding '{' or ',' to the end of the value (leading white space, key,
// colon, value), val the value alone.
type member struct {
	lead, val span
	name      string
}

// moved are the fields a request naming a cache may not carry: they go
// into the cache. Index order is the order of the key chain.
var moved = [...][2]string{
	{"systemInstruction", "system_instruction"},
	{"tools", "tools"},
	{"toolConfig", "tool_config"},
}

// Request is a parsed generateContent body: byte ranges, never decoded
// values, so that everything the planner does not move stays byte for
// byte. Build it with Parse. A Request is immutable and safe for
// concurrent use.
type Request struct {
	body     []byte
	members  []member
	tail     span // from the end of the last value to the end of the body
	contents int  // index in members of contents
	elems    []span
	moved    [len(moved)]int // index in members, -1 when absent
	keys     []Key           // keys[k]: prefix with k leading contents, 0 <= k < len(elems)
	size     []int           // size[k]: bytes of that prefix's moved fields and contents
	total    int             // bytes of the moved fields and all contents
}

// Parse reads a generateContent body for model (the model id as in the
// request path, e.g. gemini-2.5-flash). It fails on invalid JSON, a
// missing or empty contents array, a duplicate field it reads, and a
// request that already names a cachedContent.
func Parse(body []byte, model string) (*Request, error) {
	r := &Request{body: body, contents: -1}
	for i := range r.moved {
		r.moved[i] = -1
	}
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, ErrInvalidJSON
	}
	i++
	prev := i
	first := true
	for {
		j := skipWS(body, i)
		if j >= len(body) {
			return nil, ErrInvalidJSON
		}
		if body[j] == '}' && first {
			r.tail = span{prev, len(body)}
			i = j + 1
			break
		}
		if body[j] != '"' {
			return nil, ErrInvalidJSON
		}
		ke, ok := skipString(body, j)
		if !ok {
			return nil, ErrInvalidJSON
		}
		var name string
		if json.Unmarshal(body[j:ke], &name) != nil {
			return nil, ErrInvalidJSON
		}
		c := skipWS(body, ke)
		if c >= len(body) || body[c] != ':' {
			return nil, ErrInvalidJSON
		}
		vs := skipWS(body, c+1)
		ve, ok := skipValue(body, vs)
		if !ok {
			return nil, ErrInvalidJSON
		}
		r.members = append(r.members, member{lead: span{prev, ve}, val: span{vs, ve}, name: name})
		n := skipWS(body, ve)
		if n >= len(body) {
			return nil, ErrInvalidJSON
		}
		first = false
		if body[n] == '}' {
			r.tail = span{ve, len(body)}
			i = n + 1
			break
		}
		if body[n] != ',' {
			return nil, ErrInvalidJSON
		}
		i, prev = n+1, n+1
	}
	if skipWS(body, i) != len(body) {
		return nil, ErrInvalidJSON
	}
	for idx, m := range r.members {
		switch m.name {
		case "cachedContent", "cached_content":
			return nil, ErrNamesCache
		case "contents":
			if r.contents >= 0 {
				return nil, ErrDuplicateField
			}
			r.contents = idx
		}
		for k, names := range moved {
			if m.name == names[0] || m.name == names[1] {
				if r.moved[k] >= 0 {
					return nil, ErrDuplicateField
				}
				r.moved[k] = idx
			}
		}
	}
	if r.contents < 0 {
		return nil, ErrNoContents
	}
	elems, ok := arrayElems(body, r.members[r.contents].val)
	if !ok || len(elems) == 0 {
		return nil, ErrNoContents
	}
	r.elems = elems
	r.hash(model)
	return r, nil
}

// hash computes the prefix keys and sizes.
func (r *Request) hash(model string) {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put([]byte("gemini-proxy/contextcache/v1"))
	put([]byte(model))
	size := 0
	for _, idx := range r.moved {
		if idx < 0 {
			put(nil)
			h.Write([]byte{0})
			continue
		}
		v := r.members[idx].val
		put(r.body[v.start:v.end])
		h.Write([]byte{1})
		size += v.end - v.start
	}
	r.keys = make([]Key, len(r.elems))
	r.size = make([]int, len(r.elems))
	var k Key
	h.Sum(k[:0])
	for i, e := range r.elems {
		r.keys[i], r.size[i] = k, size
		h.Reset()
		h.Write(k[:])
		put(r.body[e.start:e.end])
		h.Sum(k[:0])
		size += e.end - e.start
	}
	r.total = size
}

// Len returns the number of contents. Prefixes have 0 to Len()-1 leading
// contents: a request naming a cache must still carry one content.
func (r *Request) Len() int { return len(r.elems) }

// Key returns the key of the prefix with k leading contents.
func (r *Request) Key(k int) Key { return r.keys[k] }

// Size returns the bytes of the prefix with k leading contents: the raw
// values of systemInstruction, tools and toolConfig plus those contents.
func (r *Request) Size(k int) int { return r.size[k] }

// Total returns the bytes of the moved fields and all contents: the prompt
// as the upstream counts it, in bytes.
func (r *Request) Total() int { return r.total }

// Apply returns the body naming the cache called name (cachedContents/…)
// that holds the prefix with k leading contents: systemInstruction, tools
// and toolConfig are removed, contents keeps its elements from k on, and a
// cachedContent field is added at the end. Every other byte, including the
// kept contents and unknown fields, is copied unchanged. It panics unless
// 0 <= k < Len().
func (r *Request) Apply(k int, name string) []byte {
	if k < 0 || k >= len(r.elems) {
		panic("contextcache: prefix out of range")
	}
	out := make([]byte, 0, len(r.body)-r.size[k]+len(name)+32)
	out = append(out, r.body[:r.members[0].lead.start]...)
	wrote := false
	for idx, m := range r.members {
		if r.isMoved(idx) {
			continue
		}
		if wrote {
			out = append(out, ',')
		}
		wrote = true
		if idx != r.contents {
			out = append(out, r.body[m.lead.start:m.lead.end]...)
			continue
		}
		// Key and leading white space as sent; the array keeps the bytes
		// from element k to its closing bracket.
		out = append(out, r.body[m.lead.start:m.val.start]...)
		out = append(out, '[')
		out = append(out, r.body[r.elems[k].start:m.val.end]...)
	}
	if wrote {
		out = append(out, ',')
	}
	out = append(out, `"cachedContent":`...)
	out = strconv.AppendQuote(out, name)
	return append(out, r.body[r.tail.start:]...)
}

func (r *Request) isMoved(idx int) bool {
	for _, m := range r.moved {
		if m == idx {
			return true
		}
	}
	return false
}

// CreateBody returns the cachedContents create body for the prefix with k
// leading contents: model ("models/" + model), the raw leading contents,
// systemInstruction, tools and toolConfig as sent, and ttl. It panics
// unless 0 <= k < Len().
func (r *Request) CreateBody(k int, model string, ttl time.Duration) []byte {
	if k < 0 || k >= len(r.elems) {
		panic("contextcache: prefix out of range")
	}
	out := make([]byte, 0, r.size[k]+len(model)+96)
	out = append(out, `{"model":`...)
	out = strconv.AppendQuote(out, "models/"+model)
	if k > 0 {
		out = append(out, `,"contents":[`...)
		for i := range k {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, r.body[r.elems[i].start:r.elems[i].end]...)
		}
		out = append(out, ']')
	}
	for i, idx := range r.moved {
		if idx < 0 {
			continue
		}
		v := r.members[idx].val
		out = append(out, ',', '"')
		out = append(out, moved[i][0]...)
		out = append(out, '"', ':')
		out = append(out, r.body[v.start:v.end]...)
	}
	out = append(out, `,"ttl":`...)
	out = strconv.AppendQuote(out, ttlString(ttl))
	return append(out, '}')
}

// ttlString formats a duration as the API's Duration JSON: seconds with an
// "s" suffix, at least one second.
func ttlString(d time.Duration) string {
	return strconv.FormatInt(max(int64(d/time.Second), 1), 10) + "s"
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
// A quote ends the string unless an odd number of backslashes precede it.
func skipString(b []byte, i int) (int, bool) {
	for i++; ; {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return 0, false
		}
		q += i
		n := 0
		for j := q - 1; j >= i && b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, true
		}
		i = q + 1
	}
}

// skipValue returns the index after the JSON value starting at b[i]. It
// checks nesting and strings, and leaves the finer grammar of the value to
// the upstream: the bytes are forwarded as they are.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		var stack []byte
		for ; i < len(b); i++ {
			switch c := b[i]; c {
			case '"':
				e, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = e - 1
			case '{', '[':
				stack = append(stack, c)
			case '}', ']':
				if len(stack) == 0 || (c == '}') != (stack[len(stack)-1] == '{') {
					return 0, false
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	default:
		s := i
		for i < len(b) && !isWS(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
			i++
		}
		if i == s || !json.Valid(b[s:i]) {
			return 0, false
		}
		return i, true
	}
}

// arrayElems returns the element ranges of the array at v.
func arrayElems(b []byte, v span) ([]span, bool) {
	if b[v.start] != '[' {
		return nil, false
	}
	var out []span
	i := skipWS(b, v.start+1)
	if i < v.end && b[i] == ']' {
		return nil, true
	}
	for i < v.end {
		e, ok := skipValue(b, i)
		if !ok || e > v.end {
			return nil, false
		}
		if b[i] != '{' {
			return nil, false // a content is an object
		}
		out = append(out, span{i, e})
		n := skipWS(b, e)
		if n >= v.end {
			return nil, false
		}
		if b[n] == ']' {
			return out, n+1 == v.end
		}
		if b[n] != ',' {
			return nil, false
		}
		i = skipWS(b, n+1)
	}
	return nil, false
}

// splitsCall reports whether a cache holding the k leading contents could
// part a function call from its response: content k-1 has a functionCall
// part or content k a functionResponse part. The API pairs a model turn's
// function calls with the next user turn's responses and, for Gemini 3,
// validates the calls of the current turn with their thought signatures
// (gemini-api.md §4.6, §4.7); whether it does so across the cache
// boundary is not documented, so such a boundary is never used. The test
// looks for the field name as a JSON key in the content's raw bytes: a
// nested "functionCall" key elsewhere only costs a candidate.
func (r *Request) splitsCall(k int) bool {
	if k > 0 && hasKey(r.content(k-1), "functionCall", "function_call") {
		return true
	}
	return hasKey(r.content(k), "functionResponse", "function_response")
}

// content returns the raw bytes of content i.
func (r *Request) content(i int) []byte { return r.body[r.elems[i].start:r.elems[i].end] }

// hasKey reports whether b contains "name": or "alt": with optional white
// space before the colon. Text inside a string value does not match: its
// quotes are escaped, and a value "name" is not followed by a colon.
func hasKey(b []byte, name, alt string) bool {
	for _, n := range [2]string{name, alt} {
		q := `"` + n + `"`
		for i := 0; ; {
			j := bytes.Index(b[i:], []byte(q))
			if j < 0 {
				break
			}
			i += j + len(q)
			if c := skipWS(b, i); c < len(b) && b[c] == ':' {
				return true
			}
		}
	}
	return false
}
