package rewrite

import (
	"slices"
	"strings"
	"unsafe"
)

// Structured texts (DESIGN §3 "Structured texts", issue 15).
//
// A text part whose content is one JSON object or array (white space
// around it allowed) is a JSON text: an editor assistant sends
// {"mode":"edit","prompt":…,"currentSource":…} and its model answers
// {"kind":"code_proposal","explanation":…,"proposedSource":…}, so that the
// file is one escaped line that nothing segments. Such a part is analysed
// by its string values instead of as one text: each value of at least
// Options.MinBlockBytes is decoded and becomes a text of its own (a
// sub-text, textPart.val), segmented like any text, its blocks and runs
// compared with every other text of the request. A value in which
// segmentation finds no block, that holds at least three lines and is not
// the value of a prose member (prompt, explanation …), is one document
// block (kindValue) whose lead-in is its member name, named by a sibling
// member that holds a file path ("path", "file", "filename" …). The same
// holds for the values of a ```json fence whose content is one JSON object
// or array (the fence is then a box: no block of its own, its lines no
// run's).
//
// A replaced span of a value becomes the reference escaped twice (as the
// value's contents, then as the part's text), so that the text stays
// valid JSON with the same keys in the same order and every byte outside
// the replaced spans as sent. A value that is a reference line is a
// sub-text too, however short, so that a second rewrite sees the copies
// the first one marked (idempotence).
//
// A functionResponse part (a user turn's tool result, only that member)
// is analysed by the string values of its response: each of at least
// Options.MinBlockBytes is one block (kindTool) that becomes an unchanged
// reference when the same content is in full earlier in the request
// (Options.ToolResults). It is a document of its own, never superseded,
// never replaced by a copy that comes after it, and it never makes
// another document's version older. The string values of a functionCall's
// args (a model turn's call, signed or not) are blocks of the same kind
// that are never replaced: what an agent wrote is a full copy that its
// later read of the file points to.

// jsonVal locates a sub-text: a string value analysed as a text of its
// own.
type jsonVal struct {
	src Source
	// nested: the value is inside the part's decoded text (a JSON text or
	// fence), start and end its raw contents there, marks its decoding's.
	// Otherwise it is a string of the body (a tool result), and the
	// textPart's part is a stand-in whose str is that string.
	nested     bool
	start, end int
	esc        bool
	marks      []mark
	// key is the member name of the value ("" in an array); box the JSON
	// value that holds it (decoded text offsets when nested, else the
	// functionResponse's response value in the body).
	key string
	box span
	// call: the value is a functionCall's argument, never replaced.
	call bool
	// name is the file path of a sibling member, "" when none; tag the
	// short values of its sibling members that tell documents apart
	// (jsonTagKeys), as they stand.
	name, tag string
}

// jsonStr is a string value found by jsonStrings.
type jsonStr struct {
	start, end int // raw contents, without quotes
	esc        bool
	key        string
	name, tag  string
}

// jsonNameKeys are member names whose short string value names the file
// the other members of the object hold.
var jsonNameKeys = []string{"path", "file", "filename", "file_name", "fileName", "filepath", "file_path", "filePath", "name", "uri"}

// jsonTagKeys are member names whose short string value tells two
// documents of one payload shape apart ({"env":"staging","config":…} and
// {"env":"production","config":…}): it is part of the lead-in of the
// object's other values, so that such documents are never one.
var jsonTagKeys = []string{"env", "environment", "stage", "profile", "tenant", "service", "region", "id", "language", "lang"}

// jsonProseKeys are member names whose value reads as prose: a value
// without blocks under such a name is never one document block, so that
// it is never superseded (runs of its lines may still repeat).
var jsonProseKeys = []string{"prompt", "question", "query", "message", "instruction", "instructions", "explanation", "answer",
	"summary", "description", "reason", "reasoning", "comment", "note", "notes", "title", "request", "task", "goal", "response"}

// jsonStrings returns the string values of the JSON value b[lo:hi] (white
// space around it allowed) whose raw contents are at least min bytes long
// or read as a reference line, in order, appended to dst; ok is false
// when b[lo:hi] is not one JSON object or array.
func jsonStrings(b []byte, lo, hi, min int, dst []jsonStr) (out []jsonStr, ok bool) {
	s := &scanner{b: b[:hi], pos: lo}
	s.ws()
	if s.pos >= hi || (b[s.pos] != '{' && b[s.pos] != '[') {
		return dst, false
	}
	w := jsonWalker{s: s, min: min, out: dst}
	if w.value(1, "") != nil {
		return dst, false
	}
	s.ws()
	if s.pos != hi {
		return dst, false
	}
	return w.out, true
}

