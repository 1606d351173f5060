package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"

	"github.com/gemini-proxy/gemini-proxy/internal/goenv"
)

// scanAnchored scans the JSON string contents texts as the turns of one
// body on Request's path (anchors on) and on the exhaustive one, and fails
// unless every text decodes alike on both: same text and line ends, and
// marks that are true pairs of decoded and raw offsets (an anchored copy
// keeps its source's marks, which a fresh decoding places elsewhere), so
// that rawOffsets maps every line boundary alike. It returns how many
// copies the scan took from anchors.
func scanAnchored(t *testing.T, texts []string) int {
	t.Helper()
	var body strings.Builder
	body.WriteString(`{"contents":[`)
	for i, r := range texts {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"parts":[{"text":"%s"}]}`, r)
	}
	body.WriteString(`]}`)
	raw := []byte(body.String())
	st := &state{}
	got, err := scanWith(raw, st, 1, limits{})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	for i, r := range texts {
		want, err := decodeString([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		p := got.contents[i].parts[0]
		d := p.dec
		if p.lazy {
			continue // empty: not decoded on this path
		}
		if d.text != want.text {
			t.Fatalf("text %d of %q: decoded %q, want %q", i, texts, d.text, want.text)
		}
		if diff := cmp.Diff(want.nl, d.nl); diff != "" {
			t.Fatalf("text %d of %q: line ends (-want +got):\n%s", i, texts, diff)
		}
		checkMarks(t, []byte(r), d.marks)
		offs := []int{0}
		for _, nl := range d.nl {
			offs = append(offs, int(nl), min(int(nl)+1, len(d.text)))
		}
		with, without := slices.Clone(offs), slices.Clone(offs)
		rawOffsets([]byte(r), with, d.marks)
		rawOffsets([]byte(r), without, nil)
		if diff := cmp.Diff(without, with); diff != "" {
			t.Fatalf("text %d of %q: rawOffsets with marks (-without +with):\n%s", i, texts, diff)
		}
	}
	return st.at.taken
}

// checkMarks fails unless marks ascend and each pairs a decoded offset
// with the raw offset where the same character starts.
func checkMarks(t *testing.T, raw []byte, marks []mark) {
	t.Helper()
	us := make([]int, len(marks))
	for k, m := range marks {
		if k > 0 && (m.u <= marks[k-1].u || m.r <= marks[k-1].r) {
			t.Fatalf("marks do not ascend: %v then %v", marks[k-1], m)
		}
		us[k] = int(m.u)
	}
	rawOffsets(raw, us, nil)
	for k, m := range marks {
		if us[k] != int(m.r) {
			t.Fatalf("mark %v: decoded offset %d starts at raw offset %d", m, m.u, us[k])
		}
	}
}

// anchorDocs are re-sent documents as a naive client pastes them: fenced,
// tagged, with a banner; escape-dense, with surrogate pairs, long enough
// to hold marks.
func anchorDocs() []string {
	src := strings.Repeat("\tif x := f(\"a\\tb\"); x != nil {\n\t\treturn 😀 é\n\t}\n", 40)
	return []string{
		"```go a.go\n" + src + "```\n",
		"<document path=\"b.txt\">\n" + strings.Repeat("prose line é 中 \u2028 \"quoted\"\n", 50) + "</document>\n",
		"--- c.py ---\n" + strings.Repeat("# comment\nprint('x\\ty')\n", 60) + "--- End of content ---\n",
		"~~~\n" + strings.Repeat("😀😀 \\ / \b\f\r\n", 80) + "~~~\n",
	}
}

func jsonContents(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw[1 : len(raw)-1])
}

// TestScanAnchors checks texts that repeat documents of earlier texts
// anywhere inside them, cut anywhere, in the shape of the overhead
// bench's 1 MB request (bench.Sizes: every turn re-sends the documents,
// the last turn several times over).
func TestScanAnchors(t *testing.T) {
	docs := anchorDocs()
	all := strings.Join(docs, "\n")
	taken := 0
	for q := range 3 {
		first := jsonContents(fmt.Sprintf("Context:\n\n%s\nQuestion %d?", all, q))
		last := all + all + "Context:\n\n" + all
		for cut := 0; cut <= len(last); cut += 97 {
			taken += scanAnchored(t, []string{first, "Noted.", first, jsonContents(last[:cut] + "...")})
		}
	}
	for i, a := range docs {
		for j, b := range docs {
			taken += scanAnchored(t, []string{jsonContents(a + b), jsonContents(b + "x" + a + b + a), jsonContents(a[:len(a)/2] + b + a[len(a)/3:])})
			_, _ = i, j
		}
	}
	if taken == 0 {
		t.Error("no text copied from an anchor")
	}
}

// FuzzScanAnchors checks texts made of pieces of earlier texts, cut and
// glued anywhere (escapes and surrogate pairs included), against a fresh
// decoding.
func FuzzScanAnchors(f *testing.F) {
	docs := anchorDocs()
	f.Add(docs[0], docs[1], uint16(7), uint16(300), "\n")
	f.Add(docs[2], docs[3], uint16(0), uint16(1000), "x\\ud83d")
	f.Add(docs[1], docs[0], uint16(33), uint16(70), "\\ude00```\n")
	f.Fuzz(fuzzAnchorsBody)
}

