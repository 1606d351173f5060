package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// markWriter is a ServedWriter that can take text back, as
// cache.ServedRecorder does: the text it ends with is what the recorder
// records.
type markWriter struct {
	b         []byte
	mark      int
	marked    bool
	served    bool
	truncated bool
}

func (w *markWriter) Grow(int)                          {}
func (w *markWriter) Write(p []byte) (int, error)       { w.b = append(w.b, p...); return len(p), nil }
func (w *markWriter) WriteString(s string) (int, error) { w.b = append(w.b, s...); return len(s), nil }
func (w *markWriter) Served(truncated bool)             { w.served, w.truncated = true, truncated }
func (w *markWriter) Mark()                             { w.mark, w.marked = len(w.b), true }
func (w *markWriter) Commit()                           { w.marked = false }
func (w *markWriter) Rewind() {
	if w.marked {
		w.b, w.marked = w.b[:w.mark], false
	}
}

// noMarkWriter is a markWriter without Mark: the tap streams nothing to it.
type noMarkWriter markWriter

func (w *noMarkWriter) Grow(int)                          {}
func (w *noMarkWriter) Write(p []byte) (int, error)       { return (*markWriter)(w).Write(p) }
func (w *noMarkWriter) WriteString(s string) (int, error) { return (*markWriter)(w).WriteString(s) }
func (w *noMarkWriter) Served(truncated bool)             { (*markWriter)(w).Served(truncated) }

// streamResult is everything the tap read from a body.
type streamResult struct {
	Usage         *Usage
	ModelVersion  string
	Text, Served  string
	TextTruncated bool
	Events        int
	MaxObj        int // the largest object buffer while reading
}

// feedTap feeds body to a tap in the pieces cut at cuts (ascending). With
// a served writer that cannot take text back, nothing is streamed: the
// tap reads each object whole, as it did before streaming (the oracle).
func feedTap(body []byte, cuts []int) streamResult { return feedTapWith(body, cuts, true) }

// writeCut writes body to tp in the pieces cuts give (offsets, in
// order) and finishes it.
func writeCut(tp *tap, body []byte, cuts []int) {
	prev := 0
	for _, c := range append(cuts, len(body)) {
		tp.Write(body[prev:c]) //nolint:errcheck // never fails
		prev = c
	}
	tp.finish()
}

func feedTapWith(body []byte, cuts []int, stream bool) streamResult {
	tp := newTap("", true)
	w := &markWriter{}
	if stream {
		tp.text.w = w
	} else {
		tp.text.w = (*noMarkWriter)(w)
	}
	res := streamResult{}
	prev := 0
	for _, c := range append(cuts, len(body)) {
		tp.Write(body[prev:c]) //nolint:errcheck // never fails
		prev = c
		res.MaxObj = max(res.MaxObj, len(tp.obj))
	}
	tp.finish()
	res.Usage, res.ModelVersion, res.Text = tp.usage, tp.modelVersion, tp.text.String()
	res.TextTruncated, res.Events, res.Served = tp.textTruncated, tp.events, string(w.b)
	return res
}

// answerGen makes GenerateContentResponse objects: Gemini's shape and its
// variations (member order, thought parts, other candidates, index before
// or after the content, signatures), texts with every kind of escape,
// multi-byte and invalid UTF-8, lone and paired surrogates, and now and
// then what the tap must read with encoding/json or not at all (repeated
// or case-folded members, null, a number for a text, invalid JSON).
type answerGen struct {
	r    *rand.Rand
	odd  bool // allow the rare shapes
	long int  // typical text length
}

func (g *answerGen) pick(n int) int { return g.r.IntN(n) }

func (g *answerGen) text() string {
	var b strings.Builder
	b.WriteByte('"')
	n := g.long/2 + g.pick(g.long+1)
	words := []string{"the ", "answer ", "Go ", "slice", "  ", "**bold** ", "`code` ", "日本語", "é", "\u00a0", "\u2003", "\U0001F600", "\ufffd"}
	escapes := []string{`\n`, `\"`, `\\`, `\/`, `\t`, `\r`, `\b`, `\f`, `\u00e9`, `\u00E9`, `\u65e5`, `\ud83d\ude00`, `\uD83D\uDE00`, `\u0000`, `\u001f`}
	oddEsc := []string{`\ud83d`, `\ude00`, `\ud83d\ud83d\ude00`, `\ud83dx`, `\ud83d\n`, `\udfff\ud800`, "\xe2\x82", "\xff", "\xed\xa0\x80", "\x80\x80", `\ud83d\u00e9`}
	for b.Len() < n {
		switch k := g.pick(10); {
		case k < 6:
			b.WriteString(words[g.pick(len(words))])
		case k < 9:
			b.WriteString(escapes[g.pick(len(escapes))])
		default:
			b.WriteString(oddEsc[g.pick(len(oddEsc))])
		}
	}
	if g.odd && g.pick(40) == 0 {
		b.WriteString([]string{"\x01", `\x`, `\u12G4`, `\u12"`}[g.pick(4)]) // not JSON
	}
	if g.odd && g.pick(60) == 0 {
		b.WriteString(phRaw)
	}
	b.WriteByte('"')
	return b.String()
}

