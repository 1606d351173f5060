package rewrite

import (
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// refLinesByLine is refLines as census had it: isRefLine on every line.
func refLinesByLine(l *lines) []string {
	var out []string
	for i := range l.n() {
		if s := l.at(i); strings.IndexByte(s, '[') >= 0 && isRefLine(s) {
			out = append(out, s)
		}
	}
	return out
}

// TestRefLines compares refLines with a test of every line on texts of
// reference lines (indented, with CRLF, Unicode spaces, at the start and
// the end of the text) among lines holding brackets that are not
// references.
func TestRefLines(t *testing.T) {
	pieces := []string{
		"[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"  [superseded: b.go sha256:0123456789ab, replaced by the version in turn 3]  ",
		"\u00a0[same image.png sha256:0123456789ab as in turn 2]",
		"[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\r",
		"x := a[1:2] // [unchanged: not a line of its own sha256:0]",
		"[", "]", "[]", "[[unchanged: sha256:]]", "plain text", "", "\t[unchanged: a.go sha256:0123456789ab]\t",
		"[unchanged: no hash here, only brackets ....]",
		"a [unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"x\u00a0[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"\u3000\u00a0 [unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"\v\f[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"x[1] := [unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	found := 0
	for n := range 3000 {
		var b strings.Builder
		for k := range rng.IntN(12) {
			if k > 0 || rng.IntN(3) == 0 {
				b.WriteByte('\n')
			}
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if n%5 == 0 {
			b.WriteByte('\n')
		}
		l := splitLines(b.String())
		got := slices.Collect(refLines(&l))
		if want := refLinesByLine(&l); !slices.Equal(got, want) {
			t.Fatalf("text %q:\nrefLines    %q\nevery line  %q", b.String(), got, want)
		}
		found += len(got)
	}
	if found < 1000 {
		t.Fatalf("only %d reference lines in the texts", found)
	}
}

// refLinesOld is refLines before the prefix test at each bracket (branch
// rwscan): the line around every bracket after white space was found and
// given to isRefLine.
func refLinesOld(l *lines) iter.Seq[string] {
	return func(yield func(string) bool) {
		text := l.text
		for from := 0; from < len(text); {
			j := strings.IndexByte(text[from:], '[')
			if j < 0 {
				return
			}
			p := from + j
			if p > 0 {
				// A reference line's first '[' follows only white space
				// on its line (strings.TrimSpace's: ASCII, or a Unicode
				// space, whose bytes are all non-ASCII): a '[' after any
				// other byte is not the first of a reference line.
				switch c := text[p-1]; {
				case c == '\n', c == ' ', c == '\t', c == '\r', c == '\v', c == '\f', c >= utf8.RuneSelf:
				default:
					from = p + 1
					continue
				}
			}
			// The line around p, as l.at gives it (l.nl holds every
			// "\n"), without a search of the line ends.
			start := strings.LastIndexByte(text[:p], '\n') + 1
			end := len(text)
			if k := strings.IndexByte(text[p:], '\n'); k >= 0 {
				end = p + k
			}
			s := text[start:end]
			if len(s) > 0 && s[len(s)-1] == '\r' {
				s = s[:len(s)-1]
			}
			if isRefLine(s) && !yield(s) {
				return
			}
			from = end + 1
		}
	}
}

// TestRefLinesOld compares refLines with refLinesOld on random texts of
// reference lines, their prefixes cut anywhere, and bracket-dense code
// (brackets after spaces, several on a line, Unicode spaces before them).
func TestRefLinesOld(t *testing.T) {
	pieces := []string{
		"[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"[superseded: b.go sha256:0123456789ab, replaced by the version in turn 3]",
		"[same image.png sha256:0123456789ab as in turn 2]",
		"[unchanged: ", "[superseded: ", "[same ", "[unchanged:", "[sam", "[s", "[u", "[",
		" sha256:", "]", "[]", "x := a[1:2]", " [x, [y]]", "\u00a0", "\u3000", "\u0085", " ", "\t", "\r", "\v", "\f",
		"é[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]",
		"\n", "\n", "\n", "\r\n", "plain", "[[unchanged: sha256:]]",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	found := 0
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		l := splitLines(b.String())
		got := slices.Collect(refLines(&l))
		if want := slices.Collect(refLinesOld(&l)); !slices.Equal(got, want) {
			t.Fatalf("text %q:\nrefLines     %q\nrefLinesOld  %q", b.String(), got, want)
		}
		if want := refLinesByLine(&l); !slices.Equal(got, want) {
			t.Fatalf("text %q:\nrefLines     %q\nevery line   %q", b.String(), got, want)
		}
		found += len(got)
	}
	if found < 1000 {
		t.Fatalf("only %d reference lines in the texts", found)
	}
}
