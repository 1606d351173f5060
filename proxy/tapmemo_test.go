package proxy

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The scanner's memo (chunkScanner.scanMemo: the path prefix resumed, the
// tail replayed from its template) against the scan of every event whole:
// the old scanner (tapjson_oracle_test.go) for each event of a sequence
// scanned with one memo, and the tap with and without the memo (noMemo)
// on whole streams in any writes. (A prefix compared one byte short, the
// text's quote left out, is not a mutation these can fail: the scan's ws
// steps over white space there, and anything else is not a string, which
// part rejects as the whole scan does.)

// memoScanResult is oracleScan of one event with the memo m, carried from
// event to event as the tap carries it.
func memoScanResult(s *chunkScanner, m *pathMemo, b []byte, rawText bool, ph int, phText bool) oracleResult {
	s.rawText = rawText
	if !s.scanMemo(b, true, ph, phText, m) {
		return oracleResult{}
	}
	r := oracleResult{OK: true, Usage: s.usage, HasUsage: s.hasUsage, Escaped: s.escaped, End: s.i, Depth: s.depth}
	if s.modelVersion != nil {
		r.ModelVersion = append([]byte{}, s.modelVersion...)
	}
	for _, t := range s.texts {
		r.Texts = append(r.Texts, append([]byte{}, t...))
		r.NilTexts = append(r.NilTexts, t == nil)
	}
	return r
}

// checkMemoSeq scans events in order with one memo, as a stream's tap
// does, and compares every result with the old scanner's on the event
// alone; for each kind of scan the tap makes with text (left escaped or
// not, a placeholder at the path's text or not). It returns how many
// events were replayed from the template.
func checkMemoSeq(t *testing.T, events [][]byte) int {
	t.Helper()
	replayed := 0
	for _, rawText := range []bool{false, true} {
		for _, phMode := range []int{0, 1, 2} {
			var s chunkScanner
			var m pathMemo
			for k, e := range events {
				ph, phText := -1, false
				if phMode > 0 {
					if n := pathPrefix(e); n > 0 {
						ph, phText = n-1, phMode == 2
					}
				}
				if ph < 0 && m.tail != nil && m.tail.ok && m.n > 0 && len(e) >= m.n && bytes.Equal(e[:m.n], m.b[:m.n]) {
					sc := chunkScanner{b: e, i: m.n - 1, rawText: rawText, ph: -1}
					if sc.replay(m.tail) {
						replayed++
					}
				}
				got := memoScanResult(&s, &m, e, rawText, ph, phText)
				want := oracleScan(e, true, rawText, ph, phText, true)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("event %d of %d (%q), rawText %v, ph %d, phText %v: memo and old scanner differ (-old +memo):\n%s\nevents: %q", k, len(events), e, rawText, ph, phText, diff, events)
				}
			}
		}
	}
	return replayed
}

// sseEvents returns the data of the SSE events in the file at path.
func sseEvents(tb testing.TB, path string) [][]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	for line := range bytes.Lines(b) {
		if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data: ")); ok {
			out = append(out, d)
		}
	}
	return out
}

// geminiEvent is an event as Gemini streams it.
func geminiEvent(text string, cand, total int) string {
	return `{"candidates": [{"content": {"parts": [{"text": "` + text + `"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 1342,"candidatesTokenCount": ` + strconv.Itoa(cand) + `,"totalTokenCount": ` + strconv.Itoa(total) + `,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 1342}],"thoughtsTokenCount": 188},"modelVersion": "gemini-2.5-flash","responseId": "kX8pZ7fDJqmXz7IP0ZTcuAk"}`
}

