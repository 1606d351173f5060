package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite golden files")

// caseOptions is the optional JSON before the first file of a golden case.
type caseOptions struct {
	MinBlockBytes     *int     `json:"min_block_bytes"`
	Similarity        *float64 `json:"similarity"`
	CompactSuperseded *bool    `json:"compact_superseded"`
	Unflatten         string   `json:"unflatten"`
	DocumentTags      []string `json:"document_tags"`
	StablePrefix      *bool    `json:"stable_prefix"`
	ToolResults       string   `json:"tool_results"`
	// Served lists the responses the test Verifier confirms as served.
	Served []string `json:"served"`
}

func (c caseOptions) options() (Options, Verifier) {
	o := DefaultOptions()
	if c.MinBlockBytes != nil {
		o.MinBlockBytes = *c.MinBlockBytes
	}
	if c.Similarity != nil {
		o.Similarity = *c.Similarity
	}
	if c.CompactSuperseded != nil {
		o.CompactSuperseded = *c.CompactSuperseded
	}
	if c.Unflatten != "" {
		o.Unflatten = UnflattenMode(c.Unflatten)
	}
	if c.DocumentTags != nil {
		o.DocumentTags = c.DocumentTags
	}
	if c.StablePrefix != nil {
		o.StablePrefix = *c.StablePrefix
	}
	if c.ToolResults != "" {
		o.ToolResults = ToolResultsMode(c.ToolResults)
	}
	if c.Served == nil {
		return o, nil
	}
	return o, goldenServed(c.Served)
}

// renderReport is the deterministic text form of a Report in want.report.
func renderReport(r *Report, err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "bytes %d -> %d, unflattened turns %d\n", r.BytesBefore, r.BytesAfter, r.UnflattenedTurns)
	if r.Reordered > 0 {
		fmt.Fprintf(&b, "stable prefix: %d parts split\n", r.Reordered)
	}
	for _, x := range r.Replacements {
		fmt.Fprintf(&b, "%s turn=%d part=%d target=%d doc=%q sha256=%s bytes=%d ref=%d\n",
			x.Rule, x.Turn, x.Part, x.Target, x.Document, x.SHA256[:12], x.Bytes, x.RefBytes)
	}
	return b.String()
}

func goldenFiles(t testing.TB) []string {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	return files
}

func file(a *txtar.Archive, name string) ([]byte, bool) {
	for _, f := range a.Files {
		if f.Name == name {
			return f.Data, true
		}
	}
	return nil, false
}

func TestGolden(t *testing.T) {
	for _, path := range goldenFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			a, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var co caseOptions
			if c := bytes.TrimSpace(a.Comment); len(c) > 0 {
				dec := json.NewDecoder(bytes.NewReader(c))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&co); err != nil {
					t.Fatalf("options: %v", err)
				}
			}
			opts, v := co.options()
			in, ok := file(a, "request.json")
			if !ok {
				t.Fatal("no request.json")
			}
			in = bytes.TrimSuffix(in, []byte("\n"))
			out, rep, err := Request(in, opts, v)
			gotReport := renderReport(rep, err)
			if slow, slowRep, slowErr := request1(in, opts, v, false); !bytes.Equal(slow, out) || !errors.Is(slowErr, err) || !cmp.Equal(slowRep, rep, reportCmp) {
				t.Errorf("without the small-request path: %q, %v, %s", slow, slowErr, cmp.Diff(rep, slowRep, reportCmp))
			}
			var gotJSON []byte
			if err == nil {
				gotJSON = append(append([]byte{}, out...), '\n')
				if e := checkInvariants(in, out, rep, opts, v); e != nil {
					t.Errorf("invariant: %v", e)
				}
				if e := checkDescription(in, out, rep); e != nil {
					t.Errorf("report: %v", e)
				}
				auditGolden(t, filepath.Base(path), in, out, rep)
				checkBuffer(t, in, opts, v, out)
				again, rep2, err := Request(out, opts, v)
				if err != nil {
					t.Fatalf("second rewrite: %v", err)
				}
				if !bytes.Equal(again, out) || rep2.Changed() {
					t.Errorf("not idempotent; second rewrite report:\n%s", renderReport(rep2, nil))
				}
			}
			if *update {
				var files []txtar.File
				files = append(files, txtar.File{Name: "request.json", Data: append(in, '\n')})
				if err == nil {
					files = append(files, txtar.File{Name: "want.json", Data: gotJSON})
				}
				files = append(files, txtar.File{Name: "want.report", Data: []byte(gotReport)})
				a.Files = files
				if err := os.WriteFile(path, txtar.Format(a), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			wantJSON, _ := file(a, "want.json")
			if diff := cmp.Diff(string(wantJSON), string(gotJSON)); diff != "" {
				t.Errorf("want.json mismatch (-want +got):\n%s", diff)
			}
			wantReport, _ := file(a, "want.report")
			if diff := cmp.Diff(string(wantReport), gotReport); diff != "" {
				t.Errorf("want.report mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStateReuse rewrites a request with states left by a request that
// outgrew each pooled map or slab, so that dropping one of them on reset
// never leaves the next request without it.
func TestStateReuse(t *testing.T) {
	body := session(19, 60)
	opts := DefaultOptions()
	want, wantRep, err := Request(body, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(wantRep.Replacements) == 0 {
		t.Fatal("the session has no replacements")
	}
	// Each fills one pooled structure past maxPooledKeys.
	for name, fill := range map[string]func(st *state){
		"ids": func(st *state) {
			st.ids, st.versions = map[string]int32{}, map[verKey]int{}
			for i := range maxPooledKeys + 1 {
				st.ids[fmt.Sprint(i)] = int32(i)
			}
		},
		"versions": func(st *state) {
			st.ids, st.versions = map[string]int32{}, map[verKey]int{}
			for i := range maxPooledKeys + 1 {
				st.versions[verKey{int32(i), 0}] = i
			}
		},
		"byName": func(st *state) {
			st.byName = map[string]int{}
			for i := range maxPooledKeys + 1 {
				st.byName[fmt.Sprint(i)] = i
			}
		},
		"shas": func(st *state) {
			st.shas.heads = map[string]int32{}
			for i := range maxPooledKeys + 1 {
				st.shas.sums = append(st.shas.sums, shaSum{s: fmt.Sprint(i), hex: "x"})
				st.shas.heads[fmt.Sprint(i)] = int32(i + 1)
			}
		},
		"docs": func(st *state) {
			st.docs = make([]doc, maxPooledKeys+1)
			st.docPtrs = make([]*doc, maxPooledKeys+1)
		},
		"byText": func(st *state) { st.byText = make([]int32, 0, maxPooledKeys+1) },
		"none":   func(*state) {},
	} {
		t.Run(name, func(t *testing.T) {
			st := new(state)
			if _, _, err := st.rewrite(body, opts, nil, true); err != nil {
				t.Fatal(err)
			}
			fill(st)
			st.reset()
			for range 2 {
				got, rep, err := st.rewrite(body, opts, nil, true)
				if err != nil || !bytes.Equal(got, want) || !cmp.Equal(rep, wantRep, reportCmp) {
					t.Fatalf("after reset: %v, output equal %v, report %s", err, bytes.Equal(got, want), cmp.Diff(wantRep, rep, reportCmp))
				}
				st.reset()
			}
		})
	}
}
