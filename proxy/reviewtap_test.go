package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// Review of the tapunary merge (reviewtap): the tap streams a unary
// answer's first text into the real cache.ServedRecorder (Mark, Rewind,
// Commit), not only into the test's markWriter; gzip bodies go through
// finish's decompression loop; a tap without a served writer (OnServed,
// OnExchange) rewinds its own builder.

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReviewTapRecorder: whatever the body and its reads, identity or
// gzip, the record the real ServedRecorder makes of a streamed read
// answers every query (the text, its halves, the text changed, its
// trail) as RecordServed of the text the old whole-object read gives.
func TestReviewTapRecorder(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	sa, err := cache.New(cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sb, err := cache.New(cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	n := 0
	for _, shape := range []struct {
		odd         bool
		long, count int
	}{{false, 40, 150}, {true, 40, 300}, {true, 3000, 120}, {false, 30000, 10}, {true, 30000, 10}} {
		g := &answerGen{r: rng, odd: shape.odd, long: shape.long}
		for range shape.count {
			body := g.body()
			want := feedTapWith(body, nil, false)
			for _, gz := range []bool{false, true} {
				n++
				tenant := fmt.Sprint("t", n)
				enc, in := "", body
				if gz {
					enc, in = "gzip", gzipOf(t, body)
				}
				tp := newTap(enc, true)
				tp.text.keep = n%2 == 0
				rec := sa.ServedRecorder(tenant)
				tp.text.w = rec
				prev := 0
				for _, c := range append(randomCutsOf(rng, len(in), rng.IntN(16)), len(in)) {
					tp.Write(in[prev:c]) //nolint:errcheck // never fails
					prev = c
				}
				tp.finish()
				if tp.text.Len() > 0 {
					rec.Served(tp.textTruncated)
				}
				if tp.text.keep && tp.text.String() != want.Text {
					t.Fatalf("body %q gzip %v: Text %q; want %q", body, gz, tp.text.String(), want.Text)
				}
				if tp.textTruncated != want.TextTruncated || !equalUsage(tp.usage, want.Usage) || tp.modelVersion != want.ModelVersion {
					t.Fatalf("body %q gzip %v: truncated %v usage %+v mv %q; want %v %+v %q", body, gz,
						tp.textTruncated, tp.usage, tp.modelVersion, want.TextTruncated, want.Usage, want.ModelVersion)
				}
				if want.Text != "" {
					sb.RecordServed(tenant, want.Text, want.TextTruncated)
				}
				sa.Wait()
				sb.Wait()
				h := len(want.Text) / 2
				for _, q := range []string{want.Text, want.Text[:h], want.Text + " more", "x" + want.Text, want.Text[h:]} {
					va, vb := sa.Verifier(tenant), sb.Verifier(tenant)
					if a, b := va.Served(q), vb.Served(q); a != b {
						t.Fatalf("body %q gzip %v: Served(%.80q) = %v; RecordServed of the old read says %v", body, gz, q, a, b)
					}
					ta, oka := va.ServedTrail(q)
					tb, okb := vb.ServedTrail(q)
					if ta != tb || oka != okb {
						t.Fatalf("body %q gzip %v: ServedTrail(%.80q) = %q %v; want %q %v", body, gz, q, ta, oka, tb, okb)
					}
				}
			}
		}
	}
	t.Logf("%d bodies compared", n)
}

// TestReviewTapKeepOnly: a tap without a served writer (OnServed, or
// OnExchange with text) streams into its own builder and takes back what
// the object does not keep.
func TestReviewTapKeepOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 55))
	g := &answerGen{r: rng, odd: true, long: 200}
	for range 1500 {
		body := g.body()
		want := feedTapWith(body, nil, false)
		tp := newTap("", true)
		prev := 0
		for _, c := range append(randomCutsOf(rng, len(body), rng.IntN(20)), len(body)) {
			tp.Write(body[prev:c]) //nolint:errcheck // never fails
			prev = c
		}
		tp.finish()
		if tp.text.String() != want.Text || tp.text.Len() != len(want.Text) || tp.textTruncated != want.TextTruncated {
			t.Fatalf("body %q: text %q (%d) truncated %v; want %q %v", body, tp.text.String(), tp.text.Len(), tp.textTruncated, want.Text, want.TextTruncated)
		}
	}
}

// TestReviewTapNearMaxEvent: an object of a streamed array just under
// maxEventBytes, whose text ends in the read that also holds the next
// object, is read whole by the old read; streamText's size check counts
// the whole rest of the read (the next object too) as the string's, gives
// the object up as too large and marks the text truncated.
func TestReviewTapNearMaxEvent(t *testing.T) {
	obj := func(image, text string) string {
		return `{"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + image + `"}},{"text":"` + text + `"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":1,"totalTokenCount":2},"modelVersion":"m"}`
	}
	shell := len(obj("", "Here is the image."))
	image := strings.Repeat("QUJD", (maxEventBytes-shell-200)/4)
	first := obj(image, "Here is the image.")
	next := obj("", strings.Repeat("next answer ", 200))
	body := []byte("[" + first + ",\r\n" + next + "]")
	if n := len(first); n > maxEventBytes || n < maxEventBytes-300 {
		t.Fatalf("first object %d bytes", n)
	}
	want := feedTapWith(body, nil, false)
	if want.TextTruncated || !strings.HasPrefix(want.Text, "Here is the image.next answer") {
		t.Fatalf("the old read: %.40q truncated %v", want.Text, want.TextTruncated)
	}
	var cuts []int
	for c := 32 << 10; c < len(body); c += 32 << 10 {
		cuts = append(cuts, c)
	}
	got := feedTap(body, cuts)
	if got.Text != want.Text || got.TextTruncated != want.TextTruncated {
		t.Fatalf("streamed: text %.40q (%d bytes), truncated %v; the old read: %.40q (%d bytes), truncated %v",
			got.Text, len(got.Text), got.TextTruncated, want.Text, len(want.Text), want.TextTruncated)
	}
}
