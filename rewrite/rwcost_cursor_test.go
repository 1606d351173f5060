package rewrite

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLineCursorIsLineAt checks that lineCursor.at answers lineAt for
// offsets asked in ascending order, with repeats, and out of order, on
// texts with empty lines, a trailing "\n" and none.
func TestLineCursorIsLineAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 2))
	for n := 0; n < 2000; n++ {
		var b strings.Builder
		for k := rng.IntN(60); k >= 0; k-- {
			b.WriteString(strings.Repeat("x", rng.IntN(5)))
			if rng.IntN(4) > 0 {
				b.WriteByte('\n')
			}
		}
		l := splitLines(b.String())
		c := lineCursor{l: &l}
		off := 0
		for q := 0; q < 40; q++ {
			switch rng.IntN(4) {
			case 0:
				off = rng.IntN(len(l.text) + 1) // anywhere, earlier too
			case 1: // the same offset again
			default:
				off = min(off+rng.IntN(12), len(l.text))
			}
			if got, want := c.at(off), lineAt(&l, off); got != want {
				t.Fatalf("text %q: at(%d) = %d, lineAt = %d", l.text, off, got, want)
			}
		}
	}
}