// jsonWalker collects the string values of one JSON value.
type jsonWalker struct {
	s   *scanner
	min int
	out []jsonStr
}

func (w *jsonWalker) value(depth int, key string) error {
	s := w.s
	if s.pos >= len(s.b) {
		return errSyntax
	}
	switch s.b[s.pos] {
	case '"':
		sp, esc, err := s.str()
		if err == nil && (sp.end-sp.start >= w.min || refValue(s.b[sp.start:sp.end])) {
			w.out = append(w.out, jsonStr{start: sp.start, end: sp.end, esc: esc, key: key})
		}
		return err
	case '{':
		var direct []int // indices in w.out of the object's own members
		name, tag := "", ""
		err := s.object(depth+1, func(k string) error {
			if s.pos < len(s.b) && s.b[s.pos] == '"' {
				at := len(w.out)
				start := s.pos + 1
				if err := w.value(depth+1, k); err != nil {
					return err
				}
				raw := s.b[start : s.pos-1]
				if name == "" && isNameKey(k) && len(raw) <= 200 && !hasByte(raw, '\\') && pathish(string(raw)) {
					name = string(raw)
				}
				if len(raw) <= 64 && isTagKey(k) {
					tag += " " + k + "=" + string(raw)
				}
				if len(w.out) > at {
					direct = append(direct, at)
				}
				return nil
			}
			return w.value(depth+1, k)
		})
		if err != nil {
			return err
		}
		for _, i := range direct {
			w.out[i].name, w.out[i].tag = name, tag
		}
		return nil
	case '[':
		return s.array(depth+1, func() error { return w.value(depth+1, "") })
	}
	return s.value(depth)
}

func isNameKey(k string) bool {
	for _, n := range jsonNameKeys {
		if k == n {
			return true
		}
	}
	return false
}

func isTagKey(k string) bool {
	for _, n := range jsonTagKeys {
		if strings.EqualFold(k, n) {
			return true
		}
	}
	return false
}

func isProseKey(k string) bool {
	for _, n := range jsonProseKeys {
		if strings.EqualFold(k, n) {
			return true
		}
	}
	return false
}

func hasByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// refValue reports whether raw, the contents of a JSON string, reads as a
// reference line this package writes.
func refValue(raw []byte) bool {
	if len(raw) > 2*maxRefBytes || len(raw) < 20 || raw[0] != '[' {
		return false
	}
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	return (strings.HasPrefix(s, "[unchanged: ") || strings.HasPrefix(s, "[superseded: ") || strings.HasPrefix(s, "[same ")) &&
		strings.Contains(s, " sha256:")
}

// jsonText reports whether text, a part's decoded text, may be a JSON
// text worth analysing by its values: it starts like a JSON object or
// array, and it is at least min bytes long or may hold a reference (a
// value replaced by an earlier rewrite, which a second one must see).
func jsonText(text string, min int) bool {
	if len(text) < min && !strings.Contains(text, " sha256:") {
		return false
	}
	t := strings.TrimLeft(text, " \t\r\n")
	return t != "" && (t[0] == '{' || t[0] == '[')
}

// docValue reports whether a value in which segmentation found no block
// is one document block: at least three lines, not prose by its member
// name.
func docValue(text, key string) bool {
	return strings.Count(text, "\n") >= 2 && !isProseKey(key)
}

// subTexts returns the sub-texts of a JSON text part: its string values
// worth analysing, decoded. ok is false when text is not a JSON text.
func subTexts(text string, min int) (vals []jsonVal, decs []decoded, ok bool) {
	if !jsonText(text, min) {
		return nil, nil, false
	}
	b := unsafe.Slice(unsafe.StringData(text), len(text))
	strs, ok := jsonStrings(b, 0, len(b), min, nil)
	if !ok {
		return nil, nil, false
	}
	box := span{0, len(text)}
	return decodeValues(b, strs, box, SourceJSONText, min)
}

