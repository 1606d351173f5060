package rewrite

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// maxNameBytes bounds the document name inside a reference, so that a
// reference never exceeds maxRefBytes.
const (
	maxNameBytes    = 80
	maxRunNameBytes = 40
	maxRefBytes     = 200
)

// shaKey names the span of a block by its content's id and the bytes
// around the content (the fence lines, a tag, a name line): two spans
// with the same key are the same bytes, so the key stands for the span
// in spanSHA's memo without hashing the whole span as a map key (the
// 1 MB overhead request's re-sent documents made those string keys 3% of
// the rewrite, issue 17).
type shaKey struct {
	cid        int32
	head, tail string
}

// spanSHA returns the hex SHA-256 of o's span (spanOf), as sha does: the
// one of the occurrence segReuse copied o from when it has one, else
// from a memo keyed by shaKey when the span is the content framed by
// head and tail, else sha's.
func (e *engine) spanSHA(o *occ) string {
	if o.copyOf > 0 {
		if h := e.occs[o.copyOf-1].sha; h != "" {
			return h // the same span
		}
	}
	content, _ := e.spanOf(o)
	b := &o.b
	// A run's content is not an identity content (its cid is not set),
	// and normalize may have changed a content (CRLF): then the span is
	// not head + content + tail.
	if b.kind == kindImage || b.kind == kindRun || o.cid < 0 || b.start > b.cstart || b.cstart > b.cend || b.cend > b.end || len(o.content) != b.cend-b.cstart {
		return e.sha(content)
	}
	text := e.parts[o.tp].text
	k := shaKey{o.cid, text[b.start:b.cstart], text[b.cend:b.end]}
	if h, ok := e.st.shaSpans[k]; ok {
		return h
	}
	h := e.sha(content)
	if e.st.shaSpans == nil {
		e.st.shaSpans = make(map[shaKey]string)
	}
	e.st.shaSpans[k] = h
	return h
}

// str returns the bytes appended to e.strs since offset n as a string.
//
// e.strs holds the strings of the Report (hashes, references, names) back
// to back, so that they share a few allocations instead of one each.
// Bytes handed out are never written again: later appends go past them,
// or to a new array (see grow; the strings keep the old one).
func (e *engine) str(n int) string {
	if n == len(e.strs) {
		return ""
	}
	return unsafe.String(&e.strs[n], len(e.strs)-n)
}

// grow makes room for n more bytes in e.strs: when it is full, appends
// go to a new, larger array, without copying the strings already handed
// out.
func (e *engine) grow(n int) {
	if cap(e.strs)-len(e.strs) < n {
		e.strs = make([]byte, 0, max(n, 2*cap(e.strs), 1024))
	}
}

// spanOf returns what replacing o removes: its text, or for an image its
// decoded bytes and the size of its part in the body.
func (e *engine) spanOf(o *occ) (content string, size int) {
	if o.b.kind == kindImage {
		return o.content, o.img.obj.end - o.img.obj.start
	}
	content = e.parts[o.tp].text[o.b.start:o.b.end]
	return content, len(content)
}

// reference fills o.sha and o.ref and reports whether replacing o pays: the
// span is at least MinBlockBytes and the reference at most half its size.
func (e *engine) reference(o *occ) bool {
	_, size := e.spanOf(o)
	if size < e.opts.MinBlockBytes || size < 2*len("[unchanged:  sha256:123456789abc]") {
		return false
	}
	o.sha = e.spanSHA(o)
	o.sumRaw = e.rawSpan(o)
	o.ref = e.refText(o)
	o.refBytes = len(o.ref)
	if o.b.kind == kindImage {
		o.refBytes = len(`{"text":""}`) + o.refJSONLen()
	}
	return o.refBytes*2 <= size
}

// rawSpan returns the raw span of e.body that o's content decodes from:
// the span of its text, or an image's data string.
func (e *engine) rawSpan(o *occ) span {
	if o.b.kind == kindImage {
		return o.img.str
	}
	offs := e.rawBlock(o)
	return span{offs[0], offs[3]}
}

