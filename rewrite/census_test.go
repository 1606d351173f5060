package rewrite

import (
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/tools/txtar"
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

// censusAnswers is what the census answers the identity tests: alone for
// every turn, copies for the user turns, and the ambiguous lead-ins.
func censusAnswers(e *engine) string {
	c := e.census()
	var b strings.Builder
	for t := range e.req.contents {
		fmt.Fprintf(&b, "%d alone=%v", t, e.alone(t))
		if e.role(t) == "user" {
			fmt.Fprintf(&b, " copies=%v", c.copies[t])
		}
		b.WriteByte('\n')
	}
	leads := slices.Sorted(maps.Keys(c.ambiguous))
	fmt.Fprintf(&b, "ambiguous %q\n", leads)
	return b.String()
}

// TestCensusSkipSame checks that the census that skips the reference-line
// search of texts that can change nothing gives the answers of the one
// that searches every text (the exhaustive path's), on the golden
// requests and their rewritten outputs (which hold reference lines), the
// fuzz seeds, and every request with a user turn's copy removed.
func TestCensusSkipSame(t *testing.T) {
	var bodies [][]byte
	files, _ := filepath.Glob("testdata/*.txtar")
	for _, f := range files {
		a, err := txtar.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"request.json", "want.json"} {
			if b, ok := file(a, name); ok {
				bodies = append(bodies, b)
			}
		}
	}
	if len(bodies) == 0 {
		t.Fatal("no golden request")
	}
	bodies = append(bodies, censusBodies(rand.New(rand.NewPCG(17, 3)), 3000)...)
	skipped := 0
	for i, body := range bodies {
		opts := DefaultOptions()
		opts.MinBlockBytes = 64
		st := new(state)
		req, err := scanWith(body, st, 0, limitsOf(&opts))
		if err != nil {
			continue
		}
		e := newEngine(body, req, &opts, st)
		if err := e.analyse(); err != nil {
			continue
		}
		e.turns = turnCensus{}
		got := censusAnswers(e)
		if e.usersWithoutCopy(&e.turns) == 0 {
			skipped++
		}
		e.turns, e.exhaustive = turnCensus{}, true
		if want := censusAnswers(e); got != want {
			t.Errorf("body %d: census\n%s\nwant (every text searched)\n%s\n%s", i, got, want, body)
		}
	}
	if skipped == 0 {
		t.Error("no request where the search is skipped")
	}
}

// censusBodies returns n requests of up to seven turns whose user texts
// mix fenced documents from a pool of four (so that some turns hold
// copies and some do not), lead-in lines and reference lines naming
// every kind of place, earlier and later turns among them.
func censusBodies(r *rand.Rand, n int) [][]byte {
	docs := make([]string, 4)
	for i := range docs {
		docs[i] = fmt.Sprintf("```%c.go\n%s\n```", 'a'+i, strings.Repeat(fmt.Sprintf("line %d of the file\n", i), 6))
	}
	refs := []string{" in this turn", " in your previous reply", " in turn 1", " in turn 2", " in turn 3", " in turn 5", " in turn 9"}
	var out [][]byte
	for range n {
		var contents []any
		for ti := range 1 + r.IntN(7) {
			role := "user"
			if ti%2 == 1 {
				role = "model"
			}
			var b strings.Builder
			for range r.IntN(5) {
				switch r.IntN(4) {
				case 0, 1:
					if r.IntN(2) == 0 {
						b.WriteString("Here is the file:\n")
					}
					b.WriteString(docs[r.IntN(len(docs))])
				case 2:
					fmt.Fprintf(&b, "[unchanged: %c.go sha256:0123456789ab, identical to the copy%s]", 'a'+r.IntN(4), refs[r.IntN(len(refs))])
				default:
					b.WriteString("Some words about it.")
				}
				b.WriteString("\n\n")
			}
			contents = append(contents, map[string]any{"role": role, "parts": []any{map[string]any{"text": b.String()}}})
		}
		body, err := json.Marshal(map[string]any{"contents": contents})
		if err != nil {
			panic(err)
		}
		out = append(out, body)
	}
	return out
}
