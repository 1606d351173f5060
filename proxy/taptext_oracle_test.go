package proxy

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// oldTapText is tapText as it was before String shared its bytes and
// Grow doubled (branch bigans): the oracle of TestTapTextOracle and
// FuzzTapTextOracle.
type oldTapText struct {
	b    []byte
	keep bool
	n    int
	w    ServedWriter
}

func (x *oldTapText) Len() int { return x.n }

func (x *oldTapText) Grow(n int) {
	if x.keep {
		x.b = slices.Grow(x.b, n)
	}
	if x.w != nil {
		x.w.Grow(n)
	}
}

func (x *oldTapText) Write(p []byte) {
	x.n += len(p)
	if x.keep {
		x.b = append(x.b, p...)
	}
	if x.w != nil {
		x.w.Write(p) //nolint:errcheck // a ServedWriter never fails
	}
}

func (x *oldTapText) WriteString(s string) {
	x.n += len(s)
	if x.keep {
		x.b = append(x.b, s...)
	}
	if x.w != nil {
		x.w.WriteString(s) //nolint:errcheck // a ServedWriter never fails
	}
}

func (x *oldTapText) truncate(k int) { x.b = x.b[:k] } // rewindText's slicing

func (x *oldTapText) String() string { return string(x.b) }

// logWriter is a ServedWriter that logs the calls it gets.
type logWriter struct{ log bytes.Buffer }

func (w *logWriter) Grow(n int) { w.log.WriteString("G" + strings.Repeat(".", n%7) + "|") }
func (w *logWriter) Write(p []byte) (int, error) {
	w.log.WriteString("W")
	w.log.Write(p)
	w.log.WriteString("|")
	return len(p), nil
}
func (w *logWriter) WriteString(s string) (int, error) {
	w.log.WriteString("S" + s + "|")
	return len(s), nil
}
func (w *logWriter) Served(bool) {}

// runTapTextOps runs the operations ops codes on a tapText and on the
// oracle and fails on the first difference: in Len, in a String (all the
// strings returned, read again at the end, must not have changed) and in
// what the ServedWriter was given.
func runTapTextOps(t *testing.T, ops []byte, keep, withW bool) {
	t.Helper()
	nw, ow := &logWriter{}, &logWriter{}
	x := tapText{keep: keep}
	o := oldTapText{keep: keep}
	if withW {
		x.w, o.w = nw, ow
	}
	var got, want []string
	for i := 0; i < len(ops); i++ {
		op := ops[i]
		arg := int(op >> 3)
		switch op & 7 {
		case 0, 1:
			// Write arg bytes, of a letter that tells the writes apart.
			p := bytes.Repeat([]byte{'a' + byte(i%26)}, arg*(1+int(op&1)*37))
			x.Write(p)
			o.Write(p)
			for j := range p {
				p[j] = '!' // the caller reuses its buffer
			}
		case 2:
			s := strings.Repeat(string(rune('A'+i%26)), arg)
			x.WriteString(s)
			o.WriteString(s)
		case 3:
			x.Grow(arg * 100)
			o.Grow(arg * 100)
		case 4, 5:
			got = append(got, x.String())
			want = append(want, o.String())
		case 6:
			if len(o.b) > 0 {
				k := arg % (len(o.b) + 1)
				x.truncate(k)
				o.truncate(k)
			}
		case 7:
			x.Grow(arg << 10)
			o.Grow(arg << 10)
		}
		if x.Len() != o.Len() || string(x.b) != string(o.b) {
			t.Fatalf("op %d (%#x): Len %d, text %q; oracle %d, %q", i, op, x.Len(), x.b, o.Len(), o.b)
		}
	}
	got = append(got, x.String())
	want = append(want, o.String())
	if !slices.Equal(got, want) {
		t.Fatalf("strings %q, oracle %q", got, want)
	}
	if nw.log.String() != ow.log.String() {
		t.Fatalf("writer got %q, oracle %q", nw.log.String(), ow.log.String())
	}
}

func TestTapTextOracle(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []byte
	}{
		{"empty", nil},
		{"write string", []byte{0x08, 0x10 | 2, 4}},
		{"string then write", []byte{0x18, 4, 0x20, 4, 0x28 | 1, 5}},
		{"string, truncate, write over", []byte{0x40, 4, 0x08 | 6, 0x30, 4, 0x00 | 6, 0x18}},
		{"grow after string", []byte{0x18, 4, 0xf8 | 7, 0x18, 4, 0x08 | 3}},
		{"grow large then strings", []byte{0x38 | 7, 0x50, 0x50 | 1, 4, 5, 0x00 | 6, 4}},
		{"many writes", bytes.Repeat([]byte{0x78 | 1}, 200)},
	} {
		for _, keep := range []bool{false, true} {
			for _, withW := range []bool{false, true} {
				t.Run(tc.name, func(t *testing.T) { runTapTextOps(t, tc.ops, keep, withW) })
			}
		}
	}
}

func FuzzTapTextOracle(f *testing.F) {
	f.Add([]byte{0x18, 4, 0x20, 4, 0x28 | 1, 5}, true, false)
	f.Add([]byte{0x40, 4, 0x08 | 6, 0x30, 4, 0x00 | 6, 0x18}, true, true)
	f.Add([]byte{0x38 | 7, 0x50, 0x50 | 1, 4, 5, 0x00 | 6, 4}, false, true)
	f.Fuzz(func(t *testing.T, ops []byte, keep, withW bool) {
		if len(ops) > 4096 {
			return
		}
		runTapTextOps(t, ops, keep, withW)
	})
}

// The doubling of Grow: a text read piece by piece is copied a few
// times, not once per quarter of growth.
func TestTapTextGrowDoubles(t *testing.T) {
	x := tapText{keep: true}
	grows := 0
	p := make([]byte, 1000)
	for range 256 {
		c := cap(x.b)
		x.Grow(len(p))
		x.Write(p)
		if cap(x.b) != c {
			grows++
		}
	}
	if grows > 10 {
		t.Errorf("256 KB in 1000-byte writes grew the buffer %d times, want at most 10", grows)
	}
}
