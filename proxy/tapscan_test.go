package proxy

import (
	"math/rand/v2"
	"testing"
)

// TestWordRuns compares plainRun and nameRun, which find their stop in a
// word by stopMask, with a byte by byte scan of strStop and nameStop, and
// plainRunOr's and plainRunASCII's report of non-ASCII bytes before the
// stop with theirs: every byte value at every offset of two words and of
// the tail, after and before
// other stops, and random buffers.
func TestWordRuns(t *testing.T) {
	slow := func(table *[256]bool, b []byte, i int) int {
		for ; i < len(b); i++ {
			if table[b[i]] {
				return i
			}
		}
		return i
	}
	check := func(b []byte, i int) {
		t.Helper()
		if got, want := plainRun(b, i), slow(&strStop, b, i); got != want {
			t.Fatalf("plainRun(%q, %d) = %d, want %d", b, i, got, want)
		}
		if got, want := nameRun(b, i), slow(&nameStop, b, i); got != want {
			t.Fatalf("nameRun(%q, %d) = %d, want %d", b, i, got, want)
		}
		j, or := plainRunOr(b, i)
		ascii := true
		for _, c := range b[i:j] {
			ascii = ascii && c < 0x80
		}
		if j != plainRun(b, i) || (or&msb == 0) != ascii {
			t.Fatalf("plainRunOr(%q, %d) = %d, %#x; want %d and ASCII %v", b, i, j, or, plainRun(b, i), ascii)
		}
		if k, a := plainRunASCII(b, i); k != j || a != ascii {
			t.Fatalf("plainRunASCII(%q, %d) = %d, %v; want %d, %v", b, i, k, a, j, ascii)
		}
	}
	for c := range 256 {
		for n := 1; n <= 36; n++ {
			for at := range n {
				b := make([]byte, n)
				for k := range b {
					b[k] = 'a'
				}
				b[at] = byte(c)
				for i := 0; i <= at; i++ {
					check(b, i)
				}
				// A stop of each kind after it: the first must win.
				for _, d := range []byte{'"', '\\', 0, 0x1f, 0x80, 0xff} {
					if at+1 < n {
						b[n-1] = d
						check(b, 0)
						b[n-1] = 'a'
					}
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab \"\\\x00\x1f\x20\x7f\x80\xc3\xa9\xff\xe0")
	for range 20000 {
		b := make([]byte, rng.IntN(72))
		for k := range b {
			if rng.IntN(6) == 0 {
				b[k] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[k] = byte(' ' + rng.IntN(95))
			}
		}
		check(b, rng.IntN(len(b)+1))
	}
}

// TestFieldFindsEveryName checks that field finds each name of every list
// the scanners match (its length filter, nameLens, must know them all: the
// ledger's were missing once, and it read no contents).
func TestFieldFindsEveryName(t *testing.T) {
	for _, names := range [][]string{topNames, topUsageNames, candidateNames, contentNames, partNames, usageNames, ledgerNames, ledgerContentNames} {
		for k, n := range names {
			var seen uint32
			if got := field([]byte(n), names, &seen); got != k {
				t.Errorf("field(%q, %q) = %d, want %d", n, names, got, k)
			}
		}
	}
}
