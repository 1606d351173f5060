package proxy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// fusedSeps are pieces of a JSON-encoded text: the escapes the recorder's
// WriteJSON reads, those it stops at (\u, surrogates), CR LF escaped,
// multi-byte and invalid UTF-8, space pairs.
var fusedSeps = []string{
	" ", "  ", `\n`, `\r\n`, `\n\n`, ` \r\n `, `\t`, `\f`, `\b`, `\"`, `\\`, `\/`,
	`\u0020`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, "é", "日本", "\u00a0", " \u2003 ", "\xff", "\xe2\x82",
}

// fusedAnswer is a Gemini answer whose one text is made of words and
// fusedSeps, each at every offset of the eight-byte words somewhere; with
// plain, only of what WriteJSON reads (no \u, only ASCII).
func fusedAnswer(rng *rand.Rand, size int, plain bool) []byte {
	seps := fusedSeps
	if plain {
		seps = seps[:12]
	}
	var b strings.Builder
	for b.Len() < size {
		b.WriteString(strings.Repeat("w", rng.IntN(11)))
		b.WriteString(seps[rng.IntN(len(seps))])
	}
	return []byte(`{"candidates": [{"content": {"parts": [{"text": "` + b.String() +
		`"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 70,"totalTokenCount": 79},"modelVersion": "gemini-2.5-flash"}`)
}

// TestTapFusedRecorder: a tap that keeps no text of its own hands the
// streamed string to the recorder still escaped (WriteJSON). Whatever the
// reads (cut at every offset of small bodies: inside escapes, \u pairs,
// runes, CR LF; byte by byte; in random pieces), the recorder's record
// answers every query as RecordServed of the text the whole-object read
// gives, and the tap counts the same text and truncation. The same for
// SSE streams, whose events' texts go to the recorder escaped as well.
func TestTapFusedRecorder(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	sa, sb := twoStores(t)
	n := 0
	check := func(body []byte, cuts []int) {
		t.Helper()
		n++
		tenant := fmt.Sprint("t", n)
		want := feedTapWith(body, nil, false)
		tp := newTap("", true)
		tp.text.keep = false
		rec := sa.ServedRecorder(tenant)
		tp.text.w = rec
		writeCut(tp, body, cuts)
		if tp.text.Len() != len(want.Text) || tp.textTruncated != want.TextTruncated {
			t.Fatalf("body %q cut at %v: %d bytes of text, truncated %v; want %d, %v", body, cuts, tp.text.Len(), tp.textTruncated, len(want.Text), want.TextTruncated)
		}
		if tp.text.Len() > 0 {
			rec.Served(tp.textTruncated)
		}
		if want.Text != "" {
			sb.RecordServed(tenant, want.Text, want.TextTruncated)
		}
		sa.Wait()
		sb.Wait()
		h := len(want.Text) / 2
		for _, q := range []string{want.Text, want.Text[:h], want.Text + " more", "x" + want.Text, want.Text[h:], strings.TrimSpace(want.Text)} {
			va, vb := sa.Verifier(tenant), sb.Verifier(tenant)
			if a, b := va.Served(q), vb.Served(q); a != b {
				t.Fatalf("body %q cut at %v: Served(%.80q) = %v; RecordServed of the whole read says %v", body, cuts, q, a, b)
			}
			ta, oka := va.ServedTrail(q)
			tb, okb := vb.ServedTrail(q)
			if ta != tb || oka != okb {
				t.Fatalf("body %q cut at %v: ServedTrail(%.80q) = %q %v; want %q %v", body, cuts, q, ta, oka, tb, okb)
			}
		}
	}
	every := func(size int) []int {
		c := make([]int, size)
		for i := range c {
			c[i] = i
		}
		return c
	}
	for k := range 16 {
		body := fusedAnswer(rng, 60+rng.IntN(120), k%4 == 0)
		for k := range len(body) + 1 {
			check(body, []int{k})
		}
		check(body, every(len(body)))
	}
	for _, size := range []int{3000, 40000, 300000, MaxTextBytes * 3 / 2} {
		for k := range 4 {
			body := fusedAnswer(rng, size, k%2 == 0)
			check(body, nil)
			check(body, randomCutsOf(rng, len(body), 1+rng.IntN(40)))
		}
	}
	for _, shape := range []struct {
		odd         bool
		long, count int
	}{{false, 40, 40}, {true, 40, 80}, {true, 3000, 60}} {
		g := &answerGen{r: rng, odd: shape.odd, long: shape.long}
		for range shape.count {
			body := g.body()
			check(body, nil)
			check(body, randomCutsOf(rng, len(body), 1+rng.IntN(16)))
			if len(body) < 400 {
				check(body, every(len(body)))
			}
		}
	}
	// Streams: each event's texts go to the recorder escaped (apply).
	for _, shape := range []struct {
		odd         bool
		long, count int
	}{{false, 40, 40}, {true, 40, 80}, {true, 600, 40}} {
		g := &answerGen{r: rng, odd: shape.odd, long: shape.long}
		for range shape.count {
			var b strings.Builder
			sep := []string{"\r\n\r\n", "\n\n"}[rng.IntN(2)]
			for range 1 + rng.IntN(5) {
				b.WriteString("data: " + strings.ReplaceAll(g.answer(), "\n", " ") + sep)
			}
			body := []byte(b.String())
			check(body, nil)
			check(body, randomCutsOf(rng, len(body), 1+rng.IntN(16)))
			if len(body) < 1500 {
				for k := range len(body) + 1 {
					check(body, []int{k})
				}
				check(body, every(len(body)))
			}
		}
	}
	t.Logf("%d reads compared", n)
}
