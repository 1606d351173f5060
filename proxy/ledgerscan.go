package proxy

import (
	"bytes"
	"encoding/binary"
	"slices"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The ledger lays out the client's body and, when the rewrite changed it,
// the body sent, on every generate request: with encoding/json that was
// 20% of the proxy's CPU at 1 KB and 77% at 1 MB (issue 17). layoutScan
// reads the same members with chunkScanner's primitives, without
// reflection or copies: a text without escapes is laid out where it lies
// in the body.

// ledgerNames are the members of ledgerRequest, in the order layoutScan's
// switch expects; ledgerContentNames those of a content.
var (
	ledgerNames        = []string{"contents", "systemInstruction", "system_instruction", "tools", "toolConfig", "tool_config", "cachedContent", "cached_content"}
	ledgerContentNames = []string{"role", "parts"}
)

// scannedPart is one part of a content as layoutScan read it: its raw
// JSON, and its text when it is a text part (textOnly).
type scannedPart struct {
	raw    []byte
	text   []byte
	isText bool
	// esc reports a text with escapes or invalid UTF-8, which is
	// body[off:end], still escaped, rather than text.
	esc      bool
	off, end int
}

// scannedContent is one content: its role (unescaped) and its parts,
// parts[from:to] of the scan.
type scannedContent struct {
	role     []byte
	from, to int
	// pos and end are where the content's object lies in the body; node
	// is its memo node when layoutScan found it there (role and parts
	// are then the node's).
	pos, end int
	node     *memoNode
	hash     *memoHash
}

// layoutScan is layoutOf without encoding/json. It reports false when the
// body must be decoded by layoutDecoded instead: invalid JSON, a type
// encoding/json would refuse, null where a value is read, a duplicate or
// case-folded member name, an escaped member name where a struct's field
// is matched, deep nesting.
//
// With a memo, it lays out the contents the memo remembers for tenant from
// their node rather than the body, and remembers the others.
func layoutScan(body []byte, model string, memo *layoutMemo, tenant string) (*layout, bool) {
	s := chunkScanner{b: body}
	// scope names the tenant and the contents read so far in the memo;
	// lost reports that a content the memo cannot know came before.
	scope, lost := uint64(0), memo == nil
	if memo != nil {
		scope = memo.root(tenant)
	}
	root := scope
	memoParts := 0
	var raws [6][]byte // the head's members, by ledgerNames index - 1
	var cached [2]bool
	var contents []scannedContent
	var parts []scannedPart
	var seen uint32
	ok := s.object(func(name []byte) bool {
		k := field(name, ledgerNames, &seen)
		switch k {
		case -2:
			return false
		case -1:
			return s.skip()
		case 0:
			if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
				s.i += 4
				return true
			}
			return s.array(func() bool {
				pos := s.i
				if !lost {
					if n, h := memo.find(scope, body, pos); n != nil {
						s.i = pos + len(n.raw)
						contents = append(contents, scannedContent{pos: pos, end: s.i, node: n, hash: h})
						scope = memo.memoScope(scope, n, nil)
						memoParts += len(n.parts)
						return true
					}
				}
				c, ok := s.ledgerContent(&parts)
				c.pos, c.end = pos, s.i
				contents = append(contents, c)
				// A content that failed to scan may leave s.i past the
				// body's end (a truncated body): the scan fails then and
				// the scope is not needed.
				if ok && !lost {
					if c.end-c.pos >= memoWindow {
						lost = true
					} else {
						scope = memo.memoScope(scope, nil, body[c.pos:c.end])
					}
				}
				return ok
			})
		case 6, 7:
			v, ok := s.text()
			cached[k-6] = len(v) > 0
			return ok
		default:
			start := s.i
			if !s.skip() {
				return false
			}
			raws[k-1] = s.b[start:s.i]
			return true
		}
	})
	if !ok {
		return nil, false
	}
	if s.ws(); s.i != len(s.b) {
		return nil, false
	}
	// About one checkpoint per part, content and text chunk: the body's
	// bytes over ledgerChunk bound the chunks.
	b := newLayoutBuilder(cached[0] || cached[1], 2+len(contents)+len(parts)+memoParts+len(body)/ledgerChunk)
	if si, tools, tc := firstRaw(raws[0], raws[1]), raws[2], firstRaw(raws[3], raws[4]); memo != nil {
		memo.layHead(b, root, tenant, model, si, tools, tc)
	} else {
		b.head(model, si, tools, tc)
	}
	var entries []memoEntry
	if memo != nil {
		entries = make([]memoEntry, len(contents))
	}
	for ci, c := range contents {
		if memo == nil {
			b.content(string(c.role))
			if !b.parts(body, parts[c.from:c.to]) {
				return nil, false
			}
			continue
		}
		entry, written, keyed := b.entry(), b.written, b.keyed
		base, escBase, media := len(b.p.sums), len(b.p.esc), b.mediaParts
		entries[ci].node = c.node
		if h := c.hash; h != nil && h.entry == entry && h.written == written && h.keyedBefore == keyed && b.replay(h, body, c.pos) {
			memo.replays.Add(1)
			continue
		}
		pts := parts[c.from:c.to]
		role := string(c.role)
		if n := c.node; n != nil {
			pts, role = n.scanned(body, c.pos), n.role
		}
		b.contentBody(role)
		if !b.parts(body, pts) {
			return nil, false
		}
		if c.node != nil || c.end-c.pos >= memoWindow {
			// Short contents are not remembered (remember).
			entries[ci].hash = b.record(entry, written, keyed, base, escBase, media, body, c.pos)
		}
	}
	p := b.done()
	if memo != nil {
		memo.remember(root, body, contents, parts, entries)
	}
	return p, true
}

