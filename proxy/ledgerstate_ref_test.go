package proxy

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The reference codec of ledgerState: the encode and decode of version 4
// as proxy/ledger.go had them before decode read by index (issue 17: a
// varint closure and two appends per tail entry; encode is still this
// one, which written by index came out dearer). The format is unchanged:
// states written by either are read by both, so replicas running the two
// during a rolling upgrade share conversation states. The oracle of
// TestLedgerStateReference and FuzzLedgerStateDecode.

func refEncodeLedgerState(s *ledgerState) []byte {
	b := make([]byte, 0, s.encodedMax())
	b = append(b, ledgerStateVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(s.at.UnixMilli()))
	b = binary.AppendUvarint(b, uint64(s.turn))
	b = append(b, flagByte(s.holdout), flagByte(s.kept))
	b = binary.AppendUvarint(b, uint64(math.Round(s.sentTokens)))
	b = binary.AppendUvarint(b, uint64(math.Round(s.naiveTokens)))
	for _, sums := range [][]uint64{s.naive, s.sent} {
		b = binary.AppendUvarint(b, uint64(len(sums)))
		for _, v := range sums {
			b = binary.BigEndian.AppendUint64(b, v)
		}
	}
	b = binary.BigEndian.AppendUint64(b, s.tail.pre)
	b = binary.AppendUvarint(b, uint64(len(s.tail.ns)))
	for k, n := range s.tail.ns {
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.BigEndian.AppendUint64(b, s.tail.sums[k])
	}
	return b
}

