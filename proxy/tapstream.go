package proxy

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A unary answer is one JSON object that arrives in many reads (a 256 KB
// answer in eight 32 KB reads). The tap used to copy the whole object into
// its object buffer and scan it once complete. Now the first text of the
// object — the value of a member named exactly "text" that no earlier
// string could have been read as text before — is written to the tap's
// text as its bytes pass (validated and unescaped as chunkScanner.text
// does), speculatively: the object buffer keeps the object without that
// string (a skeleton with a placeholder in its place), and when the object
// is complete the skeleton is read as before, the placeholder standing for
// the text written. If the object keeps the text (a part of candidate 0,
// not a thought, an object that is valid JSON) it is committed; otherwise
// it is taken back (tapText.rewind, ServedRecorder.Rewind). So the object
// buffer holds the skeleton only, not a second copy of the answer, and the
// text is read once. TestTapStreamChunks compares every result with the
// object read whole.
//
// A text that ends in the read where it starts is streamed too: one pass
// over it instead of the framing's and the scanner's.

// servedMarker is a ServedWriter that can take back text
// (cache.ServedRecorder). The tap streams text only to such a writer.
type servedMarker interface {
	Mark()
	Rewind()
	Commit()
}

// jsonTextWriter is a ServedWriter that reads text still JSON-escaped
// (cache.ServedRecorder.WriteJSON): as far as it can, it unescapes and
// records it in one pass, and returns the bytes of raw read and of text
// written.
type jsonTextWriter interface {
	WriteJSON(raw []byte) (used, n int)
}

// phRaw is the placeholder written in the skeleton, between the streamed
// string's quotes. It is recognised by its offset (chunkScanner) or by its
// address (encoding/json, with tapChunkPH), not by its bytes.
const phRaw = `\u0000\u0000tap`

// preScan follows a captured object from its start until the first string
// value that may be read as a part's text, to decide whether to stream it.
// It sees only the bytes the tap's framing loop stops at: brackets, commas,
// colons and quotes.
type preScan struct {
	active bool
	objs   uint64 // bit d: the container at depth d is an object
	d      int    // depth inside the object (1: the object itself)
	name   bool   // the next string in an object is a member name
	inName bool   // inside a member name
	nameAt int    // the name's first byte in the current read, -1 in an earlier one
	// last classifies the last member name: 0 not text, 't' exactly
	// "text", 'x' perhaps a text to encoding/json (case, escapes,
	// non-ASCII bytes, cut between reads).
	last byte
}

func (q *preScan) open(obj bool) {
	if q.d++; q.d >= 64 {
		q.active = false
		return
	}
	if obj {
		q.objs |= 1 << q.d
	} else {
		q.objs &^= 1 << q.d
	}
	q.name = obj
}

func (q *preScan) close() {
	// Brackets that do not match ("{]") close the object for the framing
	// loop, which counts them alike: give up before d goes below 1.
	if q.d--; q.d < 1 {
		q.active = false
	}
	q.name = false
}

func (q *preScan) comma()         { q.name = q.inObject() }
func (q *preScan) inObject() bool { return q.objs&(1<<q.d) != 0 }

// str is called at a string's opening quote, p[i]. It reports whether the
// string is the value of a member named exactly "text" and nothing before
// it could have been read as a text.
func (q *preScan) str(i int) bool {
	if !q.inObject() {
		return false // an array's element: no text reads it
	}
	if q.name {
		q.inName, q.nameAt, q.name = true, i+1, false
		return false
	}
	switch q.last {
	case 't':
		return true
	case 'x':
		q.active = false
	}
	return false
}

// endName classifies the member name that ends at p[j].
func (q *preScan) endName(p []byte, j int) {
	q.inName = false
	if q.nameAt < 0 {
		q.last = 'x'
		return
	}
	name := p[q.nameAt:j]
	switch {
	case string(name) == "text":
		q.last = 't'
	case len(name) == 4 && asciiEqualFold(name, "text"), bytes.IndexByte(name, '\\') >= 0, asciiRun(name, 0) < len(name):
		q.last = 'x'
	default:
		q.last = 0
	}
}

// strStream is the state of the string being streamed.
type strStream struct {
	on  bool
	bad bool // not a valid JSON string: the object is not JSON
	// esc is 1 after a backslash, 'u' in the four hex digits of \u.
	esc  byte
	nhex int
	u    rune
	hi   rune // a surrogate read from \u, waiting for the next escape; -1 none
	// carry is a rune cut at the end of a read.
	carry [utf8.UTFMax]byte
	nc    int
	got   int    // bytes of text produced
	raw   int    // bytes of the string read
	out   []byte // text produced, not yet written
	// jw, when the tap keeps no text of its own, takes the string's bytes
	// as they are (jsonTextWriter): out is then only for what it does not
	// read (surrogates, invalid UTF-8, what a read cuts).
	jw jsonTextWriter
}

// streamBufs recycles the streams' output buffers.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 0, streamFlush+64); return &b }}

// streamFlush is how much text a stream gathers before writing it on.
const streamFlush = 16 << 10

// textMark is the tap's text when streaming began.
type textMark struct {
	n, keep   int
	truncated bool
}

// startStream begins streaming the string whose opening quote ends b (the
// rest of the object's bytes in this read, up to that quote). It reports
// false when the object buffer could not take b (the string is then read
// with the object as before, b taken).
func (t *tap) startStream(b []byte) bool {
	t.pre.active = false
	t.appendObj(b)
	if t.objOver || t.objTrimmed {
		return false
	}
	t.ph, t.phOn = len(t.obj)-1, true
	t.obj = append(t.obj, phRaw...)
	out := t.st.out
	if out == nil {
		out = getPooled(&streamBufs, &t.outBox)
	}
	t.st = strStream{on: true, hi: -1, out: out[:0]}
	if !t.text.keep {
		t.st.jw, _ = t.text.w.(jsonTextWriter)
	}
	t.tm = textMark{n: t.text.n, keep: len(t.text.b), truncated: t.textTruncated}
	if m, ok := t.text.w.(servedMarker); ok {
		m.Mark()
	}
	return true
}

// streamable reports whether the object being captured may have its text
// streamed.
func (t *tap) streamable() bool {
	if !t.needText || t.ix {
		return false
	}
	if t.text.w != nil {
		if _, ok := t.text.w.(servedMarker); !ok {
			return false
		}
	}
	return true
}

// rewindText takes back the streamed text; commitText keeps it.
func (t *tap) rewindText() {
	t.text.truncate(min(len(t.text.b), t.tm.keep)) // what follows is overwritten
	t.text.n, t.textTruncated = t.tm.n, t.tm.truncated
	if m, ok := t.text.w.(servedMarker); ok {
		m.Rewind()
	}
}

func (t *tap) commitText() {
	if m, ok := t.text.w.(servedMarker); ok {
		m.Commit()
	}
}

// endStream drops a stream whose object never completed (or was given up):
// its text is taken back.
func (t *tap) endStream() {
	if t.st.on || t.phOn {
		t.rewindText()
		t.st.on, t.phOn = false, false
	}
}

// putStream returns the stream's buffer.
func (t *tap) putStream() {
	if t.st.out != nil {
		putPooled(&streamBufs, &t.outBox, t.st.out)
		t.st.out = nil
	}
}

// streamOut writes the text gathered to the tap's text, as apply writes a
// text: up to MaxTextBytes in all.
func (t *tap) streamOut() {
	b := t.st.out
	t.st.got += len(b)
	t.st.out = b[:0]
	if len(b) == 0 {
		return
	}
	if k := t.textRoom(len(b)); k >= 0 {
		t.text.Grow(k)
		t.text.Write(b[:k])
	}
}

// streamText reads the streamed string's content from p[i:]. It returns
// the index of the quote that ends it (as the framing loop finds it), or
// len(p). over reports that the object grew past maxEventBytes: the text
// is taken back and the object read from its tail, as appendObj does for
// an object too large (the framing goes on inside the string at the index
// returned).
func (t *tap) streamText(all []byte, i int) (end int, over bool) {
	s := &t.st
	// Only the string's own bytes count against maxEventBytes, not what
	// follows it in this read (the next object of an array): the string
	// is read up to the limit, and is over only if it goes on past it.
	p := all
	if room := maxEventBytes - len(t.obj) - s.raw; len(p)-i > room {
		p = p[:i+max(room, 0)]
	}
	from := i
	for i < len(p) {
		switch s.esc {
		case 1:
			c := p[i]
			i++
			s.esc = 0
			switch c {
			case '"', '\\', '/':
				s.emit(rune(c))
			case 'b':
				s.emit('\b')
			case 'f':
				s.emit('\f')
			case 'n':
				s.emit('\n')
			case 'r':
				s.emit('\r')
			case 't':
				s.emit('\t')
			case 'u':
				s.esc, s.nhex, s.u = 'u', 0, 0
			default:
				s.bad = true
			}
			continue
		case 'u':
			c := p[i]
			if !isHex(c) {
				// Read again as string content: a quote ends the string
				// here, as for the framing loop.
				s.bad, s.esc = true, 0
				continue
			}
			i++
			s.u = s.u<<4 | rune(hexDigit(c))
			if s.nhex++; s.nhex == 4 {
				s.esc = 0
				s.escaped(s.u)
			}
			continue
		}
		if s.jw != nil && s.nc == 0 && s.hi < 0 && jsonFast[p[i]] {
			i = t.streamJSON(p, i)
			if i == len(p) {
				break
			}
		}
		j, ascii := plainRunASCII(p, i)
		if ascii && s.nc == 0 && s.hi < 0 {
			s.out = append(s.out, p[i:j]...)
		} else {
			s.run(p[i:j], j < len(p))
		}
		if j == len(p) {
			i = j
			break
		}
		switch c := p[j]; {
		case c == '"':
			if s.hi >= 0 {
				s.out = utf8.AppendRune(s.out, utf8.RuneError)
				s.hi = -1
			}
			s.raw += j - from
			t.streamOut()
			s.on = false
			return j, false
		case c == '\\':
			s.esc = 1
		default:
			s.bad = true // a control byte
		}
		i = j + 1
		if len(s.out) >= streamFlush {
			t.streamOut()
		}
	}
	if len(p) < len(all) {
		t.rewindText()
		t.textTruncated = true
		t.st.on, t.phOn = false, false
		t.obj, t.objTrimmed = lastBytes(t.obj, nil, tailBytes), true
		t.inStr, t.esc = true, s.esc == 1
		return len(p), true
	}
	s.raw += len(p) - from
	t.streamOut()
	return len(p), false
}

// jsonFast marks the bytes a jsonTextWriter may read: all but the quote
// and control bytes (the backslash begins an escape).
var jsonFast = func() (t [256]bool) {
	for c := ' '; c < 256; c++ {
		t[c] = true
	}
	t['"'] = false
	return t
}()

// streamJSON hands the streamed string's bytes from p[i] to the text's
// jsonTextWriter, after the text gathered in out, up to MaxTextBytes in
// all (a byte of the string stands for one byte of text at most), and
// returns where it stopped.
func (t *tap) streamJSON(p []byte, i int) int {
	s := &t.st
	if len(s.out) > 0 {
		t.streamOut()
	}
	if t.textTruncated {
		return i
	}
	end := min(len(p), i+MaxTextBytes-t.text.n)
	if end <= i {
		return i
	}
	t.text.w.Grow(end - i)
	used, n := s.jw.WriteJSON(p[i:end])
	t.text.n += n
	s.got += n
	return i + used
}

// emit adds the rune of an escape other than \u.
func (s *strStream) emit(r rune) {
	if s.hi >= 0 {
		s.out = utf8.AppendRune(s.out, utf8.RuneError)
		s.hi = -1
	}
	s.out = append(s.out, byte(r))
}

// escaped adds the rune of a \u escape, pairing surrogates as
// appendUnquoted does.
func (s *strStream) escaped(r rune) {
	if s.hi >= 0 {
		hi := s.hi
		s.hi = -1
		if dec := utf16.DecodeRune(hi, r); dec != utf8.RuneError {
			s.out = utf8.AppendRune(s.out, dec)
			return
		}
		s.out = utf8.AppendRune(s.out, utf8.RuneError)
	}
	if utf16.IsSurrogate(r) {
		s.hi = r
		return
	}
	s.out = utf8.AppendRune(s.out, r)
}

// run adds a run of string content without quotes, backslashes or
// control bytes. final reports that the run is complete (something else
// follows it in this read): a rune cut at its end is then invalid, not
// continued in the next read.
func (s *strStream) run(seg []byte, final bool) {
	if len(seg) > 0 && s.hi >= 0 {
		s.out = utf8.AppendRune(s.out, utf8.RuneError)
		s.hi = -1
	}
	for s.nc > 0 {
		var tmp [2 * utf8.UTFMax]byte
		n := copy(tmp[:], s.carry[:s.nc])
		k := copy(tmp[n:n+utf8.UTFMax-n], seg)
		if !final && !utf8.FullRune(tmp[:n+k]) {
			s.nc = copy(s.carry[:], tmp[:n+k]) // seg is all taken
			return
		}
		r, size := utf8.DecodeRune(tmp[:n+k])
		if r == utf8.RuneError && size == 1 {
			s.out = utf8.AppendRune(s.out, r)
		} else {
			s.out = append(s.out, tmp[:size]...)
		}
		if size >= n {
			seg = seg[size-n:]
			s.nc = 0
		} else {
			s.nc = copy(s.carry[:], tmp[size:n])
		}
	}
	if len(seg) == 0 {
		return
	}
	cut := len(seg)
	if !final {
		cut = runeCut(seg)
	}
	if body := seg[:cut]; utf8.Valid(body) {
		s.out = append(s.out, body...)
	} else {
		s.out = appendUnquoted(s.out, body) // no backslash in body
	}
	s.nc = copy(s.carry[:], seg[cut:])
}

// plainRunASCII is plainRun that also reports whether the run is ASCII.
func plainRunASCII(b []byte, i int) (int, bool) {
	var or uint64
	for {
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			if stopMask(x) != 0 {
				break
			}
			or |= x
			i += 8
			// A run longer than a word: sixteen bytes a step, half the
			// loop's tests and bounds checks. (Most runs of prose end
			// in their first word, which this would only slow down.)
			for i+16 <= len(b) {
				w := b[i : i+16 : i+16]
				x, y := binary.LittleEndian.Uint64(w), binary.LittleEndian.Uint64(w[8:])
				if stopMask(x)|stopMask(y) != 0 {
					break
				}
				or |= x | y
				i += 16
			}
		}
		for end := min(i+8, len(b)); i < end; i++ {
			if strStop[b[i]] {
				return i, or&msb == 0
			}
			or |= uint64(b[i])
		}
		if i == len(b) {
			return i, or&msb == 0
		}
	}
}

