package cache

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// servedRecordRef is RecordServed's record as it was made before
// ServedRecorder, in one pass over the whole text: the oracle of the
// incremental recorder.
func servedRecordRef(text string, truncated bool) (id digest, rec []byte, prefixes []digest, ok bool) {
	flag := byte(0)
	trail := text[len(strings.TrimRightFunc(text, unicode.IsSpace)):]
	switch {
	case truncated:
		flag = flagTruncated
	case trail == "":
		flag = flagEnd
	case len(trail) <= maxTrail:
		flag = flagEnd | flagTrail
	}
	rec = []byte{flag}
	if flag&flagTrail != 0 {
		rec = append(append(rec, byte(len(trail))), trail...)
	}
	head := len(rec)
	rec = appendNormalized(rec, text)
	n := rec[head:]
	if len(n) == 0 {
		return id, nil, nil, false
	}
	h := sha256.New()
	done := 0
	for _, c := range prefixCuts {
		if c >= len(n) {
			break
		}
		cut := cutAt(n, c)
		h.Write(n[done:cut])
		done = cut
		prefixes = append(prefixes, digest(h.Sum(nil)))
	}
	h.Write(n[done:])
	h.Sum(id[:0])
	if len(n) < MinPrefixBytes {
		rec = rec[:head]
	}
	return id, rec, prefixes, true
}

// checkRecorder writes text to a ServedRecorder cut at cuts (ascending
// offsets into text) and compares its record with servedRecordRef's.
func checkRecorder(t *testing.T, text string, cuts []int, truncated bool) {
	t.Helper()
	r := (&Store{}).ServedRecorder("t")
	if len(cuts)%3 == 0 {
		r.Grow(len(text)) // as RecordServed does; other cuts grow by appending
	}
	prev := 0
	for i, c := range cuts {
		if i%2 == 0 {
			r.WriteString(text[prev:c]) //nolint:errcheck // never fails
		} else {
			r.Write([]byte(text[prev:c])) //nolint:errcheck // never fails
		}
		prev = c
	}
	r.WriteString(text[prev:]) //nolint:errcheck // never fails
	id, rec, prefixes, ok := r.record(truncated)
	wid, wrec, wprefixes, wok := servedRecordRef(text, truncated)
	switch {
	case ok != wok:
		t.Fatalf("text %q cut at %v: recorded %v, want %v", text, cuts, ok, wok)
	case id != wid:
		t.Fatalf("text %q cut at %v: id %x, want %x", text, cuts, id, wid)
	case !bytes.Equal(rec, wrec):
		t.Fatalf("text %q cut at %v: record %q, want %q", text, cuts, rec, wrec)
	case len(prefixes) != len(wprefixes):
		t.Fatalf("text %q cut at %v: %d prefixes, want %d", text, cuts, len(prefixes), len(wprefixes))
	}
	for i := range prefixes {
		if prefixes[i] != wprefixes[i] {
			t.Fatalf("text %q cut at %v: prefix %d differs", text, cuts, i)
		}
	}
}

