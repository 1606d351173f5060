package rewrite

import (
	"bytes"
	"encoding/json"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

// mapMemo is an in-memory Memo for tests. frozen drops every SetAnalysis,
// so that a benchmark can replay the same warm state in every iteration.
type mapMemo struct {
	mu         sync.Mutex
	m          map[string][]byte
	gets, hits int
	frozen     bool
}

func newMapMemo() *mapMemo { return &mapMemo{m: map[string][]byte{}} }

func (m *mapMemo) GetAnalysis(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	v, ok := m.m[key]
	if ok {
		m.hits++
	}
	return v, ok
}

func (m *mapMemo) SetAnalysis(key string, value []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.frozen {
		m.m[key] = value
	}
}

// memoVerifier is the per-tenant object the proxy passes: a Verifier that
// is also a Memo. A nil served verifies nothing.
type memoVerifier struct {
	Verifier
	*mapMemo
}

func (v memoVerifier) Served(text string) bool {
	return v.Verifier != nil && v.Verifier.Served(text)
}

// corruptions turn a memo's values into garbage, each in its own way.
var corruptions = map[string]func(key string, v []byte, all map[string][]byte) []byte{
	"empty":     func(string, []byte, map[string][]byte) []byte { return nil },
	"truncated": func(_ string, v []byte, _ map[string][]byte) []byte { return v[:len(v)/2] },
	"flipped": func(_ string, v []byte, _ map[string][]byte) []byte {
		w := bytes.Clone(v)
		w[len(w)/3] ^= 0x5a
		return w
	},
	"version": func(_ string, v []byte, _ map[string][]byte) []byte {
		w := bytes.Clone(v)
		w[0]++
		return w
	},
	"no blocks": func(string, []byte, map[string][]byte) []byte { return []byte{memoFormat, 0, 0, 0, 0, 0, 0, 0, 0, 0} },
	"other key": func(key string, v []byte, all map[string][]byte) []byte {
		// The value stored for another turn: well-formed, wrong turn.
		keys := slices.Sorted(maps.Keys(all))
		return all[keys[(slices.Index(keys, key)+1)%len(keys)]]
	},
	"garbage": func(_ string, v []byte, _ map[string][]byte) []byte {
		return bytes.Repeat([]byte{0xff, 0x01}, len(v))
	},
}

// TestMemoGolden rewrites every golden request with a cold memo, a warm
// memo and a memo whose values are corrupted, and wants the output and
// report of a rewrite without a memo every time.
func TestMemoGolden(t *testing.T) {
	hexKey := regexp.MustCompile(`^[0-9a-f]{32}$`)
	totalHits := 0
	for _, path := range goldenFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			a, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var co caseOptions
			if c := bytes.TrimSpace(a.Comment); len(c) > 0 {
				if err := json.Unmarshal(c, &co); err != nil {
					t.Fatalf("options: %v", err)
				}
			}
			opts, v := co.options()
			in, _ := file(a, "request.json")
			in = bytes.TrimSuffix(in, []byte("\n"))
			want, wantRep, wantErr := Request(in, opts, v)
			check := func(name string, m *mapMemo) {
				t.Helper()
				got, rep, err := Request(in, opts, memoVerifier{v, m})
				if diff := cmp.Diff(renderReport(wantRep, wantErr), renderReport(rep, err)); diff != "" {
					t.Errorf("%s memo: report (-want +got):\n%s", name, diff)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s memo: output differs\nwant: %s\ngot:  %s", name, want, got)
				}
				if err == nil && !cmp.Equal(wantRep, rep, reportCmp) {
					t.Errorf("%s memo: report differs: %s", name, cmp.Diff(wantRep, rep, reportCmp))
				}
			}
			m := newMapMemo()
			check("cold", m)
			for k := range m.m {
				if !hexKey.MatchString(k) {
					t.Errorf("memo key %q is not 32 hex digits", k)
				}
			}
			if wantErr != nil {
				return
			}
			stored := maps.Clone(m.m)
			m.gets, m.hits = 0, 0
			check("warm", m)
			if m.hits != m.gets || (len(stored) > 0 && m.hits == 0) {
				t.Errorf("warm memo: %d hits of %d gets, want all", m.hits, m.gets)
			}
			totalHits += m.hits
			if len(stored) == 0 {
				return
			}
			for name, corrupt := range corruptions {
				bad := newMapMemo()
				for k, val := range stored {
					bad.m[k] = corrupt(k, val, stored)
				}
				check(name, bad)
			}
		})
	}
	if totalHits == 0 {
		t.Error("no golden case hit its warm memo")
	}
}

// TestMemoConversation checks that each request of a growing conversation
// finds the analysis of the turns it re-sends, and only those.
func TestMemoConversation(t *testing.T) {
	full := session(9, 60)
	var req struct {
		Contents []json.RawMessage `json:"contents"`
	}
	if err := json.Unmarshal(full, &req); err != nil {
		t.Fatal(err)
	}
	m := newMapMemo()
	opts := DefaultOptions()
	for n := 1; n <= len(req.Contents); n += 2 {
		body, err := json.Marshal(map[string]any{"contents": req.Contents[:n]})
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := Request(body, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.gets, m.hits = 0, 0
		got, _, err := Request(body, opts, memoVerifier{nil, m})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d turns: output with memo differs", n)
		}
		if wantHits := max(n-2, 0); m.gets != n || m.hits != wantHits {
			t.Errorf("%d turns: %d hits of %d gets, want %d of %d", n, m.hits, m.gets, wantHits, n)
		}
	}
	// Other document tags analyse differently: their keys differ.
	opts.DocumentTags = []string{"file"}
	m.gets, m.hits = 0, 0
	if _, _, err := Request(full, opts, memoVerifier{nil, m}); err != nil {
		t.Fatal(err)
	}
	if m.hits != 0 {
		t.Errorf("other tags: %d hits, want 0", m.hits)
	}
}

// FuzzMemo checks on arbitrary bodies that a cold, a warm and a corrupted
// memo all give the output and report of a rewrite without one.
func FuzzMemo(f *testing.F) {
	for _, path := range goldenFiles(f) {
		a, err := txtar.ParseFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if in, ok := file(a, "request.json"); ok {
			f.Add(bytes.TrimSuffix(in, []byte("\n")), uint16(7), byte(0x20), false)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, at uint16, x byte, small bool) {
		opts := DefaultOptions()
		if small {
			opts.MinBlockBytes = 24
		}
		want, wantRep, wantErr := Request(body, opts, nil)
		m := newMapMemo()
		for _, name := range []string{"cold", "warm", "corrupted"} {
			if name == "corrupted" {
				for k, v := range m.m {
					w := bytes.Clone(v)
					if len(w) > 0 {
						w[int(at)%len(w)] ^= x | 1
						w = w[:len(w)-int(at)%2]
					}
					m.m[k] = w
				}
			}
			got, rep, err := Request(body, opts, memoVerifier{nil, m})
			if renderReport(rep, err) != renderReport(wantRep, wantErr) || !bytes.Equal(got, want) {
				t.Fatalf("%s memo changed the rewrite\nin:   %q\nwant: %q\ngot:  %q", name, body, want, got)
			}
			if err == nil {
				if aerr := auditBoth(t, body, got, rep); aerr != nil && !auditKnownReason(aerr) {
					t.Fatalf("%s memo: audit: %v\nin:  %q\nout: %q", name, aerr, body, got)
				}
			}
		}
	})
}
