package proxy

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// chunkScanner reads the members of one GenerateContentResponse that the
// tap needs (tapChunk, or tapUsage without text) without reflection: the
// tap decodes every object of every response, and encoding/json was most of
// its cost. It validates the whole input as JSON and accepts only what it
// is sure encoding/json decodes to the same values: anything else (a type
// mismatch, null where a value is read, a duplicate or case-folded member
// name, escapes in member names, deep nesting) makes scan report false, and
// the tap decodes that object with encoding/json as before.
// FuzzChunkScanner compares the two. The zero value is ready to use; not
// safe for concurrent use.
type chunkScanner struct {
	b     []byte
	i     int
	depth int

	needText bool
	// Results of the last successful scan.
	usage        Usage
	hasUsage     bool
	modelVersion []byte   // unescaped; nil when absent
	texts        [][]byte // text of the parts of candidate 0 to keep, in order
	scratch      []byte   // unescaped strings; texts may point into it
	// escaped has bit k set when texts[k] is still JSON-escaped (the
	// inside of its string literal, validated): with rawText the scanner
	// leaves a part's text so, for the tap to hand to a jsonTextWriter
	// (apply), instead of unescaping it here and normalising it there.
	escaped uint64
	rawText bool

	// ph is the offset in b of a placeholder string (tapstream.go), -1
	// none; a part whose text it is is kept as a nil text when phText
	// reports that the text it stands for is not empty.
	ph     int
	phText bool

	// resume starts the scan at the opening quote of candidate 0's first
	// text value, in the state the path's prefix leaves (pathPrefix): the
	// functions on the path skip their opening bracket and take their
	// path member's name without reading it; part clears it.
	resume bool
	// tm, when not nil, records where the path's text ends and where the
	// usage counts are (tailMemo), for a template of the event's tail.
	tm *tailMemo
}

// pathMemo is the prefix of the last event that pathPrefix took
// (chunkScanner.scanMemo): its first n bytes, the text's quote included.
type pathMemo struct {
	n     int
	b     [64]byte
	armed bool      // an object was scanned before
	tail  *tailMemo // from tailMemos at the third event of a stream
}

// tailMemo is the template of an event's tail that replay matches the
// next event against: the bytes from the end of candidate 0's first text
// (the path's, pathPrefix) to the end of the event but for the values of
// the usage counts (its holes), and what the scan of the event read but
// the text and those counts. chunkScanner is a function of the bytes, and
// it reads a text and an integer with the same code whatever their value
// (part keeps a text that is not empty, usageObject stores a count): an
// event that is the template's prefix, a valid text that is not empty,
// the template's bytes with a valid count in each hole (read by int, as
// usageObject reads it) and nothing more, scans to the template's results
// with its own text and counts.
type tailMemo struct {
	ok bool // the template holds an event
	// Recorded by the scan (chunkScanner.tm): where the path's text ends,
	// when part kept it, and the counts' places in the event.
	textEnd int
	nh      int
	holeAt  [6][2]int // start, end
	holeK   [6]uint8  // usageField's k
	// The template: the bytes between the holes, segment j ending at
	// segEnd[j] in buf (segment j comes before hole j, segment nh is the
	// last), and what the scan read.
	segEnd   [7]int
	usage    Usage
	hasUsage bool
	mvNil    bool
	mvLen    int
	mv       [64]byte
	buf      [768]byte
}

// tailMemos recycles the templates of streams that are over (tap.release):
// one per stream, of about 1 KB.
var tailMemos = sync.Pool{New: func() any { return new(tailMemo) }}

// build makes the template of the event s scanned, when its results are
// what replay reproduces: the path's text is the only text kept.
func (m *tailMemo) build(s *chunkScanner) {
	m.ok = false
	if m.textEnd == 0 || len(s.texts) != 1 || s.ph >= 0 || s.depth != 0 {
		return
	}
	n, at := 0, m.textEnd
	for j := 0; j <= m.nh; j++ {
		end := len(s.b)
		if j < m.nh {
			end = m.holeAt[j][0]
		}
		if end < at || n+end-at > len(m.buf) {
			return
		}
		n += copy(m.buf[n:], s.b[at:end])
		m.segEnd[j] = n
		if j < m.nh {
			at = m.holeAt[j][1]
		}
	}
	m.mvNil, m.mvLen = s.modelVersion == nil, len(s.modelVersion)
	if m.mvLen > len(m.mv) {
		return
	}
	copy(m.mv[:], s.modelVersion)
	m.usage, m.hasUsage = s.usage, s.hasUsage
	m.ok = true
}