// parts lays out the parts of a content.
func (b *layoutBuilder) parts(body []byte, parts []scannedPart) bool {
	for _, pt := range parts {
		switch {
		case pt.esc:
			if !b.textEsc(body, pt.off, pt.end) {
				return false
			}
		case pt.isText:
			b.text(pt.text)
		default:
			b.other(pt.raw)
		}
	}
	return true
}

// scanned returns n's parts as layoutScan read them, n lying at
// body[pos:].
func (n *memoNode) scanned(body []byte, pos int) []scannedPart {
	out := make([]scannedPart, len(n.parts))
	for i, mp := range n.parts {
		pt := scannedPart{raw: body[pos+mp.raw0 : pos+mp.raw1], isText: mp.isText, esc: mp.esc}
		switch {
		case mp.esc:
			pt.off, pt.end = pos+mp.text0, pos+mp.text1
			pt.text = body[pt.off:pt.end]
		case mp.isText && !mp.textNil:
			pt.text = body[pos+mp.text0 : pos+mp.text1]
		}
		out[i] = pt
	}
	return out
}

// ledgerContent reads one content, appending its parts to parts.
func (s *chunkScanner) ledgerContent(parts *[]scannedPart) (scannedContent, bool) {
	c := scannedContent{from: len(*parts)}
	var seen uint32
	ok := s.object(func(name []byte) bool {
		switch field(name, ledgerContentNames, &seen) {
		case -2:
			return false
		case -1:
			return s.skip()
		case 0:
			v, ok := s.text()
			c.role = v
			return ok
		default:
			return s.array(func() bool {
				pt, ok := s.ledgerPart()
				*parts = append(*parts, pt)
				return ok
			})
		}
	})
	c.to = len(*parts)
	return c, ok
}

// ledgerPart reads one part: its raw JSON and whether it is a text part
// as textOnly says (an object whose only member name, unescaped, is text,
// with a string or null value; for a name given more than once the last
// value counts, as in a map).
func (s *chunkScanner) ledgerPart() (scannedPart, bool) {
	start := s.i
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		ok := s.skip()
		return scannedPart{raw: s.b[start:s.i]}, ok
	}
	s.i++
	if s.depth++; s.depth > maxScanDepth {
		return scannedPart{}, false
	}
	onlyText, sawText := true, false
	var text []byte
	textOK, textEsc, textOff := false, false, 0
	// pending is where the last text value with escapes starts, which
	// textEsc validates only when it is the part's text; -1 for none.
	pending := -1
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			if s.peek() != '"' {
				return scannedPart{}, false
			}
			nameStart := s.i + 1
			esc, ok := s.str()
			if !ok {
				return scannedPart{}, false
			}
			name := s.b[nameStart : s.i-1]
			isText := string(name) == "text"
			if esc {
				var buf [8]byte
				isText = string(appendUnquoted(buf[:0], name)) == "text"
			}
			if s.peek() != ':' {
				return scannedPart{}, false
			}
			s.i++
			s.ws()
			switch {
			case !isText:
				onlyText = false
				if !s.skip() {
					return scannedPart{}, false
				}
			case s.i < len(s.b) && s.b[s.i] == '"':
				sawText = true
				if !s.validPending(&pending) {
					return scannedPart{}, false
				}
				off := s.i + 1
				esc, ok := s.ledgerText()
				if !ok {
					return scannedPart{}, false
				}
				if esc {
					pending = off
				}
				text, textOK = s.b[off:s.i-1], true
				textEsc, textOff = esc, off
			case bytes.HasPrefix(s.b[s.i:], []byte("null")):
				sawText = true
				s.i += 4
				text, textOK, textEsc = nil, true, false
			default:
				sawText = true
				if !s.skip() {
					return scannedPart{}, false
				}
				text, textOK = nil, false
			}
			c := s.peek()
			s.i++
			if c == '}' {
				break
			}
			if c != ',' {
				return scannedPart{}, false
			}
		}
	}
	s.depth--
	p := scannedPart{raw: s.b[start:s.i]}
	if onlyText && sawText && textOK {
		p.text, p.isText = text, true
		if textEsc {
			p.esc, p.off, p.end = true, textOff, textOff+len(text)
		}
		if textEsc && pending == textOff {
			pending = -1
		}
	}
	if !s.validPending(&pending) {
		return scannedPart{}, false
	}
	return p, true
}