// memoVariants are events that differ from geminiEvent's shape in one
// way each, where the memo's prefix or the tail's template must not be
// taken or must be taken with care.
func memoVariants() []string {
	base := geminiEvent("one", 5, 1500)
	return []string{
		base,
		geminiEvent("", 5, 1500), // an empty text: not kept
		geminiEvent(`esc\n\"aped\u00e9`, 6, 1501),                   // escapes
		geminiEvent("caf\xc3\xa9 \xff", 7, 1502),                    // a rune, invalid UTF-8
		geminiEvent("x", 123456789012345678, 0),                     // 18 digits
		geminiEvent("x", 1234567890123456789, -1),                   // 19 digits: strconv
		strings.Replace(base, `: 5,`, `: 12345678901234567890,`, 1), // out of range
		strings.Replace(base, `: 5,`, `: -9223372036854775808,`, 1),
		strings.Replace(base, `1342,"candidates`, `1342.0,"candidates`, 1), // a fraction in a count
		strings.Replace(base, `: 5,`, `: 05,`, 1),                          // a leading zero
		strings.Replace(base, `: 5,`, `: -0,`, 1),
		strings.Replace(base, `: 5,`, `: 5e1,`, 1),
		strings.Replace(base, `: 5,`, `: "5",`, 1),
		strings.Replace(base, `: 5,`, `: null,`, 1),
		strings.Replace(base, `"index": 0`, `"index": 1`, 1), // another candidate's text
		strings.Replace(base, `"index": 0`, `"index": 00`, 1),
		strings.Replace(base, `"text": "one"}`, `"text": "one", "thought": true}`, 1),
		strings.Replace(base, `"text": "one"}`, `"text": "one", "thought": false}`, 1),
		strings.Replace(base, `"text": "one"}`, `"text": "one"},{"text": "two"}`, 1), // a second part
		strings.Replace(base, `"text": "one"}`, `"text": "one"},{"text": "two", "thought": true}`, 1),
		strings.Replace(base, `"text": "one"}`, `"text": "one", "text": "two"}`, 1), // repeated
		strings.Replace(base, `"text": "one"}`, `"text": "one", "Text": "two"}`, 1), // folded
		strings.Replace(base, `"text": "one"}`, `"text": "one"}]},"index": 0},{"content": {"parts": [{"text": "cand1"}`, 1),
		strings.Replace(base, `"index": 0}]`, `"index": 1},{"content": {"parts": [{"text": "cand1"}]}}]`, 1),
		strings.Replace(base, `"index": 0}]`, `"index": 0},{"content": {"parts": [{"text": "cand1"}]},"index": 1}]`, 1),
		strings.Replace(base, `"thoughtsTokenCount": 188`, `"thoughtsTokenCount": 188,"totalTokenCount": 3`, 1), // repeated count
		strings.Replace(base, `"thoughtsTokenCount": 188`, `"thoughtsTokenCount": 188,"cachedContentTokenCount": 9,"toolUsePromptTokenCount": 4`, 1),
		strings.Replace(base, `"thoughtsTokenCount": 188`, `"ThoughtsTokenCount": 188`, 1),
		strings.Replace(base, `"modelVersion": "gemini-2.5-flash"`, `"modelVersion": "gemini\u002d2.5"`, 1),
		strings.Replace(base, `"modelVersion": "gemini-2.5-flash"`, `"modelVersion": ""`, 1),
		strings.Replace(base, `"modelVersion": "gemini-2.5-flash"`, `"modelVersion": null`, 1),
		strings.Replace(base, `,"modelVersion": "gemini-2.5-flash"`, ``, 1),
		strings.Replace(base, `"modelVersion": "gemini-2.5-flash"`, `"modelVersion": "`+strings.Repeat("m", 80)+`"`, 1),
		strings.Replace(base, `"responseId": "kX8pZ7fDJqmXz7IP0ZTcuAk"`, `"responseId": "`+strings.Repeat("r", 900)+`"`, 1), // a tail over the template's room
		strings.Replace(base, `"candidates": [`, `"candidates" : [ `, 1),                                                    // white space in the prefix
		strings.Replace(base, `{"candidates"`, ` {"candidates"`, 1),
		strings.Replace(base, `"text": "`, `"text":"`, 1),
		strings.Replace(base, `"text": "one"`, `"text": 1`, 1),
		strings.Replace(base, `"text": "one"`, `"text": null`, 1),
		strings.Replace(base, `"text": "one"`, `"text": "on`+"\x01"+`e"`, 1),
		strings.Replace(base, `"parts": [{"text"`, `"parts": [{"thought": true, "text"`, 1),
		strings.Replace(base, `"parts": [{"text"`, `"parts": [{"Text"`, 1),
		strings.Replace(base, `"parts": [{"text"`, `"parts": [{"text\u0000"`, 1),
		strings.Replace(base, `{"candidates"`, `{"usageMetadata": {"totalTokenCount": 1},"candidates"`, 1),
		strings.Replace(base, `"usageMetadata"`, `"usageMetadata": {},"x"`, 1),
		strings.Replace(base, `"usageMetadata"`, `"candidates": [],"x"`, 1), // repeated candidates
		base + " ",
		base + "\r\n",
		base + "x",
		base + "}",
		base + `{}`,
		base[:len(base)-1],
		base[:len(base)-1] + ` }`,
		base[:len(base)-1] + `,"x": [1, {"y": null}]}`,
	}
}

