package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// Adversarial differential tests of the scanner's memo (scanMemo's path
// prefix, replay's tail template) against the full scan of every event
// (tap.noMemo), on dimensions tapmemo_test.go leaves out: the tap
// configurations the Handler makes (a text kept or not, a served writer
// that streams, one that reads JSON-escaped text, as cache.ServedRecorder
// does, so the scanner's rawText), gzip bodies, JSON-array streams, SSE
// framings (LF, CRLF, data split over lines, comments, other fields),
// streams whose events change shape after a template was made (recorded
// events of other streams spliced in, structural edits, odd counts),
// taps one after another and side by side (the templates' pool), and the
// Handler with an upstream, whose client bytes, Exchange, served text and
// usage metrics must be those of the tap without the memo.

// memoLog is a ServedWriter that logs every call the tap makes on it, and
// the text it holds (Mark, Rewind and Commit applied).
type memoLog struct {
	ops               []string
	text              []byte
	mark              int
	marked            bool
	served, truncated bool
}

func (w *memoLog) Grow(n int) { w.ops = append(w.ops, "G"+strconv.Itoa(n)) }
func (w *memoLog) Write(p []byte) (int, error) {
	w.ops = append(w.ops, "W"+string(p))
	w.text = append(w.text, p...)
	return len(p), nil
}
func (w *memoLog) WriteString(s string) (int, error) {
	w.ops = append(w.ops, "S"+s)
	w.text = append(w.text, s...)
	return len(s), nil
}
func (w *memoLog) Served(truncated bool) {
	w.ops = append(w.ops, "D"+strconv.FormatBool(truncated))
	w.served, w.truncated = true, truncated
}

// memoMarkLog takes text back (servedMarker): the tap streams to it.
type memoMarkLog struct{ memoLog }

func (w *memoMarkLog) Mark() {
	w.ops = append(w.ops, "M")
	w.mark, w.marked = len(w.text), true
}
func (w *memoMarkLog) Commit() { w.ops = append(w.ops, "C"); w.marked = false }
func (w *memoMarkLog) Rewind() {
	w.ops = append(w.ops, "R")
	if w.marked {
		w.text, w.marked = w.text[:w.mark], false
	}
}

// memoJSONWrite is a WriteJSON that reads the plain run of raw (up to an
// escape, a quote, a control or a non-ASCII byte), leaving the rest to
// the tap, as cache.ServedRecorder may.
func memoJSONWrite(w *memoLog, raw []byte) (used, n int) {
	for used < len(raw) && raw[used] >= ' ' && raw[used] < 0x80 && raw[used] != '\\' && raw[used] != '"' {
		used++
	}
	w.ops = append(w.ops, "J"+string(raw[:used])+"|"+strconv.Itoa(len(raw)))
	w.text = append(w.text, raw[:used]...)
	return used, used
}

// memoJSONLog is a recorder that streams and reads escaped text.
type memoJSONLog struct{ memoMarkLog }

func (w *memoJSONLog) WriteJSON(raw []byte) (used, n int) { return memoJSONWrite(&w.memoLog, raw) }

// memoJSONNoMark reads escaped text but takes nothing back.
type memoJSONNoMark struct{ memoLog }

func (w *memoJSONNoMark) WriteJSON(raw []byte) (used, n int) { return memoJSONWrite(&w.memoLog, raw) }

var (
	_ jsonTextWriter = (*memoJSONLog)(nil)
	_ servedMarker   = (*memoJSONLog)(nil)
	_ jsonTextWriter = (*memoJSONNoMark)(nil)
)

// memoCfg is a tap as Handler.newTap makes one: keep (OnExchange or
// OnServed), the served writer (ServedText), gzip.
type memoCfg struct {
	name string
	keep bool
	w    int // 0 none, 1 memoLog, 2 memoMarkLog, 3 memoJSONLog, 4 memoJSONNoMark
	gzip bool
}

