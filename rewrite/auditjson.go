package rewrite

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"unicode/utf8"
)

// The audit of structured texts (jsontext.go). A span replaced in a string
// value of a JSON text, of a fenced JSON block or of a tool result is
// checked, besides what audit.go checks of every span, for what keeps the
// JSON valid and its keys in place, re-derived from the original body
// without the engine's JSON walker:
//
//   - the value holding the span (its box) is one JSON value, white space
//     around it allowed: a text string's contents that decode to one (a
//     JSON text, a fence's content), or the object of a functionResponse's
//     "response" member;
//   - the span lies inside one string value of the box (never a key), and
//     a nested one starts and ends between two characters of both the
//     text and the value's own escaping;
//   - the reference is escaped as the value's contents, then as the
//     text's, so that the output holds a string where the value was;
//   - the hash is of the span decoded twice (once for a tool result), and
//     a full copy is compared decoded at its own depth;
//   - a superseded span is a whole value (kindValue), never a tool
//     result; a tool result is a whole string value of a response whose
//     full copy comes before it, and a functionCall's argument is never
//     cut (it may only be a full copy).
//
// The same holds of a full copy that is in a value.

// auditSub locates the string value a span or a full copy is in.
type auditSub struct {
	// nested: the value is inside a text string (a JSON text or a fenced
	// JSON block); otherwise the string is the body's own (a tool result).
	nested bool
	// in is the value's raw contents in the body (inside the text string
	// when nested, the cut's string itself otherwise); box is the JSON
	// value holding it, in raw body offsets: inside the text string when
	// nested, the functionResponse's response object otherwise.
	in, box span
	tool    bool
	// key is the member whose value box is, for a tool result: "response",
	// or "args" for a call's argument (a full copy, never cut).
	key string
}

// AuditJSONStructure: a span or full copy in a JSON text or tool result
// that is not inside one string value of one JSON value, splits an escape
// of the value, or replaces a key.
const AuditJSONStructure AuditReason = "json_structure"

// auditSubOf returns the record of tp's value, nil for a text analysed as
// a whole.
func (e *engine) auditSubOf(tp *textPart) *auditSub {
	v := tp.val
	if v == nil {
		return nil
	}
	if !v.nested {
		key := "response"
		if v.call {
			key = "args"
		}
		return &auditSub{in: tp.p.str, box: v.box, tool: true, key: key}
	}
	offs := []int{v.box.start, v.start, v.end, v.box.end}
	if tp.p.esc {
		rawOffsets(e.body[tp.p.str.start:tp.p.str.end], offs, tp.marks)
	}
	for k := range offs {
		offs[k] += tp.p.str.start
	}
	return &auditSub{nested: true, in: span{offs[1], offs[2]}, box: span{offs[0], offs[3]}}
}

// subBox is one JSON value that holds spans: the string values found in
// it and which of the wanted offsets fall between two characters of both
// escapings.
type subBox struct {
	nested bool
	strs   []span // string values (not keys), in order
	want   []int  // sorted, distinct
	ok     []bool // per want
	valid  bool
}

// subBoxes walks every box named by a record once.
func (au *auditor) subBoxes() error {
	type key struct {
		box    span
		nested bool
	}
	var order []key
	boxes := map[key]*subBox{}
	add := func(x *auditSub, offs ...int) {
		if x == nil {
			return
		}
		k := key{x.box, x.nested}
		bx := boxes[k]
		if bx == nil {
			bx = &subBox{nested: x.nested}
			boxes[k] = bx
			order = append(order, k)
		}
		if x.nested {
			bx.want = append(bx.want, offs...)
		}
	}
	for i := range au.a.cuts {
		c := &au.a.cuts[i]
		add(c.x, c.start, c.cs, c.ce, c.end)
		add(c.tx, c.tfull.start, c.ts, c.te, c.tfull.end)
	}
	if len(order) == 0 {
		return nil
	}
	au.boxes = make(map[span]*subBox, len(order))
	for _, k := range order {
		bx := boxes[k]
		if k.box.start < 0 || k.box.end > len(au.b1) || k.box.start > k.box.end {
			return auditFail(AuditStructure, -1, "box %d..%d out of range", k.box.start, k.box.end)
		}
		sort.Ints(bx.want)
		bx.want = compactInts(bx.want)
		bx.ok = make([]bool, len(bx.want))
		bx.valid = walkJSON(au.b1, k.box, bx)
		if !bx.valid {
			return auditFail(AuditJSONStructure, -1, "box %d..%d is not one JSON value", k.box.start, k.box.end)
		}
		au.boxes[k.box] = bx
	}
	return nil
}

