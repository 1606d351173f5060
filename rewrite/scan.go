package rewrite

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"slices"
	"sort"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// ErrUnsupported is returned for a well-formed request whose shape the
// rewriter does not handle (for example a duplicated "contents" key); the
// caller forwards the original body.
var ErrUnsupported = errors.New("rewrite: unsupported request shape")

// maxDepth bounds JSON nesting so that hostile input cannot exhaust the stack.
const maxDepth = 1000

// span is a half-open byte range [start, end) of the request body.
type span struct{ start, end int }

// partKind says what the rewriter may do with a part.
type partKind uint8

const (
	partOther  partKind = iota // never analysed, copied verbatim
	partText                   // a text part whose string may be edited
	partInline                 // an inlineData-only part that may become a reference
)

// part is one element of contents[i].parts as located by scan.
type part struct {
	kind partKind
	obj  span // the whole part object, braces included
	str  span // text: the string's contents without quotes; inline: the data string
	esc  bool // the string contains a backslash escape
	mime string
	dec  decoded // text: the decoded string, its lines and marks
	// lazy: the text was validated and measured but not decoded yet
	// (scanner.small).
	lazy bool
	// media: the part holds inline or file data, whose tokens do not
	// follow from its bytes.
	media bool
	// fr is the functionResponse value of a part with no other member
	// (a tool result, jsontext.go), or with call the functionCall value of
	// a part with no other member but a thought signature; zero otherwise.
	fr   span
	call bool
}

// content is one element of contents as located by scan.
type content struct {
	obj   span
	role  string // "" when the role is omitted
	parts []part
	extra bool // members other than role and parts
	// pOff and pEnd locate parts in the scanner's parts while scanning.
	pOff, pEnd int
}

// request is the result of scanning a generateContent body.
type request struct {
	contents []content
	// genConfig is the raw generationConfig (or generation_config) value, if any.
	genConfig span
	// otherBytes is the raw size of the prompt outside contents: the
	// systemInstruction, tools and toolConfig values.
	otherBytes int
	// cached: the request refers to a cachedContent.
	cached bool
	// small: every text is shorter than the scan's small limit and no part
	// is an analysable inlineData part, so nothing can be replaced; the
	// texts are then validated and measured but not decoded.
	small bool
}

// scanner is a validating, allocation-light JSON reader over one body.
type scanner struct {
	b   []byte
	pos int
	// arena holds every decoded text, back to back; it is grown once to the
	// body's size (decoding never grows a text), so it never moves, and
	// each part's text is a substring of it.
	arena []byte
	n     int // bytes used in arena
	// nls holds the line ends of every decoded text, back to back.
	nls []int32
	// marks holds the marks of every decoded text, back to back.
	marks []mark
	// parts holds the parts of every content, back to back.
	parts []part
	st    *state // buffers to reuse, or nil
	// small is the raw size below which a text is only validated and
	// measured while scanning (decoded afterwards unless the request is
	// small); 0 decodes every text at once. eager is set at the first text
	// of at least small bytes or inlineData part: from then on texts are
	// decoded as they are read.
	small int
	eager bool
	// recent holds the last texts decoded, newest at recent[(nrecent-1)%len],
	// whose decoded prefixes a later text that starts with the same raw
	// bytes copies instead of decoding again (see resume).
	recent  [4]recentText
	nrecent int
	// at finds, at a line start inside a text, a text decoded earlier
	// whose raw bytes are the same from one of its line starts (copyAt);
	// nil decodes every text from its start or resume point.
	at *anchors
	// lim bounds the parts and line ends the scan may record.
	lim limits
	// plainTo, when past the opening quote at pos, ends the run of
	// ordinary bytes (no '"', '\\' or control byte) that shortText found
	// at the start of the string at pos before giving up on it: textStr
	// copies them instead of decoding them again.
	plainTo int
}

// limits is Options.MaxParts and Options.MaxLines (0: no limit).
type limits struct{ parts, lines int }

func limitsOf(o *Options) limits { return limits{o.MaxParts, o.MaxLines} }

// over reports whether the scan has recorded more parts or line ends than
// its limits allow. It is checked after every part (textStr also checks
// the line ends as it records them), so what the scan records stays
// within one part of the limits.
func (s *scanner) over() bool {
	return (s.lim.parts > 0 && len(s.parts) > s.lim.parts) || (s.lim.lines > 0 && len(s.nls) > s.lim.lines)
}

// recentText is a text decoded earlier in the same body.
type recentText struct {
	raw span // its raw string contents
	d   decoded
}

var errSyntax = ErrInvalidJSON

// scan validates body as one JSON object and locates the parts of contents.
func scan(body []byte) (*request, error) {
	return scanWith(body, &state{}, 0, limits{})
}