var memoCfgs = func() (out []memoCfg) {
	for _, gz := range []bool{false, true} {
		for _, c := range []memoCfg{
			{"keep", true, 0, false},
			{"keep+log", true, 1, false},
			{"keep+mark", true, 2, false},
			{"keep+json", true, 3, false}, // kept: rawText off
			{"json", false, 3, false},     // the store's recorder alone: rawText on
			{"json-nomark", false, 4, false},
			{"mark", false, 2, false},
		} {
			c.gzip = gz
			if gz {
				c.name += "+gzip"
			}
			out = append(out, c)
		}
	}
	return out
}()

func (c memoCfg) writer() (ServedWriter, *memoLog) {
	switch c.w {
	case 1:
		w := &memoLog{}
		return w, w
	case 2:
		w := &memoMarkLog{}
		return w, &w.memoLog
	case 3:
		w := &memoJSONLog{}
		return w, &w.memoLog
	case 4:
		w := &memoJSONNoMark{}
		return w, &w.memoLog
	}
	return nil, nil
}

// memoObs is everything observable of a tap once the body is over.
type memoObs struct {
	Usage          *Usage
	ModelVersion   string
	Text           string
	Len            int
	TextTruncated  bool
	Events         int
	Ops            []string
	Served         string
	ServedCalled   bool
	ServedTruncate bool
	// TailHeld: the tap still holds a template after its release (given
	// back to the pool, another tap's to write).
	TailHeld bool
}

func memoGzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// memoFeed writes body to a tap of cfg in the pieces cuts gives, with the
// memo or without, and calls the served writer as Handler.served does.
func memoFeed(body []byte, cuts []int, cfg memoCfg, noMemo bool) memoObs {
	enc := ""
	if cfg.gzip {
		enc = "gzip"
		body = memoGzip(body)
		cuts = nil // the gzip copy is decoded at the end, whatever the writes
	}
	tp := newTap(enc, true)
	tp.noMemo = noMemo
	tp.text.keep = cfg.keep
	w, log := cfg.writer()
	if w != nil {
		tp.text.w = w
	}
	writeCut(tp, body, cuts)
	if tp.text.Len() > 0 && tp.text.w != nil {
		tp.text.w.Served(tp.textTruncated)
	}
	// A response cut short is released after its finish may have run:
	// releasing twice must not give the template back twice.
	tp.release()
	o := memoObs{Usage: tp.usage, ModelVersion: tp.modelVersion, Text: tp.text.String(), Len: tp.text.Len(),
		TextTruncated: tp.textTruncated, Events: tp.events, TailHeld: tp.memo.tail != nil}
	if log != nil {
		o.Ops, o.Served, o.ServedCalled, o.ServedTruncate = log.ops, string(log.text), log.served, log.truncated
	}
	return o
}

// memoCheck compares the tap with and without the memo on body for every
// configuration, in one write and in random pieces (and byte by byte when
// short and every).
func memoCheck(t *testing.T, r *rand.Rand, what string, body []byte, every bool) {
	t.Helper()
	memoCheckCfgs(t, r, what, body, every, memoCfgs)
}

func memoCheckCfgs(t *testing.T, r *rand.Rand, what string, body []byte, every bool, cfgs []memoCfg) {
	t.Helper()
	for _, cfg := range cfgs {
		want := memoFeed(body, nil, cfg, true)
		cutsList := [][]int{nil, randomCutsOf(r, len(body), 1+r.IntN(24))}
		if every && len(body) < 2500 && !cfg.gzip {
			e := make([]int, 0, len(body))
			for c := 1; c < len(body); c++ {
				e = append(e, c)
			}
			cutsList = append(cutsList, e)
		}
		for _, cuts := range cutsList {
			// The same writes: every call on the served writer alike.
			same := memoFeed(body, cuts, cfg, true)
			got := memoFeed(body, cuts, cfg, false)
			if diff := cmp.Diff(same, got); diff != "" {
				t.Fatalf("%s, %s, cuts %v: the tap with the memo reads differently (-without +with):\n%s\nbody %q", what, cfg.name, cuts, diff, body)
			}
			// Other writes: what the writer holds and the tap read alike
			// (the calls follow the reads when text is streamed).
			got.Ops = want.Ops
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s, %s, cuts %v: the tap with the memo in pieces reads differently from the one without in one write (-without +with):\n%s\nbody %q", what, cfg.name, cuts, diff, body)
			}
		}
	}
}

