package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// Review of the tapunary merge (reviewtap): the tap streams a unary
// answer's first text into the real cache.ServedRecorder (Mark, Rewind,
// Commit), not only into the test's markWriter; gzip bodies go through
// finish's decompression loop; a tap without a served writer (OnServed,
// OnExchange) rewinds its own builder.

// twoStores returns two fresh stores, closed when t ends: one the tap
// records into, one RecordServed fills as the oracle.
func twoStores(t testing.TB) (a, b *cache.Store) {
	t.Helper()
	for _, p := range []**cache.Store{&a, &b} {
		s, err := cache.New(cache.Options{MaxBytes: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		*p = s
	}
	return a, b
}

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
	sa, sb := twoStores(t)
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
		writeCut(tp, body, randomCutsOf(rng, len(body), rng.IntN(20)))
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

// TestReviewTapRecorderCap: a streamed text past MaxTextBytes, cut inside
// a rune, then taken back (a thought) or kept, leaves the real recorder
// with the record of the old read's text.
func TestReviewTapRecorderCap(t *testing.T) {
	s, err := cache.New(cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ref, err := cache.New(cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	long := "x" + strings.Repeat("日本語 ", MaxTextBytes/10+100) // a rune across the cap
	for i, parts := range []string{
		`{"text":"` + long + `","thought":true},{"text":"the answer, after a long thought"}`,
		`{"thought":true,"text":"` + long + `"},{"text":"the answer"},{"text":"` + long + `"}`,
		`{"text":"` + long + `"},{"text":"more"}`,
		`{"text":"` + long[:MaxTextBytes-3] + `"},{"text":"日本"}`,
	} {
		body := []byte(`{"candidates":[{"content":{"parts":[` + parts + `]},"index":0}],"usageMetadata":{"promptTokenCount":1}}`)
		want := feedTapWith(body, nil, false)
		tenant := fmt.Sprint("t", i)
		tp := newTap("", true)
		tp.text.keep = false
		rec := s.ServedRecorder(tenant)
		tp.text.w = rec
		for k := 0; k < len(body); k += 32 << 10 {
			tp.Write(body[k:min(k+32<<10, len(body))]) //nolint:errcheck // never fails
		}
		tp.finish()
		rec.Served(tp.textTruncated)
		ref.RecordServed(tenant, want.Text, want.TextTruncated)
		s.Wait()
		ref.Wait()
		for _, q := range []string{want.Text, want.Text[:len(want.Text)/2], want.Text[:len(want.Text)-1] + "y", "the answer"} {
			if a, b := s.Verifier(tenant).Served(q), ref.Verifier(tenant).Served(q); a != b {
				t.Errorf("case %d: Served(%.40q…) = %v; the old read's record says %v", i, q, a, b)
			}
		}
		if tp.textTruncated != want.TextTruncated {
			t.Errorf("case %d: truncated %v; want %v", i, tp.textTruncated, want.TextTruncated)
		}
	}
}

// rewindKeepBody is a streamed JSON array whose text reaches 512 KB,
// then many objects whose first text is a thought, each taken back.
func rewindKeepBody() []byte {
	var sb strings.Builder
	sb.WriteString(`[{"candidates":[{"content":{"parts":[{"text":"` + strings.Repeat("answer text ", (512<<10)/12) + `"}]}}]}`)
	for range 500 {
		sb.WriteString(`,{"candidates":[{"content":{"parts":[{"text":"a thought","thought":true},{"text":"x"}]}}]}`)
	}
	sb.WriteString("]")
	return []byte(sb.String())
}

// TestReviewTapRewindKeepAlloc: taking back a streamed thought must not
// copy the text kept so far (OnServed, OnExchange with text): the tap
// allocated 280 MB for this 560 KB body (500 rewinds of a 512 KB text);
// reading each object whole allocates under 3 MB.
func TestReviewTapRewindKeepAlloc(t *testing.T) {
	body := rewindKeepBody()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tp := newTap("", true)
	tp.text.w = &markWriter{}
	for k := 0; k < len(body); k += 32 << 10 {
		tp.Write(body[k:min(k+32<<10, len(body))]) //nolint:errcheck // never fails
	}
	tp.finish()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 20*uint64(len(body)) {
		t.Errorf("reading a %d-byte body allocated %d bytes", len(body), got)
	}
	if want := feedTapWith(body, nil, false).Text; tp.text.String() != want {
		t.Errorf("text %d bytes; want %d", len(tp.text.String()), len(want))
	}
}

// BenchmarkReviewTapRewindKeep: rewindKeepBody read with keep
// (OnServed, OnExchange with text); keep=false (the served recorder
// only, as cmd/gemini-proxy runs) and stream=false (a writer without
// Mark: the old read of each object whole) are the baselines.
func BenchmarkReviewTapRewindKeep(b *testing.B) {
	body := rewindKeepBody()
	for _, c := range []struct{ keep, stream bool }{{false, true}, {true, true}, {true, false}} {
		b.Run(fmt.Sprintf("keep=%v/stream=%v", c.keep, c.stream), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				tp := newTap("", true)
				tp.text.keep = c.keep
				if c.stream {
					tp.text.w = &markWriter{}
				} else {
					tp.text.w = &noMarkWriter{} // the old read: nothing streamed
				}
				for k := 0; k < len(body); k += 32 << 10 {
					tp.Write(body[k:min(k+32<<10, len(body))]) //nolint:errcheck // never fails
				}
				tp.finish()
			}
		})
	}
}