// scanWith is scan with the arena and line ends of st, which the returned
// request's texts then view: st must not be reused while they are in use.
//
// When small > 0 and every text is shorter than small raw bytes (and no
// part is an analysable inlineData part), the request is small: its texts
// are validated and measured (decoded.size) but left undecoded, because a
// request without a text as long as the smallest replaceable block is
// never changed (issue 3: per-part cost at small bodies).
func scanWith(body []byte, st *state, small int, lim limits) (*request, error) {
	s := &scanner{b: body, st: st, parts: st.parts[:0], small: small, lim: lim}
	// Always emptied: a pooled state keeps the last body's anchors and
	// copies, and analyse hands st.at.copies to segIndex.known, which
	// must never see copies of another body (TestStaleScanCopies).
	st.at.reset()
	if small > 0 {
		// Request's path (small is MinBlockBytes); its exhaustive path
		// for tests (small 0) decodes every text in full.
		s.at = &st.at
	}
	req := &request{contents: st.contents[:0]}
	s.ws()
	if s.pos >= len(s.b) || s.b[s.pos] != '{' {
		return nil, ErrInvalidJSON
	}
	seen := 0
	err := s.object(1, func(key string) error {
		switch key {
		case "contents":
			seen++
			if seen > 1 {
				return ErrUnsupported
			}
			return s.contents(req)
		case "generationConfig", "generation_config":
			start := s.pos
			if err := s.value(1); err != nil {
				return err
			}
			req.genConfig = span{start, s.pos}
			return nil
		case "systemInstruction", "system_instruction", "tools", "toolConfig", "tool_config":
			start := s.pos
			err := s.value(1)
			req.otherBytes += s.pos - start
			return err
		case "cachedContent", "cached_content":
			req.cached = true
		}
		return s.value(1)
	})
	if err != nil {
		return nil, err
	}
	s.ws()
	if s.pos != len(s.b) {
		return nil, ErrInvalidJSON
	}
	if seen == 0 {
		return nil, ErrNoContents
	}
	req.small = small > 0 && !s.eager
	if !req.small {
		// Decode the texts read before the first long one.
		for i := range s.parts {
			if p := &s.parts[i]; p.lazy {
				s.pos = p.str.start - 1
				_, _, d, err := s.textStr()
				if err != nil {
					return nil, err
				}
				p.dec, p.lazy = d, false
				if s.over() {
					return nil, ErrTooComplex
				}
			}
		}
	}
	st.parts, st.contents = s.parts, req.contents
	if s.arena != nil {
		st.arena, st.nls, st.marks = s.arena, s.nls, s.marks
	}
	// The arena is never written again: share it rather than copy it.
	all := unsafe.String(unsafe.SliceData(s.arena), s.n)
	for i := range req.contents {
		c := &req.contents[i]
		c.parts = s.parts[c.pOff:c.pEnd:c.pEnd]
		for j := range req.contents[i].parts {
			if d := &req.contents[i].parts[j].dec; d.nlEnd > 0 {
				d.nl = s.nls[d.nlOff:d.nlEnd:d.nlEnd]
				d.marks = s.marks[d.markOff:d.markEnd:d.markEnd]
				d.text = all[d.off : d.off+int(d.nl[len(d.nl)-1])]
			}
		}
	}
	return req, nil
}

func (s *scanner) ws() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// object reads an object at s.pos, calling member for each key with s.pos at
// the start of the member's value; member must consume the value.
func (s *scanner) object(depth int, member func(key string) error) error {
	if depth > maxDepth {
		return ErrUnsupported
	}
	s.pos++ // '{'
	s.ws()
	if s.pos < len(s.b) && s.b[s.pos] == '}' {
		s.pos++
		return nil
	}
	for {
		s.ws()
		if s.pos >= len(s.b) || s.b[s.pos] != '"' {
			return errSyntax
		}
		sp, esc, err := s.str()
		if err != nil {
			return err
		}
		// Keys are only compared, never kept: view the body's bytes.
		key := unsafe.String(unsafe.SliceData(s.b[sp.start:sp.end]), sp.end-sp.start)
		if esc {
			key = unescape(s.b[sp.start:sp.end])
		}
		s.ws()
		if s.pos >= len(s.b) || s.b[s.pos] != ':' {
			return errSyntax
		}
		s.pos++
		s.ws()
		if err := member(key); err != nil {
			return err
		}
		s.ws()
		if s.pos >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

// array reads an array at s.pos, calling elem with s.pos at each element.
func (s *scanner) array(depth int, elem func() error) error {
	if depth > maxDepth {
		return ErrUnsupported
	}
	s.pos++ // '['
	s.ws()
	if s.pos < len(s.b) && s.b[s.pos] == ']' {
		s.pos++
		return nil
	}
	for {
		s.ws()
		if err := elem(); err != nil {
			return err
		}
		s.ws()
		if s.pos >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

// str reads a string at s.pos and returns the span of its contents (without
// quotes) and whether it contains escapes.
func (s *scanner) str() (span, bool, error) {
	s.pos++ // '"'
	start := s.pos
	esc := false
	b := s.b
	for i := s.pos; i < len(b); {
		i = skipPlain(b, i)
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++ // the last few bytes of b
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return span{start, i}, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return span{}, false, errSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return span{}, false, errSyntax
				}
				for _, h := range b[i+2 : i+6] {
					if hexVal(h) < 0 {
						return span{}, false, errSyntax
					}
				}
				i += 6
			default:
				return span{}, false, errSyntax
			}
		case c < 0x20:
			return span{}, false, errSyntax
		default:
			i++
		}
	}
	return span{}, false, errSyntax
}

// shortText is str for a text string that may be shorter than s.small raw
// bytes: it validates the string as textStr would and returns its decoded
// size without decoding it. When the string is not closed within s.small
// bytes it reports !ok and leaves s.pos at the opening quote.
func (s *scanner) shortText() (sp span, esc bool, size int, ok bool, err error) {
	open := s.pos
	start := open + 1
	b := s.b
	limit := min(len(b), start+s.small)
	shrink := 0 // raw bytes minus decoded bytes so far
	for i := start; i < limit; {
		i = skipPlain(b[:limit], i)
		for i < limit && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i++ // the last few bytes before limit
		}
		if i >= limit {
			break
		}
		switch c := b[i]; {
		case c == '"':
			s.pos = i + 1
			return span{start, i}, esc, i - start - shrink, true, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return span{}, false, 0, false, errSyntax
			}
			if escByte[b[i+1]] != 0 {
				shrink++
				i += 2
				continue
			}
			// The checks and the decoding of textStr, so that both accept
			// the same strings and agree on the size.
			if b[i+1] != 'u' || i+6 > len(b) {
				return span{}, false, 0, false, errSyntax
			}
			for _, h := range b[i+2 : i+6] {
				if hexVal(h) < 0 {
					return span{}, false, 0, false, errSyntax
				}
			}
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				for _, h := range b[i+8 : i+12] {
					if hexVal(h) < 0 {
						return span{}, false, 0, false, errSyntax
					}
				}
			}
			r, k := decodeEscape(b[i:])
			shrink += k - utf8.RuneLen(r)
			i += k
		case c < 0x20:
			return span{}, false, 0, false, errSyntax
		default:
			i++
		}
	}
	s.pos = open
	if !esc && (s.st == nil || !s.st.noPlainHint) {
		// Every byte before limit is ordinary: a '"' would have closed
		// the string, a control byte failed it, a '\\' set esc. The
		// run goes on to the first byte that is not (or to one of the
		// body's last seven), which textStr copies rather than decodes.
		s.plainTo = skipPlain(b, limit)
	}
	return span{}, false, 0, false, nil
}