func (g *answerGen) ws() string {
	return []string{"", "", "", " ", "\n  ", "\t"}[g.pick(6)]
}

func (g *answerGen) member(name, value string) string {
	return g.ws() + strconv.Quote(name) + g.ws() + ":" + g.ws() + value
}

func (g *answerGen) object(members []string) string {
	if g.pick(3) == 0 {
		g.r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	}
	return "{" + strings.Join(members, ",") + g.ws() + "}"
}

func (g *answerGen) part() string {
	var m []string
	switch g.pick(8) {
	case 0:
		m = append(m, g.member("functionCall", `{"name":"run","args":{"code":`+g.text()+`}}`))
	default:
		name := "text"
		if g.odd && g.pick(30) == 0 {
			name = []string{"Text", "TEXT", "t\u0065xt"}[g.pick(3)]
		}
		m = append(m, g.member(name, g.text()))
		if g.odd && g.pick(30) == 0 {
			m = append(m, g.member("text", []string{"null", "1", g.text()}[g.pick(3)]))
		}
	}
	if g.odd && g.pick(40) == 0 {
		// Nested deeper than preScan follows, before the text.
		d := 50 + g.pick(20)
		m = append([]string{g.member("x", strings.Repeat("[", d)+`"s"`+strings.Repeat("]", d))}, m...)
	}
	switch g.pick(5) {
	case 0:
		m = append(m, g.member("thought", "true"))
	case 1:
		m = append(m, g.member("thought", "false"))
	}
	if g.pick(4) == 0 {
		m = append(m, g.member("thoughtSignature", `"`+strings.Repeat("QUJD", 20+g.pick(200))+`"`))
	}
	return g.object(m)
}

func (g *answerGen) candidate(index int) string {
	parts := make([]string, 1+g.pick(3))
	for i := range parts {
		parts[i] = g.part()
	}
	content := []string{g.member("parts", "["+strings.Join(parts, ",")+"]"), g.member("role", `"model"`)}
	if g.pick(2) == 0 {
		content[0], content[1] = content[1], content[0]
	}
	m := []string{g.member("content", g.object(content)), g.member("finishReason", `"STOP"`)}
	if index != 0 || g.pick(2) == 0 {
		m = append(m, g.member("index", strconv.Itoa(index)))
	}
	return "{" + strings.Join(m, ",") + "}"
}

func (g *answerGen) answer() string {
	cands := make([]string, 1+g.pick(2))
	for i := range cands {
		cands[i] = g.candidate([]int{i, 0, 1}[g.pick(3)])
	}
	usage := fmt.Sprintf(`{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d}`, g.pick(1000), g.pick(1000), g.pick(2000))
	m := []string{
		g.member("candidates", "["+strings.Join(cands, ",")+"]"),
		g.member("usageMetadata", usage),
		g.member("modelVersion", `"gemini-2.5-flash"`),
		g.member("responseId", `"r-`+strconv.Itoa(g.pick(1e6))+`"`),
	}
	if g.odd && g.pick(25) == 0 {
		m = append(m, g.member("candidates", "["+g.candidate(0)+"]")) // repeated
	}
	if g.odd && g.pick(30) == 0 {
		m = append(m, g.member("usageMetadata", "null"))
	}
	if g.pick(6) == 0 {
		// The usage first (the Interactions order), text after it.
		m[0], m[1] = m[1], m[0]
	}
	obj := "{" + strings.Join(m, ",") + g.ws() + "}"
	if g.odd && g.pick(40) == 0 {
		obj = obj[:len(obj)-1-g.pick(len(obj)/2)] // cut short
	}
	return obj
}