// replay reads the event from the path's text (s.i, resume) on against
// the template m. It reports false, s as it found it, when the event
// does not match; then the event must be scanned.
func (s *chunkScanner) replay(m *tailMemo) bool {
	i0, scratch := s.i, len(s.scratch)
	v, esc, ok := s.rawOrText(s.rawText)
	if ok && len(v) > 0 {
		u := m.usage
		b, i, prev := s.b, s.i, 0
		for j := 0; ; j++ {
			seg := m.buf[prev:m.segEnd[j]]
			prev = m.segEnd[j]
			if len(b)-i < len(seg) || string(b[i:i+len(seg)]) != string(seg) {
				break
			}
			i += len(seg)
			if j == m.nh {
				if i != len(b) {
					break
				}
				s.i, s.depth, s.resume = i, 0, false
				s.texts = append(s.texts, v)
				if esc {
					s.escaped = 1
				}
				s.usage, s.hasUsage = u, m.hasUsage
				if !m.mvNil {
					s.modelVersion = m.mv[:m.mvLen:m.mvLen]
				}
				return true
			}
			s.i = i
			c, ok := s.int(64)
			if !ok {
				break
			}
			*usageField(&u, m.holeK[j]) = c
			i = s.i
		}
	}
	s.i, s.scratch = i0, s.scratch[:scratch]
	return false
}

// usageField returns the count of u that usageObject stores as its k.
func usageField(u *Usage, k uint8) *int64 {
	switch k {
	case 0:
		return &u.PromptTokens
	case 1:
		return &u.CachedTokens
	case 2:
		return &u.CandidatesTokens
	case 3:
		return &u.ThoughtsTokens
	case 4:
		return &u.ToolUsePromptTokens
	}
	return &u.TotalTokens
}

// pathTokens are the tokens of the path from an event's start to
// candidate 0's first text value, white space around each aside.
var pathTokens = [...]string{"{", `"candidates"`, ":", "[", "{", `"content"`, ":", "{", `"parts"`, ":", "[", "{", `"text"`, ":", `"`}

// pathDepth is the scanner's depth at the text of pathTokens: the top
// object, candidates, the candidate, its content, parts and the part.
const pathDepth = 6

// pathPrefix returns the length of the prefix of b, up to and with the
// opening quote of candidate 0's first text value, when it holds nothing
// but pathTokens and white space; 0 when it does not. The scanner reads
// such a prefix always alike: it enters each container (none is empty,
// as each token is followed by the next), takes candidates, content,
// parts and text as the first member of their objects (none seen
// before, none folded) and is at the text's quote at pathDepth, with
// nothing read yet: no text, no usage, index 0, the first element of
// candidates and of parts. So the scan of b may begin there instead
// (resume), whatever follows.
func pathPrefix(b []byte) int {
	i := 0
	for _, tok := range pathTokens {
		i = skipWS(b, i)
		if len(b)-i < len(tok) || string(b[i:i+len(tok)]) != tok {
			return 0
		}
		i += len(tok)
	}
	return i
}

// enterPath is enter(c), or, on the path resume skips, the container
// entered already.
func (s *chunkScanner) enterPath(c byte) (empty, ok bool) {
	if s.resume {
		return false, true
	}
	return s.enter(c)
}

// memberPath is member, or, on the path resume skips, the path's member
// name (name) read already.
func (s *chunkScanner) memberPath(name []byte) ([]byte, bool) {
	if s.resume {
		return name, true
	}
	return s.member()
}

// The names of the members on the path, as resume takes them.
var (
	pathCandidates = []byte("candidates")
	pathContent    = []byte("content")
	pathParts      = []byte("parts")
	pathText       = []byte("text")
)

// maxScanDepth bounds the nesting the scanner follows; deeper input goes to
// encoding/json (which allows 10000).
const maxScanDepth = 64