// textStr is str for a text string the engine analyses: it decodes the
// string in the same pass into the arena, recording its line breaks and,
// for strings with escapes, marks for rawOffsets.
func (s *scanner) textStr() (span, bool, decoded, error) {
	s.pos++ // '"'
	start := s.pos
	b := s.b
	if s.arena == nil {
		s.grow()
	}
	out, n, nls := s.arena, s.n, s.nls
	d := decoded{off: n, nlOff: len(nls), markOff: len(s.marks)}
	next := markEvery
	i := start
	// Options.MaxLines, checked at every line end: one text of short
	// lines may hold millions of them.
	maxNL := math.MaxInt
	if s.lim.lines > 0 {
		maxNL = s.lim.lines
	}
	if m, c, ok := s.resume(start); ok {
		// The raw bytes up to mark m are those of the earlier text c, and
		// the decoder's state at a mark depends on nothing else: take its
		// decoded bytes, line ends and marks instead of decoding them.
		nls = s.take(out, n, nls, &c, mark{}, m, 0, 0)
		if len(nls) > maxNL {
			return span{}, false, d, ErrTooComplex
		}
		n += int(m.u)
		i += int(m.r)
		next = int(m.u) + markEvery
	} else if s.at != nil {
		if c, a, m, ok := s.at.copyAt(s, start, start, 0); ok {
			nls = s.take(out, n, nls, c, a, m, 0, 0)
			if len(nls) > maxNL {
				return span{}, false, d, ErrTooComplex
			}
			n += int(m.u - a.u)
			i += int(m.r - a.r)
			next = n - d.off + markEvery
		}
	}
	if i == start && s.plainTo > start {
		// shortText read these bytes and found them ordinary: what the
		// loop below would do with them is copy them (no line end, no
		// mark, no anchor: those follow escapes).
		n += copy(out[n:], b[start:s.plainTo])
		i = s.plainTo
	}
	s.plainTo = 0
	t := textRun{b: b, out: out, nls: nls, i: i, n: n, off: d.off, mark: d.off + next, maxNL: maxNL, anchored: s.at != nil}
	for {
		// The run of ordinary bytes and one-byte escapes, which is almost
		// all of real text, in a loop of its own (few live values: in
		// this function's loop they were spilled at every escape).
		stop := t.run()
		i, n, nls = t.i, t.n, t.nls
		if stop == stopGrow {
			t.nls = slices.Grow(nls, 1)
			continue
		}
		if len(nls) > maxNL {
			return span{}, false, d, ErrTooComplex
		}
		if stop&stopMark != 0 {
			u := n - d.off
			s.marks = append(s.marks, mark{int32(u), int32(i - start)})
			next = u + markEvery
			t.mark = d.off + next
		}
		if i >= len(b) {
			return span{}, false, d, errSyntax
		}
		if stop&stopAnchor != 0 {
			// A line that may start a re-sent block (a fence, a tag):
			// when an earlier text has the same raw bytes from one of
			// its line starts, take its decoded bytes up to its last
			// mark inside them.
			if c, a, m, ok := s.at.copyAt(s, start, i, int32(n-d.off)); ok {
				if nls = s.take(out, n, nls, c, a, m, int32(n-d.off), int32(i-start)); len(nls) > maxNL {
					return span{}, false, d, ErrTooComplex
				}
				n += int(m.u - a.u)
				i += int(m.r - a.r)
				next = n - d.off + markEvery
				t.i, t.n, t.nls, t.mark = i, n, nls, d.off+next
				continue
			}
		}
		if stop&stopOther == 0 {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			s.pos = i + 1
			s.n = n
			d.size = n - d.off
			s.nls = append(nls, int32(n-d.off))
			d.nlEnd = len(s.nls)
			d.markEnd = len(s.marks)
			if d.markEnd > d.markOff {
				s.recent[s.nrecent%len(s.recent)] = recentText{raw: span{start, i}, d: d}
				s.nrecent++
				if s.at != nil {
					s.at.done(recentText{raw: span{start, i}, d: d})
				}
			} else if s.at != nil {
				s.at.done(recentText{raw: span{start, i}, d: d}) // no mark: never a source
			}
			// Every escape decodes to fewer bytes than it takes, every
			// other byte to itself (and a text copied by take holds an
			// escape before the mark it was copied up to).
			return span{start, i}, i-start != d.size, d, nil
		case c == '\\':
			if i+1 >= len(b) {
				return span{}, false, d, errSyntax
			}
			if b[i+1] != 'u' { // run stops at no other one-byte escape
				return span{}, false, d, errSyntax
			}
			if i+6 > len(b) {
				return span{}, false, d, errSyntax
			}
			for _, h := range b[i+2 : i+6] {
				if hexVal(h) < 0 {
					return span{}, false, d, errSyntax
				}
			}
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				for _, h := range b[i+8 : i+12] {
					if hexVal(h) < 0 {
						return span{}, false, d, errSyntax
					}
				}
			}
			r, k := decodeEscape(b[i:])
			if r == '\n' { // "\u000a" ends a line as "\n" does
				if nls = append(nls, int32(n-d.off)); len(nls) > maxNL {
					return span{}, false, d, ErrTooComplex
				}
			}
			n += utf8.EncodeRune(out[n:], r)
			i += k
			if u := n - d.off; u >= next {
				s.marks = append(s.marks, mark{int32(u), int32(i - start)})
				next = u + markEvery
			}
			t.i, t.n, t.nls, t.mark = i, n, nls, d.off+next
		default: // a control byte
			return span{}, false, d, errSyntax
		}
	}
}