func compactInts(s []int) []int {
	w := 0
	for i, v := range s {
		if i == 0 || v != s[w-1] {
			s[w] = v
			w++
		}
	}
	return s[:w]
}

// subAt reports whether x names a string value of its box that holds
// lo..hi, each offset between two characters.
func (au *auditor) subAt(x *auditSub, lo, hi int, offs ...int) bool {
	bx := au.boxes[x.box]
	if bx == nil || bx.nested != x.nested || !insideSpan(x.box, x.in.start, x.in.end) || !insideSpan(x.in, lo, hi) {
		return false
	}
	k := sort.Search(len(bx.strs), func(k int) bool { return bx.strs[k].start >= x.in.start })
	if k == len(bx.strs) || bx.strs[k] != x.in {
		return false
	}
	if !x.nested {
		return true
	}
	for _, off := range offs {
		j := sort.SearchInts(bx.want, off)
		if j == len(bx.want) || bx.want[j] != off || !bx.ok[j] {
			return false
		}
	}
	return true
}

// subSpan checks the span of cut i, which is in a value (c.x set).
func (au *auditor) subSpan(i int, c *auditCut) error {
	b, x := au.b1, c.x
	if x.tool {
		if x.key != "response" || !isValueOf(b, x.box, "response") || x.in != c.str || c.start != c.str.start || c.end != c.str.end || c.kind != kindTool {
			return auditFail(AuditJSONStructure, i, "a tool result span that is not a whole string of a response")
		}
	} else if !insideSpan(c.str, x.box.start, x.box.end) || !isStringOf(b, c.str, "text") {
		return auditFail(AuditStructure, i, "span not inside a text string")
	}
	if !insideSpan(c.str, c.start, c.end) || !insideSpan(span{c.start, c.end}, c.cs, c.ce) || c.cs > c.ce ||
		!escBoundary(b, c.str.start, c.start) || !escBoundary(b, c.str.start, c.end) {
		return auditFail(AuditStructure, i, "span not inside a string")
	}
	if !au.subAt(x, c.start, c.end, c.start, c.cs, c.ce, c.end) {
		return auditFail(AuditJSONStructure, i, "span %d..%d not inside one string value", c.start, c.end)
	}
	if c.kind == kindValue && (c.start != x.in.start || c.end != x.in.end) {
		return auditFail(AuditJSONStructure, i, "a value block that is not a whole value")
	}
	return nil
}

// subTarget checks the full copy of cut i, which is in a value (c.tx set).
func (au *auditor) subTarget(i int, c *auditCut) bool {
	b, x, t := au.b1, c.tx, c.tfull
	if x.tool {
		if x.key != "response" && x.key != "args" || !isValueOf(b, x.box, x.key) || x.in != c.tstr {
			return false
		}
	} else if !insideSpan(c.tstr, x.box.start, x.box.end) || !isStringOf(b, c.tstr, "text") {
		return false
	}
	return insideSpan(c.tstr, t.start, t.end) && insideSpan(t, c.ts, c.te) &&
		escBoundary(b, c.tstr.start, t.start) && escBoundary(b, c.tstr.start, t.end) &&
		escBoundary(b, c.tstr.start, c.ts) && escBoundary(b, c.tstr.start, c.te) &&
		au.subAt(x, t.start, t.end, t.start, c.ts, c.te, t.end)
}

// isValueOf reports whether b[s.start:s.end] is an object that is the
// value of member key: `"key"`, a colon and white space before it.
func isValueOf(b []byte, s span, key string) bool {
	if s.start < 1 || s.end > len(b) || s.end-s.start < 2 || b[s.start] != '{' || b[s.end-1] != '}' {
		return false
	}
	return followsKey(b, s.start-1, key)
}