// The recorded streams' events.
type memoRec struct {
	name   string
	sse    bool
	body   []byte
	events [][]byte
}

func memoRecordings(t *testing.T) []memoRec {
	t.Helper()
	var out []memoRec
	for _, r := range tu.Recordings(t) {
		if !strings.Contains(r.Path, "generateContent") && !strings.Contains(r.Path, "GenerateContent") {
			continue
		}
		evs, err := r.Events()
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		mr := memoRec{name: r.Name, sse: r.SSE(), body: []byte(r.ResponseBody)}
		for _, e := range evs {
			mr.events = append(mr.events, append([]byte{}, e...))
		}
		out = append(out, mr)
	}
	if len(out) == 0 {
		t.Skip("no recorded generate answers")
	}
	return out
}

var memoCountRE = regexp.MustCompile(`("[A-Za-z]+TokenCount"\s*:\s*)(-?[0-9]+)`)

// memoTexts are texts put in place of an event's first text.
var memoTexts = []string{
	"plain words ", "", `esc\n\"aped\u00e9 `, "caf\xc3\xa9 \xff\xfe", `\ud83d\ude00 `, `\ud83d`, "\\", `\\`,
	strings.Repeat("long ", 30), "x", "\u2028", `tab\tand\r\n`, "\x7f", "日本語",
}

// memoCounts are counts put in place of a usage count: valid ones (the
// template's holes) and forms the scanner hands to encoding/json.
var memoCounts = []string{"0", "7", "123", "9999999", "-1", "-0", "00", "012", "1.0", "1e3", "-", "9223372036854775807",
	"9223372036854775808", "-9223372036854775808", "12345678901234567890", `"5"`, "null", "1 ", " 1", "1,\"x\":2"}

// memoVary changes an event's first text (the path's, when it has one)
// and its counts: the event a template replays.
func memoVary(r *rand.Rand, e []byte, odd bool) []byte {
	out := memoVaryText(r, e, odd)
	return memoCountRE.ReplaceAllFunc(out, func(m []byte) []byte {
		sub := memoCountRE.FindSubmatch(m)
		v := strconv.Itoa(r.IntN(100000))
		if odd && r.IntN(6) == 0 {
			v = memoCounts[r.IntN(len(memoCounts))]
		}
		return append(append([]byte{}, sub[1]...), v...)
	})
}

// memoVaryText changes an event's first text only.
func memoVaryText(r *rand.Rand, e []byte, odd bool) []byte {
	out := e
	if n := pathPrefix(e); n > 0 {
		if end := plainEnd(e, n); end > 0 {
			text := memoTexts[r.IntN(len(memoTexts))]
			if !odd && r.IntN(3) > 0 {
				text = "w" + strconv.Itoa(r.IntN(1000)) + " "
			}
			out = append(append(append([]byte{}, e[:n]...), text...), e[end:]...)
		}
	}
	return out
}