// textRun is the state of textStr's decoding loop that run keeps in
// registers: the body b from i, the arena out from n, the line ends nls
// (decoded offsets from off), the arena offset mark at which a mark is
// due and the most line ends allowed.
type textRun struct {
	b, out      []byte
	nls         []int32
	i, n, off   int
	mark, maxNL int
	anchored    bool
}

// What stopped textRun.run: a mark is due (after an escape that brought
// the arena offset to mark or past it), a "\n" escape is followed by an
// anchor byte (anchorByte, when anchored), or anything but an ordinary
// byte or a one-byte escape is next (the closing quote, a "\u" escape, a
// bad escape or a control byte), or the body ended, or more than maxNL
// line ends were recorded; or nls is full before a "\n" escape. The first
// two may come together.
const (
	stopMark = 1 << iota
	stopAnchor
	stopOther
	stopGrow // alone: t.nls is full before a "\n" escape
)

// run decodes from t.i into t.out at t.n ordinary bytes and one-byte
// escapes, recording line ends, until something stops it (stop* bits).
// Ordinary bytes are copied eight at a time, stopping at the first '"',
// '\\' or control byte (bytes stored past it are overwritten later). The
// arena offset never passes the body offset (decoding never grows a
// string), so eight-byte stores at n stay inside the arena whenever the
// eight-byte load at i stays inside the body; words are read and written
// through pointers, the loop condition checking the bounds of both, as in
// skipPlain.
func (t *textRun) run() (stop int) {
	b, out, nls, i, n := t.b, t.out, t.nls, t.i, t.n
	bp, op := unsafe.Pointer(unsafe.SliceData(b)), unsafe.Pointer(unsafe.SliceData(out))
	for {
		for end := min(len(b)-i, len(out)-n) - 8; end >= 0; end -= 8 {
			w := binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(bp, i))[:])
			binary.LittleEndian.PutUint64((*[8]byte)(unsafe.Add(op, n))[:], w)
			if m := special(w); m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				i += k
				n += k
				goto special
			}
			i += 8
			n += 8
		}
		for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			out[n] = b[i]
			n++
			i++
		}
		if i >= len(b) {
			stop = stopOther
			break
		}
	special:
		// Runs of one-byte escapes ("\n\t\t", "\\\"") without a trip
		// through the word loop.
		for b[i] == '\\' && i+1 < len(b) {
			v := escByte[b[i+1]]
			if v == 0 {
				break
			}
			if v == '\n' {
				if len(nls) == cap(nls) {
					// No call in this loop: the caller grows nls.
					stop = stopGrow
					goto done
				}
				if nls = append(nls, int32(n-t.off)); len(nls) > t.maxNL {
					stop = stopOther
					goto done
				}
			}
			out[n] = v
			n++
			i += 2
			if n >= t.mark {
				stop = stopMark
			}
			if i >= len(b) {
				stop |= stopOther
				goto done
			}
			if v == '\n' && t.anchored && anchorByte[b[i]] {
				stop |= stopAnchor
			}
			if stop != 0 {
				goto done
			}
		}
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			stop = stopOther
			break
		}
	}
done:
	t.nls, t.i, t.n = nls, i, n
	return stop
}

