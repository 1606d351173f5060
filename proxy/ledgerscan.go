package proxy

import (
	"bytes"
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
}

// layoutScan is layoutOf without encoding/json. It reports false when the
// body must be decoded by layoutDecoded instead: invalid JSON, a type
// encoding/json would refuse, null where a value is read, a duplicate or
// case-folded member name, an escaped member name where a struct's field
// is matched, deep nesting.
func layoutScan(body []byte, model string) (*layout, bool) {
	s := chunkScanner{b: body}
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
				c, ok := s.ledgerContent(&parts)
				contents = append(contents, c)
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
	b := newLayoutBuilder(cached[0] || cached[1], 2+len(contents)+len(parts)+len(body)/ledgerChunk)
	b.head(model, firstRaw(raws[0], raws[1]), raws[2], firstRaw(raws[3], raws[4]))
	for _, c := range contents {
		b.content(string(c.role))
		for _, pt := range parts[c.from:c.to] {
			switch {
			case pt.esc:
				b.textEsc(body, pt.off, pt.end)
			case pt.isText:
				b.text(pt.text)
			default:
				b.other(pt.raw)
			}
		}
	}
	return b.done(), true
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
				off := s.i + 1
				esc, ok := s.str()
				if !ok {
					return scannedPart{}, false
				}
				text, textOK = s.b[off:s.i-1], true
				textEsc, textOff = esc || !utf8.Valid(text), off
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
	}
	return p, true
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

// textEsc is text for an escaped text, body[off:end] the inside of its
// string literal: it unescapes and hashes the chunks through a buffer of
// one chunk, and keeps where each starts (escChunk) instead of the chunk.
func (b *layoutBuilder) textEsc(body []byte, off, end int) {
	p := b.p
	p.body = body
	lead := textLeads[1:]
	if b.afterText {
		lead = textLeads[:]
	}
	var buf [ledgerChunk + 2*utf8.UTFMax]byte
	out := buf[:0]
	s := body[:end]
	start, skip := off, 0 // where the pending chunk's first byte comes from
	for r := off; ; {
		tok, before := r, len(out)
		if r < end {
			out, r = unquoteStep(out, s, r, ledgerChunk-len(out))
			if len(out) < ledgerChunk {
				continue
			}
		}
		n := min(len(out), ledgerChunk)
		b.mark(2)
		b.write(out[:n])
		p.esc = append(p.esc, escChunk{i: len(p.sums), off: start, end: end, skip: skip, n: n})
		b.check(n, 0, nil, lead)
		lead = textLeads[1:]
		rest := copy(out, out[n:])
		out = out[:rest]
		if rest > 0 {
			// The last step's bytes go on into the next chunk.
			start, skip = tok, n-before
		} else {
			start, skip = r, 0
		}
		if r >= end && rest == 0 {
			break
		}
	}
	b.mark(3)
	b.afterText = true
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
