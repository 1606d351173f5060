package rewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"
)

// The oracle of textStr's copy of the ordinary bytes shortText found
// (scanner.plainTo) is the decoding it replaces: the same scan with the
// hint turned off (state.noPlainHint), which decodes those bytes in
// textRun.run as before.

// checkPlainHint scans body with small both ways and fails on any
// difference in the request found.
func checkPlainHint(t *testing.T, body []byte, small int) {
	t.Helper()
	want, wantErr := scanWith(body, &state{noPlainHint: true}, small, limits{})
	got, err := scanWith(body, &state{}, small, limits{})
	if (err == nil) != (wantErr == nil) || !errors.Is(err, wantErr) {
		t.Fatalf("error %v, without the hint %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if got.small != want.small || len(got.contents) != len(want.contents) {
		t.Fatalf("small %v, %d contents; want %v, %d", got.small, len(got.contents), want.small, len(want.contents))
	}
	for i := range want.contents {
		wc, gc := want.contents[i], got.contents[i]
		if len(gc.parts) != len(wc.parts) {
			t.Fatalf("content %d: %d parts, want %d", i, len(gc.parts), len(wc.parts))
		}
		for j := range wc.parts {
			w, g := wc.parts[j], gc.parts[j]
			if g.str != w.str || g.esc != w.esc || g.lazy != w.lazy || g.dec.size != w.dec.size || g.dec.text != w.dec.text ||
				!slices.Equal(g.dec.nl, w.dec.nl) || !slices.Equal(g.dec.marks, w.dec.marks) {
				t.Fatalf("content %d part %d: %v %v %v %d %q %v %v, want %v %v %v %d %q %v %v", i, j,
					g.str, g.esc, g.lazy, g.dec.size, g.dec.text, g.dec.nl, g.dec.marks,
					w.str, w.esc, w.lazy, w.dec.size, w.dec.text, w.dec.nl, w.dec.marks)
			}
		}
	}
}

// plainHintBody is a request of one user content per text.
func plainHintBody(texts ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"contents":[`)
	for i, r := range texts {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"role":"user","parts":[{"text":"%s"}]}`, r)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func TestPlainHintOracle(t *testing.T) {
	prose := strings.Repeat("Explain the difference between a slice and an array in Go. ", 17)
	fence := "```go\\nfunc main() {\\n\\tfmt.Println(\\\"hi\\\")\\n}\\n```\\n"
	for _, tt := range []struct {
		name  string
		texts []string
	}{
		{"bench small", []string{prose}},
		{"escape after the limit", []string{prose + `\n` + prose}},
		{"escape before the limit", []string{`a\n` + prose}},
		{"unicode escape after", []string{prose + `\u00e9\ud83d\ude00`}},
		{"fence after", []string{prose + `\n\n` + fence + prose}},
		{"re-sent", []string{prose + `\n` + fence, "short", prose + `\n` + fence, prose}},
		{"short first", []string{"hi", prose, prose + "x"}},
		{"exactly the limit", []string{strings.Repeat("b", 512), strings.Repeat("b", 511), strings.Repeat("b", 513)}},
		{"control byte", []string{prose + "\x01"}},
		{"bad escape", []string{prose + `\x`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := plainHintBody(tt.texts...)
			for _, small := range []int{1, 8, 100, 512, 4096} {
				checkPlainHint(t, body, small)
			}
		})
	}
	// A string that the body ends inside.
	for _, small := range []int{8, 512} {
		checkPlainHint(t, []byte(`{"contents":[{"parts":[{"text":"`+prose), small)
	}
	// The hint is used on the bench's request, and only there.
	s := &scanner{b: plainHintBody(prose), small: 512}
	s.pos = strings.Index(string(s.b), `"Explain`)
	if _, _, _, ok, err := s.shortText(); ok || err != nil || s.plainTo < s.pos+1+512 || s.plainTo > s.pos+1+len(prose) {
		t.Errorf("shortText: ok %v, err %v, plainTo %d; want from %d to %d", ok, err, s.plainTo, s.pos+1+512, s.pos+1+len(prose))
	}
	s = &scanner{b: plainHintBody(`a\n` + prose), small: 512}
	s.pos = strings.Index(string(s.b), `"a\n`)
	if s.shortText(); s.plainTo != 0 {
		t.Errorf("shortText after an escape: plainTo %d, want 0", s.plainTo)
	}
}

func FuzzPlainHint(f *testing.F) {
	f.Add(strings.Repeat("plain words ", 50), `\n`, "tail", 100)
	f.Add(strings.Repeat("x", 600), "```go\\nfunc f() {}\\n```\\n", `\u00e9`, 512)
	f.Add("a", `\"`, `\ud83d\ude00`, 3)
	f.Fuzz(func(t *testing.T, head, mid, tail string, small int) {
		small = 1 + small&1023
		texts := []string{head + mid + tail, head, head + mid, mid + tail, head + mid + tail + head}
		checkPlainHint(t, plainHintBody(texts...), small)
		checkPlainHint(t, plainHintBody(texts[1:]...), small)
	})
}

// skipPlainRef is skipPlain before it read two words a step: its oracle.
func skipPlainRef(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	return i
}

func TestSkipPlainOracle(t *testing.T) {
	prose := []byte(strings.Repeat("Explain the difference between a slice and an array in Go. ", 3))
	for _, sp := range []byte{'"', '\\', 0, 0x1f, '\n'} {
		for at := range 40 {
			b := slices.Clone(prose[:64])
			b[at] = sp
			for n := range len(b) + 1 {
				for i := range min(n, 20) + 1 {
					if got, want := skipPlain(b[:n], i), skipPlainRef(b[:n], i); got != want {
						t.Fatalf("byte %#x at %d, %d bytes, from %d: %d, want %d", sp, at, n, i, got, want)
					}
				}
			}
		}
	}
	if got, want := skipPlain(prose, 0), skipPlainRef(prose, 0); got != want {
		t.Fatalf("plain: %d, want %d", got, want)
	}
}

func FuzzSkipPlain(f *testing.F) {
	f.Add([]byte(`plain text then a "quote`), 0)
	f.Add([]byte(strings.Repeat("abcdefgh", 9)+`\n`), 3)
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		if i < 0 || i > len(b) {
			i = 0
		}
		if got, want := skipPlain(b, i), skipPlainRef(b, i); got != want {
			t.Fatalf("%q from %d: %d, want %d", b, i, got, want)
		}
	})
}