// skipPlain returns the position of the first '"', '\\' or control byte
// of b from i, or of one of its last seven bytes. It reads words through
// pointers, its loop condition checking each word's bounds: slicing b[i:]
// for each word made the loop half as long again (issue 3). It scans keys,
// short texts and inlineData strings (megabytes of base64).
func skipPlain(b []byte, i int) int {
	bp := unsafe.Pointer(unsafe.SliceData(b))
	// Two words a step while neither holds one (a text's run is mostly
	// longer than 16 bytes): one test and one bound check for both.
	for i+16 <= len(b) {
		w0 := binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(bp, i))[:])
		w1 := binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(bp, i+8))[:])
		if special(w0)|special(w1) != 0 {
			break
		}
		i += 16
	}
	for i+8 <= len(b) {
		if m := special(binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(bp, i))[:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	return i
}

// resume finds, among the recent texts, the one that shares the longest
// raw prefix with the string whose contents start at start, and returns its
// last mark inside that prefix. The prefix must extend past the mark by
// the longest look-ahead of an escape (a surrogate pair), so that decoding
// up to the mark cannot depend on the bytes after it.
func (s *scanner) resume(start int) (mark, decoded, bool) {
	var best mark
	var bestText decoded
	found := false
	cur := s.b[start:]
	// Newest first; once a prefix is found, an older text is compared only
	// when it could give a mark an eighth further on, and only when its
	// bytes just past that mark match, which rejects most texts in a few
	// bytes instead of a whole comparison.
	for j := range min(s.nrecent, len(s.recent)) {
		c := &s.recent[(s.nrecent-1-j)%len(s.recent)]
		old := s.b[c.raw.start:c.raw.end]
		marks := s.marks[c.d.markOff:c.d.markEnd]
		if found {
			want := best.u + best.u/8
			k, _ := slices.BinarySearchFunc(marks, want, func(x mark, u int32) int { return cmp.Compare(x.u, u+1) })
			if k == len(marks) {
				continue
			}
			if e := int(marks[k].r) + lookAhead; e > len(old) || e > len(cur) || !bytes.Equal(cur[e-lookAhead:e], old[e-lookAhead:e]) {
				continue
			}
		}
		l := commonPrefix(cur, old)
		// The last mark with r+lookAhead <= l.
		lo, hi := 0, len(marks)
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if int(marks[m].r)+lookAhead <= l {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo > 0 && (!found || marks[lo-1].u > best.u) {
			best, bestText, found = marks[lo-1], c.d, true
		}
	}
	return best, bestText, found
}

// lookAhead is the longest look-ahead of an escape (a surrogate pair,
// "\ud83d\ude00"): decoding a string up to a character boundary depends on
// no byte more than lookAhead bytes past it.
const lookAhead = 12

// take copies to out[n:] the decoded bytes of the earlier text c from its
// offsets a to its mark m, and appends their line ends to nls and their
// marks (those after a, m included) to s.marks, moved to the text being
// decoded, which is at cu decoded and cr raw bytes from its start where
// c is at a. The raw bytes of both texts from there must be the same up
// to lookAhead bytes past m.r, and a must be a character boundary of c:
// decoding depends on nothing else, so the result is what decoding them
// gives, except that the marks lie where c had them.
func (s *scanner) take(out []byte, n int, nls []int32, c *decoded, a, m mark, cu, cr int32) []int32 {
	copy(out[n:], out[c.off+int(a.u):c.off+int(m.u)])
	if s.at != nil {
		s.at.copies = append(s.at.copies, arenaCopy{int32(n), int32(c.off) + a.u, m.u - a.u})
	}
	cn := nls[c.nlOff:c.nlEnd]
	lo, _ := slices.BinarySearch(cn, a.u)
	hi, _ := slices.BinarySearch(cn, m.u)
	if du := cu - a.u; du == 0 {
		nls = append(nls, cn[lo:hi]...)
	} else {
		nls = slices.Grow(nls, hi-lo)
		to := nls[len(nls) : len(nls)+hi-lo]
		for k, v := range cn[lo:hi] {
			to[k] = v + du
		}
		nls = nls[:len(nls)+hi-lo]
	}
	cm := s.marks[c.markOff:c.markEnd]
	after := func(x mark, u int32) int { return cmp.Compare(x.u, u+1) }
	lo, _ = slices.BinarySearchFunc(cm, a.u, after)
	hi, _ = slices.BinarySearchFunc(cm, m.u, after)
	if du, dr := cu-a.u, cr-a.r; du == 0 && dr == 0 {
		s.marks = append(s.marks, cm[lo:hi]...)
	} else {
		s.marks = slices.Grow(s.marks, hi-lo)
		to := s.marks[len(s.marks) : len(s.marks)+hi-lo]
		for k, x := range cm[lo:hi] {
			to[k] = mark{x.u + du, x.r + dr}
		}
		s.marks = s.marks[:len(s.marks)+hi-lo]
	}
	return nls
}

// anchors indexes places of the texts decoded so far in a body where a
// later text that repeats their raw bytes may copy their decoding: each
// text's start and its line starts whose first byte may open a re-sent
// block (anchorByte: a fence, a tag, a banner). The key is the 16 raw
// bytes there, and any match is confirmed by comparing the bytes. Issue
// 17: the last turn of a long session often re-sends, inside one growing
// text, the documents that every earlier turn sent, where resume (which
// only compares the texts' starts) copies nothing. The zero value is
// ready to use.
type anchors struct {
	texts []recentText // the texts decoded, in order
	list  []anchor
	tab   chainTable // key → 1 + the index in list of its newest anchor
	// pending is the first anchor of the text being decoded: its anchors
	// enter the table when it is done, so that a text of many alike
	// lines does not walk its own anchors at each of them.
	pending int
	// copies lists every copy take made, in arena order: the segmentation
	// need not compare again bytes the scan copied (segIndex.known).
	copies []arenaCopy
	// taken counts the copies found and walked the anchors compared, for
	// tests.
	taken, walked int
}

// arenaCopy is one copy of take: n decoded bytes at arena offset dst
// copied from arena offset src.
type arenaCopy struct{ dst, src, n int32 }

// anchor is one indexed place: the text (an index into anchors.texts)
// and its decoded and raw offsets there, its key, and the anchor with the
// same key indexed before it (-1: none).
type anchor struct {
	text int32
	at   mark
	prev int32
	key  uint64
}

// anchorByte marks the bytes after a line break that make the line an
// anchor: those that open a fence or a tag, where segIndex resumes too.
// Banner and heading lines ("--- a.go ---", "# a.md") would add an anchor
// per Markdown list item and heading, which cost more on texts that
// repeat nothing (the overhead bench's 70 KB request) than they save.
var anchorByte = [256]bool{'`': true, '~': true, '<': true}

// anchorBytes is the body's bytes per anchor it may record: a text of
// tiny fences would otherwise cost more in anchors than in text
// (TestLimitsBoundMemory), and an anchor closer than a mark's spacing to
// the next saves little.
const anchorBytes = 128

// maxAnchorTries bounds the earlier anchors with the same key that one
// place is compared with.
const maxAnchorTries = 4

// reset empties at for a new body.
func (at *anchors) reset() {
	if len(at.texts) > 0 || at.tab.used {
		clear(at.texts)
		at.texts, at.list, at.copies, at.taken, at.walked, at.pending = at.texts[:0], at.list[:0], at.copies[:0], 0, 0, 0
		at.tab.reset()
	}
}

// done records the end of the text being decoded, whose anchors were
// recorded by copyAt.
func (at *anchors) done(t recentText) {
	at.texts = append(at.texts, t)
	if at.pending == len(at.list) {
		return
	}
	at.tab.fit(len(at.list))
	for j := at.pending; j < len(at.list); j++ {
		x := &at.list[j]
		h := at.tab.slot(x.key)
		x.prev = at.tab.heads[h] - 1
		at.tab.keys[h], at.tab.heads[h] = x.key, int32(j+1)
	}
	at.pending = len(at.list)
}

// copyAt records the place at raw offset i of s.b, cu decoded bytes into
// the text being decoded (whose contents start at start): its start, or a
// line start. It returns the earlier text that shares the most raw bytes
// from one of its anchors with that place, the anchor, and the last mark
// of that text that the decoding of those bytes reaches (see take); ok is
// false when no earlier text shares a mark's worth.
func (at *anchors) copyAt(s *scanner, start, i int, cu int32) (c *decoded, a, m mark, ok bool) {
	b := s.b
	room := len(at.list) < len(b)/anchorBytes+64
	if i+16 > len(b) || !room && len(at.tab.keys) == 0 {
		return nil, a, m, false
	}
	w0, w1 := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
	key := (w0*0x9e3779b97f4a7c15 ^ w1) * 0xbf58476d1ce4e5b9
	head := int32(-1)
	if len(at.tab.keys) > 0 {
		head = at.tab.heads[at.tab.slot(key)] - 1
	}
	cur := int32(len(at.texts))
	here := b[i:]
	bestL := 0
	tries := 0
	for j := head; j >= 0 && tries < maxAnchorTries; j = at.list[j].prev {
		x := &at.list[j]
		tries++
		at.walked++
		t := &at.texts[x.text]
		old := b[t.raw.start+int(x.at.r) : t.raw.end]
		if ok && (bestL >= len(old) || bestL >= len(here) || old[bestL] != here[bestL]) {
			continue // cannot share more than the best
		}
		l := commonPrefix(here, old)
		marks := s.marks[t.d.markOff:t.d.markEnd]
		// The last mark whose look-ahead the shared bytes cover.
		k := sort.Search(len(marks), func(k int) bool { return int(marks[k].r)+lookAhead > int(x.at.r)+l }) - 1
		if k < 0 || marks[k].u <= x.at.u {
			continue
		}
		if !ok || marks[k].u-x.at.u > m.u-a.u {
			c, a, m, ok, bestL = &t.d, x.at, marks[k], true, l
		}
	}
	if room {
		at.list = append(at.list, anchor{text: cur, at: mark{cu, int32(i - start)}, key: key})
	}
	if ok {
		at.taken++
	}
	return c, a, m, ok
}

// commonPrefix returns the length of the longest common prefix of a and b.
// It compares 512-byte chunks with bytes.Equal (vectorised: about 12 GB/s
// here, the memory's speed, BenchmarkCommonPrefix), then eight-byte words,
// the first differing byte found from the XOR of two words.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	const chunk = 512
	i := 0
	for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)>>3
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// grow sets up the arena and line ends for a body, reusing the buffers of
// s.st when they are large enough. Bytes past s.n are never read, so a
// reused arena needs no clearing. The eight bytes of slack keep the
// word stores in bounds when the texts read before the first long one are
// decoded after it (the arena offset may then pass the body offset, but
// never the body's size).
func (s *scanner) grow() {
	if st := s.st; st != nil && cap(st.arena) >= len(s.b)+8 {
		s.arena = st.arena[:len(s.b)+8]
	} else {
		s.arena = make([]byte, len(s.b)+8)
	}
	if st := s.st; st != nil && cap(st.nls) >= len(s.b)/32+64 {
		s.nls, s.marks = st.nls[:0], st.marks[:0]
	} else {
		s.nls = make([]int32, 0, len(s.b)/32+64)
	}
}

// value validates and skips any JSON value.
func (s *scanner) value(depth int) error {
	if s.pos >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.pos]; {
	case c == '{':
		return s.object(depth+1, func(string) error { return s.value(depth + 1) })
	case c == '[':
		return s.array(depth+1, func() error { return s.value(depth + 1) })
	case c == '"':
		_, _, err := s.str()
		return err
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return errSyntax
}

func (s *scanner) lit(w string) error {
	if len(s.b)-s.pos < len(w) || string(s.b[s.pos:s.pos+len(w)]) != w {
		return errSyntax
	}
	s.pos += len(w)
	return nil
}

func (s *scanner) number() error {
	b, i := s.b, s.pos
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return errSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return errSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return errSyntax
		}
	}
	s.pos = i
	return nil
}

