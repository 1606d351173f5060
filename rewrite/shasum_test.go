package rewrite

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
)

// shaOracle is the sum engine.sha must return: crypto/sha256 over the
// whole content.
func shaOracle(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// shaInputs returns contents that share prefixes in every way a resumed
// sum meets: exact repeats, prefixes and extensions of each other, cut at
// and around checkpoints and 64-byte blocks, edited after the prefix, and
// with the same head but nothing else alike.
func shaInputs(r *rand.Rand, every int) []string {
	base := make([]byte, 6*every+200)
	for i := range base {
		base[i] = "ab\n\t{}\"x"[r.IntN(8)]
	}
	b := string(base)
	var in []string
	for _, n := range []int{0, 1, 63, 64, 65, every - 1, every, every + 1, 2*every - 64, 2 * every, 2*every + 63, 3*every + 5, len(b)} {
		in = append(in, b[:n])
	}
	for range 40 {
		n := r.IntN(len(b) + 1)
		s := b[:n]
		switch r.IntN(4) {
		case 0: // an edit after a shared prefix
			if n > 0 {
				k := r.IntN(n)
				s = s[:k] + "EDIT" + s[k:]
			}
		case 1: // the same head, then other bytes
			s = b[:min(n, shaHeadBytes)] + strings.Repeat("z", r.IntN(3*every))
		case 2: // a longer content that begins with a shorter one
			s = s + strings.Repeat("y", r.IntN(2*every))
		}
		in = append(in, s)
	}
	return in
}

// TestSHASums checks every sum of engine.sha against crypto/sha256, in
// random orders of contents that share prefixes, with the default
// checkpoint distance and small ones (every resume path at a few KB), and
// on the exhaustive path; and that the resumes happen.
func TestSHASums(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	for _, every := range []int{0, 64, 128, 192} {
		e0 := every
		if e0 == 0 {
			e0 = shaEvery
		}
		resumed := 0
		for round := range 20 {
			in := shaInputs(r, e0)
			r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			for _, exhaustive := range []bool{false, true} {
				st := new(state)
				st.shas.every = every
				e := &engine{st: st, exhaustive: exhaustive}
				for i, s := range in {
					if got, want := e.sha(s), shaOracle(s); got != want {
						t.Fatalf("every %d, round %d, exhaustive %v: sha of content %d (%d bytes) = %s, want %s", every, round, exhaustive, i, len(s), got, want)
					}
				}
				// Asked again, in another order, after the memo filled up.
				for _, i := range r.Perm(len(in)) {
					if got, want := e.sha(in[i]), shaOracle(in[i]); got != want {
						t.Fatalf("every %d, round %d: sha of content %d again = %s, want %s", every, round, i, got, want)
					}
				}
				if exhaustive && st.shas.resumed != 0 {
					t.Fatalf("exhaustive path resumed %d bytes", st.shas.resumed)
				}
				resumed += st.shas.resumed
				st.shas.reset()
				if len(st.shas.heads) != 0 || len(st.shas.sums) != 0 || len(st.shas.cks) != 0 || len(st.shas.states) != 0 {
					t.Fatal("reset kept contents")
				}
			}
		}
		if resumed == 0 {
			t.Errorf("every %d: no sum resumed from a checkpoint", every)
		}
	}
}

// TestSHASumsWalk checks that contents past shaWalk with the same head
// still get their own sums (hashed again), and that a repeat of one is
// still the same sum.
func TestSHASumsWalk(t *testing.T) {
	st := new(state)
	st.shas.every = 64
	e := &engine{st: st}
	head := strings.Repeat("h", shaHeadBytes)
	var in []string
	for i := range 3 * shaWalk {
		in = append(in, head+strings.Repeat(string(rune('a'+i)), 300+i))
	}
	for range 2 {
		for i, s := range in {
			if got, want := e.sha(s), shaOracle(s); got != want {
				t.Fatalf("content %d: %s, want %s", i, got, want)
			}
		}
	}
}
