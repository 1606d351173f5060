package proxy

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// The tap's chunk scanner before it was written without closures (a func
// value per member and per element, object and array calling them): kept
// as the oracle of TestChunkScannerOracle and FuzzChunkScannerOracle, which
// compare every result of the two. The primitives the rewrite changed are
// kept old here too (skip, str, plainRun, nameRun, stopMask); ws, peek,
// int, number, unquote and field are shared, unchanged.

func (s *chunkScanner) scanPHOracle(b []byte, needText bool, ph int, phText bool) bool {
	*s = chunkScanner{b: b, needText: needText, texts: s.texts[:0], scratch: s.scratch[:0], ph: ph, phText: phText, rawText: s.rawText}
	s.ws()
	if !s.topOracle() {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

func (s *chunkScanner) topOracle() bool {
	names := topUsageNames
	if s.needText {
		names = topNames
	}
	var seen uint32
	return s.objectOracle(func(name []byte) bool {
		k := field(name, names, &seen)
		if k >= 0 && !s.needText {
			k++ // topUsageNames is topNames without candidates
		}
		switch k {
		case -2:
			return false
		case -1:
			return s.skipOracle()
		case 0:
			return s.array(s.candidateOracle)
		case 1:
			s.hasUsage = true
			return s.usageObjectOracle()
		default:
			v, ok := s.textOracle()
			s.modelVersion = v
			return ok && v != nil
		}
	})
}

func (s *chunkScanner) candidateOracle() bool {
	first := len(s.texts)
	index := int64(0)
	var seen uint32
	ok := s.objectOracle(func(name []byte) bool {
		switch field(name, candidateNames, &seen) {
		case -2:
			return false
		case -1:
			return s.skipOracle()
		case 0:
			n, ok := s.int(strconv.IntSize)
			index = n
			return ok
		default:
			var seen uint32
			return s.objectOracle(func(name []byte) bool {
				switch field(name, contentNames, &seen) {
				case -2:
					return false
				case -1:
					return s.skipOracle()
				default:
					return s.array(s.partOracle)
				}
			})
		}
	})
	if index != 0 {
		s.texts = s.texts[:first]
		s.escaped &= 1<<first - 1
	}
	return ok
}

func (s *chunkScanner) partOracle() bool {
	var text []byte
	thought, ph, escaped := false, false, false
	var seen uint32
	ok := s.objectOracle(func(name []byte) bool {
		switch field(name, partNames, &seen) {
		case -2:
			return false
		case -1:
			return s.skipOracle()
		case 0:
			if s.i == s.ph {
				_, ok := s.strOracle()
				ph = true
				return ok
			}
			v, esc, ok := s.rawOrTextOracle(s.rawText)
			text, escaped = v, esc
			return ok && v != nil
		default:
			switch {
			case bytes.HasPrefix(s.b[s.i:], []byte("true")):
				thought = true
				s.i += 4
			case bytes.HasPrefix(s.b[s.i:], []byte("false")):
				s.i += 5
			default:
				return false
			}
			return true
		}
	})
	switch {
	case !ok || thought:
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
		s.texts = append(s.texts, text)
	}
	return ok
}

func (s *chunkScanner) usageObjectOracle() bool {
	var seen uint32
	return s.objectOracle(func(name []byte) bool {
		k := field(name, usageNames, &seen)
		switch k {
		case -2:
			return false
		case -1:
			return s.skipOracle()
		}
		n, ok := s.int(64)
		switch k {
		case 0:
			s.usage.PromptTokens = n
		case 1:
			s.usage.CachedTokens = n
		case 2:
			s.usage.CandidatesTokens = n
		case 3:
			s.usage.ThoughtsTokens = n
		case 4:
			s.usage.ToolUsePromptTokens = n
		default:
			s.usage.TotalTokens = n
		}
		return ok
	})
}

func (s *chunkScanner) objectOracle(member func(name []byte) bool) bool {
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
		j := nameRunOracle(s.b, start)
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

func (s *chunkScanner) skipOracle() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '{':
		return s.objectOracle(func([]byte) bool { return s.skipOracle() })
	case '[':
		return s.array(s.skipOracle)
	case '"':
		_, ok := s.strOracle()
		return ok
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
				s.i += len(lit)
				return true
			}
		}
		return false
	default:
		_, ok := s.number()
		return ok
	}
}