// validPending validates the string whose inside starts at *pending (a
// text value ledgerText did not validate) unless it is -1, and clears it.
func (s *chunkScanner) validPending(pending *int) bool {
	if *pending < 0 {
		return true
	}
	v := chunkScanner{b: s.b, i: *pending - 1}
	*pending = -1
	_, ok := v.str()
	return ok
}

// escChunk is a text chunk of an escaped text, which the layout unescapes
// from its body only when it is read (layout.text): body[off:end] is the
// rest of the string's content from the escape or rune that the chunk's
// first byte comes from, skip the bytes of it that end the chunk before,
// n the chunk's length.
type escChunk struct {
	i, off, end, skip, n int
}

// unquoteStep appends to b what s[r:], the inside of a valid JSON string
// literal, unescapes to next, as appendUnquoted does: a run of ASCII
// without escapes (at most room bytes of it), or one escape, escaped
// surrogate pair or rune. It returns b and the index after what it read.
func unquoteStep(b, s []byte, r, room int) ([]byte, int) {
	if j := min(asciiRun(s, r), r+max(room, 1)); j > r {
		return append(b, s[r:j]...), j
	}
	if s[r] != '\\' {
		rr, size := utf8.DecodeRune(s[r:])
		if rr == utf8.RuneError && size == 1 {
			return utf8.AppendRune(b, rr), r + 1
		}
		return append(b, s[r:r+size]...), r + size
	}
	// One escape: appendUnquoted on it alone unescapes it as on the whole
	// string, a pair of escaped surrogates included.
	n := 2
	if s[r+1] == 'u' {
		n = 6
		if rr := hex4(s[r+2 : r+6]); utf16.IsSurrogate(rr) && r+12 <= len(s) && s[r+6] == '\\' && s[r+7] == 'u' {
			if utf16.DecodeRune(rr, hex4(s[r+8:r+12])) != unicode.ReplacementChar {
				n = 12
			}
		}
	}
	return appendUnquoted(b, s[r:r+n]), r + n
}

// ledgerText skips the string value at s.i, a text part's text, which
// textEsc validates as it unescapes when esc reports escapes or invalid
// UTF-8: it finds the closing quote (bytes.IndexByte, past quotes an odd
// run of backslashes escapes) and checks a text without escapes for
// control bytes, so the body's largest strings are read once by the
// scanner rather than twice.
func (s *chunkScanner) ledgerText() (esc, ok bool) {
	start := s.i + 1
	for i := start; ; {
		k := bytes.IndexByte(s.b[i:], '"')
		if k < 0 {
			return false, false
		}
		q := i + k
		n := 0
		for q-1-n >= start && s.b[q-1-n] == '\\' {
			n++
		}
		if n%2 == 1 {
			i = q + 1
			continue
		}
		text := s.b[start:q]
		s.i = q + 1
		if bytes.IndexByte(text, '\\') >= 0 {
			return true, true
		}
		if hasControl(text) {
			return false, false
		}
		return !utf8.Valid(text), true
	}
}

// hasControl reports whether b holds a byte below ' ', eight bytes at a
// time.
func hasControl(b []byte) bool {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if hasLess(binary.LittleEndian.Uint64(b[i:]), ' ') {
			return true
		}
	}
	for ; i < len(b); i++ {
		if b[i] < ' ' {
			return true
		}
	}
	return false
}

// escRun marks the bytes textEsc copies as they are: printable ASCII but
// the backslash (a quote cannot occur unescaped between ledgerText's
// quotes).
var escRun = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '\\' && c != '"'
	}
	return t
}()