// decodeValues decodes the strings strs of b, in box, keeping those of at
// least min decoded bytes and the reference lines.
func decodeValues(b []byte, strs []jsonStr, box span, src Source, min int) (vals []jsonVal, decs []decoded, ok bool) {
	for _, x := range strs {
		raw := b[x.start:x.end]
		d, err := decodeString(raw)
		if err != nil {
			return nil, nil, false
		}
		if len(d.text) < min && !refValue(raw) {
			continue
		}
		vals = append(vals, jsonVal{src: src, nested: src != SourceToolResult, start: x.start, end: x.end, esc: x.esc,
			marks: d.marks, key: x.key, box: box, name: x.name, tag: x.tag})
		decs = append(decs, d)
	}
	return vals, decs, true
}

// toolTexts returns the sub-texts of a functionResponse or functionCall
// part whose value is body[fr.start:fr.end]: the string values of its
// member (response or args).
func toolTexts(body []byte, fr span, member string, min int) (vals []jsonVal, decs []decoded) {
	s := &scanner{b: body[:fr.end], pos: fr.start}
	if s.pos >= fr.end || body[s.pos] != '{' {
		return nil, nil
	}
	var resp span
	err := s.object(1, func(k string) error {
		start := s.pos
		err := s.value(1)
		if k == member && err == nil && body[start] == '{' {
			resp = span{start, s.pos}
		}
		return err
	})
	if err != nil || resp.end == 0 {
		return nil, nil
	}
	strs, ok := jsonStrings(body, resp.start, resp.end, min, nil)
	if !ok {
		return nil, nil
	}
	vals, decs, _ = decodeValues(body, strs, resp, SourceToolResult, min)
	return vals, decs
}

// subOffsets maps offsets (ascending) in the decoded text of sub-text tp
// to offsets in its part's decoded text, in place: the offsets the part's
// own mapping (rawOffsets with tp.marks) then takes to the body. Offsets
// of other texts are left alone.
func (e *engine) subOffsets(tp *textPart, offs []int) {
	v := tp.val
	if v == nil || !v.nested {
		return
	}
	if v.esc {
		t := tp.p.dec.text
		rawOffsets(unsafe.Slice(unsafe.StringData(t[v.start:]), v.end-v.start), offs, v.marks)
	}
	for k := range offs {
		offs[k] += v.start
	}
}

// subRef returns the bytes that stand for reference ref, with refEsc as
// reported by refText, inside the part of tp, and whether the body
// escapes them once more: a nested value escapes them first as its own
// contents.
func subRef(tp *textPart, ref string, refEsc bool) (string, bool) {
	if tp.val == nil || !tp.val.nested || !refEsc {
		return ref, refEsc
	}
	return string(appendEscaped(nil, ref)), true
}

// hasSubTexts reports whether a part of content c may be analysed by its
// values (a JSON text or a tool result).
func (e *engine) hasSubTexts(c *content) bool {
	for pi := range c.parts {
		p := &c.parts[pi]
		if p.fr.end > 0 || p.kind == partText && (jsonText(p.dec.text, max(e.opts.MinBlockBytes, 1)) || mayHoldJSONFence(p.dec.text)) {
			return true
		}
	}
	return false
}

// addSubTexts appends the sub-texts of part pi of turn ti to e.parts and
// reports whether the part is analysed by them (it is then not a text of
// its own). nb counts the blocks of the request (Options.MaxBlocks).
func (e *engine) addSubTexts(ti, pi int, p *part, sr *segReuse, nb *int, maxBlocks int) (bool, error) {
	minBytes := max(e.opts.MinBlockBytes, 1)
	var vals []jsonVal
	var decs []decoded
	switch {
	case p.kind == partText && jsonText(p.dec.text, minBytes):
		var ok bool
		if vals, decs, ok = subTexts(p.dec.text, minBytes); !ok || len(vals) == 0 {
			// Not JSON, or no value worth analysing (a pasted
			// package.json): a text like any other.
			return false, nil
		}
	case p.fr.end > 0 && e.opts.ToolResults == ToolResultsDedup && !p.call && e.role(ti) == "user":
		vals, decs = toolTexts(e.body, p.fr, "response", minBytes)
	case p.fr.end > 0 && e.opts.ToolResults == ToolResultsDedup && p.call && e.role(ti) == "model":
		// A call's arguments are never changed (the part is often
		// signed), but what it wrote is a full copy that a later read
		// of it may point to.
		vals, decs = toolTexts(e.body, p.fr, "args", minBytes)
		for i := range vals {
			vals[i].call = true
		}
	default:
		return false, nil
	}
	st := e.st
	for i := range vals {
		v, d := &vals[i], &decs[i]
		ls := lines{text: d.text, nl: d.nl}
		off := len(st.blocks)
		tp := textPart{turn: ti, part: pi, p: p, text: d.text, marks: p.dec.marks, lines: ls, blockOff: off, val: v}
		if !v.nested {
			// A tool result: its string is the text, the whole value one
			// block.
			tp.p = &part{kind: partOther, str: span{v.start, v.end}, esc: v.esc}
			tp.marks = d.marks
			if len(d.text) >= e.opts.MinBlockBytes {
				st.blocks = append(st.blocks, valueBlock(d.text, kindTool, ""))
			}
		} else {
			sr.left = maxBlocks - *nb
			sr.segment(st, ls, e.opts.DocumentTags)
			if len(st.blocks) == off && len(d.text) >= e.opts.MinBlockBytes && docValue(d.text, v.key) {
				st.blocks = append(st.blocks, valueBlock(d.text, kindValue, v.name))
			}
		}
		for len(st.copyOf) < len(st.blocks) {
			st.copyOf = append(st.copyOf, -1)
		}
		tp.blocks = st.blocks[off:len(st.blocks):len(st.blocks)]
		if *nb += len(tp.blocks); *nb > maxBlocks {
			return true, ErrTooComplex
		}
		e.parts = append(e.parts, tp)
	}
	return true, nil
}