// subContent returns the content of raw body bytes in a value: decoded
// twice when nested, once otherwise.
func subContent(raw []byte, x *auditSub) ([]byte, bool) {
	d, ok := decodeRaw(nil, raw)
	if !ok || x == nil || !x.nested {
		return d, ok
	}
	return decodeRaw(nil, d)
}

// subCut checks what contents checks of a cut that is in a value or whose
// full copy is.
func (au *auditor) subCut(i int, c *auditCut, r *Replacement) error {
	b := au.b1
	content, ok := subContent(b[c.start:c.end], c.x)
	if !ok {
		return auditFail(AuditStructure, i, "replaced span does not decode")
	}
	sum := sha256.Sum256(content)
	if hex.EncodeToString(sum[:]) != r.SHA256 {
		return auditFail(AuditRefMismatch, i, "replaced bytes do not have the recorded hash")
	}
	if c.session {
		return au.sessionCut(i, c, r)
	}
	if c.super {
		if c.kind == kindTool || c.x != nil && c.x.tool {
			return auditFail(AuditSupersededNotDocument, i, "a superseded tool result")
		}
		return au.superseded(i, c)
	}
	if c.kind == kindTool && c.tfull.end > c.start {
		return auditFail(AuditTargetMissing, i, "a tool result whose full copy is not before it")
	}
	x, ok1 := subContent(b[c.cs:c.ce], c.x)
	y, ok2 := subContent(b[c.ts:c.te], c.tx)
	if !ok1 || !ok2 || lf(string(x)) != lf(string(y)) {
		return auditFail(AuditTargetMissing, i, "full copy %d..%d differs", c.ts, c.te)
	}
	if au.inModel(c.start) {
		return auditFail(AuditServedAnswerAltered, i, "a reference inside a promoted model turn")
	}
	return nil
}

// subRefBytes returns the reference of a cut in a nested value: escaped as
// the value's contents, then as the text's.
func subRefBytes(ref string, scratch []byte) []byte {
	inner := appendEscaped(nil, ref)
	return appendEscaped(scratch[:0], string(inner))
}

// walkJSON reads b[box.start:box.end] (its decoding as a JSON string's
// contents when bx.nested) as one JSON value with white space around it,
// recording its string values in bx.strs and, of bx.want, the offsets that
// fall between two characters of a string value's contents in both
// escapings. It reports whether the value is well-formed.
func walkJSON(b []byte, box span, bx *subBox) bool {
	r := &jreader{b: b, i: box.start, end: box.end, nested: bx.nested}
	w := 0 // next want
	mark := func(p int) {
		for w < len(bx.want) && bx.want[w] < p {
			w++
		}
		if w < len(bx.want) && bx.want[w] == p {
			bx.ok[w] = true
			w++
		}
	}
	// str reads a string's contents after its opening quote, returning
	// their raw span.
	str := func(value bool) (span, bool) {
		start := r.at()
		for {
			p := r.at()
			if value && p >= 0 {
				mark(p)
			}
			c, ok := r.next()
			if !ok || c < 0x20 {
				return span{}, false
			}
			switch c {
			case '"':
				return span{start, p}, p >= 0
			case '\\':
				e, ok := r.next()
				if !ok {
					return span{}, false
				}
				switch e {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				case 'u':
					for range 4 {
						if h, ok := r.next(); !ok || hexVal(h) < 0 {
							return span{}, false
						}
					}
				default:
					return span{}, false
				}
			}
		}
	}
	var stack []byte
	const (
		value = iota
		valueOrEnd
		keyOrEnd
		key
		after
	)
	state := value
	for {
		c, ok := r.nonSpace()
		if !ok {
			return state == after && len(stack) == 0 && !r.bad
		}
		if state == after && len(stack) == 0 {
			return false // more after the value
		}
		switch state {
		case keyOrEnd, key:
			if c == '}' && state == keyOrEnd {
				stack = stack[:len(stack)-1]
				state = after
				continue
			}
			if c != '"' {
				return false
			}
			if _, ok := str(false); !ok {
				return false
			}
			if c, ok := r.nonSpace(); !ok || c != ':' {
				return false
			}
			state = value
		case value, valueOrEnd:
			if c == ']' && state == valueOrEnd {
				stack = stack[:len(stack)-1]
				state = after
				continue
			}
			switch {
			case c == '{':
				if len(stack) >= maxDepth {
					return false
				}
				stack = append(stack, '{')
				state = keyOrEnd
			case c == '[':
				if len(stack) >= maxDepth {
					return false
				}
				stack = append(stack, '[')
				state = valueOrEnd
			case c == '"':
				sp, ok := str(true)
				if !ok {
					return false
				}
				bx.strs = append(bx.strs, sp)
				state = after
			default:
				if !r.scalar(c) {
					return false
				}
				state = after
			}
		case after:
			top := stack[len(stack)-1]
			switch {
			case c == ',' && top == '{':
				state = key
			case c == ',':
				state = value
			case c == '}' && top == '{', c == ']' && top == '[':
				stack = stack[:len(stack)-1]
			default:
				return false
			}
		}
	}
}