// TestTapMemoOracle: every event of real streams, of Gemini-shaped ones
// with texts and counts that change, and of each variant (alone, after a
// run of base events, and with every byte of the event changed, cut or
// doubled), scanned with the memo as it is carried from event to event,
// reads what the old scanner reads from it alone.
func TestTapMemoOracle(t *testing.T) {
	replayed := 0
	for _, path := range []string{"testdata/stream.sse", "testdata/vertex_stream.sse", "../bench/upstream/stream.sse"} {
		ev := sseEvents(t, path)
		replayed += checkMemoSeq(t, append(append(ev, ev...), ev...))
	}
	if replayed == 0 {
		t.Fatal("the recorded streams' events were never replayed from a template")
	}
	base := []byte(geminiEvent("one", 5, 1500))
	vars := memoVariants()
	var stream [][]byte
	for k := range 40 {
		stream = append(stream, []byte(geminiEvent("chunk "+strconv.Itoa(k)+` \"q\" `, 5+k, 1500+k*k)))
	}
	if r := checkMemoSeq(t, stream); r != 2*37 {
		t.Errorf("%d of 2×37 Gemini-shaped events replayed: the template is not taken", r)
	}
	for _, v := range vars {
		for _, seq := range [][]string{{v, v, v, v}, {string(base), string(base), string(base), v, v, string(base)}, {string(base), string(base), v, string(base), v}} {
			var evs [][]byte
			for _, e := range seq {
				evs = append(evs, []byte(e))
			}
			checkMemoSeq(t, evs)
		}
	}
	// Every byte of an event changed, after events that set the memo and
	// the template: inside the prefix, the text, the segments and the
	// counts.
	for _, e := range [][]byte{base, []byte(vars[2]), []byte(vars[24])} {
		for i := range e {
			for _, c := range []byte{' ', '"', '\\', '0', '9', 'x', ',', '}', ']', '{', 0x01, 0xff, e[i] ^ 0x20, e[i] + 1} {
				if c == e[i] {
					continue
				}
				mut := append([]byte{}, e...)
				mut[i] = c
				checkMemoSeq(t, [][]byte{base, base, base, mut, base, mut})
			}
			checkMemoSeq(t, [][]byte{base, base, base, e[:i], base})                                    // cut
			checkMemoSeq(t, [][]byte{base, base, base, append(append([]byte{}, e[:i+1]...), e[i:]...)}) // a byte doubled
			checkMemoSeq(t, [][]byte{base, base, base, append(append([]byte{}, e[:i]...), e[i+1:]...)}) // a byte dropped
		}
	}
}

// memoEventGen makes streams of events that share a skeleton now and
// then: Gemini's, answerGen's and respGen's, events changed a little from
// the one before.
type memoEventGen struct {
	r  *rand.Rand
	ag *answerGen
	rg *respGen
}

func (g *memoEventGen) event(prev []byte) []byte {
	switch g.r.IntN(8) {
	case 0, 1, 2:
		return []byte(geminiEvent(strings.Repeat("w ", g.r.IntN(30))+strconv.Itoa(g.r.IntN(100)), g.r.IntN(2000), g.r.IntN(5000)))
	case 3:
		return []byte(g.ag.answer())
	case 4:
		return append([]byte{}, g.rg.answer()...)
	case 5:
		vars := memoVariants()
		return []byte(vars[g.r.IntN(len(vars))])
	}
	if len(prev) == 0 {
		return []byte(geminiEvent("x", 1, 2))
	}
	e := append([]byte{}, prev...)
	for range 1 + g.r.IntN(3) {
		i := g.r.IntN(len(e))
		switch g.r.IntN(4) {
		case 0:
			const bs = "0123456789 \"\\{}[],:x"
			e[i] = bs[g.r.IntN(len(bs))]
		case 1:
			e = append(e[:i], e[i+1:]...)
		case 2:
			e = append(e[:i], append([]byte{"09 \"a,}"[g.r.IntN(7)]}, e[i:]...)...)
		default:
			e = e[:i]
		}
		if len(e) == 0 {
			break
		}
	}
	return e
}

func (g *memoEventGen) stream(n int) [][]byte {
	var evs [][]byte
	var prev []byte
	for range n {
		e := g.event(prev)
		evs = append(evs, e)
		prev = e
	}
	return evs
}