func refDecodeLedgerState(b []byte) (*ledgerState, error) {
	s := &ledgerState{}
	if len(b) < 9 || b[0] != ledgerStateVersion {
		return nil, errLedgerState
	}
	*s = ledgerState{at: time.UnixMilli(int64(binary.BigEndian.Uint64(b[1:9])))}
	b = b[9:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	turn, ok1 := uv()
	if !ok1 || turn > math.MaxInt32 || len(b) < 2 || b[0] > 1 || b[1] > 1 {
		return nil, errLedgerState
	}
	s.turn, s.holdout, s.kept, b = int(turn), b[0] == 1, b[1] == 1, b[2:]
	tokens, ok2 := uv()
	naiveTokens, ok3 := uv()
	if !ok2 || !ok3 {
		return nil, errLedgerState
	}
	s.sentTokens, s.naiveTokens = float64(tokens), float64(naiveTokens)
	var sums []uint64
	if most := min(len(b)/8, 2*maxLedgerSums+maxTailSums); cap(sums) < most {
		sums = make([]uint64, 0, most)
	}
	for _, dst := range [...]*[]uint64{&s.naive, &s.sent} {
		n, ok := uv()
		if !ok || n > maxLedgerSums || uint64(len(b)) < 8*n {
			return nil, errLedgerState
		}
		from := len(sums)
		for i := range int(n) {
			sums = append(sums, binary.BigEndian.Uint64(b[8*i:]))
		}
		b = b[8*n:]
		*dst = sums[from:len(sums):len(sums)]
	}
	if len(b) < 8 {
		return nil, errLedgerState
	}
	s.tail.pre, b = binary.BigEndian.Uint64(b), b[8:]
	count, ok := uv()
	if !ok || count > maxTailSums {
		return nil, errLedgerState
	}
	if count > 0 {
		s.tail.ns, s.tail.sums = make([]int, 0, count), sums[len(sums):]
	}
	for range count {
		n, ok := uv()
		if !ok || n == 0 || n >= ledgerChunk || len(b) < 8 {
			return nil, errLedgerState
		}
		s.tail.ns = append(s.tail.ns, int(n))
		s.tail.sums = append(s.tail.sums, binary.BigEndian.Uint64(b))
		b = b[8:]
	}
	return s, nil
}

// randomLedgerState returns a state with r's lists and numbers, lengths
// at the edges of their varints among them.
func randomLedgerState(r *rand.Rand) *ledgerState {
	pick := func(vals ...int) int { return vals[r.IntN(len(vals))] }
	s := &ledgerState{
		at:      time.UnixMilli(r.Int64N(1 << 45)),
		turn:    pick(0, 1, 2, 127, 128, 300, 16383, 16384, math.MaxInt32, r.IntN(1000)),
		holdout: r.IntN(2) == 0, kept: r.IntN(2) == 0,
		sentTokens:  float64(pick(0, 1, 127, 128, 1<<20, 1<<40, r.IntN(1<<30))) + []float64{0, 0.4, 0.5, 0.6}[r.IntN(4)],
		naiveTokens: float64(pick(0, 127, 128, 1<<62, r.IntN(1<<20))),
	}
	list := func() []uint64 {
		n := pick(0, 1, 2, 127, 128, maxLedgerSums, r.IntN(maxLedgerSums+1))
		out := make([]uint64, n)
		for i := range out {
			out[i] = r.Uint64() >> r.IntN(64)
		}
		return out
	}
	s.naive, s.sent = list(), list()
	if r.IntN(4) > 0 {
		k := pick(1, 2, maxTailSums, 1+r.IntN(maxTailSums))
		s.tail = tail{pre: r.Uint64(), ns: make([]int, k), sums: make([]uint64, k)}
		for i := range k {
			s.tail.ns[i] = pick(1, 127, 128, ledgerChunk-1, 1+r.IntN(ledgerChunk-1))
			s.tail.sums[i] = r.Uint64()
		}
	}
	return s
}

var stateCmp = []cmp.Option{cmp.AllowUnexported(ledgerState{}, tail{}), cmpopts.IgnoreFields(ledgerState{}, "bufs")}

// sameState reports whether a and b hold the same state, nil and empty
// lists told apart unless emptyOK.
func sameState(a, b *ledgerState, emptyOK bool) bool {
	nilSame := func(x, y bool) bool { return emptyOK || x == y }
	return a.at.Equal(b.at) && a.at.Location() == b.at.Location() && a.turn == b.turn && a.holdout == b.holdout && a.kept == b.kept &&
		a.sentTokens == b.sentTokens && a.naiveTokens == b.naiveTokens && a.tail.pre == b.tail.pre &&
		slices.Equal(a.naive, b.naive) && nilSame(a.naive == nil, b.naive == nil) &&
		slices.Equal(a.sent, b.sent) && nilSame(a.sent == nil, b.sent == nil) &&
		slices.Equal(a.tail.ns, b.tail.ns) && nilSame(a.tail.ns == nil, b.tail.ns == nil) &&
		slices.Equal(a.tail.sums, b.tail.sums) && nilSame(a.tail.sums == nil, b.tail.sums == nil)
}

// checkDecodeReference decodes b with decodeLedgerState, decodePooled
// and the reference and reports a difference.
func checkDecodeReference(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := refDecodeLedgerState(b)
	got, err := decodeLedgerState(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodeLedgerState(%x): error %v, reference %v", b, err, wantErr)
	}
	pooled := decodePooled(b)
	if (pooled == nil) != (wantErr != nil) {
		t.Fatalf("decodePooled(%x) = %v, reference error %v", b, pooled, wantErr)
	}
	if wantErr != nil {
		return
	}
	if sameState(want, got, false) {
		// cmp.Diff is slow on lists of a thousand hashes: only on a
		// difference.
	} else if diff := cmp.Diff(want, got, stateCmp...); diff != "" {
		t.Fatalf("decodeLedgerState(%x) (-reference +got):\n%s", b, diff)
	}
	// A pooled state's empty lists are its arrays', not nil.
	if sameState(want, pooled, true) {
	} else if diff := cmp.Diff(want, pooled, append(stateCmp, cmpopts.EquateEmpty())...); diff != "" {
		t.Fatalf("decodePooled(%x) (-reference +got):\n%s", b, diff)
	}
	releaseState(pooled)
}

// TestLedgerStateReference checks the codec against the reference: every
// random state encodes to the reference's bytes, and those bytes, their
// truncations, corruptions and non-minimal varints decode as the
// reference decodes them (the same state, or an error for both).
func TestLedgerStateReference(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 4))
	for range 3000 {
		s := randomLedgerState(r)
		b, want := s.encode(), refEncodeLedgerState(s)
		if !bytes.Equal(b, want) {
			t.Fatalf("encode(%+v) = %x, reference %x", s, b, want)
		}
		checkDecodeReference(t, b)
		for range 4 {
			checkDecodeReference(t, b[:r.IntN(len(b)+1)])
		}
		for range 4 {
			c := slices.Clone(b)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			checkDecodeReference(t, c)
		}
		checkDecodeReference(t, append(slices.Clone(b), byte(r.IntN(256))))
	}
	// Non-minimal and overlong varints where each varint is read.
	for _, b := range [][]byte{
		// turn 0 as two bytes, the rest minimal.
		{4, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		// turn of eleven bytes.
		{4, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0},
		// a tail length of 300 as two bytes.
		{4, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 5, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0xac, 0x02, 1, 2, 3, 4, 5, 6, 7, 8},
		// a tail length of 512.
		{4, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 5, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0x80, 0x04, 1, 2, 3, 4, 5, 6, 7, 8},
		// a tail of one with its varint cut.
		{4, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 5, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0xac},
		// version 3.
		{3, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 5, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0},
	} {
		checkDecodeReference(t, b)
	}
}

// FuzzLedgerStateDecode checks decode against the reference on any bytes,
// and that a state decoded re-encodes to the same bytes as the reference
// encodes it.
func FuzzLedgerStateDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(17, 5))
	for range 20 {
		f.Add(randomLedgerState(r).encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeReference(t, b)
		if s, err := decodeLedgerState(b); err == nil {
			if got, want := s.encode(), refEncodeLedgerState(s); !bytes.Equal(got, want) {
				t.Fatalf("encode(%+v) = %x, reference %x", s, got, want)
			}
		}
	})
}
