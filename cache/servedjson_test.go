package cache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// unquoteOracle is the text a JSON string literal's inside stands for, as
// encoding/json reads it.
func unquoteOracle(t *testing.T, raw []byte) string {
	t.Helper()
	var s string
	if err := json.Unmarshal([]byte(`"`+string(raw)+`"`), &s); err != nil {
		t.Fatalf("%q is not a JSON string: %v", raw, err)
	}
	return s
}

// jsonUnit is the length of what WriteJSON stopped at in p (an escape, a
// \u pair, a rune, an invalid byte), or 0 when more input is needed to
// tell; final reports that no more input follows.
func jsonUnit(p []byte, final bool) int {
	hex := func(b []byte) rune {
		r, err := strconv.ParseUint(string(b), 16, 32)
		if err != nil {
			return -1
		}
		return rune(r)
	}
	switch c := p[0]; {
	case c == '\\':
		if len(p) < 2 || p[1] == 'u' && len(p) < 6 {
			return 0
		}
		if p[1] != 'u' {
			return 2
		}
		if r := hex(p[2:6]); utf16.IsSurrogate(r) && r < 0xdc00 {
			if len(p) < 12 && !final {
				return 0
			}
			if len(p) >= 12 && p[6] == '\\' && p[7] == 'u' {
				if lo := hex(p[8:12]); 0xdc00 <= lo && lo < 0xe000 {
					return 12
				}
			}
		}
		return 6
	case c >= utf8.RuneSelf:
		if !utf8.FullRune(p) && !final {
			return 0
		}
		_, size := utf8.DecodeRune(p)
		return size
	}
	return 1
}

// writeJSONCut writes raw, the inside of a JSON string, to r in the pieces
// cut at cuts, as the tap does: WriteJSON as far as it reads, what it
// stops at unescaped and written with Write (a rune now and then in two
// writes, so that WriteJSON meets the recorder's carry). It checks each
// WriteJSON's count of text bytes.
func writeJSONCut(t *testing.T, r *ServedRecorder, raw []byte, cuts []int, rng *rand.Rand) {
	t.Helper()
	var pend []byte
	prev := 0
	for k, c := range append(cuts, len(raw)) {
		pend = append(pend, raw[prev:c]...)
		prev = c
		final := k == len(cuts)
		for len(pend) > 0 {
			used, n := r.WriteJSON(pend)
			if want := len(unquoteOracle(t, pend[:used])); n != want || used > len(pend) {
				t.Fatalf("WriteJSON(%q) = %d, %d: %q stands for %d bytes", pend, used, n, pend[:used], want)
			}
			if pend = pend[used:]; len(pend) == 0 {
				break
			}
			u := jsonUnit(pend, final)
			if u == 0 {
				break // the next piece tells
			}
			text := []byte(unquoteOracle(t, pend[:u]))
			if len(text) > 1 && rng.IntN(2) == 0 {
				r.Write(text[:1]) //nolint:errcheck // never fails
				if used, n := r.WriteJSON(pend[u:]); used != 0 || n != 0 {
					t.Fatalf("WriteJSON(%q) with a rune cut before it = %d, %d; want 0, 0", pend[u:], used, n)
				}
				text = text[1:]
			}
			r.Write(text) //nolint:errcheck // never fails
			pend = pend[u:]
		}
	}
	if len(pend) > 0 {
		t.Fatalf("%q left unread", pend)
	}
}

// checkJSON records raw cut at cuts through WriteJSON and compares the key,
// record and prefixes with the oracle's of the text encoding/json reads
// from it (normalizeOracle, sha256.Sum256), and the record, header and
// trail included, with Write's of that text in one piece.
func checkJSON(t *testing.T, raw string, cuts []int, rng *rand.Rand) {
	t.Helper()
	text := unquoteOracle(t, []byte(raw))
	r := (&Store{}).ServedRecorder("t")
	writeJSONCut(t, r, []byte(raw), cuts, rng)
	one := (&Store{}).ServedRecorder("t")
	one.WriteString(text) //nolint:errcheck // never fails
	_, want, _, _ := one.record(false)
	got := checkRecord(t, r, text, func() string { return fmt.Sprintf("raw %q cut at %v", raw, cuts) })
	if !bytes.Equal(got, want) {
		t.Fatalf("raw %q cut at %v: record %q; Write of the text whole makes %q", raw, cuts, got, want)
	}
}

// jsonSeps are the pieces of JSON string the tests put between words:
// every escape WriteJSON reads (white space and text), those it stops at
// (\u, surrogates paired and not), CR LF escaped and raw runes, spaces in
// pairs, non-ASCII white space, invalid UTF-8 and DEL.
var jsonSeps = []string{
	" ", "  ", `\n`, `\r\n`, `\n\n`, ` \r\n `, `\t`, `\f`, `\b`, `\"`, `\\`, `\/`, `x\\\"`,
	`\u0020`, `\u000b`, `\u00e9`, `\u00a0`, `\ud83d\ude00`, `\ud83d`, `\ud83d\u00e9`, `\ude00 `,
	"é", " é", "日本", "\u00a0", " \u2003 ", "\xff", "\xe2\x82", "\x7f", `\n \t`,
	`\u003c`, `\u0026`, `\u0085`, `\u2003`, `\u3000 `, `\u0000`, `\uFFFD`, "\ufffd", "\U0001F600", `\u00A0\u00a0`,
}

// TestServedRecorderJSON: WriteJSON, with what it stops at written by
// Write, records exactly what Write of the unescaped text records, for
// each separator at every offset of the eight-byte words, cut at every
// offset (inside escapes, \u pairs, runes, CR LF and space pairs), byte by
// byte and in random pieces.
func TestServedRecorderJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	for _, sep := range jsonSeps {
		for _, sep2 := range jsonSeps {
			for off := range 10 {
				raw := strings.Repeat("a", off) + sep + strings.Repeat("b", 7+off%5) + sep2 + "ccccccccc d e  f"
				for _, r := range []string{raw, raw + sep, " " + raw + sep2 + " ", sep + raw} {
					checkJSON(t, r, nil, rng)
					checkJSON(t, r, randomCuts(rng, len(r), 4), rng)
				}
				if off%3 == 0 {
					for k := range len(raw) + 1 {
						checkJSON(t, raw, []int{k}, rng)
					}
					every := make([]int, len(raw))
					for i := range every {
						every[i] = i
					}
					checkJSON(t, raw, every, rng)
				}
			}
		}
	}
	// Long texts across the prefix cuts.
	for range 100 {
		var sb strings.Builder
		for sb.Len() < 300+rng.IntN(20000) {
			sb.WriteString(strings.Repeat("x", rng.IntN(12)))
			sb.WriteString(jsonSeps[rng.IntN(len(jsonSeps))])
		}
		checkJSON(t, sb.String(), randomCuts(rng, sb.Len(), 20), rng)
	}
}

// FuzzServedRecorderJSON is TestServedRecorderJSON for any JSON string.
func FuzzServedRecorderJSON(f *testing.F) {
	f.Add("a short  answer\\r\\n", uint64(1))
	f.Add(`abc\"defg  hij\u00e9klmn\ud83d x`, uint64(2))
	f.Fuzz(func(t *testing.T, text string, seed uint64) {
		b, err := json.Marshal(text)
		if err != nil {
			t.Skip()
		}
		raw := string(b[1 : len(b)-1])
		if seed&1 == 0 {
			// As written by hand: \n, \t and \r escaped, the rest raw.
			raw = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(raw)
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		checkJSON(t, raw, randomCuts(rng, len(raw), 16), rng)
	})
}