// refJSONLen returns the length of o.ref escaped as JSON string contents.
func (o *occ) refJSONLen() int {
	if !o.refEsc {
		return len(o.ref)
	}
	return escapedLen(o.ref)
}

// needsEscape reports whether s holds a byte that a JSON string escapes.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return true
		}
	}
	return false
}

// refText renders the reference that replaces o (see doc.go for the format).
func (e *engine) refText(o *occ) string {
	e.grow(maxRefBytes)
	n := len(e.strs)
	b := e.strs
	name := displayName(e.name(o))
	// The rest of a reference is ASCII that JSON does not escape.
	o.refEsc = needsEscape(name)
	h := o.sha[:12]
	switch {
	case o.b.kind == kindImage:
		b = append(b, "[same "...)
	case o.super:
		b = append(b, "[superseded: "...)
	default:
		b = append(b, "[unchanged: "...)
	}
	at := len(b) - n
	b = append(b, name...)
	b = append(b, " sha256:"...)
	b = append(b, h...)
	switch {
	case o.b.kind == kindImage:
		b = append(b, " as "...)
	case o.super:
		b = append(b, ", replaced by the version "...)
	default:
		b = append(b, ", identical to the copy "...)
	}
	b = e.appendWhere(b, o)
	e.strs = append(b, ']')
	ref := e.str(n)
	o.refName = ref[at : at+len(name)] // in e.strs, as report needs
	return ref
}

// where says where the full copy is: "in turn N", "in your previous reply"
// (the model turn right before a user turn), or "earlier/later in this turn".
func (e *engine) where(o *occ) string {
	switch {
	case o.target == o.turn && o.later:
		return "later in this turn"
	case o.target == o.turn:
		return "earlier in this turn"
	case o.target == o.turn-1 && e.role(o.target) == "model" && e.role(o.turn) == "user":
		return "in your previous reply"
	}
	return "in turn " + strconv.Itoa(o.target+1)
}

// appendWhere appends e.where(o) to b without building the string first.
func (e *engine) appendWhere(b []byte, o *occ) []byte {
	switch {
	case o.target == o.turn, o.target == o.turn-1 && e.role(o.target) == "model" && e.role(o.turn) == "user":
		return append(b, e.where(o)...)
	}
	return strconv.AppendInt(append(b, "in turn "...), int64(o.target+1), 10)
}

// name is the document name shown for o: its own name, else its document's.
func (e *engine) name(o *occ) string {
	switch {
	case o.b.kind == kindImage:
		if o.b.name == "" {
			return "inline data"
		}
		return o.b.name
	case o.b.kind == kindRun:
		// An unnamed run is named by its first line, cut shorter than a
		// file name so that the reference stays small.
		name := firstLine(e.parts[o.tp].text[o.b.start:o.b.end])
		if len(name) > maxRunNameBytes {
			cut := maxRunNameBytes - 3
			for cut > 0 && !utf8.RuneStart(name[cut]) {
				cut--
			}
			name = name[:cut] + "..."
		}
		return name
	case o.b.name != "":
		return o.b.name
	}
	return e.docs[o.doc].name
}

// displayName makes a name safe and short for a reference: control
// characters and brackets become spaces, and it is cut to maxNameBytes.
func displayName(s string) string {
	if !plainName(s) {
		s = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == '[' || r == ']' || r == utf8.RuneError {
				return ' '
			}
			return r
		}, s)
	}
	s = strings.TrimSpace(s)
	if len(s) > maxNameBytes {
		cut := maxNameBytes - 3
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	if s == "" {
		s = "block"
	}
	return s
}

// plainName reports whether displayName maps no byte of s: s is printable
// ASCII without brackets (strings.Map returns such a string unchanged).
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '[' || c == ']' {
			return false
		}
	}
	return true
}