// contents reads the contents array. A contents value that is not an array
// of objects is left to the API to reject.
func (s *scanner) contents(req *request) error {
	if s.pos >= len(s.b) || s.b[s.pos] != '[' {
		return ErrUnsupported
	}
	return s.array(2, func() error {
		if s.pos >= len(s.b) || s.b[s.pos] != '{' {
			return ErrUnsupported
		}
		c := content{obj: span{start: s.pos}, pOff: len(s.parts), pEnd: len(s.parts)}
		seenParts, seenRole := false, false
		err := s.object(3, func(key string) error {
			switch key {
			case "role":
				if seenRole {
					return ErrUnsupported
				}
				seenRole = true
				if s.pos >= len(s.b) || s.b[s.pos] != '"' {
					return ErrUnsupported
				}
				sp, esc, err := s.str()
				if err != nil {
					return err
				}
				// The usual roles need no allocation.
				switch r := s.b[sp.start:sp.end]; string(r) {
				case "user":
					c.role = "user"
				case "model":
					c.role = "model"
				default:
					c.role = string(r)
				}
				if esc {
					c.role = unescape(s.b[sp.start:sp.end])
				}
				if c.role == "" {
					return ErrUnsupported
				}
				return nil
			case "parts":
				if seenParts {
					return ErrUnsupported
				}
				seenParts = true
				if s.pos >= len(s.b) || s.b[s.pos] != '[' {
					return ErrUnsupported
				}
				return s.array(4, func() error {
					p, err := s.part()
					s.parts = append(s.parts, p)
					c.pEnd = len(s.parts)
					if err == nil && s.over() {
						err = ErrTooComplex
					}
					return err
				})
			}
			c.extra = true
			return s.value(3)
		})
		c.obj.end = s.pos
		req.contents = append(req.contents, c)
		return err
	})
}