// plainEnd returns the offset of the closing quote of the string whose
// inside starts at i, or -1.
func plainEnd(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// memoEdits change an event's structure in the places the template
// covers (its tail) or the prefix.
var memoEdits = []struct {
	old, new string
}{
	{`}]`, `, "thoughtSignature": "c2lnbmF0dXJl"}]`},
	{`"parts": [{"text": "`, `"parts": [{"thought": true, "text": "`},
	{`"}]`, `", "thought": true}]`},
	{`"}]`, `"}, {"functionCall": {"name": "f", "args": {"a": 1}}}]`},
	{`"}]`, `"}, {"text": "second part"}]`},
	{`"index": 0`, `"index": 1`},
	{`"index": 0`, `"index": 0, "finishReason": "STOP"`},
	{`"index": 0}`, `"index": 0}, {"content": {"parts": [{"text": "cand 1"}]}, "index": 1}`},
	{`"index": 0}`, `"index": 0}, {"content": {"parts": [{"text": "cand 0 again"}]}}`},
	{`"index": 0}`, `"index": 0, "safetyRatings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE"}], "groundingMetadata": {"webSearchQueries": ["q"]}}`},
	{`"usageMetadata": {`, `"usageMetadata": {"cachedContentTokenCount": 3, "toolUsePromptTokenCount": 4, `},
	{`"usageMetadata": {`, `"usageMetadata": {"totalTokenCount": 1, `},
	{`"usageMetadata": {`, `"usageMetadata": {"TotalTokenCount": 1, `},
	{`"usageMetadata": {`, `"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {`},
	{`"usageMetadata": {`, `"usageMetadata": null, "x": {`},
	{`"usageMetadata": {`, `"error": {"code": 500, "message": "boom"}, "usageMetadata": {`},
	{`"modelVersion": "`, `"modelVersion": "x-`},
	{`"modelVersion": "`, `"modelVersion": "\u0067`},
	{`"modelVersion": "`, `"modelVersion": "` + strings.Repeat("v", 70)},
	{`"modelVersion"`, `"modelversion"`},
	{`"modelVersion"`, `"modelVersion": "dup", "modelVersion"`},
	{`"candidates"`, `"candidates": [], "c"`},
	{`{"candidates"`, `{"usageMetadata": {"totalTokenCount": 2}, "candidates"`},
	{`"responseId": "`, `"responseId": "` + strings.Repeat("r", 800)},
	{`"usageMetadata"`, `"usageMetadataX"`}, // no usage from here
	{`"modelVersion"`, `"modelVersionX"`},   // no modelVersion
	{`"index": 0}`, `"index": 1}, {"content": {"parts": [{"text": "cand 0 after"}]}, "index": 0}`},
}

// memoTrailers end an event with what is not its object's.
var memoTrailers = []string{" ", "\t", "x", "}", "{}", ",", "]", "\"", "0"}

// memoEdit applies a random edit (or a byte's change) to e.
func memoEdit(r *rand.Rand, e []byte) []byte {
	if r.IntN(4) == 0 && len(e) > 0 {
		out := append([]byte{}, e...)
		i := r.IntN(len(out))
		const bs = "0123456789 \"\\{}[],:x-\n"
		out[i] = bs[r.IntN(len(bs))]
		return out
	}
	if r.IntN(8) == 0 {
		return append(append([]byte{}, e...), memoTrailers[r.IntN(len(memoTrailers))]...)
	}
	ed := memoEdits[r.IntN(len(memoEdits))]
	s := string(e)
	// Gemini's events come with and without a space after colons.
	for _, o := range []string{ed.old, strings.ReplaceAll(ed.old, ": ", ":")} {
		if strings.Contains(s, o) {
			return []byte(strings.Replace(s, o, ed.new, 1))
		}
	}
	return e
}

// memoStream makes a stream from the recorded events: runs of one event
// varied (a template made, then replayed), events of other streams
// spliced in, edits after a template.
func memoStream(r *rand.Rand, recs []memoRec) [][]byte {
	var evs [][]byte
	for range 1 + r.IntN(5) {
		rec := recs[r.IntN(len(recs))]
		if len(rec.events) == 0 {
			continue
		}
		e := rec.events[r.IntN(len(rec.events))]
		odd := r.IntN(3) == 0
		for range 1 + r.IntN(6) {
			evs = append(evs, memoVary(r, e, odd))
		}
		if r.IntN(2) == 0 {
			evs = append(evs, memoEdit(r, memoVary(r, e, odd)))
			for range r.IntN(3) {
				evs = append(evs, memoVary(r, e, false))
			}
		}
	}
	return evs
}

// memoFrame writes events as a body: SSE in one of several framings, or
// a JSON array as Gemini streams it.
func memoFrame(r *rand.Rand, evs [][]byte) []byte {
	var b []byte
	if r.IntN(5) == 0 {
		b = append(b, "[\n"...)
		for k, e := range evs {
			if k > 0 {
				b = append(b, []string{"\n,\r\n", ",", ",\n"}[r.IntN(3)]...)
			}
			b = append(b, e...)
		}
		return append(b, "\n]"...)
	}
	nl := []string{"\r\n", "\n"}[r.IntN(2)]
	for _, e := range evs {
		switch r.IntN(8) {
		case 0:
			b = append(b, ": keep-alive"+nl...)
		case 1:
			b = append(b, "event: message"+nl+"id: 7"+nl...)
		}
		prefix := "data: "
		if r.IntN(6) == 0 {
			prefix = "data:"
		}
		if r.IntN(6) == 0 && len(e) > 2 {
			// The data over two lines: SSE joins them with a newline.
			i := 1 + r.IntN(len(e)-1)
			b = append(append(append(append(append(b, prefix...), e[:i]...), nl...), prefix...), e[i:]...)
		} else {
			b = append(append(b, prefix...), e...)
		}
		b = append(b, nl+nl...)
	}
	return b
}

// TestMemoAttackRecordings: the recorded streams whole, and each one's
// events replayed as the three framings and as runs that make and take a
// template, read alike with the memo and without it, in every tap
// configuration and any writes.
func TestMemoAttackRecordings(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 43))
	recs := memoRecordings(t)
	for _, rec := range recs {
		memoCheck(t, r, rec.name, rec.body, true)
		var run [][]byte
		for range 4 {
			for _, e := range rec.events {
				run = append(run, memoVary(r, e, false))
			}
		}
		checkMemoSeq(t, run)
		memoCheck(t, r, rec.name+" runs", memoFrame(r, run), false)
	}
}