// final returns every replacement in request order.
func (e *engine) final() []*occ {
	out := e.st.reps[:0]
	for i := range e.occs {
		if e.occs[i].replace {
			out = append(out, &e.occs[i])
		}
	}
	for i := range e.runs {
		out = append(out, &e.runs[i])
	}
	slices.SortFunc(out, func(a, b *occ) int {
		return cmp.Or(cmp.Compare(a.turn, b.turn), cmp.Compare(a.part, b.part), cmp.Compare(e.anchor(a), e.anchor(b)), cmp.Compare(a.b.start, b.b.start))
	})
	e.st.reps = out
	return out
}

// cut replaces body[start:end] by ref (escaped), wrapped as a text part
// when it replaces an inlineData part.
type cut struct {
	start, end int
	ref        string
	img        bool
	esc        bool // ref holds a byte that JSON escapes
}

// emit stitches the unchanged byte ranges of the body around the replaced
// strings. Text kept in a part keeps its original escaping byte for byte.
// The output is written once, into a buffer of its exact size (or one
// from Options.Buffer).
func (e *engine) emit(reps []*occ) []byte {
	if len(reps) == 0 {
		return e.body
	}
	const textOpen, textClose = `{"text":"`, `"}`
	cuts := e.st.cuts[:0]
	for i := 0; i < len(reps); {
		o := reps[i]
		if o.b.kind == kindImage {
			cuts = append(cuts, cut{o.img.obj.start, o.img.obj.end, o.ref, true, o.refEsc})
			i++
			continue
		}
		j := i
		for j < len(reps) && reps[j].tp == o.tp && reps[j].b.kind != kindImage {
			j++
		}
		tp := &e.parts[o.tp]
		for _, r := range reps[i:j] {
			ref, esc := subRef(tp, r.ref, r.refEsc)
			offs := e.rawBlock(r) // mapped already for the reference's hash
			cuts = append(cuts, cut{offs[0], offs[3], ref, false, esc})
		}
		i = j
	}
	e.st.cuts = cuts
	n := len(e.body)
	for _, c := range cuts {
		n += len(c.ref) - (c.end - c.start)
		if c.esc {
			n += escapedLen(c.ref) - len(c.ref)
		}
		if c.img {
			n += len(textOpen) + len(textClose)
		}
	}
	out := e.output(n)
	prev := 0
	for _, c := range cuts {
		out = append(out, e.body[prev:c.start]...)
		if c.img {
			out = append(out, textOpen...)
		}
		if c.esc {
			out = appendEscaped(out, c.ref)
		} else {
			out = append(out, c.ref...)
		}
		if c.img {
			out = append(out, textClose...)
		}
		prev = c.end
	}
	return append(out, e.body[prev:]...)
}

// output returns an empty slice with room for a body of n bytes: from
// Options.Buffer when it gives enough, else newly allocated.
func (e *engine) output(n int) []byte {
	if f := e.opts.Buffer; f != nil {
		if b := f(n); cap(b) >= n {
			return b[:0]
		}
	}
	return make([]byte, 0, n)
}

// escapedLen returns len(appendEscaped(nil, s)).
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n++
		case c < 0x20:
			n += 5
		}
	}
	return n
}

// report lists the replacements for the Report.
func (e *engine) report(reps []*occ) []Replacement {
	if len(reps) == 0 {
		return nil
	}
	out := make([]Replacement, len(reps))
	for i, o := range reps {
		size := o.b.end - o.b.start
		if o.b.kind == kindImage {
			size = o.img.obj.end - o.img.obj.start
		}
		name := o.refName
		if name == "" {
			// The name may view the pooled decoding arena: copy it.
			name = displayName(e.name(o))
			e.grow(len(name))
			n := len(e.strs)
			e.strs = append(e.strs, name...)
			name = e.str(n)
		}
		out[i] = Replacement{Rule: o.rule, Turn: o.turn, Part: o.part, Document: name,
			SHA256: o.sha, Bytes: size, RefBytes: o.refBytes, Target: o.target, Reference: o.ref, Source: e.srcOf(o)}
	}
	return out
}