func plainRunOracle(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := stopMaskOracle(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if strStop[b[i]] {
			return i
		}
	}
	return i
}

func nameRunOracle(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := stopMaskOracle(x) | x&msb; m != 0 {
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

func stopMaskOracle(x uint64) uint64 {
	return ^(nonZero(x^lsb*'"') & nonZero(x^lsb*'\\') & nonZero(x&(lsb*0xe0))) & msb
}

func (s *chunkScanner) strOracle() (esc, ok bool) {
	i := s.i + 1
	for {
		j := plainRunOracle(s.b, i)
		if j == len(s.b) || s.b[j] < ' ' {
			return false, false
		}
		if s.b[j] == '"' {
			s.i = j + 1
			return esc, true
		}
		esc = true
		if j+1 >= len(s.b) {
			return false, false
		}
		switch s.b[j+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = j + 2
		case 'u':
			if j+6 > len(s.b) {
				return false, false
			}
			for _, c := range s.b[j+2 : j+6] {
				if !isHex(c) {
					return false, false
				}
			}
			i = j + 6
		default:
			return false, false
		}
	}
}

func (s *chunkScanner) rawOrTextOracle(raw bool) (v []byte, escaped, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	start := s.i
	esc, ok := s.strOracle()
	if !ok {
		return nil, false, false
	}
	in := s.b[start+1 : s.i-1]
	if !esc && utf8.Valid(in) {
		return in, false, true
	}
	if raw {
		return in, true, true
	}
	return s.unquote(in), false, true
}

func (s *chunkScanner) textOracle() ([]byte, bool) {
	v, _, ok := s.rawOrTextOracle(false)
	return v, ok
}

// oracleResult is what one scan yields, for comparing the two scanners.
type oracleResult struct {
	OK           bool
	Usage        Usage
	HasUsage     bool
	ModelVersion []byte
	Texts        [][]byte
	NilTexts     []bool
	Escaped      uint64
	End, Depth   int
}

func oracleScan(b []byte, needText, rawText bool, ph int, phText, old bool) oracleResult {
	s := chunkScanner{rawText: rawText}
	var ok bool
	if old {
		ok = s.scanPHOracle(b, needText, ph, phText)
	} else {
		ok = s.scanPH(b, needText, ph, phText)
	}
	if !ok {
		return oracleResult{}
	}
	r := oracleResult{OK: true, Usage: s.usage, HasUsage: s.hasUsage, ModelVersion: s.modelVersion, Escaped: s.escaped, End: s.i, Depth: s.depth}
	for _, t := range s.texts {
		r.Texts = append(r.Texts, append([]byte{}, t...))
		r.NilTexts = append(r.NilTexts, t == nil)
	}
	return r
}

// checkOracleScan compares the two scanners on b for every kind of scan
// the tap makes: with and without text, text left escaped or not, and a
// placeholder at each string's opening quote (standing for a text or not).
func checkOracleScan(t *testing.T, b []byte) {
	t.Helper()
	phs := []int{-1}
	for i, c := range b {
		if c == '"' && len(phs) < 12 {
			phs = append(phs, i)
		}
	}
	for _, needText := range []bool{true, false} {
		for _, rawText := range []bool{false, true} {
			for _, ph := range phs {
				for _, phText := range []bool{false, true} {
					if ph < 0 && phText {
						continue
					}
					got := oracleScan(b, needText, rawText, ph, phText, false)
					want := oracleScan(b, needText, rawText, ph, phText, true)
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("scan(%q, needText %v, rawText %v, ph %d, phText %v): new and old scanners differ (-old +new):\n%s", b, needText, rawText, ph, phText, diff)
					}
				}
			}
		}
	}
}

// respGen writes Gemini-shaped response objects: members in any order,
// known and unknown, folded and repeated names, every kind of value where
// the tap reads one, texts with escapes, runes, invalid UTF-8 and control
// bytes, thought parts, function calls, nesting, white space anywhere.
type respGen struct {
	rng *rand.Rand
	b   []byte
}

func (g *respGen) n(k int) int { return g.rng.IntN(k) }

func (g *respGen) ws() {
	if g.n(4) == 0 {
		g.b = append(g.b, []string{" ", "\n", "\t", "\r\n  ", "\f", "\v"}[g.n(6)]...)
	}
}

func (g *respGen) name(names ...string) {
	n := names[g.n(len(names))]
	switch g.n(14) {
	case 0:
		n = strings.ToUpper(n[:1]) + n[1:]
	case 1:
		n = n[:len(n)-1] + "z"
	case 2:
		n = `\u0074` + n[1:]
	case 3:
		n = "ſ" + n[1:]
	}
	g.ws()
	g.b = append(g.b, '"')
	g.b = append(g.b, n...)
	g.b = append(g.b, '"')
	g.ws()
	g.b = append(g.b, ':')
	g.ws()
}

func (g *respGen) str() {
	g.b = append(g.b, '"')
	pieces := []string{"word", " ", "  ", `\n`, `\"`, `\\`, `\/`, `\b`, `\f`, `\r`, `\t`, `\u00e9`, `\u003c`, `\ud83d\ude00`, `\ud83d`, `\ude00x`, `\uD83D\uDE00`, "é", "日本", "\xff", "\xe2\x82", "\x01", `\x`, `\u12`, "abcdefghijklmnop", "\u2003"}
	for range g.n(12) {
		p := pieces[g.n(len(pieces))]
		if g.n(8) != 0 && (p == "\x01" || p == `\x` || p == `\u12`) {
			p = "ok"
		}
		g.b = append(g.b, p...)
	}
	g.b = append(g.b, '"')
}

func (g *respGen) num() {
	g.b = append(g.b, []string{"0", "1", "-1", "7", "42", "-0", "1342", "01", "1.0", "1e3", "2.5E-2", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "4294967296", "999999999999999999", "1000000000000000000", "-", "1.", "12345678901234567890"}[g.n(20)]...)
}

func (g *respGen) value(depth int) {
	g.ws()
	switch k := g.n(9); {
	case k == 0 && depth < 70:
		g.b = append(g.b, '{')
		for i := range g.n(4) {
			if i > 0 {
				g.b = append(g.b, ',')
			}
			g.name("a", "name", "args", "text", "x\\\"y")
			g.value(depth + 1)
		}
		g.ws()
		g.b = append(g.b, '}')
	case k == 1 && depth < 70:
		g.b = append(g.b, '[')
		for i := range g.n(4) {
			if i > 0 {
				g.b = append(g.b, ',')
			}
			g.value(depth + 1)
		}
		g.ws()
		g.b = append(g.b, ']')
	case k == 2:
		g.str()
	case k == 3:
		g.num()
	default:
		g.b = append(g.b, []string{"true", "false", "null", "nul", "tru"}[g.n(5)]...)
	}
	g.ws()
}

// members writes an object of n members, each written by one of the
// funcs (chosen at random).
func (g *respGen) object(n int, members ...func()) {
	g.ws()
	g.b = append(g.b, '{')
	for i := range n {
		if i > 0 {
			g.b = append(g.b, ',')
		}
		members[g.n(len(members))]()
	}
	g.ws()
	g.b = append(g.b, '}')
	g.ws()
}

func (g *respGen) array(n int, elem func()) {
	g.ws()
	g.b = append(g.b, '[')
	for i := range n {
		if i > 0 {
			g.b = append(g.b, ',')
		}
		elem()
	}
	g.ws()
	g.b = append(g.b, ']')
	g.ws()
}

func (g *respGen) other() {
	g.name("role", "finishReason", "responseId", "functionCall", "thoughtSignature", "safetyRatings", "promptTokensDetails", "candidatez")
	g.value(0)
}

func (g *respGen) part() {
	g.object(g.n(4),
		func() { g.name("text"); g.valueOr(g.str) },
		func() {
			g.name("thought")
			g.valueOr(func() { g.b = append(g.b, []string{"true", "false"}[g.n(2)]...) })
		},
		func() {
			g.name("functionCall")
			g.object(2, func() { g.name("name"); g.str() }, func() { g.name("args"); g.value(1) })
		},
		g.other)
}

// valueOr writes v, or (one time in six) any value.
func (g *respGen) valueOr(v func()) {
	if g.n(6) == 0 {
		g.value(0)
		return
	}
	v()
}

func (g *respGen) candidate() {
	g.object(g.n(5),
		func() { g.name("index"); g.valueOr(g.num) },
		func() {
			g.name("content")
			g.valueOr(func() {
				g.object(g.n(3), func() { g.name("parts"); g.valueOr(func() { g.array(g.n(5), g.part) }) }, g.other)
			})
		},
		g.other)
}

func (g *respGen) usage() {
	g.object(g.n(8), func() {
		g.name(usageNames...)
		g.valueOr(g.num)
	}, g.other)
}

func (g *respGen) answer() []byte {
	g.b = g.b[:0]
	g.object(g.n(6),
		func() { g.name("candidates"); g.valueOr(func() { g.array(g.n(3), g.candidate) }) },
		func() { g.name("usageMetadata"); g.valueOr(g.usage) },
		func() { g.name("modelVersion"); g.valueOr(g.str) },
		g.other)
	switch g.n(10) {
	case 0: // cut short
		g.b = g.b[:g.n(len(g.b)+1)]
	case 1: // a byte changed
		g.b[g.n(len(g.b))] = "{}[],:\"\\ x0"[g.n(11)]
	case 2: // trailing data
		g.b = append(g.b, " {}"...)
	}
	return g.b
}

// TestChunkScannerOracle compares the scanner with the old one on
// generated answers (valid and not), the seeds and the recorded responses.
func TestChunkScannerOracle(t *testing.T) {
	for _, tc := range scanSeeds {
		checkOracleScan(t, []byte(tc.in))
	}
	for _, o := range recordedObjects(t) {
		checkOracleScan(t, o)
	}
	g := &respGen{rng: rand.New(rand.NewPCG(11, 17))}
	took := 0
	for range 20000 {
		b := g.answer()
		checkOracleScan(t, b)
		if oracleScan(b, true, false, -1, false, true).OK {
			took++
		}
	}
	if took < 2000 {
		t.Errorf("the old scanner took %d of 20000 generated answers: too few to compare on", took)
	}
	// Deep nesting around maxScanDepth, in skipped values and in the
	// tap's own.
	for d := 60; d <= 68; d++ {
		checkOracleScan(t, []byte(`{"a":`+strings.Repeat(`[`, d)+strings.Repeat(`]`, d)+`}`))
		checkOracleScan(t, []byte(`{"a":`+strings.Repeat(`{"b":`, d)+`1`+strings.Repeat(`}`, d)+`}`))
		checkOracleScan(t, []byte(`{"candidates":[{"content":{"parts":[{"functionCall":`+strings.Repeat(`[{"x":`, d/2)+`0`+strings.Repeat(`}]`, d/2)+`,"text":"t"}]}}]}`))
	}
}

// FuzzChunkScannerOracle compares the scanner with the old one on any
// input.
func FuzzChunkScannerOracle(f *testing.F) {
	for _, tc := range scanSeeds {
		f.Add([]byte(tc.in))
	}
	for _, o := range recordedObjects(f) {
		f.Add(o)
	}
	g := &respGen{rng: rand.New(rand.NewPCG(3, 5))}
	for range 50 {
		f.Add(append([]byte{}, g.answer()...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkOracleScan(t, b)
	})
}

// nonZero has 0x80 in each byte of x that is not zero (and other bits
// below it): the low seven bits' sum carries into the top bit without
// crossing into the next byte (Hacker's Delight 6-1).
func nonZero(x uint64) uint64 {
	const lo7 = 0x7f7f7f7f7f7f7f7f
	return (x&lo7 + lo7) | x
}