// jreader reads the bytes of a raw span, or, when nested, of its decoding
// as a JSON string's contents, one at a time.
type jreader struct {
	b      []byte
	i, end int
	nested bool
	pend   [utf8.UTFMax]byte
	np, pi int
	bad    bool
}

// at returns the raw offset of the next byte, -1 inside a decoded
// multi-byte character.
func (r *jreader) at() int {
	if r.pi < r.np {
		return -1
	}
	return r.i
}

func (r *jreader) next() (byte, bool) {
	if r.pi < r.np {
		c := r.pend[r.pi]
		r.pi++
		return c, true
	}
	if r.i >= r.end || r.bad {
		return 0, false
	}
	c := r.b[r.i]
	if !r.nested || c != '\\' {
		if r.nested && (c < 0x20 || c == '"') {
			r.bad = true
			return 0, false
		}
		r.i++
		return c, true
	}
	if r.i+1 >= r.end {
		r.bad = true
		return 0, false
	}
	if e := escByte[r.b[r.i+1]]; e != 0 {
		r.i += 2
		return e, true
	}
	if r.b[r.i+1] != 'u' || r.i+6 > r.end {
		r.bad = true
		return 0, false
	}
	for _, h := range r.b[r.i+2 : r.i+6] {
		if hexVal(h) < 0 {
			r.bad = true
			return 0, false
		}
	}
	rn, n := decodeEscape(r.b[r.i:r.end])
	r.i += n
	r.np = utf8.EncodeRune(r.pend[:], rn)
	r.pi = 1
	return r.pend[0], true
}

// nonSpace returns the next byte that is not JSON white space.
func (r *jreader) nonSpace() (byte, bool) {
	for {
		c, ok := r.next()
		if !ok || !isWS(c) {
			return c, ok
		}
	}
}

// peek returns the next byte without reading it.
func (r *jreader) peek() (byte, bool) {
	s := *r
	c, ok := s.next()
	return c, ok
}

// scalar reads a literal or number that starts with c.
func (r *jreader) scalar(c byte) bool {
	lit := func(w string) bool {
		for k := 1; k < len(w); k++ {
			if d, ok := r.next(); !ok || d != w[k] {
				return false
			}
		}
		return true
	}
	switch c {
	case 't':
		return lit("true")
	case 'f':
		return lit("false")
	case 'n':
		return lit("null")
	}
	digits := func() int {
		n := 0
		for {
			d, ok := r.peek()
			if !ok || d < '0' || d > '9' {
				return n
			}
			r.next()
			n++
		}
	}
	if c == '-' {
		var ok bool
		if c, ok = r.next(); !ok {
			return false
		}
	}
	switch {
	case c == '0':
	case c >= '1' && c <= '9':
		digits()
	default:
		return false
	}
	if d, ok := r.peek(); ok && d == '.' {
		r.next()
		if digits() == 0 {
			return false
		}
	}
	if d, ok := r.peek(); ok && (d == 'e' || d == 'E') {
		r.next()
		if d, ok := r.peek(); ok && (d == '+' || d == '-') {
			r.next()
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
