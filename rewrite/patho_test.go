package rewrite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPathologicalLinear guards against quadratic blow-ups on hostile
// texts: each shape, at 256 KB per turn, rewrites in well under a second
// on an idle machine, while a quadratic cost would take minutes. The limit
// is generous (30 s) so that -race on a loaded 2-core CI machine cannot make
// it flaky, and still far below what a quadratic cost would take.
func TestPathologicalLinear(t *testing.T) {
	var distinct strings.Builder
	for i := 0; distinct.Len() < 1<<18; i++ {
		fmt.Fprintf(&distinct, "```\nblock %d line a\nblock %d line b\n```\n", i, i)
	}
	shapes := map[string]string{
		"unclosed tags":     strings.Repeat("<file>\nx\n", 1<<15),
		"unclosed fences":   strings.Repeat("````\nx```\n", 1<<15),
		"tags before close": strings.Repeat("<document path=\"a\">\n", 1<<14) + "</document>",
		"distinct blocks":   distinct.String(),
		"same short lines":  strings.Repeat("x\n", 1<<17),
		"banners":           strings.Repeat("--- a.go ---\nx\n", 1<<14),
	}
	for name, text := range shapes {
		t.Run(name, func(t *testing.T) {
			c := map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}
			body, _ := json.Marshal(map[string]any{"contents": []any{c, c, c}})
			start := time.Now()
			if _, _, err := Request(body, DefaultOptions(), nil); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("%d bytes took %v", len(body), d)
			}
		})
	}
}
