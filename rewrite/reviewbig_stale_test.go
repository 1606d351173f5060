package rewrite

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStaleScanCopies: a pooled state keeps the scan's copies
// (state.at.copies) after release, because state.reset does not reset
// st.at, and scanWith resets it only on Request's path (small > 0). The
// next body analysed on that state by a path whose scan records no
// anchors (Elide and SessionBlocks scan with small 0, as does a Request
// with MinBlockBytes 0) hands those stale copies to segIndex.known, which
// then claims bytes of the new body equal because they were equal in the
// previous body at the same arena offsets: the segmentation copies a
// block of an earlier text into a text whose bytes there differ, with
// the earlier content and content id. The listed SHA-256 (and Elide's
// reference) then names bytes that are not the block's.
func TestStaleScanCopies(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("```go a.go\n")
	for k := range 80 {
		doc.WriteString("\tif x := f(\"a\\tb\"); x != nil { return é }\n")
		_ = k
	}
	doc.WriteString("```\n")
	a := doc.String()
	// b: the same document with one byte changed in the middle (same
	// length, same lines).
	mid := len(a) / 2
	for a[mid] != 'x' {
		mid++
	}
	b := a[:mid] + "y" + a[mid+1:]
	body := func(last string) []byte {
		turns := []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Context:\n" + a + "\nQuestion 1?"}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"text": "ok"}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Again:\n" + last + "\nQuestion 2?"}}},
		}
		raw, _ := json.Marshal(map[string]any{"contents": turns})
		return raw
	}
	bodyA, bodyB := body(a), body(b)
	opts := DefaultOptions()

	// The first request, on Request's path: its scan copies the document
	// of the last turn from the first.
	st := &state{}
	if _, _, err := st.rewrite(bodyA, opts, nil, true); err != nil {
		t.Fatal(err)
	}
	if len(st.at.copies) == 0 {
		t.Fatal("the first request's scan copied nothing: the test needs a copy")
	}
	st.reset() // as release does before the state returns to the pool

	// The second body, on SessionBlocks' path, on that state and on a
	// fresh one.
	blocks := func(st *state) ([]Block, []string) {
		req, err := scanWith(bodyB, st, 0, limitsOf(&opts))
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		e := newEngine(bodyB, req, &o, st)
		if err := e.analyse(); err != nil {
			t.Fatal(err)
		}
		var bad []string
		for i := range e.occs {
			oc := &e.occs[i]
			if oc.tp < 0 {
				continue
			}
			if got := normalize(e.parts[oc.tp].text[oc.b.cstart:oc.b.cend]); got != oc.content {
				bad = append(bad, "occurrence "+oc.b.name+" holds content that is not its text's")
			}
		}
		return e.newTurnBlocks(), bad
	}
	fresh, _ := blocks(&state{})
	reused, bad := blocks(st)
	for _, m := range bad {
		t.Error(m)
	}
	want := sha256.Sum256([]byte(b))
	_ = hex.EncodeToString(want[:])
	if diff := cmp.Diff(fresh, reused); diff != "" {
		t.Errorf("SessionBlocks on a pooled state differs from a fresh state (-fresh +pooled):\n%s", diff)
	}
}

// TestStaleScanCopiesElide shows the effect on Elide through the pool:
// after a Request whose scan copied, Elide of the next body (another
// tenant's or the same session's edited document) drops the edit. The
// pool may hand out another state (under -race it drops entries), so the
// test tries a few times and fails if any try loses bytes.
func TestStaleScanCopiesElide(t *testing.T) {
	var doc strings.Builder
	doc.WriteString("```go a.go\n")
	for range 80 {
		doc.WriteString("\tif x := f(\"a\\tb\"); x != nil { return é }\n")
	}
	doc.WriteString("```\n")
	a := doc.String()
	mid := len(a) / 2
	for a[mid] != 'x' {
		mid++
	}
	b := a[:mid] + "y" + a[mid+1:]
	body := func(first, last string) []byte {
		turns := []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Context:\n" + first + "\nQuestion 1?"}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"text": "ok"}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Again:\n" + last + "\nQuestion 2?"}}},
		}
		raw, _ := json.Marshal(map[string]any{"contents": turns})
		return raw
	}
	bodyA, bodyB := body(a, a), body(a, b)
	opts := DefaultOptions()
	none := func(string) bool { return false }
	for try := range 5 {
		st := &state{}
		if _, _, err := st.rewrite(bodyA, opts, nil, true); err != nil {
			t.Fatal(err)
		}
		st.release()
		out, reps, err := Elide(bodyB, opts, none)
		if err != nil {
			t.Fatal(err)
		}
		// The newest turn's document (the edited version) must reach the
		// model whole; the older version may be superseded by it.
		if !strings.Contains(string(out), jsonContents(b)) {
			t.Logf("replacements: %+v", reps)
			t.Fatalf("try %d: Elide with nothing sent lost the edited document of the newest turn: %.300q", try, out)
		}
		for _, r := range reps {
			if r.Rule == "unchanged" {
				t.Fatalf("try %d: Elide calls two different documents identical: %+v", try, r)
			}
		}
	}
}
