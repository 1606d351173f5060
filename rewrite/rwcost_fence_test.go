package rewrite

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFenceNoCloseSame checks that fence, whose loop over the lines after
// a fence that no line closes skips plain code lines and lines that do
// not end in the fence character (issue 17), finds what fenceOld, the
// loop that ran flags and the glued-close test on every line, found: the
// same block (span, content, blob and shell flags), the same next line
// and the same steps, on texts of random lines from a vocabulary of the
// cases those loops tell apart (glued closes with trailing blanks and
// "\r", comment banners, reference lines, blank lines, tilde fences).
func TestFenceNoCloseSame(t *testing.T) {
	vocab := []string{
		"func a() {", "\treturn x", "}", "", "\r", "  ", "\t",
		"// File: a.go", "# path: b.py", "-- file: c.sql", "; filename: d.ini", "// plain comment", "// fix", "//",
		"[unchanged: a.go, sha256:0123456789ab]", "  [superseded: a.go, sha256:0123456789ab]",
		"}```", "}```  ", "}```\t", "}```\r", "x ``", "``", "  ```", "```", "````", "~~~", "x~~~", "}~~~ \r",
		"````x", "   ```go", "`", "a`b```", "\t\t}```", "/* file: e.c */```",
	}
	rng := rand.New(rand.NewPCG(17, 1))
	for n := 0; n < 20000; n++ {
		var b strings.Builder
		open := []string{"```go", "~~~", "````", "```go a.go"}[rng.IntN(4)]
		if rng.IntN(3) == 0 {
			b.WriteString("// File: z.go\n")
		}
		b.WriteString(open)
		for k := rng.IntN(12); k >= 0; k-- {
			b.WriteString("\n")
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		text := b.String()
		l := splitLines(text)
		at := 0
		if strings.HasPrefix(text, "// File") {
			at = 1
		}
		sgNew, sgOld := segmenter{l: l}, segmenter{l: l}
		for i := at; i < l.n(); i++ { // every opening line, as run tries them
			bn, nn, okn := sgNew.fence(i, 0)
			bo, no, oko := sgOld.fenceOld(i, 0)
			if bn != bo || nn != no || okn != oko || sgNew.steps != sgOld.steps || sgNew.noClose != sgOld.noClose {
				t.Fatalf("text %q line %d:\nfence    %+v %d %v steps %d\nfenceOld %+v %d %v steps %d", text, i, bn, nn, okn, sgNew.steps, bo, no, oko, sgOld.steps)
			}
		}
	}
}

// fenceOld is fence as it was before its no-close loop took the fast
// paths (issue 17), kept as the oracle of TestFenceNoCloseSame. fence reads a fenced block opening at line i. free is the first line that
// a name line above the fence may use.
func (sg *segmenter) fenceOld(i, free int) (block, int, bool) {
	l := &sg.l
	ch, n, info, ok := fenceOpen(l.at(i))
	if !ok {
		return block{}, 0, false
	}
	b := block{kind: kindFence, start: l.s(i), name: infoName(info)}
	if i > free {
		if name := nameLine(l.at(i - 1)); name != "" {
			if b.name == "" {
				b.name = name
			}
			b.start = l.s(i - 1)
		}
	}
	if i+1 >= l.n() {
		sg.touchEnd()
		return block{}, 0, false
	}
	b.cstart = l.s(i + 1)
	memo := &sg.noClose[0]
	if ch == '~' {
		memo = &sg.noClose[1]
	}
	banners, refs, other := 0, 0, false
	flags := func(line string) {
		t := trimIndent(line)
		switch {
		case t == "" || t == "\r":
		case strings.IndexByte("/#-;", t[0]) >= 0 && commentBanner(t) != "":
			banners++
		case t[0] == '[' && isRefLine(t):
			refs++
		default:
			other = true
		}
		b.blob = banners > 0 && banners+refs >= 2
		b.shell = !other && refs > 0
	}
	known := memo.n > 0 && i >= memo.from && n >= memo.n // known: no closing fence below
	j0 := i + 1
	for j, prev := i+1, int(l.nl[i]); j < l.n() && !known; j++ {
		// Fast path for the common code line: its first byte after the
		// indent is neither the fence character nor one that flags or a
		// blank line looks at, so it can only be "other" content.
		end := int(l.nl[j])
		k, e := skipIndent(l.text, prev+1, end)
		prev = end
		if k < e && plainCodeLine(l.text, k, e, ch) {
			other, b.shell = true, false
			continue
		}
		line := l.at(j)
		if fenceClose(line, ch, n) {
			b.end = l.e(j)
			b.cend = l.s(j)
			if b.cend > b.cstart {
				b.cend-- // the "\n" before the closing fence
			}
			sg.touch(j)
			sg.steps += j + 1 - j0
			return b, j + 1, true
		}
		flags(line)
	}
	if !known {
		sg.steps += l.n() - j0
	}
	sg.touchEnd()
	memo.from, memo.n = i, n
	// No closing fence. A naive template may have glued it to the last code
	// line ("}```"); otherwise the fence was left open by truncation.
	banners, refs, other = 0, 0, false
	b.blob, b.shell = false, false
	for j := i + 1; j < l.n(); j++ {
		flags(l.at(j))
		s := strings.TrimRight(l.at(j), " \t")
		k := len(s)
		for k > 0 && s[k-1] == ch {
			k--
		}
		if len(s)-k >= n && k > 0 && strings.TrimSpace(s[:k]) != "" {
			b.end = l.e(j)
			b.cend = l.s(j) + k
			sg.steps += j - i
			return b, j + 1, true
		}
	}
	sg.steps += l.n() - i - 1
	b.end = len(l.text)
	b.cend = len(l.text)
	return b, l.n(), true
}
