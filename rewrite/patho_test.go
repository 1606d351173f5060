package rewrite

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestPathologicalLinear guards against quadratic blow-ups on hostile
// texts: each shape is rewritten at 32 KB and at 256 KB per turn, and the
// work of the larger (the segmentation's steps, the bytes the identity
// tests read, the bytes allocated) must stay within twice linear of the
// smaller's (checkLinear). It counts work, not time, so that a loaded
// machine cannot make it fail, while a quadratic cost exceeds the bound
// four fold.
func TestPathologicalLinear(t *testing.T) {
	distinct := func(k int) string {
		var b strings.Builder
		for i := 0; b.Len() < k<<15; i++ {
			fmt.Fprintf(&b, "```\nblock %d line a\nblock %d line b\n```\n", i, i)
		}
		return b.String()
	}
	shapes := map[string]func(k int) string{
		"unclosed tags":     func(k int) string { return strings.Repeat("<file>\nx\n", k<<12) },
		"unclosed fences":   func(k int) string { return strings.Repeat("````\nx```\n", k<<12) },
		"tags before close": func(k int) string { return strings.Repeat("<document path=\"a\">\n", k<<11) + "</document>" },
		"distinct blocks":   distinct,
		"same short lines":  func(k int) string { return strings.Repeat("x\n", k<<14) },
		"banners":           func(k int) string { return strings.Repeat("--- a.go ---\nx\n", k<<11) },
	}
	// Without the limits on parts, lines and blocks, which would refuse
	// some of these: the analysis itself must stay linear.
	opts := DefaultOptions()
	opts.MaxParts, opts.MaxLines, opts.MaxBlocks = 0, 0, 0
	for name, text := range shapes {
		t.Run(name, func(t *testing.T) {
			body := func(k int) []byte {
				c := map[string]any{"role": "user", "parts": []any{map[string]any{"text": text(k)}}}
				b, _ := json.Marshal(map[string]any{"contents": []any{c, c, c}})
				return b
			}
			checkLinearOpts(t, body(1), body(8), nil, opts)
		})
	}
}

// namedChunksBody is one huge named file followed by n small blocks named
// as the same file, each a distinct slice of its end (retrieval chunks).
func namedChunksBody(n int) []byte {
	lines := make([]string, 100*n)
	for j := range lines {
		lines[j] = fmt.Sprintf("func f%07d() { return %d }\n", j, j)
	}
	parts := []any{map[string]any{"text": "```go a.go\n" + strings.Join(lines, "") + "```\n"}}
	for c := 0; c < n; c++ {
		at := len(lines) - 30 - c
		parts = append(parts, map[string]any{"text": "```go a.go\n" + strings.Join(lines[at:at+25], "") + "```\n"})
	}
	body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": parts}}})
	return body
}

// TestNamedChunksLinear guards the retrieval-chunk test of named blocks:
// each small block named as a huge file was searched for in the whole file,
// so n blocks cost n times its size (8× the bytes read 64× the bytes).
func TestNamedChunksLinear(t *testing.T) {
	checkLinear(t, namedChunksBody(200), namedChunksBody(1600), nil)
}

// checkLinear rewrites small and big (about 8× the bytes) and fails when,
// for big, the segmentation's steps (state.steps), the bytes the identity
// tests read (state.scanned) or the bytes allocated exceed twice the
// linear cost: big's size ratio times small's, plus big's size. All three
// count work, not time, so that a loaded machine cannot make the test
// fail; a quadratic cost exceeds the bound 4 fold.
func checkLinear(t *testing.T, small, big []byte, v Verifier) {
	t.Helper()
	checkLinearOpts(t, small, big, v, DefaultOptions())
}

// checkLinearOpts is checkLinear with opts.
func checkLinearOpts(t *testing.T, small, big []byte, v Verifier, opts Options) {
	t.Helper()
	work := func(body []byte) (steps, scanned, alloc uint64) {
		var before, after runtime.MemStats
		st := new(state)
		runtime.ReadMemStats(&before)
		if _, _, err := st.rewrite(body, opts, v, true); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return uint64(st.steps), uint64(st.scanned), after.TotalAlloc - before.TotalAlloc
	}
	w1, s1, a1 := work(small)
	w8, s8, a8 := work(big)
	ratio := float64(len(big)) / float64(len(small))
	bound := func(w uint64) uint64 { return uint64(2*ratio*float64(w)) + uint64(len(big)) }
	t.Logf("%d bytes: steps %d, scanned %d, allocated %d; %d bytes (%.1f×): steps %d (%.1f×), scanned %d (%.1f×), allocated %d (%.1f×)",
		len(small), w1, s1, a1, len(big), ratio, w8, float64(w8)/float64(max(w1, 1)), s8, float64(s8)/float64(max(s1, 1)), a8, float64(a8)/float64(a1))
	if w8 > bound(w1) {
		t.Errorf("segmentation took %d steps for %d bytes, %d for %d: more than %d, twice linear", w1, len(small), w8, len(big), bound(w1))
	}
	if s8 > bound(s1) {
		t.Errorf("identity tests read %d bytes for %d bytes, %d for %d: more than %d, twice linear", s1, len(small), s8, len(big), bound(s1))
	}
	if a8 > bound(a1) {
		t.Errorf("allocated %d bytes for %d bytes, %d for %d: more than %d, twice linear", a1, len(small), a8, len(big), bound(a1))
	}
}