// part reads one part object and classifies it.
func (s *scanner) part() (part, error) {
	p := part{obj: span{start: s.pos}}
	if s.pos >= len(s.b) || s.b[s.pos] != '{' {
		return p, ErrUnsupported
	}
	var texts, inlines, others, sigs int
	err := s.object(5, func(key string) error {
		switch key {
		case "text":
			texts++
			if s.pos >= len(s.b) || s.b[s.pos] != '"' {
				others++
				return s.value(5)
			}
			if s.small > 0 && !s.eager {
				sp, esc, size, ok, err := s.shortText()
				if err != nil || ok {
					p.str, p.esc, p.dec.size, p.lazy = sp, esc, size, true
					return err
				}
				s.eager = true // s.pos is back at the string
			}
			sp, esc, d, err := s.textStr()
			p.str, p.esc, p.dec = sp, esc, d
			return err
		case "inlineData", "inline_data":
			inlines++
			p.media = true
			if s.pos >= len(s.b) || s.b[s.pos] != '{' {
				others++
				return s.value(5)
			}
			return s.inline(&p)
		case "thought":
			// A thought summary is the model's private text: never edited.
			others++
		case "fileData", "file_data":
			p.media = true
			others++
		case "functionResponse", "function_response", "functionCall", "function_call":
			others++
			start := s.pos
			if err := s.value(5); err != nil {
				return err
			}
			p.fr, p.call = span{start, s.pos}, key == "functionCall" || key == "function_call"
			return nil
		case "thoughtSignature", "thought_signature":
			sigs++
			others++
		default:
			// Any other member (thoughtSignature, functionCall, fileData,
			// videoMetadata, fields from next year's API …) freezes the
			// part: it is copied verbatim and never analysed.
			others++
		}
		return s.value(5)
	})
	p.obj.end = s.pos
	if p.call && sigs > 1 || others != 1+sigs || !p.call && sigs > 0 || texts+inlines > 0 || p.fr.end-p.fr.start < 2 {
		p.fr, p.call = span{}, false
	} else if !p.call && s.small > 0 && p.fr.end-p.fr.start >= s.small {
		s.eager = true // a tool result that may hold a long value
	}
	switch {
	case others > 0 || texts+inlines != 1:
		p.kind = partOther
	case texts == 1:
		p.kind = partText
	case inlines == 1 && p.str.end > p.str.start:
		p.kind = partInline
		s.eager = true
	}
	if p.kind != partText && p.lazy {
		p.lazy, p.dec = false, decoded{} // a frozen part is never decoded
	}
	return p, err
}

// inline reads an inlineData object, recording data and mimeType.
func (s *scanner) inline(p *part) error {
	var datas, mimes, others int
	err := s.object(6, func(key string) error {
		switch key {
		case "data":
			datas++
			if s.pos < len(s.b) && s.b[s.pos] == '"' {
				sp, esc, err := s.str()
				p.str, p.esc = sp, esc
				return err
			}
		case "mimeType", "mime_type":
			mimes++
			if s.pos < len(s.b) && s.b[s.pos] == '"' {
				sp, esc, err := s.str()
				if esc {
					p.mime = unescape(s.b[sp.start:sp.end])
				} else {
					p.mime = string(s.b[sp.start:sp.end])
				}
				return err
			}
		}
		others++
		return s.value(6)
	})
	if others > 0 || datas != 1 || mimes > 1 {
		// Unknown members (displayName …) or odd shapes: leave the part alone.
		p.str = span{}
	}
	return err
}

