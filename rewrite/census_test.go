package rewrite

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
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