// body is one answer, or a streamed JSON array of a few.
func (g *answerGen) body() []byte {
	if g.pick(4) == 0 {
		n := 1 + g.pick(3)
		objs := make([]string, n)
		for i := range objs {
			objs[i] = g.answer()
		}
		return []byte("[" + strings.Join(objs, ",\r\n") + "]")
	}
	return []byte(g.ws() + g.answer() + g.ws())
}

// TestTapStreamChunks: whatever the reads, the tap reads from a unary
// answer (or a streamed array) exactly what it reads from the body written
// whole, where every object is read in one piece: usage, model version,
// the text (Exchange.Text and what the served writer is left with), its
// truncation and the events; small bodies are cut at every byte, every
// body in random pieces and byte by byte.
func TestTapStreamChunks(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	cases := 0
	for _, shape := range []struct {
		odd   bool
		long  int
		count int
	}{{false, 12, 300}, {true, 12, 600}, {false, 3000, 200}, {true, 3000, 300}, {false, 40000, 12}, {true, 40000, 12}} {
		g := &answerGen{r: rng, odd: shape.odd, long: shape.long}
		for range shape.count {
			body := g.body()
			want := feedTapWith(body, nil, false)
			check := func(cuts []int) {
				t.Helper()
				cases++
				got := feedTap(body, cuts)
				got.MaxObj, want.MaxObj = 0, 0
				gu, wu := got.Usage, want.Usage
				got.Usage, want.Usage = nil, nil
				defer func() { want.Usage = wu }()
				if got.Served != got.Text {
					t.Fatalf("body %q cut at %v: served writer has %q, Text %q", body, cuts, got.Served, got.Text)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) || !equalUsage(gu, wu) {
					t.Fatalf("body %q cut at %v:\n got %+v usage %+v\nwant %+v usage %+v", body, cuts, got, gu, want, wu)
				}
			}
			check(nil) // streamed, in one piece
			if len(body) < 700 {
				for k := 1; k < len(body); k++ {
					check([]int{k})
				}
			}
			for range 8 {
				check(randomCutsOf(rng, len(body), 1+rng.IntN(20)))
			}
			if len(body) < 20000 {
				every := make([]int, len(body))
				for i := range every {
					every[i] = i
				}
				check(every)
			}
		}
	}
	t.Logf("%d chunkings compared", cases)
}

func equalUsage(a, b *Usage) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// randomCutsOf returns n ascending offsets into a body of size bytes.
func randomCutsOf(rng *rand.Rand, size, n int) []int {
	cuts := make([]int, n)
	for i := range cuts {
		cuts[i] = rng.IntN(size + 1)
	}
	for i := 1; i < len(cuts); i++ {
		for j := i; j > 0 && cuts[j] < cuts[j-1]; j-- {
			cuts[j], cuts[j-1] = cuts[j-1], cuts[j]
		}
	}
	return cuts
}