func fuzzAnchorsBody(t *testing.T, a, b string, i, j uint16, glue string) {
	if !json.Valid([]byte(`"` + glue + `"`)) {
		return
	}
	ra, rb := jsonContents(a), jsonContents(b)
	// Cut the raw strings anywhere that leaves valid JSON.
	ci, cj := int(i)%(len(ra)+1), int(j)%(len(rb)+1)
	for ci > 0 && !json.Valid([]byte(`"`+ra[:ci]+`"`)) {
		ci--
	}
	for cj > 0 && !json.Valid([]byte(`"`+rb[cj:]+`"`)) {
		cj--
	}
	scanAnchored(t, []string{ra + "\\n" + rb, rb + glue + ra, ra[:ci] + glue + rb[cj:] + "\\n" + ra, rb + "\\n" + rb})
}

// TestSpanSHA checks that spanSHA gives every occurrence of the golden
// requests and of a request in the overhead bench's shape the SHA-256
// of its span, asked first and again (from its memo).
func TestSpanSHA(t *testing.T) {
	var bodies [][]byte
	for _, path := range goldenFiles(t) {
		a, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if in, ok := file(a, "request.json"); ok {
			bodies = append(bodies, in)
		}
	}
	docs := strings.Join(segSamples, "\n") + strings.Join(anchorDocs(), "\n")
	var turns []any
	for q := range 3 {
		turns = append(turns, map[string]any{"role": "user", "parts": []any{map[string]any{"text": fmt.Sprintf("Context:\n\n%s\nQuestion %d?", docs, q)}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Noted.\r\n" + docs}}})
	}
	turns = append(turns, map[string]any{"role": "user", "parts": []any{map[string]any{"text": docs + docs + "Context:\n\n" + docs[:len(docs)/2]}}})
	body, _ := json.Marshal(map[string]any{"contents": turns})
	bodies = append(bodies, body)
	checked := 0
	for _, body := range bodies {
		opts := DefaultOptions()
		st := &state{}
		req, err := scanWith(body, st, opts.MinBlockBytes, limitsOf(&opts))
		if err != nil || req.small {
			continue
		}
		e := newEngine(body, req, &opts, st)
		if e.analyse() != nil {
			continue
		}
		for range 2 {
			for i := range e.occs {
				o := &e.occs[i]
				content, _ := e.spanOf(o)
				sum := sha256.Sum256([]byte(content))
				if got, want := e.spanSHA(o), hex.EncodeToString(sum[:]); got != want {
					t.Fatalf("spanSHA of %q = %s, want %s", content, got, want)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no occurrence checked")
	}
}

// TestReuseSameOutput rewrites requests in the shape of the overhead
// bench's 1 MB request (every user turn re-sends the documents, the last
// one several times over inside one text, cut anywhere), built from Go
// sources read at run time, and checks that the body and report are
// those of the exhaustive path, which decodes and segments every text
// afresh (no resume, anchors or segmentation reuse), and that the audit
// passes.
func TestReuseSameOutput(t *testing.T) {
	env, err := goenv.Lookup()
	if err != nil {
		t.Skipf("Go installation: %v", err)
	}
	var docs strings.Builder
	for _, f := range []string{"net/http/httputil/reverseproxy.go", "text/scanner/scanner.go", "sort/sort.go", "container/list/list.go"} {
		src, err := os.ReadFile(filepath.Join(env.GOROOT, "src", f))
		if err != nil {
			t.Skipf("Go sources: %v", err)
		}
		fmt.Fprintf(&docs, "``` %s\n%s\n```\n", filepath.Base(f), src)
	}
	all := docs.String()
	for _, cut := range []int{0, 777, len(all) + 11} {
		var turns []any
		for q := range 3 {
			turns = append(turns, map[string]any{"role": "user", "parts": []any{map[string]any{"text": fmt.Sprintf("Context:\n\n%s\nQuestion %d?", all, q)}}},
				map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Noted."}}})
		}
		last := all + all + "Context:\n\n" + all
		last = last[:min(len(last), 2*len(all)+cut)] + "..."
		turns = append(turns[:5], map[string]any{"role": "user", "parts": []any{map[string]any{"text": last}}})
		body, _ := json.Marshal(map[string]any{"contents": turns})
		opts := DefaultOptions()
		st := &state{}
		out, rep, err := st.rewrite(body, opts, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		slow, slowRep, err := request1(body, opts, nil, false)
		if err != nil || !bytes.Equal(out, slow) || !cmp.Equal(rep, slowRep, reportCmp) {
			t.Fatalf("cut %d: the reuse paths change the rewrite (err %v): %d bytes, want %d\n%s", cut, err, len(out), len(slow), cmp.Diff(slowRep, rep, reportCmp))
		}
		if err := Audit(body, out, rep); err != nil {
			t.Fatalf("cut %d: audit: %v", cut, err)
		}
		if st.at.taken == 0 || st.segIdx.taken == 0 {
			t.Errorf("cut %d: %d decodings and %d segmentations copied from inside earlier texts, want some", cut, st.at.taken, st.segIdx.taken)
		}
		if len(out) >= len(body)/2 {
			t.Errorf("cut %d: %d bytes rewritten to %d", cut, len(body), len(out))
		}
	}
}

// TestKnown checks that what segIndex.known claims the scan copied is
// the same bytes, at positions in and around every copy of a request in
// the overhead bench's shape, and that it claims some.
func TestKnown(t *testing.T) {
	docs := strings.Join(anchorDocs(), "\n") + strings.Join(segSamples, "\n")
	var turns []any
	for q := range 2 {
		turns = append(turns, map[string]any{"role": "user", "parts": []any{map[string]any{"text": fmt.Sprintf("Context:\n\n%s\nQuestion %d?", docs, q)}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Noted."}}})
	}
	turns = append(turns, map[string]any{"role": "user", "parts": []any{map[string]any{"text": docs + docs + "Context:\n\n" + docs[:len(docs)/2]}}})
	body, _ := json.Marshal(map[string]any{"contents": turns})
	st := &state{}
	if _, _, err := st.rewrite(body, DefaultOptions(), nil, true); err != nil {
		t.Fatal(err)
	}
	x := &st.segIdx
	all := unsafe.String(unsafe.SliceData(x.arena), len(x.arena))
	claimed := 0
	for _, c := range x.copies {
		for _, d := range []int{-300, -1, 0, 1, 17, int(c.n) / 2, int(c.n) - 1, int(c.n), int(c.n) + 5} {
			for _, e := range []int{0, 1, -1} {
				i, j := int(c.dst)+d, int(c.src)+d+e
				if i < 0 || j < 0 || i > len(all) || j > len(all) {
					continue
				}
				k := x.known(all, i, all, j)
				if k < 0 || i+k > len(all) || j+k > len(all) || all[i:i+k] != all[j:j+k] {
					t.Fatalf("known(%d, %d) = %d: not the same bytes", i, j, k)
				}
				claimed += k
			}
		}
	}
	if claimed == 0 {
		t.Fatal("known claimed no copied byte")
	}
}

// TestAnchorsLinear checks that texts of many alike fence and tag lines
// (one key for every anchor and index entry) cost a bounded number of
// comparisons per line: a text's own anchors are not walked at each of
// its lines.
func TestAnchorsLinear(t *testing.T) {
	for _, line := range []string{"```\n", "<file path=\"a\">\nx\n</file>\n", "```go\nx\n```\n"} {
		text := strings.Repeat(line, 20000/len(line)*8)
		lines := 3 * strings.Count(text, "\n")
		c := map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}
		m := map[string]any{"role": "model", "parts": []any{map[string]any{"text": "ok"}}}
		body, _ := json.Marshal(map[string]any{"contents": []any{c, m, c, m, c}})
		st := &state{}
		if _, _, err := st.rewrite(body, DefaultOptions(), nil, true); err != nil && !errors.Is(err, ErrTooComplex) {
			t.Fatal(err)
		}
		if st.at.walked > maxAnchorTries*lines || st.segIdx.walked > maxAnchorTries*lines {
			t.Errorf("%q: %d anchors and %d index entries compared for %d lines", line, st.at.walked, st.segIdx.walked, lines)
		}
	}
}