// special returns a mask with the high bit set in the lowest byte of w
// (little endian) that is '"', '\\' or a control byte, and possibly in
// higher bytes; zero when there is none.
func special(w uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := w ^ (lo * '"')
	e := w ^ (lo * '\\')
	return ((q-lo)&^q | (e-lo)&^e | (w-lo*0x20)&^w) & hi
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// unescape decodes the contents of a JSON string that scan has validated.
// Lone surrogates decode to U+FFFD, as in encoding/json; other bytes,
// including invalid UTF-8, are copied unchanged.
func unescape(raw []byte) string {
	d, _ := decodeString(raw)
	return d.text
}

// mark pairs an offset in an unescaped string with the offset in the raw
// JSON string where the same character starts.
type mark struct{ u, r int32 }

// markEvery is the spacing, in unescaped bytes, of the marks recorded by
// textStr, which bounds the walk of rawOffsets.
const markEvery = 256

// escByte maps the byte after a backslash to the byte it stands for, for
// the one-byte JSON escapes; zero for "u" and invalid escapes.
var escByte = [256]byte{'n': '\n', 't': '\t', '"': '"', '\\': '\\', '/': '/', 'r': '\r', 'b': '\b', 'f': '\f'}

// decoded is a text string decoded by textStr.
type decoded struct {
	off              int // start of text in the scanner's arena
	nlOff, nlEnd     int // nl in the scanner's nls, set by textStr
	markOff, markEnd int // marks in the scanner's marks, set by textStr
	text             string
	marks            []mark
	nl               []int32 // offsets of "\n" in text, then len(text) (see lines)
	size             int     // len(text), also when the text is not decoded
}

// decodeString decodes the contents of a JSON string (without quotes) with
// the same decoder as the scanner.
func decodeString(raw []byte) (decoded, error) {
	s := &scanner{b: make([]byte, 0, len(raw)+2)}
	s.b = append(append(append(s.b, '"'), raw...), '"')
	_, _, d, err := s.textStr()
	if err != nil {
		return d, err
	}
	d.nl = s.nls[d.nlOff:d.nlEnd:d.nlEnd]
	d.marks = s.marks[d.markOff:d.markEnd:d.markEnd]
	d.text = string(s.arena[:s.n])
	return d, nil
}

// decodeEscape decodes the escape sequence at the start of raw, returning the
// rune and the number of raw bytes consumed.
func decodeEscape(raw []byte) (rune, int) {
	switch raw[1] {
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'u':
		r := hex4(raw[2:6])
		if utf16.IsSurrogate(r) {
			if len(raw) >= 12 && raw[6] == '\\' && raw[7] == 'u' {
				if d := utf16.DecodeRune(r, hex4(raw[8:12])); d != utf8.RuneError {
					return d, 12
				}
			}
			return utf8.RuneError, 6
		}
		return r, 6
	}
	return rune(raw[1]), 2 // " \ /
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r = r<<4 | rune(hexVal(c))
	}
	return r
}

// rawOffsets maps offsets in the unescaped form of raw (sorted ascending) to
// offsets in raw, in place. Offsets must fall on escape boundaries, which
// line boundaries always do.
//
// marks (from textStr) let the walk start near each offset.
func rawOffsets(raw []byte, offs []int, marks []mark) {
	out := offs // out[k] is written once offs[k] has been read for the last time
	k := 0
	u := 0 // unescaped position
	var buf [utf8.UTFMax]byte
	m := 0
	if len(offs) > 0 {
		// Skip the marks before the first offset's without a walk over
		// them: a block late in a long text is mapped by itself.
		m = sort.Search(len(marks), func(j int) bool { return int(marks[j].u) > offs[0] })
		if m > 0 {
			m--
		}
	}
	for i := 0; i <= len(raw) && k < len(offs); {
		for m < len(marks) && int(marks[m].u) <= offs[k] {
			if int(marks[m].u) > u {
				u, i = int(marks[m].u), int(marks[m].r)
			}
			m++
		}
		for k < len(offs) && offs[k] <= u {
			out[k] = i
			k++
		}
		if i == len(raw) || k == len(offs) {
			break
		}
		if raw[i] != '\\' {
			// Plain bytes advance both positions alike, up to the next
			// escape or the next wanted offset.
			j := bytes.IndexByte(raw[i:], '\\')
			if j < 0 {
				j = len(raw) - i
			}
			j = min(j, offs[k]-u)
			i += j
			u += j
			continue
		}
		if c := raw[i+1]; c != 'u' && c < utf8.RuneSelf {
			// A one-byte escape, as decodeEscape decodes it, without the
			// call: source code holds one every few bytes.
			i += 2
			u++
			continue
		}
		r, n := decodeEscape(raw[i:])
		i += n
		if r < utf8.RuneSelf {
			u++
		} else {
			u += utf8.EncodeRune(buf[:], r)
		}
	}
	for ; k < len(offs); k++ {
		out[k] = len(raw)
	}
}

// appendEscaped appends s as the contents of a JSON string (no quotes),
// escaping only what JSON requires.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}
