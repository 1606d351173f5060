package cache

import (
	"math/rand/v2"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The word scans before the run ends were found at the word's lowest mark
// (jsonRun, normalizeTo): the old loops, kept as oracles. After a marked
// word they went on byte by byte from the word's start.

// jsonRunOracle is jsonRun as it was.
func jsonRunOracle(p []byte, j int) int {
	const (
		lsb = 0x0101010101010101
		msb = 0x8080808080808080
	)
	for {
		// As normalizeTo: sp carries a space last in the word before.
		sp := uint64(0)
		for j+8 <= len(p) {
			x := le64(p[j:])
			m := spaceMask(x)
			q, e := x^(lsb*'"'), x^(lsb*'\\')
			// No byte >= 0x80 or < ' ', no two spaces in a row, no quote,
			// no backslash.
			if (x|(x-lsb*' ')&^x|m&(m<<8|sp)|(q-lsb)&^q|(e-lsb)&^e)&msb != 0 {
				break
			}
			sp = m >> 56
			j += 8
		}
		if sp != 0 {
			j-- // a space last: the byte by byte step decides it
		}
		if j >= len(p) {
			return j
		}
		switch d := p[j]; {
		case jsonWord[d]:
			j++
		case d == ' ' && j+1 < len(p) && jsonWord[p[j+1]]:
			j += 2
		default:
			return j
		}
	}
}

// normalizeToOracle is normalizeTo as it was.
func normalizeToOracle[T string | []byte](r *ServedRecorder, p T, final bool) int {
	const msb = 0x8080808080808080
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf && !asciiSpace[c] {
			// A run of ASCII text with single spaces between words.
			j := i + 1
			for {
				// p[j-1] is not a space here. sp has 0x80 in its low byte
				// when the word before ends in a space, so that a space
				// last in a word costs no break: only the next word's
				// first byte tells whether it is a single space.
				sp := uint64(0)
				for j+8 <= len(p) {
					x := le64(p[j:])
					m := spaceMask(x)
					// No byte >= 0x80 or < ' ', no two spaces in a row.
					if (x|(x-0x2020202020202020)&^x|m&(m<<8|sp))&msb != 0 {
						break
					}
					sp = m >> 56
					j += 8
				}
				if sp != 0 {
					// A space last: the byte by byte step below decides it.
					j--
				}
				if j >= len(p) {
					break
				}
				d := p[j]
				if d >= utf8.RuneSelf {
					break
				}
				if asciiSpace[d] {
					if d != ' ' || j+1 >= len(p) || p[j+1] >= utf8.RuneSelf || asciiSpace[p[j+1]] {
						break
					}
					j++
				}
				j++
			}
			textTo(r, p[i:j])
			i = j
			continue
		}
		if c < utf8.RuneSelf {
			whiteTo(r, p[i:i+1])
			i++
			continue
		}
		var q [utf8.UTFMax]byte
		k := copy(q[:], p[i:])
		if !final && !utf8.FullRune(q[:k]) {
			return len(p) - i
		}
		ru, n := utf8.DecodeRune(q[:k])
		if unicode.IsSpace(ru) {
			whiteTo(r, p[i:i+n])
		} else {
			textTo(r, p[i:i+n])
		}
		i += n
	}
	return 0
}

// runAlphabet is what the generated texts are made of: word bytes, the
// bytes that end a run (space pairs, the quote, the backslash, control
// bytes, white space, bytes >= 0x80) and DEL, which is a word byte.
var runAlphabet = []string{"a", "b", "x", " ", " ", "  ", "\"", "\\", "\n", "\t", "\r", "\x01", "\x7f", "\x80", "é", "日", "\u00a0", "\u2003", "\\n", "\\u003c", "\xc3", "."}

// runText returns a text of about n pieces of runAlphabet.
func runText(rng *rand.Rand, n int) string {
	var b []byte
	for range n {
		if rng.IntN(3) == 0 {
			// A long word: the word loop's full words.
			b = append(b, "abcdefghijklmnopqrstuvwxyz"[:rng.IntN(27)]...)
		}
		b = append(b, runAlphabet[rng.IntN(len(runAlphabet))]...)
	}
	return string(b)
}

// checkRun compares jsonRun with jsonRunOracle from every j a run can
// start at, and normalizeTo with normalizeToOracle on p from every offset.
func checkRun(t *testing.T, p []byte) {
	t.Helper()
	for j := 1; j <= len(p); j++ {
		if !jsonWord[p[j-1]] {
			continue
		}
		if got, want := jsonRun(p, j), jsonRunOracle(p, j); got != want {
			t.Fatalf("jsonRun(%q, %d) = %d, want %d", p, j, got, want)
		}
	}
	for i := range len(p) + 1 {
		for _, final := range []bool{false, true} {
			a, b := (&Store{}).ServedRecorder("t"), (&Store{}).ServedRecorder("t")
			la, lb := normalizeTo(a, p[i:], final), normalizeToOracle(b, p[i:], final)
			if la != lb || string(a.buf) != string(b.buf) || a.space != b.space || a.nt != b.nt || a.trail != b.trail {
				t.Fatalf("normalizeTo(%q, %v) = %d, %q, space %v, trail %q (%d); want %d, %q, %v, %q (%d)",
					p[i:], final, la, a.buf, a.space, a.trail[:min(a.nt, maxTrail)], a.nt, lb, b.buf, b.space, b.trail[:min(b.nt, maxTrail)], b.nt)
			}
		}
	}
}

// TestWordRunStops compares the runs with the old loops on generated texts
// (every stop at every offset of the words, long words, escapes, runes,
// space pairs across words) at every start.
func TestWordRunStops(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	for _, p := range []string{"", "a", "ab cd", "abcdefg  h", "abcdefgh ij", "abcdefg\x01hij", "abcdefg \\n", "a\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f b"} {
		checkRun(t, []byte(p))
	}
	for _, stop := range runAlphabet {
		for k := range 17 {
			p := "abcdefghijklmnopqrstuvwxyz"[:k] + stop + "abcdefghijklmnopqrstuvwxyz"
			checkRun(t, []byte(p))
			checkRun(t, []byte(p[:len(p)-k]))
		}
	}
	for range 3000 {
		checkRun(t, []byte(runText(rng, 1+rng.IntN(12))))
	}
}

// FuzzWordRunStops is TestWordRunStops for any text.
func FuzzWordRunStops(f *testing.F) {
	f.Add([]byte("abcdefg  hijklmnop \\n q"))
	f.Add([]byte("a \xc3\xa9 b\x01c   "))
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) > 256 || !utf8.Valid(p) && len(p) > 64 {
			return
		}
		checkRun(t, p)
	})
}