// valueBlock returns the block of a whole value: its content is the
// value without one final line break, as a fence's content is the file
// without the line break before the closing fence.
func valueBlock(text string, kind blockKind, name string) block {
	ce := len(text)
	if ce > 0 && text[ce-1] == '\n' {
		ce--
	}
	return block{kind: kind, start: 0, end: len(text), cstart: 0, cend: ce, name: name}
}

// subLead is leadIn for block j of tp; a whole value's lead-in is its
// member name.
func subLead(tp *textPart, j int) string {
	if tp.val != nil {
		switch tp.blocks[j].kind {
		case kindValue:
			if tp.val.key == "" {
				return tp.val.tag
			}
			return `"` + tp.val.key + `":` + tp.val.tag
		case kindTool:
			return ""
		}
	}
	return leadIn(tp, j)
}

// toolDoc returns the document of o, a tool result: one per content, so
// that a tool result never becomes a version of another document (nor
// makes one older) and another block joins it only as a copy of it.
func (e *engine) toolDoc(o *occ) int {
	key := "\x00tool\x00" + o.content
	if d, ok := e.byName[key]; ok {
		return d
	}
	d := e.newDoc(firstLine(o.content), kindTool)
	e.byName[key] = d
	return d
}

// keepTool reports whether o, a block whose full copy is elsewhere, must
// stay as it is because it is a tool result or a call's argument: a tool
// result is only ever an unchanged reference to a copy earlier in the
// request (a fact of its time, never superseded), a call's argument never
// a reference.
func (e *engine) keepTool(o *occ) bool {
	return o.b.kind == kindTool && (o.super || o.later || o.target > o.turn || e.parts[o.tp].val.call)
}

// anchor orders the replacements of one part: a sub-text's by where its
// value starts, others by where they start. Sub-texts of one part do not
// overlap, and no block of a part's own text lies inside a value.
func (e *engine) anchor(o *occ) int {
	if o.tp >= 0 {
		if v := e.parts[o.tp].val; v != nil {
			return v.start
		}
	}
	return o.b.start
}

// srcOf returns where o was found.
func (e *engine) srcOf(o *occ) Source {
	if o.tp < 0 {
		return SourceInlineData
	}
	if v := e.parts[o.tp].val; v != nil {
		return v.src
	}
	return SourceText
}

// textReps returns the references of reps, one part's, that are in text
// q: a part analysed by sub-texts has the references of each.
func textReps(reps []*occ, q int) []*occ {
	for _, r := range reps {
		if r.tp != q {
			out := make([]*occ, 0, len(reps))
			for _, r := range reps {
				if r.tp == q {
					out = append(out, r)
				}
			}
			return out
		}
	}
	return reps
}

