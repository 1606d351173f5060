package rewrite

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

// reviewGoldens returns the request, options and verifier of every golden
// case.
func reviewGoldens(t *testing.T) map[string]struct {
	in   []byte
	opts Options
	v    Verifier
} {
	t.Helper()
	out := map[string]struct {
		in   []byte
		opts Options
		v    Verifier
	}{}
	for _, path := range goldenFiles(t) {
		a, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var co caseOptions
		if c := bytes.TrimSpace(a.Comment); len(c) > 0 {
			if err := json.Unmarshal(c, &co); err != nil {
				t.Fatalf("%s: options: %v", path, err)
			}
		}
		in, ok := file(a, "request.json")
		if !ok {
			t.Fatalf("%s: no request.json", path)
		}
		opts, v := co.options()
		out[strings.TrimSuffix(filepath.Base(path), ".txtar")] = struct {
			in   []byte
			opts Options
			v    Verifier
		}{bytes.TrimSuffix(in, []byte("\n")), opts, v}
	}
	return out
}

// TestReviewBufferReportOutlivesBuffer: the Report of a rewrite into the
// memory of Options.Buffer, all of it (Blocks, the audit's record), is
// the Report of the same rewrite without a Buffer, also once that memory
// was overwritten (a caller pools it, the proxy reuses it for another
// tenant's body after the request), and the audit of the body against it
// still passes. checkBuffer compares only renderReport's fields.
func TestReviewBufferReportOutlivesBuffer(t *testing.T) {
	changed := 0
	for name, c := range reviewGoldens(t) {
		t.Run(name, func(t *testing.T) {
			want, wantRep, err := Request(c.in, c.opts, c.v)
			if err != nil {
				return // the error cases: no body, no Report
			}
			var given [][]byte
			opts := c.opts
			opts.Buffer = func(n int) []byte {
				b := bytes.Repeat([]byte{'?'}, n)
				given = append(given, b)
				return b[:0]
			}
			got, rep, err := Request(c.in, opts, c.v)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("with a Buffer: %v, body differs: %v", err, !bytes.Equal(got, want))
			}
			if len(given) > 0 {
				changed++
			}
			for _, b := range given {
				for i := range b {
					b[i] = 'x'
				}
			}
			if !cmp.Equal(rep, wantRep, reportCmp) {
				t.Fatalf("the Report differs once the Buffer's memory was overwritten:\n%s", cmp.Diff(wantRep, rep, reportCmp))
			}
			for _, b := range rep.Blocks {
				if _, err := hex.DecodeString(b.SHA256); err != nil || len(b.SHA256) != 64 {
					t.Errorf("block hash %q", b.SHA256)
				}
			}
			if wantErr := Audit(c.in, want, wantRep); wantErr == nil {
				if err := Audit(c.in, want, rep); err != nil {
					t.Errorf("audit after the Buffer was overwritten: %v", err)
				}
			}
		})
	}
	if changed < 20 {
		t.Fatalf("only %d golden cases wrote into the Buffer: the test shows little", changed)
	}
}

// reviewRefLineBodies are requests whose texts hold reference lines and
// near misses in every form the old per-line test and refLines must agree
// on: at the very start of a text, after "\n", "\r\n", "\u000a" escapes,
// tabs, \v, \f, NEL, NBSP, U+2028 and U+3000, after an emoji (not white
// space), after "\r" alone, and ending in "\r".
var reviewRefLineBodies = []string{
	`[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\nrest`,
	`x\n[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\r\ny`,
	`x\u000a[superseded: b.go sha256:0123456789ab, replaced by the version in turn 3]\u000d\u000ay`,
	`\t\t[same image.png sha256:0123456789ab as in turn 2]\t\n`,
	`\u000b\u000c[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]`,
	`\u0085[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\n\u00a0[unchanged: a.go sha256:0123456789ab]`,
	`\u2028[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\n\u3000 [unchanged: a.go sha256:0123456789ab]`,
	`\ud83d\ude00[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]`,
	`a\r[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\nb`,
	`[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\r`,
	`x[1] [unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]\n  [[unchanged: a.go sha256:0123456789ab]]`,
	`[`, `\n[`, `[\n[unchanged: a.go sha256:0123456789ab, identical to the copy in turn 1]`,
}

// TestReviewRefLinesOnDecodedTexts checks what refLines relies on, on the
// texts the scanner decodes (goldens and reviewRefLineBodies): a text's
// line ends are every "\n" in it, however escaped ("\n", "\u000a"), so
// that the lines refLines cuts around a '[' are those of lines.at; and
// that refLines finds exactly the reference lines of the old test of
// every line.
func TestReviewRefLinesOnDecodedTexts(t *testing.T) {
	var bodies [][]byte
	for _, c := range reviewGoldens(t) {
		bodies = append(bodies, c.in)
	}
	for _, s := range reviewRefLineBodies {
		bodies = append(bodies, []byte(`{"contents":[{"role":"user","parts":[{"text":"`+s+`"},{"text":"pad `+strings.Repeat("p", 300)+`"}]}]}`))
	}
	crafted := len(bodies) - len(reviewRefLineBodies)
	found := 0
	for bi, body := range bodies {
		req, err := scanWith(body, &state{}, 0, limits{})
		if err != nil {
			continue
		}
		for ci := range req.contents {
			for pi := range req.contents[ci].parts {
				p := &req.contents[ci].parts[pi]
				if p.kind != partText {
					continue
				}
				l := lines{text: p.dec.text, nl: p.dec.nl}
				var ends []int32
				for i := range len(l.text) {
					if l.text[i] == '\n' {
						ends = append(ends, int32(i))
					}
				}
				ends = append(ends, int32(len(l.text)))
				if !slices.Equal(l.nl, ends) {
					t.Fatalf("text %q: line ends %v, its \"\\n\" at %v", l.text, l.nl, ends)
				}
				got := slices.Collect(refLines(&l))
				if want := refLinesByLine(&l); !slices.Equal(got, want) {
					t.Fatalf("text %q:\nrefLines    %q\nevery line  %q", l.text, got, want)
				}
				if bi >= crafted {
					found += len(got)
				}
			}
		}
	}
	if found != 11 { // counted by hand: see reviewRefLineBodies
		t.Fatalf("%d reference lines in the crafted texts, want 11", found)
	}
}