// textEsc is text for an escaped text, body[off:end] the inside of its
// string literal (ledgerText): it unescapes the chunks into a buffer of
// one chunk, as appendUnquoted does, and hashes them, and keeps where
// each starts (escChunk) instead of the chunk. It validates what
// ledgerText did not (escapes, control bytes) and reports false for an
// invalid string. Runs without escapes are found eight bytes at a time
// and copied at once; an escape is decoded in place.
func (b *layoutBuilder) textEsc(body []byte, off, end int) bool {
	p := b.p
	p.body = body
	lead := textLeads[1:]
	if b.afterText {
		lead = textLeads[:]
	}
	var buf [ledgerChunk + 2*utf8.UTFMax]byte
	n := 0
	s := body[:end]
	start, skip := off, 0 // where the pending chunk's first byte comes from
	// tok and before are where the last escape or rune began and the
	// buffer's length then: only such a step ends past a chunk.
	tok, before := off, 0
	for r := off; ; {
		for n < ledgerChunk && r < end {
			c := s[r]
			if escRun[c] {
				j, lim := r+1, min(end, r+ledgerChunk-n)
				for j+8 <= lim {
					if x := binary.LittleEndian.Uint64(s[j:]); x&msb != 0 || hasByte(x, '\\') || hasByte(x, '"') || hasLess(x, ' ') {
						break
					}
					j += 8
				}
				for j < lim && escRun[s[j]] {
					j++
				}
				n += copy(buf[n:], s[r:j])
				r = j
				continue
			}
			tok, before = r, n
			switch {
			case c == '\\':
				if r+1 >= end {
					return false
				}
				switch e := s[r+1]; e {
				case '"', '\\', '/':
					buf[n] = e
				case 'b':
					buf[n] = '\b'
				case 'f':
					buf[n] = '\f'
				case 'n':
					buf[n] = '\n'
				case 'r':
					buf[n] = '\r'
				case 't':
					buf[n] = '\t'
				case 'u':
					if r+6 > end || !hex4Valid(s[r+2:r+6]) {
						return false
					}
					rr := hex4(s[r+2 : r+6])
					r += 6
					if utf16.IsSurrogate(rr) {
						rr1 := rune(-1)
						if r+6 <= end && s[r] == '\\' && s[r+1] == 'u' && hex4Valid(s[r+2:r+6]) {
							rr1 = hex4(s[r+2 : r+6])
						}
						if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
							r += 6
							n += utf8.EncodeRune(buf[n:], dec)
							continue
						}
						rr = unicode.ReplacementChar
					}
					n += utf8.EncodeRune(buf[n:], rr)
					continue
				default:
					return false
				}
				n++
				r += 2
			case c < ' ' || c == '"':
				return false
			default:
				rr, size := utf8.DecodeRune(s[r:])
				if rr == utf8.RuneError && size == 1 {
					n += utf8.EncodeRune(buf[n:], rr)
				} else {
					n += copy(buf[n:], s[r:r+size])
				}
				r += size
			}
		}
		k := min(n, ledgerChunk)
		b.mark(2)
		b.write(buf[:k])
		p.esc = append(p.esc, escChunk{i: len(p.sums), off: start, end: end, skip: skip, n: k})
		b.check(k, 0, nil, lead)
		lead = textLeads[1:]
		rest := copy(buf[:], buf[k:n])
		n = rest
		if rest > 0 {
			// The last step's bytes go on into the next chunk.
			start, skip = tok, k-before
		} else {
			start, skip = r, 0
		}
		if r >= end && rest == 0 {
			break
		}
	}
	b.mark(3)
	b.afterText = true
	return true
}

// hex4Valid reports whether h is four hex digits.
func hex4Valid(h []byte) bool {
	return isHex(h[0]) && isHex(h[1]) && isHex(h[2]) && isHex(h[3])
}

// text returns the text of checkpoint i: texts[i], or an escaped text's
// chunk unescaped from the body.
func (p *layout) text(i int) string {
	k, ok := slices.BinarySearchFunc(p.esc, i, func(e escChunk, i int) int { return e.i - i })
	if !ok {
		return p.texts[i]
	}
	e := p.esc[k]
	out := make([]byte, 0, e.skip+e.n+utf8.UTFMax)
	for r := e.off; len(out) < e.skip+e.n; {
		out, r = unquoteStep(out, p.body[:e.end], r, e.skip+e.n-len(out))
	}
	return string(out[e.skip : e.skip+e.n])
}