// scan reads b. It reports false when b must be decoded by encoding/json
// instead.
func (s *chunkScanner) scan(b []byte, needText bool) bool {
	return s.scanPH(b, needText, -1, false)
}

// scanPH is scan of a skeleton whose placeholder is at ph (chunkScanner.ph).
func (s *chunkScanner) scanPH(b []byte, needText bool, ph int, phText bool) bool {
	return s.scanMemo(b, needText, ph, phText, nil)
}

// scanMemo is scanPH that, with a memo and needText, does not scan the
// prefix of b that every event of a Gemini stream begins with, up to
// candidate 0's first text (pathPrefix): it resumes at the text's
// opening quote in the state that prefix leaves, which is always the
// same. The memo holds the previous such prefix, so that an event that
// begins with the same bytes is recognised by one comparison; and the
// template of the last such event's tail (tailMemo), which replay reads
// the next one against.
func (s *chunkScanner) scanMemo(b []byte, needText bool, ph int, phText bool, m *pathMemo) bool {
	*s = chunkScanner{b: b, needText: needText, texts: s.texts[:0], scratch: s.scratch[:0], ph: ph, phText: phText, rawText: s.rawText}
	if needText && m != nil {
		if n := m.n; n > 0 && len(b) >= n && string(b[:n]) == string(m.b[:n]) {
			s.i, s.depth, s.resume = n-1, pathDepth, true
			if ph < 0 {
				// From the third event of a stream on: its tail may be
				// the last one's but for the text and the usage counts.
				if m.tail != nil && m.tail.ok && s.replay(m.tail) {
					return true
				}
				if m.tail == nil {
					m.tail = tailMemos.Get().(*tailMemo)
				}
				s.tm = m.tail
				s.tm.textEnd, s.tm.nh, s.tm.ok = 0, 0, false
			}
		} else if !m.armed {
			// A response of one object (most unary answers) would pay
			// pathPrefix for nothing: a stream takes it from its second.
			m.armed = true
		} else if n := pathPrefix(b); n > 0 {
			m.n = 0
			if n <= len(m.b) {
				m.n = copy(m.b[:], b[:n])
			}
			s.i, s.depth, s.resume = n-1, pathDepth, true
		}
	}
	s.ws()
	ok := s.top()
	if ok {
		s.ws()
		ok = s.i == len(s.b)
	}
	if s.tm != nil {
		if ok {
			s.tm.build(s)
		}
		s.tm = nil
	}
	return ok
}

func (s *chunkScanner) ws() {
	// Most calls find no white space: one test, then the loop on locals.
	b, i := s.b, s.i
	if i >= len(b) || b[i] > ' ' {
		return
	}
	for i < len(b) && b[i] <= ' ' {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			s.i = i
			return
		}
	}
	s.i = i
}

