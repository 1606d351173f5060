package rewrite

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// segBlock is a block as the tests see it: kind, name, replaced span and
// content as text.
type segBlock struct {
	Kind          blockKind
	Name          string
	Span, Content string
}

func segmentText(text string) []segBlock {
	blocks, _ := segment(text, DefaultOptions().DocumentTags)
	var out []segBlock
	for _, b := range blocks {
		out = append(out, segBlock{b.kind, b.name, text[b.start:b.end], text[b.cstart:b.cend]})
	}
	return out
}

func TestSegment(t *testing.T) {
	code := "func a() {}\nfunc b() {}"
	tests := []struct {
		name string
		text string
		want []segBlock
	}{
		{"fence with name", "Here:\n```go a.go\n" + code + "\n```\nWhy?",
			[]segBlock{{kindFence, "a.go", "```go a.go\n" + code + "\n```", code}}},
		{"fence title attribute", "```ts title=\"src/app.ts\"\n" + code + "\n```",
			[]segBlock{{kindFence, "src/app.ts", "```ts title=\"src/app.ts\"\n" + code + "\n```", code}}},
		{"fence lang:path", "```go:main.go\n" + code + "\n```",
			[]segBlock{{kindFence, "main.go", "```go:main.go\n" + code + "\n```", code}}},
		{"fence no name", "```\n" + code + "\n```",
			[]segBlock{{kindFence, "", "```\n" + code + "\n```", code}}},
		{"tilde fence", "~~~python\n" + code + "\n~~~",
			[]segBlock{{kindFence, "", "~~~python\n" + code + "\n~~~", code}}},
		{"path line above", "src/a.go\n```\n" + code + "\n```",
			[]segBlock{{kindFence, "src/a.go", "src/a.go\n```\n" + code + "\n```", code}}},
		{"caption File:", "File: a.go\n```go\n" + code + "\n```",
			[]segBlock{{kindFence, "a.go", "File: a.go\n```go\n" + code + "\n```", code}}},
		{"dash banner above fence", "--- a.go ---\n```go\n" + code + "\n```",
			[]segBlock{{kindFence, "a.go", "--- a.go ---\n```go\n" + code + "\n```", code}}},
		{"longer closing fence", "```go\n" + code + "\n`````\nafter",
			[]segBlock{{kindFence, "", "```go\n" + code + "\n`````", code}}},
		{"nested fence", "````md\nx\n```go\n" + code + "\n```\ny\n````",
			[]segBlock{{kindFence, "", "````md\nx\n```go\n" + code + "\n```\ny\n````", "x\n```go\n" + code + "\n```\ny"}}},
		{"open fence", "Look:\n```go\n" + code,
			[]segBlock{{kindFence, "", "```go\n" + code, code}}},
		{"closing fence on last line", "```go\n" + code + "```\nWhy?",
			[]segBlock{{kindFence, "", "```go\n" + code + "```", code}}},
		{"crlf fence", "```go a.go\r\nx\r\n```\r\nq",
			[]segBlock{{kindFence, "a.go", "```go a.go\r\nx\r\n```\r", "x\r"}}},
		{"file tag", "<file path=\"a.go\">\n" + code + "\n</file>\nq",
			[]segBlock{{kindTag, "a.go", "<file path=\"a.go\">\n" + code + "\n</file>", code}}},
		{"document tag single quotes", "<document name='spec.md'>\ntext\n</document>",
			[]segBlock{{kindTag, "spec.md", "<document name='spec.md'>\ntext\n</document>", "text"}}},
		{"file_path child", "<file><file_path>b.py</file_path><file_contents>\nx\n</file_contents></file>",
			[]segBlock{{kindTag, "b.py", "<file><file_path>b.py</file_path><file_contents>\nx\n</file_contents></file>", "<file_path>b.py</file_path><file_contents>\nx\n</file_contents>"}}},
		{"unclosed unnamed tag is text", "<document>\nabc\n", nil},
		{"unknown tag is text", "<documents>\nabc\n</documents>", nil},
		{"dash banner with end", "--- a.py ---\n" + code + "\n--- End of content ---\nq",
			[]segBlock{{kindBanner, "a.py", "--- a.py ---\n" + code + "\n--- End of content ---", code}}},
		{"dash banner without end drops the question", "--- a.py ---\n" + code + "\n\nWhat does this code do here?",
			[]segBlock{{kindBanner, "a.py", "--- a.py ---\n" + code, code}}},
		{"FILENAME banner", "--- FILENAME: x.ts ---\n" + code,
			[]segBlock{{kindBanner, "x.ts", "--- FILENAME: x.ts ---\n" + code, code}}},
		{"context file", "[CONTEXT FILE] lib/b.py\n" + code + "\n[CONTEXT FILE] lib/c.py\ny",
			[]segBlock{{kindBanner, "lib/b.py", "[CONTEXT FILE] lib/b.py\n" + code, code}, {kindBanner, "lib/c.py", "[CONTEXT FILE] lib/c.py\ny", "y"}}},
		{"FILE between rules", "=====\nFILE: a.go\n=====\n" + code + "\n=====\nFILE: b.go\n=====\nz\n=====",
			[]segBlock{{kindBanner, "a.go", "=====\nFILE: a.go\n=====\n" + code, code}, {kindBanner, "b.go", "=====\nFILE: b.go\n=====\nz\n=====", "z"}}},
		{"comment banners in free text", "// File: a.ts\nx()\n// File: b.ts\ny()",
			[]segBlock{{kindBanner, "a.ts", "// File: a.ts\nx()", "x()"}, {kindBanner, "b.ts", "// File: b.ts\ny()", "y()"}}},
		{"comment banners in a fence", "```ts\n// File: a.ts\nx()\n\n// File: b.ts\ny()\n```",
			[]segBlock{{kindBanner, "a.ts", "// File: a.ts\nx()", "x()"}, {kindBanner, "b.ts", "// File: b.ts\ny()", "y()"}}},
		{"one comment banner keeps the fence", "```ts\n// File: a.ts\nx()\n```",
			[]segBlock{{kindFence, "", "```ts\n// File: a.ts\nx()\n```", "// File: a.ts\nx()"}}},
		{"project tree", "Structure:\napp/\n├── a.go\n├── b.go\n└── c.go\nq",
			[]segBlock{{kindTree, "project tree", "app/\n├── a.go\n├── b.go\n└── c.go", "app/\n├── a.go\n├── b.go\n└── c.go"}}},
		{"open tabs", "Open tabs:\n- a.go\n- b.go\n\nq",
			[]segBlock{{kindTabs, "open tabs", "Open tabs:\n- a.go\n- b.go", "Open tabs:\n- a.go\n- b.go"}}},
		{"prose only", "Just a question about Go.\nAnother line.", nil},
		{"indented code is not a fence", "    ```go\n" + code, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, segmentText(tt.text)); diff != "" {
				t.Errorf("segment(%q) (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}

func TestInfoName(t *testing.T) {
	tests := map[string]string{
		"":                       "",
		"go":                     "",
		"ts app.ts":              "app.ts",
		"ts title=\"app.ts\"":    "app.ts",
		"python filename=a.py":   "a.py",
		"go:cmd/main.go":         "cmd/main.go",
		"main.go":                "main.go",
		"c++":                    "",
		"ts title=\"my app.ts\"": "my app.ts",
		"js {1,3}":               "",
	}
	for in, want := range tests {
		if got := infoName(in); got != want {
			t.Errorf("infoName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSplitLines(t *testing.T) {
	for _, s := range []string{"", "a", "a\n", "a\r\nb", "\n\n"} {
		l := splitLines(s)
		var got []string
		for i := 0; i < l.n(); i++ {
			got = append(got, l.at(i))
		}
		want := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("lines of %q (-want +got):\n%s", s, diff)
		}
	}
}

func TestSimilarity(t *testing.T) {
	a := lineSet("x\ny\nz\nw")
	b := lineSet("x\ny\nz\nv")
	if got := similarity(a, b); got != 3.0/5 {
		t.Errorf("similarity = %v, want 0.6", got)
	}
	if got := similarity(a, a); got != 1 {
		t.Errorf("self similarity = %v", got)
	}
	if hashLine("abcdefghij") == hashLine("abcdefghik") {
		t.Error("hashLine collides on a one-byte change")
	}
}

func TestNextField(t *testing.T) {
	for _, s := range []string{"", "  ", "go", " go  main.go ", "ts\ttitle=\"a b.ts\"", "a\u00a0b\u2003c\x85d", "\xff x\xc2", "go:main.go\v\fx\r\n y"} {
		var got []string
		for rest := s; ; {
			var f string
			if f, rest = nextField(rest); f == "" {
				break
			}
			got = append(got, f)
		}
		if diff := cmp.Diff(strings.Fields(s), got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("fields of %q (-want +got):\n%s", s, diff)
		}
	}
}

// segSamples are texts for every detector, each with blocks that end
// before the text does and blocks that run to its end.
var segSamples = []string{
	"Here:\n```go a.go\nfunc a() {}\nfunc b() {}\n```\nWhy?",
	"```go\nx\n```\n```\ny\n```\ntail ```\n````\n",
	"Look:\n```go\nfunc a() {}\n}```\nWhy?\n~~~\nz\n~~~",
	"src/a.go\n```\nx\n```\n\nFile: b.go\n```go\ny\n```\n",
	"<file path=\"a.go\">\nx\n</file>\nq\n<document>\n<source>b.md</source>\ny\n</document>\n<file>\nopen",
	"--- a.py ---\nx\n--- End of content ---\nq\n--- b.py ---\ny\n\nWhat does this code do here?",
	"=====\nFILE: a.go\n=====\nx\n=====\nFILE: b.go\n=====\nz\n=====\n",
	"[CONTEXT FILE] lib/b.py\nx\n[CONTEXT FILE] lib/c.py\ny\n",
	"// File: a.ts\nx()\n// File: b.ts\ny()\n```ts\n// File: c.ts\nx()\n\n// File: d.ts\ny()\n```\n",
	"Structure:\napp/\n├── a.go\n├── b.go\n└── c.go\nq\nOpen tabs:\n- a.go\n- b.go\n\nq",
	"```\n[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\n```\nx\n```go\r\ny\r\n```\r\n",
	"    ```go\ncode\n<file path=a>\nx\n</file> trailing\n|-- a\n|-- b\n|-- c\n",
}

// segTails end a copy of a sample cut anywhere: closing what the cut left
// open, opening something new, or nothing.
var segTails = []string{"", "\n", "x", "```\n", "\n```\n", "~~~\n", "\nQuestion?", "</file>\n", "</document>\n",
	"--- End of content ---\n", "=====\n", "\n|-- a\n|-- b\n|-- c\n", "- c.go\n", "```go\nmore\n```\n", "// File: e.ts\n"}

// checkSegReuse segments texts in order as analyse does and reports a
// text whose blocks differ from a fresh segmentation, or whose copied
// blocks (st.copyOf) have not the bytes of their sources; it returns how
// many texts resumed at a mark, and how many runs of blocks were copied
// from inside earlier texts (segIndex).
func checkSegReuse(t *testing.T, texts []string) int {
	resumed, _ := checkSegReuseMid(t, texts)
	return resumed
}

func checkSegReuseMid(t *testing.T, texts []string) (resumed, copied int) {
	t.Helper()
	tags := DefaultOptions().DocumentTags
	st := &state{}
	var sr segReuse
	var all []string // the text of each block
	for _, text := range texts {
		n := len(st.blocks)
		if sr.segment(st, splitLines(text), tags).line > 0 {
			resumed++
		}
		got := st.blocks[n:]
		want := appendBlocks(nil, splitLines(text), tags)
		if !cmp.Equal(want, got, cmp.AllowUnexported(block{}), cmpopts.EquateEmpty()) {
			t.Fatalf("blocks of %q after %q differ from a fresh segmentation:\n%s", text, texts, cmp.Diff(want, got, cmp.AllowUnexported(block{}), cmpopts.EquateEmpty()))
		}
		for k, b := range got {
			all = append(all, text[b.start:b.end]+"\x00"+text[b.cstart:b.cend])
			if src := st.copyOf[n+k]; src >= 0 && all[src] != all[n+k] {
				t.Fatalf("block %d of %q copied from block %d, %q, holds %q", k, text, src, all[src], all[n+k])
			}
		}
	}
	return resumed, st.segIdx.taken
}

// TestSegReuseInside checks texts that re-send earlier texts' blocks
// anywhere inside them, in the shape of the overhead bench's 1 MB request
// (bench.Sizes: every turn re-sends the documents, the last turn several
// times over, cut anywhere), against a fresh segmentation.
func TestSegReuseInside(t *testing.T) {
	docs := strings.Join(segSamples, "\n")
	copied := 0
	for q := range 2 {
		first := fmt.Sprintf("Context:\n\n%s\nQuestion %d?", docs, q)
		last := docs + docs + "Context:\n\n" + docs
		for cut := 0; cut <= len(last); cut += 41 {
			_, c := checkSegReuseMid(t, []string{first, "Noted.", first, last[:cut] + "..."})
			copied += c
		}
	}
	for _, a := range segSamples {
		for _, b := range segSamples {
			_, c := checkSegReuseMid(t, []string{a + "\n" + b, b + "x\n" + a + "\n" + b, "Name: a.go\n" + a, a[:len(a)/2] + b + "\n" + a[len(a)/3:]})
			copied += c
		}
	}
	if copied == 0 {
		t.Error("no block copied from inside an earlier text")
	}
}

// TestSegReuse checks that a text segmented after one it begins like has
// the blocks of a fresh segmentation, wherever the shared prefix ends.
func TestSegReuse(t *testing.T) {
	resumed := 0
	for _, a := range segSamples {
		for k := 0; k <= len(a); k++ {
			for _, tail := range segTails {
				resumed += checkSegReuse(t, []string{a, a[:k] + tail})
			}
		}
	}
	for _, a := range segSamples {
		for _, b := range segSamples {
			resumed += checkSegReuse(t, []string{a, b, a + b, b, a + "\n" + b, a[:len(a)/2] + b})
		}
	}
	if resumed == 0 {
		t.Error("no text resumed at a mark")
	}
	// A naive re-sent file: the second copy resumes after the fence.
	file := "Here is my code:\n```go a.go\nfunc a() {}\n```\n"
	tags := DefaultOptions().DocumentTags
	st := &state{}
	var sr segReuse
	sr.segment(st, splitLines(file+"Question 1?"), tags)
	if got := sr.segment(st, splitLines(file+"Question 2?"), tags); got.line != 4 || got.nblocks != 1 {
		t.Errorf("second copy resumed at %+v, want line 4 after 1 block", got)
	}
}

// checkPlainLine fails when plainLine says that no banner or secondary
// block starts at the first line of text and one does.
func checkPlainLine(t *testing.T, text string) {
	t.Helper()
	sg := segmenter{l: splitLines(text), tags: DefaultOptions().DocumentTags}
	line := sg.l.at(0)
	if !plainLine(line) {
		return
	}
	if b, _, ok := sg.banner(0); ok {
		t.Errorf("plainLine(%q) but banner finds %+v in %q", line, b, text)
	}
	if b, _, ok := sg.secondary(0); ok {
		t.Errorf("plainLine(%q) but secondary finds %+v in %q", line, b, text)
	}
}

func TestPlainLine(t *testing.T) {
	lines := []string{"", " ", "\t\r", "Answer 1: fine.", "Here is my code:", "app/", "app/ ", ".", " . ", "src\u00a0",
		"--- a.go ---", "=====", "[CONTEXT FILE] a.go", "// File: a.go", "# file: a.py", "Open tabs:", "open files", "\vOpen tabs",
		"\u00a0--- a.go ---", "\u2003// File: a.go", "|-- a", "+-- b", "`-- c", "x ├── a", "│ a", "└ a", "a.go", "Visible Files",
		"**Open tabs**", "\u0085app/"}
	tails := []string{"", "\nx\n", "\n- a.go\n- b.go\n", "\n|-- a\n|-- b\n|-- c\n", "\n├── a\n├── b\n└── c\n", "\nFILE: a.go\n=====\nx\n=====",
		"\nx\n--- End of content ---", "\ncode\n[CONTEXT FILE] b.go"}
	plain := 0
	for _, l := range lines {
		for _, tail := range tails {
			checkPlainLine(t, l+tail)
		}
		if plainLine(l) {
			plain++
		}
	}
	if plain < 3 {
		t.Errorf("plainLine holds for %d lines, want prose lines to pass", plain)
	}
}