// randomCuts returns up to n ascending offsets into a text of size bytes.
func randomCuts(rng *rand.Rand, size, n int) []int {
	if size == 0 {
		return nil
	}
	cuts := make([]int, rng.IntN(n+1))
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

// TestServedRecorderChunks checks the incremental record against the
// one-pass one on texts with every kind of white space, multi-byte and
// invalid UTF-8 (cut inside runes), trails short and long, prefix cuts
// near multi-byte runes and runs of continuation bytes, each written in
// one piece, byte by byte and in random pieces.
func TestServedRecorderChunks(t *testing.T) {
	texts := []string{
		"",
		" \n\t ",
		"a",
		"a short answer",
		"  lead and trail  \n\n",
		strings.Repeat("word ", 20) + strings.Repeat(" ", 300),
		strings.Repeat("b", 64),
		strings.Repeat("word \n\t ", 400) + " ",
		strings.Repeat("é", 3000),
		strings.Repeat("x\u00a0y\u2003", 1500),
		strings.Repeat("0123456789abcdef ", 20000),
		strings.Repeat("Prose, with  double spaces,\r\nCRLF and\ttabs.\v\f", 300),
		strings.Repeat("a", 62) + "\xe2\x80\x83" + strings.Repeat("b", 300),
		strings.Repeat("a", 63) + strings.Repeat("\x80", 40) + strings.Repeat("c", 300),
		strings.Repeat("\x80", 300),
		"\xf0\x9f\x98\x80 emoji \xf0\x9f \xe2\x82 truncated runes \xed\xa0\x80 surrogate \xff",
		strings.Repeat("日本語のテキスト　全角スペース ", 400),
		"ends in a cut rune \xe2\x82",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, text := range texts {
		for _, truncated := range []bool{false, true} {
			checkRecorder(t, text, nil, truncated)
			if len(text) < 5000 {
				every := make([]int, len(text))
				for i := range every {
					every[i] = i
				}
				checkRecorder(t, text, every, truncated)
			}
			for range 20 {
				checkRecorder(t, text, randomCuts(rng, len(text), 12), truncated)
			}
		}
	}
}

// FuzzServedRecorder checks the incremental record against the one-pass
// one for any text, cut anywhere.
func FuzzServedRecorder(f *testing.F) {
	f.Add("a short  answer\n", uint64(1), false)
	f.Add(strings.Repeat("é x\u2003", 40), uint64(7), true)
	f.Add(strings.Repeat("a", 63)+"\x80\x80\x80\x80b", uint64(3), false)
	f.Fuzz(func(t *testing.T, text string, seed uint64, truncated bool) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		checkRecorder(t, text, randomCuts(rng, len(text), 16), truncated)
	})
}

// BenchmarkServedRecorder records a 256 KB answer (Markdown prose with
// code and new lines, as bench.LongAnswers serves) with the recorder, in
// one write and in 100 writes (a stream), next to the one-pass record it
// replaced.
//
//	go test ./cache -run '^$' -bench ServedRecorder -benchmem
func BenchmarkServedRecorder(b *testing.B) {
	para := "The difference is ownership of the backing storage.\n\nAn **array** in Go has a fixed length that is part of its type: `[4]int` and `[5]int` are different types.\n\n```go\na := [4]int{1, 2, 3, 4}\ns := a[1:3] // len 2, cap 3\n```\n\n"
	text := strings.Repeat(para, 256<<10/len(para))
	b.Run("one-pass", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			servedRecordRef(text, false)
		}
	})
	for _, pieces := range []int{1, 100} {
		b.Run("recorder/"+strconv.Itoa(pieces), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			step := len(text)/pieces + 1
			for b.Loop() {
				r := (&Store{}).ServedRecorder("t")
				for i := 0; i < len(text); i += step {
					r.Grow(min(step, len(text)-i))
					r.WriteString(text[i:min(i+step, len(text))]) //nolint:errcheck // never fails
				}
				r.record(false)
			}
		})
	}
}

// TestServedRecorderMark: text written after Mark and taken back by Rewind
// leaves the record of the text without it; with Commit, the record of the
// whole text; wherever the pieces, the mark and the taken-back text are
// cut (inside runes and white space runs, across prefix cuts), and with
// writes after either.
func TestServedRecorderMark(t *testing.T) {
	pieces := []string{
		"", " ", "a", "word ", "  \n\t ", "é", "\xe2\x82", "\x80\x80", "\xf0\x9f\x98\x80",
		strings.Repeat("0123456789abcdef ", 300), strings.Repeat("x\u00a0y ", 700),
		strings.Repeat(" ", 300), "日本語　", strings.Repeat("b", 61),
	}
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func() string {
		var sb strings.Builder
		for range rng.IntN(4) {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return sb.String()
	}
	write := func(r *ServedRecorder, s string) {
		prev := 0
		for _, c := range append(randomCuts(rng, len(s), 4), len(s)) {
			r.WriteString(s[prev:c]) //nolint:errcheck // never fails
			prev = c
		}
	}
	for i := range 3000 {
		a, b, c := pick(), pick(), pick()
		commit := i%2 == 0
		r := (&Store{}).ServedRecorder("t")
		write(r, a)
		r.Mark()
		write(r, b)
		want := a + c
		if commit {
			r.Commit()
			want = a + b + c
		} else {
			r.Rewind()
		}
		write(r, c)
		truncated := i%5 == 0
		id, rec, prefixes, ok := r.record(truncated)
		wid, wrec, wprefixes, wok := servedRecordRef(want, truncated)
		if ok != wok || id != wid || !bytes.Equal(rec, wrec) || len(prefixes) != len(wprefixes) {
			t.Fatalf("a %q, b %q (commit %v), c %q: record %v %x %q %d; want %v %x %q %d",
				a, b, commit, c, ok, id, rec, len(prefixes), wok, wid, wrec, len(wprefixes))
		}
		for k := range prefixes {
			if prefixes[k] != wprefixes[k] {
				t.Fatalf("a %q, b %q (commit %v), c %q: prefix %d differs", a, b, commit, c, k)
			}
		}
	}
}