// TestMemoAttackShapes: streams whose events change shape after the memo
// and the template were made, from the recorded events.
func TestMemoAttackShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 53))
	recs := memoRecordings(t)
	n := 300
	if testing.Short() || raceEnabled {
		n = 60
	}
	replayed := 0
	for k := range n {
		evs := memoStream(r, recs)
		replayed += checkMemoSeq(t, evs)
		memoCheck(t, r, fmt.Sprint("stream ", k), memoFrame(r, evs), k%10 == 0)
	}
	if replayed == 0 {
		t.Fatal("no event replayed from a template: the test misses the memo")
	}
	// Every edit after a template, on a Gemini event of each spacing.
	for _, base := range [][]byte{[]byte(geminiEvent("one", 5, 1500)), []byte(strings.ReplaceAll(geminiEvent("one", 5, 1500), ": ", ":"))} {
		for _, ed := range memoEdits {
			s := string(base)
			for _, o := range []string{ed.old, strings.ReplaceAll(ed.old, ": ", ":")} {
				s = strings.Replace(s, o, ed.new, 1)
			}
			v := []byte(s)
			evs := [][]byte{base, memoVary(r, base, false), memoVary(r, base, false), v, memoVary(r, base, false), v, memoVary(r, v, false), memoVary(r, v, false), memoVary(r, v, true)}
			checkMemoSeq(t, evs)
			memoCheck(t, r, "edit "+ed.new, memoFrame(r, evs), true)
			// The edited event replayed to the end, counts and all
			// (what its tail holds of usage, modelVersion, candidates).
			evs = [][]byte{base, memoVaryText(r, base, false), memoVaryText(r, base, false), v, memoVaryText(r, v, false), memoVaryText(r, v, true), memoVaryText(r, v, false)}
			if checkMemoSeq(t, evs) == 0 && bytes.HasPrefix(v, base[:pathPrefix(base)]) && strings.Contains(ed.new, "X") {
				t.Errorf("edit %s: never replayed", ed.new)
			}
			memoCheck(t, r, "edit replayed "+ed.new, memoFrame(r, evs), true)
		}
		for _, tr := range memoTrailers {
			v := append(append([]byte{}, base...), tr...)
			evs := [][]byte{base, memoVary(r, base, false), memoVary(r, base, false), v, memoVary(r, base, false), v}
			checkMemoSeq(t, evs)
			memoCheck(t, r, "trailer "+tr, memoFrame(r, evs), true)
		}
	}
}