// peek returns the next byte after white space, or 0 at the end.
func (s *chunkScanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// object reads an object whose opening brace is next, calling member for
// each member with its name (known to be ASCII without escapes) and the
// scanner positioned at the value. member reports false to give up.
func (s *chunkScanner) object(member func(name []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	if s.peek() == '}' {
		s.i++
		s.depth--
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		// A member name is short: read it a byte at a time up to its
		// closing quote. An escape, a control byte (not JSON) or a
		// non-ASCII byte (Unicode case folding could map it onto a field
		// name) ends it too: give up.
		start := s.i + 1
		j := nameRun(s.b, start)
		if j == len(s.b) || s.b[j] != '"' {
			return false
		}
		name := s.b[start:j]
		s.i = j + 1
		if s.peek() != ':' {
			return false
		}
		s.i++
		s.ws()
		if !member(name) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// array reads an array whose opening bracket is next, calling elem with
// the scanner positioned at each element.
func (s *chunkScanner) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	if s.peek() == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		s.ws()
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// field matches a member name against the names of one struct: it returns
// the index of the exact match, -1 for a name no field takes, and -2 for a
// name encoding/json would match case-insensitively (give up). seen
// catches duplicates, which encoding/json merges.
func field(name []byte, names []string, seen *uint32) int {
	// Names are ASCII here (object gives up on others), so only a name of
	// the same length can match one of names, exactly or folded: most
	// names no field takes are told by their length alone.
	if l := len(name); l >= 64 || nameLens&(1<<l) == 0 {
		return -1
	}
	for k, n := range names {
		if len(n) != len(name) {
			continue
		}
		if string(name) == n {
			if *seen&(1<<k) != 0 {
				return -2
			}
			*seen |= 1 << k
			return k
		}
		if asciiEqualFold(name, n) {
			return -2
		}
	}
	return -1
}

// asciiEqualFold reports whether name equals n ignoring ASCII case (and
// only ASCII case: unlike strings.EqualFold, 'ſ' is not 's').
func asciiEqualFold[T string | []byte](name T, n string) bool {
	if len(name) != len(n) {
		return false
	}
	for i := range len(name) {
		if lower(name[i]) != lower(n[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// nameLens has bit l set when a member name field matches has l bytes:
// every list of names passed to field must be here (the ledger's too, in
// ledgerscan.go), or field never finds its names.
var nameLens = func() (m uint64) {
	for _, names := range [][]string{topNames, candidateNames, contentNames, partNames, usageNames, ledgerNames, ledgerContentNames} {
		for _, n := range names {
			m |= 1 << len(n)
		}
	}
	return m
}()

// The member names of tapChunk's structs, in the order the scanner's
// switches expect.
var (
	topNames       = []string{"candidates", "usageMetadata", "modelVersion"}
	topUsageNames  = []string{"usageMetadata", "modelVersion"}
	candidateNames = []string{"index", "content"}
	contentNames   = []string{"parts"}
	partNames      = []string{"text", "thought"}
	usageNames     = []string{"promptTokenCount", "cachedContentTokenCount", "candidatesTokenCount", "thoughtsTokenCount", "toolUsePromptTokenCount", "totalTokenCount"}
)

// The tap's reading of a response is written without closures: object
// and array take a func value per member or element, and calling them
// (and the closures' own frames) was a large part of the scanner's cost
// per SSE event. Each struct is a loop over its members (enter, member,
// next) whose names a switch matches; the old scanner is the oracle of
// TestChunkScannerOracle.

// enter reads the opening bracket open of an object or array, next after
// white space. empty reports that the closing one follows (read too).
func (s *chunkScanner) enter(open byte) (empty, ok bool) {
	b, i := s.b, skipWS(s.b, s.i)
	if i >= len(b) || b[i] != open {
		s.i = i
		return false, false
	}
	if s.depth++; s.depth > maxScanDepth {
		return false, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == open+2 { // '{'+2 == '}', '['+2 == ']'
		s.i = i + 1
		s.depth--
		return true, true
	}
	s.i = i
	return false, true
}

// member reads a member name and its colon, leaving the scanner at the
// value (after white space), as object does before calling member. It
// works on locals, not on s.i through s, and reads the name's first word
// itself: it runs for every member, and most names end in their first
// word or the next.
func (s *chunkScanner) member() ([]byte, bool) {
	b, i := s.b, skipWS(s.b, s.i)
	if i >= len(b) || b[i] != '"' {
		return nil, false
	}
	start := i + 1
	j := start
	if start+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[start:])
		if m := stopMask(x) | x&msb; m != 0 {
			j += bits.TrailingZeros64(m) >> 3
		} else {
			j = nameRun(b, start+8)
		}
	} else {
		j = nameRun(b, start)
	}
	if j >= len(b) || b[j] != '"' {
		return nil, false
	}
	i = j + 1
	if i >= len(b) || b[i] != ':' {
		if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
			return nil, false
		}
	}
	s.i = skipWS(b, i+1)
	return b[start:j], true
}

// skipWS returns the index of the first byte from i in b that is not JSON
// white space, or len(b): ws on locals.
func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// next reads what follows a member or an element: a comma (more) or the
// closing bracket close.
func (s *chunkScanner) next(close byte) (more, ok bool) {
	i := skipWS(s.b, s.i)
	if i < len(s.b) {
		switch s.b[i] {
		case ',':
			s.i = i + 1
			return true, true
		case close:
			s.i = i + 1
			s.depth--
			return false, true
		}
	}
	s.i = i
	return false, false
}

// folds reports whether name, matching none of names exactly, is one of
// them but for ASCII case: encoding/json would take it (field's -2).
func folds(name []byte, names []string) bool {
	for _, n := range names {
		if asciiEqualFold(name, n) {
			return true
		}
	}
	return false
}

// once marks field k seen; it reports false for a name seen before
// (encoding/json merges duplicates: give up).
func once(seen *uint32, k int) bool {
	if *seen&(1<<k) != 0 {
		return false
	}
	*seen |= 1 << k
	return true
}

func (s *chunkScanner) top() bool {
	empty, ok := s.enterPath('{')
	if !ok || empty {
		return ok
	}
	var seen uint32
	for {
		name, ok := s.memberPath(pathCandidates)
		if !ok {
			return false
		}
		k := -1
		switch string(name) {
		case "candidates":
			if s.needText {
				k = 0
			}
		case "usageMetadata":
			k = 1
		case "modelVersion":
			k = 2
		default:
			if s.needText && folds(name, topNames) || !s.needText && folds(name, topUsageNames) {
				return false
			}
		}
		switch k {
		case -1:
			ok = s.skip()
		case 0:
			ok = once(&seen, 0) && s.candidates()
		case 1:
			s.hasUsage = true
			ok = once(&seen, 1) && s.usageObject()
		default:
			var v []byte
			v, ok = s.text()
			s.modelVersion = v
			ok = once(&seen, 2) && ok && v != nil
		}
		if !ok {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// candidates reads the candidates array.
func (s *chunkScanner) candidates() bool {
	empty, ok := s.enterPath('[')
	if !ok || empty {
		return ok
	}
	for {
		s.ws()
		if !s.candidate() {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}

func (s *chunkScanner) candidate() bool {
	empty, ok := s.enterPath('{')
	if !ok || empty {
		return ok
	}
	first := len(s.texts)
	index := int64(0)
	var seen uint32
	for {
		name, ok := s.memberPath(pathContent)
		if !ok {
			return false
		}
		switch string(name) {
		case "index":
			var n int64
			n, ok = s.int(strconv.IntSize)
			index = n
			ok = once(&seen, 0) && ok
		case "content":
			ok = once(&seen, 1) && s.content()
		default:
			ok = !folds(name, candidateNames) && s.skip()
		}
		if !ok {
			return false
		}
		if more, ok := s.next('}'); !more {
			if index != 0 {
				s.texts = s.texts[:first]
				s.escaped &= 1<<first - 1
				if s.tm != nil {
					s.tm.textEnd = 0 // the path's text may be gone
				}
			}
			return ok
		}
	}
}

// content reads a candidate's content object.
func (s *chunkScanner) content() bool {
	empty, ok := s.enterPath('{')
	if !ok || empty {
		return ok
	}
	var seen uint32
	for {
		name, ok := s.memberPath(pathParts)
		if !ok {
			return false
		}
		if string(name) == "parts" {
			ok = once(&seen, 0) && s.parts()
		} else {
			ok = !folds(name, contentNames) && s.skip()
		}
		if !ok {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// parts reads a content's parts array.
func (s *chunkScanner) parts() bool {
	empty, ok := s.enterPath('[')
	if !ok || empty {
		return ok
	}
	for {
		s.ws()
		if !s.part() {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}

func (s *chunkScanner) part() bool {
	empty, ok := s.enterPath('{')
	if !ok {
		return false
	}
	var text []byte
	thought, ph, escaped := false, false, false
	var seen uint32
	textEnd := 0 // the path's text's end, for the template (tm)
	for !empty {
		name, ok := pathText, true
		if s.resume {
			s.resume = false // the rest is read as ever
			textEnd = -1
		} else {
			name, ok = s.member()
		}
		if !ok {
			return false
		}
		switch string(name) {
		case "text":
			if !once(&seen, 0) {
				return false
			}
			if s.i == s.ph {
				_, ok = s.str()
				ph = true
			} else {
				var v []byte
				v, escaped, ok = s.rawOrText(s.rawText)
				text = v
				ok = ok && v != nil
				if textEnd < 0 {
					textEnd = s.i
				}
			}
		case "thought":
			if !once(&seen, 1) {
				return false
			}
			switch b := s.b[s.i:]; {
			case len(b) >= 4 && string(b[:4]) == "true":
				thought = true
				s.i += 4
			case len(b) >= 5 && string(b[:5]) == "false":
				s.i += 5
			default:
				ok = false
			}
		default:
			ok = !folds(name, partNames) && s.skip()
		}
		if !ok {
			return false
		}
		var more bool
		if more, ok = s.next('}'); !ok {
			return false
		}
		empty = !more
	}
	switch {
	case thought:
	case ph:
		if s.phText {
			s.texts = append(s.texts, nil)
		}
	case len(text) > 0:
		if escaped {
			if len(s.texts) < 64 {
				s.escaped |= 1 << len(s.texts)
			} else {
				text = s.unquote(text)
			}
		}
		if textEnd > 0 && s.tm != nil {
			s.tm.textEnd = textEnd
		}
		s.texts = append(s.texts, text)
	}
	return true
}

func (s *chunkScanner) usageObject() bool {
	empty, ok := s.enter('{')
	if !ok || empty {
		return ok
	}
	var seen uint32
	for {
		name, ok := s.member()
		if !ok {
			return false
		}
		var p *int64
		k := 0
		switch string(name) {
		case "promptTokenCount":
			p, k = &s.usage.PromptTokens, 0
		case "cachedContentTokenCount":
			p, k = &s.usage.CachedTokens, 1
		case "candidatesTokenCount":
			p, k = &s.usage.CandidatesTokens, 2
		case "thoughtsTokenCount":
			p, k = &s.usage.ThoughtsTokens, 3
		case "toolUsePromptTokenCount":
			p, k = &s.usage.ToolUsePromptTokens, 4
		case "totalTokenCount":
			p, k = &s.usage.TotalTokens, 5
		}
		if p != nil {
			var n int64
			at := s.i
			n, ok = s.int(64)
			*p = n
			ok = once(&seen, k) && ok
			if s.tm != nil && s.tm.nh < len(s.tm.holeAt) {
				s.tm.holeAt[s.tm.nh] = [2]int{at, s.i}
				s.tm.holeK[s.tm.nh] = uint8(k)
				s.tm.nh++
			}
		} else {
			ok = !folds(name, usageNames) && s.skip()
		}
		if !ok {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// int reads a number that encoding/json would store in an integer of the
// given size: no fraction, no exponent, in range. Its digits are read
// and added up in the one pass (number's grammar for an integer: an
// optional minus, then 0 or a digit 1-9 and more digits).
func (s *chunkScanner) int(bits int) (int64, bool) {
	b, i := s.b, s.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var n int64
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			n = n*10 + int64(b[i]-'0') // wraps past 18 digits: not used then
			i++
		}
	default:
		return 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, false // a fraction or an exponent: not an integer
	}
	if i-start > 18 {
		// Might not fit: strconv decides, as encoding/json does.
		n, err := strconv.ParseInt(string(b[s.i:i]), 10, bits)
		s.i = i
		return n, err == nil
	}
	s.i = i
	if neg {
		n = -n
	}
	if bits < 64 && (n < -1<<(bits-1) || n > 1<<(bits-1)-1) {
		return 0, false
	}
	return n, true
}

// text reads a string value and returns it unescaped, or nil, false when
// the value is not a string (null included).
func (s *chunkScanner) text() ([]byte, bool) {
	v, _, ok := s.rawOrText(false)
	return v, ok
}

// rawOrText is text that, with raw, returns a string that needs
// unescaping (escapes, invalid UTF-8) as it is, inside its quotes,
// reporting escaped.
func (s *chunkScanner) rawOrText(raw bool) (v []byte, escaped, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	start := s.i
	esc, ascii, ok := s.strASCII()
	if !ok {
		return nil, false, false
	}
	in := s.b[start+1 : s.i-1]
	if !esc && (ascii || utf8.Valid(in)) {
		return in, false, true
	}
	if raw {
		return in, true, true
	}
	return s.unquote(in), false, true
}

// unquote returns the inside of a valid JSON string literal unescaped.
func (s *chunkScanner) unquote(raw []byte) []byte {
	// Unescaped into the scratch buffer the scanner keeps between scans,
	// grown once to what the text needs at most (but for invalid UTF-8):
	// appending a 256 KB text grew it by doubling, a megabyte in all.
	start := len(s.scratch)
	s.scratch = appendUnquoted(growScratch(s.scratch, len(raw)), raw)
	return s.scratch[start:len(s.scratch):len(s.scratch)]
}

// scratchBuffers recycles the scanner's scratch buffers of more than
// minPooledScratch bytes (up to maxPooledObj) between responses: a large
// answer's text, unescaped, is a large buffer each time, and fresh memory
// costs its page faults as well as its zeroing.
var scratchBuffers sync.Pool

const minPooledScratch = 64 << 10

// growScratch returns b with room for n more bytes, from scratchBuffers
// when it must grow past minPooledScratch. b itself is not recycled: the
// texts of the scan may point into it.
func growScratch(b []byte, n int) []byte {
	need := len(b) + n
	if cap(b) >= need {
		return b
	}
	if need > minPooledScratch && need <= maxPooledObj {
		if p, ok := scratchBuffers.Get().(*[]byte); ok {
			if cap(*p) >= need {
				return append((*p)[:0], b...)
			}
			scratchBuffers.Put(p)
		}
	}
	return slices.Grow(b, n)
}

// putScratch recycles a large scratch buffer whose texts were copied out.
func putScratch(b []byte) {
	if cap(b) > minPooledScratch && cap(b) <= maxPooledObj {
		b = b[:0]
		scratchBuffers.Put(&b)
	}
}

// str skips the string that starts at s.i, validating it; esc reports
// whether it holds escapes.
func (s *chunkScanner) str() (esc, ok bool) {
	esc, _, ok = s.strASCII()
	return esc, ok
}

// strASCII is str that also reports whether the string's bytes are all
// ASCII, so that rawOrText need not test them for valid UTF-8 again.
func (s *chunkScanner) strASCII() (esc, ascii, ok bool) {
	i := s.i + 1
	var or uint64
	for {
		j, o := plainRunOr(s.b, i)
		or |= o
		if j == len(s.b) || s.b[j] < ' ' {
			return false, false, false
		}
		if s.b[j] == '"' {
			s.i = j + 1
			return esc, or&msb == 0, true
		}
		esc = true
		if j+1 >= len(s.b) {
			return false, false, false
		}
		switch s.b[j+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = j + 2
		case 'u':
			if j+6 > len(s.b) {
				return false, false, false
			}
			for _, c := range s.b[j+2 : j+6] {
				if !isHex(c) {
					return false, false, false
				}
			}
			i = j + 6
		default:
			return false, false, false
		}
	}
}

// Word-at-a-time byte tests (Hacker's Delight 6-1; "bit twiddling
// hacks": determine if a word has a byte less than n). They are exact
// about whether such a byte exists, which is all the loops below use.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasLess reports whether a byte of x is below n (n <= 128).
func hasLess(x uint64, n byte) bool { return (x-lsb*uint64(n))&^x&msb != 0 }

// hasByte reports whether a byte of x is c.
func hasByte(x uint64, c byte) bool { return hasLess(x^(lsb*uint64(c)), 1) }

// plainRun returns the index of the first quote, backslash or control byte
// in b from i, or len(b); eight bytes at a time over the plain text, the
// stop itself found in its word by stopMask, not byte by byte.
func plainRun(b []byte, i int) int {
	j, _ := plainRunOr(b, i)
	return j
}

// plainRunOr is plainRun that also returns the bytes before the stop
// ORed together (in their words' places): its 0x80 bits tell whether any
// is not ASCII.
func plainRunOr(b []byte, i int) (int, uint64) {
	var or uint64
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := stopMask(x); m != 0 {
			k := bits.TrailingZeros64(m) // 8 × the stop's byte + 7
			return i + k>>3, or | x&(1<<(k&^7)-1)
		}
		or |= x
	}
	for ; i < len(b); i++ {
		if strStop[b[i]] {
			return i, or
		}
		or |= uint64(b[i])
	}
	return i, or
}

// nameRun is plainRun for a member name: it also stops at a byte >= 0x80
// (nameStop).
func nameRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := stopMask(x) | x&msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if nameStop[b[i]] {
			return i
		}
	}
	return i
}

// stopMask has 0x80 in the byte of x that is the first quote, backslash
// or control byte (strStop), and perhaps in bytes above it, but in none
// below: each subtraction's borrow can only mark a byte above one it
// marks rightly (Hacker's Delight 6-1, "find the first zero byte"), so the
// lowest mark is the first stop, which is all plainRun and nameRun use.
// (Testing each byte on its own, as the old stopMask did, took twice
// the operations: tapjson_oracle_test.go.)
func stopMask(x uint64) uint64 {
	q, e := x^(lsb*'"'), x^(lsb*'\\')
	return ((q-lsb)&^q | (e-lsb)&^e | (x-lsb*' ')&^x) & msb
}

// asciiRun returns the index of the first backslash or non-ASCII byte in
// b from i, or len(b).
func asciiRun(b []byte, i int) int {
	for {
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			if x&msb != 0 || hasByte(x, '\\') {
				break
			}
			i += 8
		}
		for end := min(i+8, len(b)); i < end; i++ {
			if b[i] == '\\' || b[i] >= utf8.RuneSelf {
				return i
			}
		}
		if i == len(b) {
			return i
		}
	}
}

// strStop marks the bytes that end a run of plain string content.
var strStop = func() (t [256]bool) {
	for c := range ' ' {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// nameStop marks the bytes that end a member name the scanner reads: the
// quote, and the backslash, control and non-ASCII bytes it gives up on.
var nameStop = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c < ' ' || c == '"' || c == '\\' || c >= utf8.RuneSelf
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number skips a JSON number; integer reports that it has neither a
// fraction nor an exponent.
func (s *chunkScanner) number() (integer, ok bool) {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return false, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return false, false
		}
	}
	s.i = i
	return integer, true
}

// skip validates and skips any value, as object and array with skip for
// every member and element would: a loop, with the kinds of the
// containers it is inside as bits of a word (maxScanDepth bounds them),
// instead of a closure per container.
func (s *chunkScanner) skip() bool {
	var objs uint64 // bit 0: the innermost open container is an object; bit 1 the one around it…
	d := 0
	for {
		// A value at s.i.
		if s.i >= len(s.b) {
			return false
		}
		switch c := s.b[s.i]; c {
		case '{', '[':
			empty, ok := s.enter(c)
			if !ok {
				return false
			}
			if !empty {
				d++
				objs <<= 1
				if c == '{' {
					objs |= 1
					if _, ok := s.member(); !ok {
						return false
					}
				} else {
					s.ws()
				}
				continue
			}
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
		case 't':
			if !s.lit("true") {
				return false
			}
		case 'f':
			if !s.lit("false") {
				return false
			}
		case 'n':
			if !s.lit("null") {
				return false
			}
		default:
			if _, ok := s.number(); !ok {
				return false
			}
		}
		// After a value: close the containers it ends, or go on to the
		// next member or element.
		for {
			if d == 0 {
				return true
			}
			obj := objs&1 != 0
			close := byte(']')
			if obj {
				close = '}'
			}
			more, ok := s.next(close)
			if !ok {
				return false
			}
			if more {
				if obj {
					if _, ok := s.member(); !ok {
						return false
					}
				} else {
					s.ws()
				}
				break
			}
			d--
			objs >>= 1
		}
	}
}

// lit reads the literal l (true, false, null).
func (s *chunkScanner) lit(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// appendUnquoted appends the inside of a valid JSON string literal to b,
// unescaped exactly as encoding/json does: invalid UTF-8 and unpaired
// surrogates become U+FFFD.
func appendUnquoted(b, s []byte) []byte {
	for r := 0; r < len(s); {
		// Copy a run of ASCII without escapes at once.
		j := asciiRun(s, r)
		b = append(b, s[r:j]...)
		if r = j; r == len(s) {
			break
		}
		switch c := s[r]; {
		case c == '\\':
			switch e := s[r+1]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := hex4(s[r+2 : r+6])
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := rune(-1)
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						rr1 = hex4(s[r+2 : r+6])
					}
					if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, e)
			}
			r += 2
		default:
			rr, size := utf8.DecodeRune(s[r:])
			if rr == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, rr)
			} else {
				b = append(b, s[r:r+size]...)
			}
			r += size
		}
	}
	return b
}

// hex4 decodes four hex digits (validated by str).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r*16 + rune(c)
	}
	return r
}