// runeCut returns the start of a rune cut at the end of b, or len(b).
func runeCut(b []byte) int {
	for k := len(b) - 1; k >= 0 && k > len(b)-utf8.UTFMax; k-- {
		switch c := b[k]; {
		case c < utf8.RuneSelf:
			return len(b)
		case c >= 0xc0:
			if !utf8.FullRune(b[k:]) {
				return k
			}
			return len(b)
		}
	}
	return len(b)
}

func hexDigit(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// decodeStreamed reads a complete object whose first text was streamed:
// the skeleton in t.obj, the placeholder at t.ph.
func (t *tap) decodeStreamed() {
	ph := t.ph
	t.phOn = false
	if t.st.bad {
		t.rewindText() // not JSON: encoding/json rejects it, nothing is read
		return
	}
	b := t.obj
	t.sc.rawText = t.jsonText()
	if t.sc.scanMemo(b, t.needText, ph, t.st.got > 0, t.pathMemo()) {
		at := -1
		for k, x := range t.sc.texts {
			if x == nil {
				at = k
			}
		}
		switch {
		case at == 0:
			t.commitText()
		case at > 0:
			// A text kept before the streamed one: never, as the
			// framing streams only the first (preScan). Had it been,
			// what was read is a prefix.
			t.rewindText()
			t.textTruncated = true
		default:
			t.rewindText()
		}
		t.events++
		t.apply(&t.sc)
		return
	}
	var c tapChunkPH
	if err := json.Unmarshal(b, &c); err != nil {
		t.rewindText()
		return
	}
	t.events++
	t.record(c.UsageMetadata, c.ModelVersion)
	var texts []string
	kept, known := false, true
	at := uintptr(unsafe.Pointer(&b[ph]))
	for _, cand := range c.Candidates {
		if cand.Index != 0 {
			continue
		}
		for _, part := range cand.Content.Parts {
			switch {
			case part.Thought:
			case part.Text.at == at:
				if t.st.got > 0 {
					// The first text kept, or the skeleton's order is not
					// the text's (members repeated).
					known = known && !kept && len(texts) == 0
					kept = true
				}
			case part.Text.s != "":
				texts = append(texts, part.Text.s)
			}
		}
	}
	if !known {
		// The skeleton's order is not the text's (members repeated): the
		// text cannot be told. What was read is a prefix.
		t.rewindText()
		t.textTruncated = true
		return
	}
	if kept {
		t.commitText()
	} else {
		t.rewindText()
	}
	for _, text := range texts {
		if k := t.textRoom(len(text)); k >= 0 {
			t.text.WriteString(text[:k])
		}
	}
}

// tapChunkPH is tapChunk whose part texts know the placeholder.
type tapChunkPH struct {
	Candidates []struct {
		Index   int `json:"index"`
		Content struct {
			Parts []struct {
				Text    phText `json:"text"`
				Thought bool   `json:"thought"`
			} `json:"parts"`
		} `json:"content"`
	} `json:"candidates"`
	UsageMetadata *Usage `json:"usageMetadata"`
	ModelVersion  string `json:"modelVersion"`
}

// phText is a part's text and where its JSON string was in the input:
// encoding/json hands UnmarshalJSON the value's bytes in its input, so the
// placeholder is told by its address, whatever the other strings hold.
type phText struct {
	s  string
	at uintptr
}

// UnmarshalJSON decodes a string as encoding/json decodes one into a
// string field (null leaves it as it is).
func (x *phText) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*x = phText{s: s, at: uintptr(unsafe.Pointer(&b[0]))}
	return nil
}
