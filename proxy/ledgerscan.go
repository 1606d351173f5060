package proxy

import (
	"bytes"
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
			if pt.isText {
				b.text(pt.text)
			} else {
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
	textOK := false
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
				v, ok := s.ledgerText()
				if !ok {
					return scannedPart{}, false
				}
				text, textOK = v, true
			case bytes.HasPrefix(s.b[s.i:], []byte("null")):
				sawText = true
				s.i += 4
				text, textOK = nil, true
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
	}
	return p, true
}

// ledgerText is chunkScanner.text for the texts of a layout, which keeps
// them: the first escaped text makes room in the scratch buffer for the
// rest of the body, which bounds what is left to unescape but for invalid
// UTF-8 (three bytes for one), so that the buffer is not regrown and
// copied for every text part.
func (s *chunkScanner) ledgerText() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i
	esc, ok := s.str()
	if !ok {
		return nil, false
	}
	raw := s.b[start+1 : s.i-1]
	if !esc && utf8.Valid(raw) {
		return raw, true
	}
	if cap(s.scratch)-len(s.scratch) < len(raw) {
		// Earlier texts keep the old buffer.
		s.scratch = make([]byte, 0, max(len(s.b)-start, 2*len(raw)))
	}
	from := len(s.scratch)
	s.scratch = appendUnquoted(s.scratch, raw)
	return s.scratch[from:len(s.scratch):len(s.scratch)], true
}