// TestMemoAttackTapsInTurn: taps read one stream after another and side
// by side (the templates come from one pool, and a template from a
// stream that is over must not be read against the next one's, a
// different tenant's): each reads what a tap without the memo reads.
func TestMemoAttackTapsInTurn(t *testing.T) {
	r := rand.New(rand.NewPCG(59, 61))
	recs := memoRecordings(t)
	var bodies [][]byte
	for range 40 {
		bodies = append(bodies, memoFrame(r, memoStream(r, recs)))
	}
	// The same tail twice in a stream, then other streams with that tail
	// and a different text or counts: the template of the first must
	// not be what the others replay against before they make their own.
	base := geminiEvent("A", 1, 2)
	for _, v := range []string{geminiEvent("B", 3, 4), geminiEvent("", 3, 4), strings.Replace(base, `"index": 0`, `"index": 1`, 1)} {
		bodies = append(bodies, sseBody([][]byte{[]byte(base), []byte(base), []byte(base)}), sseBody([][]byte{[]byte(v), []byte(v), []byte(v)}))
	}
	cfgs := []memoCfg{memoCfgs[0], memoCfgs[4]}
	want := make([][]memoObs, len(bodies))
	cuts := make([][]int, len(bodies))
	for k, b := range bodies {
		cuts[k] = randomCutsOf(r, len(b), 3)
		for _, c := range cfgs {
			want[k] = append(want[k], memoFeed(b, cuts[k], c, true))
		}
	}
	for range 3 {
		for k, b := range bodies {
			for j, c := range cfgs {
				if got := memoFeed(b, cuts[k], c, false); !cmp.Equal(want[k][j], got) {
					t.Fatalf("body %d in turn, %s: %s", k, c.name, cmp.Diff(want[k][j], got))
				}
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(g), 3))
			for range 200 {
				k, j := rr.IntN(len(bodies)), rr.IntN(len(cfgs))
				if got := memoFeed(bodies[k], cuts[k], cfgs[j], false); !cmp.Equal(want[k][j], got) {
					errs <- fmt.Sprintf("body %d side by side, %s: %s", k, cfgs[j].name, cmp.Diff(want[k][j], got))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// FuzzMemoAttack: a stream of recorded-shaped events edited by the input
// (lines of the input are events after three of Gemini's, or edits of a
// base event), in every configuration.
func FuzzMemoAttack(f *testing.F) {
	f.Add([]byte(geminiEvent("z", 1, 2)), uint64(1))
	f.Add([]byte(strings.Replace(geminiEvent("z", 1, 2), `"index": 0`, `"index": 0, "finishReason": "STOP"`, 1)), uint64(2))
	f.Add([]byte(strings.Replace(geminiEvent(`a\"b`, 1, 2), `}]`, `, "thoughtSignature": "x"}]`, 1)), uint64(3))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		if len(in) > 2<<10 {
			return
		}
		r := rand.New(rand.NewPCG(seed, 5))
		evs := [][]byte{[]byte(geminiEvent("a", 1, 2)), []byte(geminiEvent("b", 3, 4)), []byte(geminiEvent("c", 5, 6))}
		for e := range bytes.SplitSeq(in, []byte("\n")) {
			evs = append(evs, e, memoVary(r, e, seed%2 == 0))
		}
		checkMemoSeq(t, evs)
		// The kept text, the store's recorder (rawText), a streaming
		// writer of a gzip body.
		memoCheckCfgs(t, r, "fuzz", memoFrame(r, evs), false, []memoCfg{memoCfgs[0], memoCfgs[4], memoCfgs[9]})
	})
}

// TestMemoAttackHandler: streams through the Handler from an upstream
// that writes them in pieces (gzip or not), for two tenants in turn, as
// serve wires it (the store's recorder alone takes the text: rawText)
// and with OnServed and OnExchange's text: the client gets the
// upstream's bytes, and the Exchange, the served text and the writer's
// text are what a tap without the memo reads from the body.
func TestMemoAttackHandler(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 71))
	recs := memoRecordings(t)
	var bodies [][]byte
	for _, rec := range recs {
		if rec.sse || bytes.HasPrefix(bytes.TrimSpace(rec.body), []byte("[")) {
			bodies = append(bodies, rec.body)
		}
	}
	n := 40
	if testing.Short() {
		n = 10
	}
	for range n {
		bodies = append(bodies, memoFrame(r, memoStream(r, recs)))
	}
	type served struct {
		tenant, text string
		truncated    bool
	}
	for _, serveStore := range []bool{true, false} {
		var mu sync.Mutex
		var exchanges []Exchange
		var onServed []served
		var writers []*memoJSONLog
		opts := Options{OnExchange: func(x Exchange) {
			mu.Lock()
			exchanges = append(exchanges, x)
			mu.Unlock()
		}}
		cfg := memoCfg{name: "exchange+served", keep: true}
		if serveStore {
			opts.ExchangeWithoutText = true
			opts.ServedText = func(string) ServedWriter {
				w := &memoJSONLog{}
				mu.Lock()
				writers = append(writers, w)
				mu.Unlock()
				return w
			}
			cfg = memoCfg{name: "store", w: 3}
		} else {
			opts.OnServed = func(tenant, text string, truncated bool) {
				mu.Lock()
				onServed = append(onServed, served{tenant, text, truncated})
				mu.Unlock()
			}
		}
		var cur []byte
		var gz bool
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			body := cur
			if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
				w.Header().Set("Content-Type", "application/json")
			} else {
				w.Header().Set("Content-Type", "text/event-stream")
			}
			if gz {
				w.Header().Set("Content-Encoding", "gzip")
				body = memoGzip(body)
			}
			fl, _ := w.(http.Flusher)
			for len(body) > 0 {
				k := min(len(body), 1+rand.IntN(700))
				_, _ = w.Write(body[:k])
				body = body[k:]
				if fl != nil {
					fl.Flush()
				}
			}
		}))
		f := newFixture(t, up.URL, opts)
		for k, body := range bodies {
			cur, gz = body, k%3 == 2
			c := cfg
			c.gzip = gz
			want := memoFeed(body, nil, c, true)
			mu.Lock()
			nx, ns, nw := len(exchanges), len(onServed), len(writers)
			mu.Unlock()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
				strings.NewReader(`{"contents":[{"parts":[{"text":"hello"}],"role":"user"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("x-goog-api-key", []string{"tenant-a-key", "tenant-b-key"}[k%2])
			if gz {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			resp, got := do(t, rawClient(), req)
			up := body
			if gz {
				up = memoGzip(body)
			}
			if resp.StatusCode != http.StatusOK || !bytes.Equal(got, up) {
				t.Fatalf("body %d: status %d, the client got %d bytes, the upstream sent %d (differ at %d)", k, resp.StatusCode, len(got), len(up), firstDiff(got, up))
			}
			var x Exchange
			waitFor(t, "the exchange", func() bool {
				mu.Lock()
				defer mu.Unlock()
				if len(exchanges) > nx {
					x = exchanges[nx]
				}
				return len(exchanges) > nx
			})
			mu.Lock()
			gotServed := onServed[ns:]
			gotWriters := writers[nw:]
			mu.Unlock()
			wantText := want.Text
			if serveStore {
				wantText = ""
			}
			if !cmp.Equal(x.Usage, want.Usage) || x.ModelVersion != want.ModelVersion || x.Text != wantText || x.TextTruncated != want.TextTruncated {
				t.Fatalf("body %d (%s, gzip %v): exchange usage %+v model %q text %q truncated %v; the tap without the memo reads %+v %q %q %v\nbody %q",
					k, c.name, gz, x.Usage, x.ModelVersion, x.Text, x.TextTruncated, want.Usage, want.ModelVersion, wantText, want.TextTruncated, body)
			}
			if serveStore {
				if len(gotWriters) != 1 {
					t.Fatalf("body %d: %d served writers", k, len(gotWriters))
				}
				w := gotWriters[0]
				if string(w.text) != want.Served || w.served != want.ServedCalled || w.truncated != want.ServedTruncate {
					t.Fatalf("body %d (gzip %v): the recorder holds %q (served %v, truncated %v); without the memo %q (%v, %v)\nbody %q",
						k, gz, w.text, w.served, w.truncated, want.Served, want.ServedCalled, want.ServedTruncate, body)
				}
			} else {
				var ws []served
				if want.Len > 0 {
					ws = []served{{x.Tenant, want.Text, want.TextTruncated}}
				}
				if len(gotServed) != len(ws) || len(ws) > 0 && gotServed[0] != ws[0] {
					t.Fatalf("body %d (gzip %v): OnServed got %+v; without the memo %+v\nbody %q", k, gz, gotServed, ws, body)
				}
			}
		}
		up.Close()
	}
}