// acceptAll is a Verifier that confirms every transcript segment.
type acceptAll struct{}

func (acceptAll) Served(string) bool { return true }

// TestFlatRunLinear guards un-flattening a transcript with a long run of
// model segments: each one was appended to the turn built so far, copying
// it again (8× the bytes took over 50× the time, and allocated as much
// more).
func TestFlatRunLinear(t *testing.T) {
	body := func(n int) []byte {
		text := strings.Repeat("<assistant>a</x>\n", n) + "<user>end</user>"
		b, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}})
		return b
	}
	checkLinear(t, body(8000), body(64000), acceptAll{})
}

// TestLimitsBoundMemory checks what Options.MaxParts, MaxLines and
// MaxBlocks are for: the shapes whose records cost many times their bytes
// (tiny parts, short lines, tiny blocks), at 90% of the default limit that
// binds them, are rewritten within the memory DefaultMaxBlocks promises;
// at twice that they are refused with ErrTooComplex, having allocated
// little more than the body and the records up to the limit.
func TestLimitsBoundMemory(t *testing.T) {
	const contents = 3
	text := func(unit string, n int) func(int) []any {
		return func(scale int) []any {
			var b strings.Builder
			for i := range n * scale / contents {
				fmt.Fprintf(&b, unit, i)
			}
			return []any{map[string]any{"text": b.String()}}
		}
	}
	lines := DefaultMaxLines * 9 / 10
	blocks := DefaultMaxBlocks * 9 / 10
	shapes := map[string]func(scale int) []any{
		"tiny parts": func(scale int) []any {
			ps := make([]any, DefaultMaxParts*9/10*scale/contents)
			for i := range ps {
				ps[i] = map[string]any{"text": "x"}
			}
			return ps
		},
		"short lines":     text("%d\n", lines),
		"tiny fences":     text("```\n%d\n```\n", blocks),
		"banners":         text("--- a%d.go ---\nx\n", blocks),
		"same banners":    text("--- a.go ---\n%d\n", blocks),
		"unclosed fences": text("````\n%dx```\n````\n", blocks),
		"tags":            text("<file path=\"a%d\">\nx\n</file>\n", blocks),
		"empty fences":    text("```%d\n```\n", blocks),
		"one-line tags":   text("<file path=\"a%d\">x</file>\n", blocks),
	}
	alloc := func(body []byte) (uint64, error) {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		// A fresh state, as after the pool dropped it: buffers kept from
		// an earlier case would hide what this one allocates.
		_, _, err := (&state{}).rewrite(body, DefaultOptions(), nil, true)
		runtime.ReadMemStats(&m1)
		return m1.TotalAlloc - m0.TotalAlloc, err
	}
	for name, parts := range shapes {
		t.Run(name, func(t *testing.T) {
			for _, scale := range []int{1, 2} {
				c := map[string]any{"role": "user", "parts": parts(scale)}
				body, _ := json.Marshal(map[string]any{"contents": []any{c, c, c}})
				n, err := alloc(body)
				t.Logf("×%d: %d bytes, %.1f MB allocated, %v", scale, len(body), float64(n)/1e6, err)
				switch {
				case scale == 1 && err != nil:
					t.Fatalf("under the limits: %v", err)
				case scale == 1 && n > 50<<20:
					t.Errorf("under the limits: %.1f MB allocated for %d bytes", float64(n)/1e6, len(body))
				case scale == 2 && !errors.Is(err, ErrTooComplex):
					t.Fatalf("over the limits: err %v, want ErrTooComplex", err)
				case scale == 2 && n > uint64(2*len(body))+32<<20:
					t.Errorf("refused, but %.1f MB allocated for %d bytes", float64(n)/1e6, len(body))
				}
			}
		})
	}
	// One text far over a limit must be stopped inside it: the scan at
	// the line that passes MaxLines, the segmentation at the block that
	// passes MaxBlocks (within the line limit here).
	var fences strings.Builder
	for i := range 4 * DefaultMaxBlocks {
		fmt.Fprintf(&fences, "```%d\n```\n", i)
	}
	for name, text := range map[string]string{
		"newlines in one part": strings.Repeat("\n", 40*DefaultMaxLines),
		"fences in one part":   fences.String(),
	} {
		t.Run(name, func(t *testing.T) {
			c := map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}
			body, _ := json.Marshal(map[string]any{"contents": []any{c}})
			n, err := alloc(body)
			t.Logf("%d bytes, %.1f MB allocated, %v", len(body), float64(n)/1e6, err)
			if !errors.Is(err, ErrTooComplex) {
				t.Fatalf("err %v, want ErrTooComplex", err)
			}
			if n > uint64(2*len(body))+32<<20 {
				t.Errorf("refused, but %.1f MB allocated for %d bytes", float64(n)/1e6, len(body))
			}
		})
	}
}