// TestTapStreamNoCopy: a 256 KB Gemini answer read in 32 KB pieces leaves
// the tap's object buffer at the size of the object without its text (no
// second copy of the answer), and the text reaches the served record
// exactly: the real recorder verifies it.
func TestTapStreamNoCopy(t *testing.T) {
	para := `The difference is ownership of the backing storage.\n\nAn **array** in Go has a fixed length: \"[4]int\" and \"[5]int\" differ \u2014 é 日本.\n\n`
	text := strings.Repeat(para, 256<<10/len(para))
	body := []byte(`{"candidates": [{"content": {"parts": [{"text": "` + text + `"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 70000,"totalTokenCount": 70009},"modelVersion": "gemini-2.5-flash","responseId": "x"}`)
	got := feedTap(body, randomCutsOf(rand.New(rand.NewPCG(1, 1)), len(body), 0))
	cuts := []int{}
	for c := 32 << 10; c < len(body); c += 32 << 10 {
		cuts = append(cuts, c)
	}
	got = feedTap(body, cuts)
	want := feedTapWith(body, nil, false)
	if got.Text != want.Text || got.Served != want.Text || len(want.Text) < 200<<10 {
		t.Fatalf("text of %d bytes, served %d; want %d", len(got.Text), len(got.Served), len(want.Text))
	}
	if got.MaxObj > 4<<10 {
		t.Errorf("object buffer reached %d bytes for a %d-byte answer; want the skeleton only", got.MaxObj, len(body))
	}

	s, err := cache.New(cache.Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tp := newTap("", true)
	tp.text.keep = false
	rec := s.ServedRecorder("t1")
	tp.text.w = rec
	writeCut(tp, body, cuts)
	rec.Served(tp.textTruncated)
	s.Wait()
	if !s.Verifier("t1").Served(want.Text) {
		t.Error("the streamed answer is not recorded as served")
	}
	if s.Verifier("t1").Served(want.Text[:len(want.Text)/2] + "x") {
		t.Error("a changed answer verifies")
	}
	if !bytes.Contains(body, []byte(`"index": 0`)) {
		t.Fatal("body shape")
	}
}

// TestTapStreamLimits: past MaxTextBytes (one text, and texts of several
// objects of a streamed array) and past maxEventBytes (an object the tap
// reads from its tail), a streamed text gives what the body written whole
// gives; so does a served writer that cannot take text back (nothing is
// streamed to it).
func TestTapStreamLimits(t *testing.T) {
	obj := func(text string) string {
		return `{"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":1,"totalTokenCount":2},"modelVersion":"m"}`
	}
	word := `long answer,\n `
	big := strings.Repeat(word, MaxTextBytes/len(word)+5000)
	half := strings.Repeat(word, MaxTextBytes/len(word)/2+3000)
	huge := strings.Repeat("QUJD", (maxEventBytes+tailBytes)/4)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ name, body string }{
		{"text past MaxTextBytes", obj(big)},
		{"array past MaxTextBytes", "[" + obj(half) + "," + obj(half) + "," + obj(half) + "]"},
		{"object past maxEventBytes", obj(huge)},
		{"object just under maxEventBytes", obj(huge[:maxEventBytes-300])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			want := feedTapWith(body, nil, false)
			cuts := []int{}
			for c := 32 << 10; c < len(body); c += 32 << 10 {
				cuts = append(cuts, c)
			}
			for _, cuts := range [][]int{cuts, randomCutsOf(rng, len(body), 40)} {
				got := feedTap(body, cuts)
				if got.Text != want.Text || got.Served != want.Served || got.TextTruncated != want.TextTruncated ||
					got.Events != want.Events || got.ModelVersion != want.ModelVersion || !equalUsage(got.Usage, want.Usage) {
					t.Fatalf("got text %d bytes (served %d), truncated %v, events %d, usage %+v; want %d (%d), %v, %d, %+v",
						len(got.Text), len(got.Served), got.TextTruncated, got.Events, got.Usage,
						len(want.Text), len(want.Served), want.TextTruncated, want.Events, want.Usage)
				}
			}
		})
	}
	t.Run("writer without Mark", func(t *testing.T) {
		body := []byte(obj(half))
		tp := newTap("", true)
		var w plainWriter
		tp.text.w = &w
		for i := 0; i < len(body); i += 1000 {
			tp.Write(body[i:min(i+1000, len(body))]) //nolint:errcheck // never fails
		}
		tp.finish()
		if want := feedTapWith(body, nil, false).Text; w.String() != want || tp.text.String() != want {
			t.Fatalf("writer got %d bytes, text %d; want %d", w.Len(), len(tp.text.String()), len(want))
		}
	})
}

// plainWriter is a ServedWriter that cannot take text back.
type plainWriter struct{ strings.Builder }

func (w *plainWriter) Grow(n int)  { w.Builder.Grow(n) }
func (w *plainWriter) Served(bool) {}

// FuzzTapStream: for any body cut anywhere, the streamed read gives what
// the old read of each object whole gives.
func FuzzTapStream(f *testing.F) {
	g := &answerGen{r: rand.New(rand.NewPCG(9, 9)), odd: true, long: 30}
	for range 20 {
		f.Add(g.body(), uint64(g.pick(1000)))
	}
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"text":"a\ud83d"},{"text":"b"}]}}]}`), uint64(3))
	f.Add([]byte("[{]]\"0"), uint64(150)) // brackets that do not match (preScan.close)
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed>>9))
		cuts := randomCutsOf(rng, len(body), rng.IntN(12))
		got, want := feedTapWith(body, cuts, true), feedTapWith(body, nil, false)
		gu, wu := got.Usage, want.Usage
		got.Usage, want.Usage, got.MaxObj, want.MaxObj = nil, nil, 0, 0
		if fmt.Sprint(got) != fmt.Sprint(want) || !equalUsage(gu, wu) || got.Served != got.Text {
			t.Fatalf("body %q cut at %v:\n got %+v %+v\nwant %+v %+v", body, cuts, got, gu, want, wu)
		}
	})
}