// subSizes returns what the replacements reps in sub-texts add to the
// decoded size of the text parts (JSON texts) and to the raw size of the
// other parts (tool results) of the request, and sets the PromptBytes and
// PromptRefBytes of out, their Replacements (e.report(reps)).
func (e *engine) subSizes(reps []*occ, out []Replacement) (text, other int) {
	var offs [2]int
	for i, o := range reps {
		out[i].PromptBytes, out[i].PromptRefBytes = out[i].Bytes, out[i].RefBytes
		if o.tp < 0 || e.parts[o.tp].val == nil {
			continue
		}
		tp := &e.parts[o.tp]
		refLen := len(o.ref)
		if o.refEsc {
			refLen = escapedLen(o.ref)
		}
		offs = [2]int{o.b.start, o.b.end}
		if tp.val.nested {
			e.subOffsets(tp, offs[:])
			text -= offs[1] - offs[0] - refLen
			out[i].PromptBytes, out[i].PromptRefBytes = offs[1]-offs[0], refLen
			continue
		}
		e.rawOf(tp, offs[:])
		other -= offs[1] - offs[0] - refLen
		out[i].PromptBytes, out[i].PromptRefBytes = offs[1]-offs[0], refLen
	}
	return text, other
}

// mayHoldJSONFence reports whether text may hold a fenced JSON block.
func mayHoldJSONFence(text string) bool {
	return strings.Contains(text, "```json") || strings.Contains(text, "~~~json")
}

// hasBox reports whether a block of tp is a box.
func hasBox(tp *textPart) bool {
	for _, b := range tp.blocks {
		if b.box {
			return true
		}
	}
	return false
}

// jsonFence reports whether block b of text is a fence whose info string
// is "json" (a file name may follow).
func jsonFence(text string, b block) bool {
	if b.kind != kindFence || b.name != "" && !strings.HasSuffix(strings.ToLower(b.name), ".json") || b.cstart == 0 || b.blob || b.shell {
		return false
	}
	open := text[:b.cstart-1]
	open = strings.TrimSpace(open[strings.LastIndexByte(open, '\n')+1:])
	info := strings.TrimLeft(open, "`~")
	if len(open)-len(info) < 3 {
		return false
	}
	f, _ := nextField(strings.TrimSpace(info))
	return strings.EqualFold(f, "json")
}

// addFenceTexts makes each fenced JSON block of the text part last added
// to e.parts that holds a string value worth analysing a box, and appends
// the sub-texts of its values.
func (e *engine) addFenceTexts(sr *segReuse, nb *int, maxBlocks int) error {
	k := len(e.parts) - 1
	tp := &e.parts[k]
	if !slices.ContainsFunc(tp.blocks, func(b block) bool { return jsonFence(tp.text, b) }) {
		return nil // most texts: no fence to look at again
	}
	minBytes := max(e.opts.MinBlockBytes, 1)
	b := unsafe.Slice(unsafe.StringData(tp.text), len(tp.text))
	for j := range tp.blocks {
		bl := &tp.blocks[j]
		if !jsonFence(tp.text, *bl) || bl.cend-bl.cstart < minBytes {
			continue
		}
		strs, ok := jsonStrings(b, bl.cstart, bl.cend, minBytes, nil)
		if !ok || len(strs) == 0 {
			continue
		}
		vals, decs, ok := decodeValues(b, strs, span{bl.cstart, bl.cend}, SourceJSONText, minBytes)
		if !ok || len(vals) == 0 {
			continue
		}
		bl.box = true
		turn, part, p, marks := tp.turn, tp.part, tp.p, tp.marks
		for i := range vals {
			v, d := &vals[i], &decs[i]
			ls := lines{text: d.text, nl: d.nl}
			st := e.st
			off := len(st.blocks)
			sr.left = maxBlocks - *nb
			sr.segment(st, ls, e.opts.DocumentTags)
			if len(st.blocks) == off && len(d.text) >= e.opts.MinBlockBytes && docValue(d.text, v.key) {
				st.blocks = append(st.blocks, valueBlock(d.text, kindValue, v.name))
			}
			for len(st.copyOf) < len(st.blocks) {
				st.copyOf = append(st.copyOf, -1)
			}
			sub := textPart{turn: turn, part: part, p: p, text: d.text, marks: marks, lines: ls, blockOff: off, val: v,
				blocks: st.blocks[off:len(st.blocks):len(st.blocks)]}
			if *nb += len(sub.blocks); *nb > maxBlocks {
				return ErrTooComplex
			}
			e.parts = append(e.parts, sub)
		}
		tp = &e.parts[k] // e.parts may have moved
	}
	return nil
}

// soleValue reports whether o is a whole value that is the one block or
// reference of its turn (a payload holding one source): a copy that turn
// holds can then only be o itself, in the input and in the output alike
// (there, o in full, or a reference that is no occurrence), so that its
// member name is evidence even though o is repeated elsewhere.
func (e *engine) soleValue(o *occ) bool {
	return o.b.kind == kindValue && e.alone(o.turn)
}