// feedTapMemo is feedTapWith (a served writer that takes streamed text)
// with the memo on or off.
func feedTapMemo(body []byte, cuts []int, noMemo bool) streamResult {
	tp := newTap("", true)
	tp.noMemo = noMemo
	w := &markWriter{}
	tp.text.w = w
	writeCut(tp, body, cuts)
	return streamResult{Usage: tp.usage, ModelVersion: tp.modelVersion, Text: tp.text.String(),
		TextTruncated: tp.textTruncated, Events: tp.events, Served: string(w.b)}
}

// sseBody writes events as an SSE stream.
func sseBody(evs [][]byte) []byte {
	var b []byte
	for _, e := range evs {
		b = append(append(append(b, "data: "...), e...), "\r\n\r\n"...)
	}
	return b
}

// checkTapMemo compares the tap with and without the memo on body, in
// one write, in random pieces and, when short and every, a byte at a time.
func checkTapMemo(t *testing.T, r *rand.Rand, body []byte, every bool) {
	t.Helper()
	want := feedTapMemo(body, nil, true)
	var cutsList [][]int
	cutsList = append(cutsList, nil)
	var cuts []int
	for c := 0; c < len(body); {
		c += 1 + r.IntN(120)
		if c < len(body) {
			cuts = append(cuts, c)
		}
	}
	cutsList = append(cutsList, cuts)
	if every && len(body) < 3000 {
		var every []int
		for c := 1; c < len(body); c++ {
			every = append(every, c)
		}
		cutsList = append(cutsList, every)
	}
	for _, cuts := range cutsList {
		got := feedTapMemo(body, cuts, false)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("tap with and without the memo differ (-without +with), cuts %v:\n%s\nbody %q", cuts, diff, body)
		}
		if w := feedTapMemo(body, cuts, true); !cmp.Equal(want, w) {
			t.Fatalf("the tap without the memo reads differently in pieces: %s", cmp.Diff(want, w))
		}
	}
}

// TestTapMemoStreams: the tap reads the same from generated streams (and
// the recorded ones, and the variants after Gemini events) with the memo
// and without it, whatever the writes.
func TestTapMemoStreams(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 29))
	for _, path := range []string{"testdata/stream.sse", "testdata/vertex_stream.sse", "../bench/upstream/stream.sse"} {
		checkTapMemo(t, r, sseBody(sseEvents(t, path)), true)
	}
	base := []byte(geminiEvent("one", 5, 1500))
	for _, v := range memoVariants() {
		checkTapMemo(t, r, sseBody([][]byte{base, base, base, []byte(v), base, []byte(v)}), true)
	}
	g := &memoEventGen{r: r, ag: &answerGen{r: r, odd: true, long: 40}, rg: &respGen{rng: r}}
	for range 400 {
		evs := g.stream(1 + r.IntN(12))
		checkMemoSeq(t, evs)
		checkTapMemo(t, r, sseBody(evs), true)
	}
	// Long texts, which the tap streams through a placeholder.
	for range 20 {
		evs := [][]byte{base}
		for range 4 {
			evs = append(evs, []byte(geminiEvent(strings.Repeat("long text ", 1000+r.IntN(2000)), r.IntN(100), r.IntN(100))), base)
		}
		checkTapMemo(t, r, sseBody(evs), false)
	}
}

// FuzzTapMemo: events cut from the input at newlines (after three events
// of Gemini's shape, which set the memo and the template), scanned with the memo, read what
// the old scanner reads; the tap reads the same with and without it.
func FuzzTapMemo(f *testing.F) {
	for _, path := range []string{"testdata/stream.sse", "../bench/upstream/stream.sse"} {
		f.Add(bytes.Join(sseEvents(f, path), []byte("\n")))
	}
	for _, v := range memoVariants() {
		f.Add([]byte(v))
		f.Add([]byte(geminiEvent("d", 7, 8) + "\n" + v))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 8<<10 {
			return
		}
		evs := [][]byte{[]byte(geminiEvent("a", 1, 2)), []byte(geminiEvent("b", 3, 4)), []byte(geminiEvent("c", 5, 6))}
		for e := range bytes.SplitSeq(in, []byte("\n")) {
			evs = append(evs, e)
		}
		checkMemoSeq(t, evs)
		checkTapMemo(t, rand.New(rand.NewPCG(uint64(len(in)), 1)), sseBody(evs), false)
	})
}
