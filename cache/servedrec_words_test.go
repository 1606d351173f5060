package cache

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
)

// normalizeOracle is normalize written the plainest way: the fields
// between runs of white space joined by one space. It shares no code with
// appendNormalized or the recorder's word scan.
func normalizeOracle(s string) string {
	return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
}

// checkOracle compares the recorder's key, record and prefix digests for
// text cut at cuts with the record made from normalizeOracle's text and
// sha256.Sum256 of its prefixes: the stored keys and values do not depend
// on how the recorder scans.
func checkOracle(t *testing.T, text string, cuts []int) {
	t.Helper()
	r := (&Store{}).ServedRecorder("t")
	prev := 0
	for _, c := range append(cuts, len(text)) {
		r.WriteString(text[prev:c]) //nolint:errcheck // never fails
		prev = c
	}
	checkRecord(t, r, text, func() string { return fmt.Sprintf("text %q cut at %v", text, cuts) })
}

// checkRecord compares r's key, record and prefix digests with those made
// from normalizeOracle(text) and sha256.Sum256, and returns the record;
// what names the case.
func checkRecord(t *testing.T, r *ServedRecorder, text string, what func() string) []byte {
	t.Helper()
	id, rec, prefixes, ok := r.record(false)
	n := normalizeOracle(text)
	if ok != (n != "") {
		t.Fatalf("%s: recorded %v, normalised %q", what(), ok, n)
	}
	if !ok {
		return nil
	}
	if want := digest(sha256.Sum256([]byte(n))); id != want {
		t.Fatalf("%s: id %x, want sha256 of %q", what(), id, n)
	}
	if len(n) >= MinPrefixBytes && !bytes.HasSuffix(rec, []byte(n)) {
		t.Fatalf("%s: record %q does not end in %q", what(), rec, n)
	}
	k := 0
	for _, c := range prefixCuts {
		if c >= len(n) {
			break
		}
		if k >= len(prefixes) || prefixes[k] != digest(sha256.Sum256([]byte(n[:cutAt(n, c)]))) {
			t.Fatalf("%s: prefix %d (cut %d) differs", what(), k, c)
		}
		k++
	}
	if k != len(prefixes) {
		t.Fatalf("%s: %d prefixes, want %d", what(), len(prefixes), k)
	}
	return rec
}

// TestServedRecorderWords puts each kind of white space and a multi-byte
// rune at every offset of the recorder's eight-byte words (a space last in
// a word, followed by a space, a tab, CR LF or a non-ASCII space first in
// the next; two spaces straddling words; trailing white space), and cuts
// the writes inside CR LF, inside runes and between the two spaces, so that
// the word scan's carry between words and between writes is exercised.
// The oracle is normalizeOracle and sha256.Sum256.
func TestServedRecorderWords(t *testing.T) {
	seps := []string{" ", "  ", " \t", "\r\n", " \r\n ", "\t", "\u00a0", " \u2003 ", "é", " é", "\x80", "\n\n", "\v\f"}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sep := range seps {
		for _, sep2 := range seps {
			for off := range 17 {
				// A run of ASCII, then sep at off, then text, then sep2 at
				// another word offset: both sides of the words' edges.
				text := strings.Repeat("a", off) + sep + strings.Repeat("b", 7+off%5) + sep2 + strings.Repeat("c", 9) + " d e  f"
				checkOracle(t, text, nil)
				checkOracle(t, text+sep, nil) // trailing white space
				checkOracle(t, " "+text+sep2+" ", nil)
				// Cut inside the separator (CR LF, a rune, two spaces).
				at := off + len(sep)/2
				checkOracle(t, text, []int{at})
				checkOracle(t, text, []int{off, at, off + len(sep)})
				checkOracle(t, text, randomCuts(rng, len(text), 5))
			}
		}
	}
	// Long generated texts crossing the prefix cuts, words of random
	// lengths and random separators, in random pieces.
	for range 200 {
		var sb strings.Builder
		for sb.Len() < 300+rng.IntN(5000) {
			sb.WriteString(strings.Repeat("x", rng.IntN(12)))
			sb.WriteString(seps[rng.IntN(len(seps))])
		}
		checkOracle(t, sb.String(), randomCuts(rng, sb.Len(), 20))
	}
}

// FuzzServedRecorderOracle checks the recorder's key and prefix digests
// against normalizeOracle and sha256.Sum256 for any text, cut anywhere.
func FuzzServedRecorderOracle(f *testing.F) {
	f.Add("a short  answer\r\n", uint64(1))
	f.Add("abcdefg  hijklmn\u00a0 x", uint64(2))
	f.Add(strings.Repeat("é x\u2003 \r\n", 20), uint64(7))
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		checkOracle(t, text, randomCuts(rng, len(text), 16))
	})
}
