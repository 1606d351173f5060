package proxy

import (
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestHexEnd checks hexEnd against hex.Encode, its oracle, for every
// byte value at every position and for random sums.
func TestHexEnd(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 16))
	var sums [][ledgerEndBytes]byte
	for c := range 256 {
		for i := range ledgerEndBytes {
			var s [ledgerEndBytes]byte
			s[i] = byte(c)
			sums = append(sums, s)
		}
	}
	for range 1000 {
		var s [ledgerEndBytes]byte
		for i := range s {
			s[i] = byte(r.Uint32())
		}
		sums = append(sums, s)
	}
	for _, s := range sums {
		checkHexEnd(t, s)
	}
}

func checkHexEnd(t *testing.T, s [ledgerEndBytes]byte) {
	t.Helper()
	var got [2 * ledgerEndBytes]byte
	hexEnd(&got, &s)
	if want := hex.EncodeToString(s[:]); string(got[:]) != want {
		t.Fatalf("hexEnd(%x) = %s, want %s", s, got, want)
	}
}

func FuzzHexEnd(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s [ledgerEndBytes]byte
		copy(s[:], b)
		checkHexEnd(t, s)
	})
}
