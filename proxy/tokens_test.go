package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// tokenTexts are texts of every run class textTokens knows, and their
// borders.
var tokenTexts = []string{
	"",
	" ",
	"  ",
	"word",
	"internationalisation",
	"don't stop: it's the user's 'quoted' text'",
	"'leading and trailing'",
	"snake_case_name and CamelCaseName, __init__, !_ and a!_b",
	"[same image/png sha256:1a2b3c4d5e6f as in turn 1]",
	`[{"role":"user","content":"What is N2?\n\tIt \"quotes\" C:\\dir"},{"role":"assistant"}]`,
	"func main() {\n\tfmt.Println(\"hi\")\n}\n",
	"\r\n\r\n\t\t  \v\f",
	"ação, coração e pão; ¿qué pasó? Ünïcödé",
	"用户：你好\n助手：你好！有什么可以帮你的吗？",
	"ひらがな カタカナ 한국어 Русский текст",
	"emoji 😀👍🏽 and ✓ — “quotes” … ½ ² ٣٤٥",
	"\x00\x01\x7f control\x1b[0m",
	"invalid \xff\xfe utf-8 \xe2\x82",
	"\u00a0nbsp\u2003em\u3000ideographic\u0085next",
	"$100 + 2*3 = <x> & |y| ~z^ `code` #tag @at %",
}

func TestTextTokensMatchesEmulator(t *testing.T) {
	for _, text := range tokenTexts {
		if got, want := textTokens(text), emulator.CountTokens(text); got != want {
			t.Errorf("textTokens(%q) = %d, the emulator counts %d", text, got, want)
		}
	}
	// And a JSON history as un-flattening reads it.
	h, _ := json.Marshal([]map[string]string{{"role": "user", "content": strings.Join(tokenTexts, "\n")}})
	if got, want := textTokens(string(h)), emulator.CountTokens(string(h)); got != want {
		t.Errorf("textTokens of a JSON history = %d, the emulator counts %d", got, want)
	}
}

func FuzzTextTokens(f *testing.F) {
	for _, text := range tokenTexts {
		f.Add(text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if got, want := textTokens(text), emulator.CountTokens(text); got != want {
			t.Errorf("textTokens(%q) = %d, the emulator counts %d", text, got, want)
		}
	})
}

// BenchmarkUnflattenCountTokens is the cost of Options.CountTokens on a
// request the rewrite un-flattens: a labelled transcript and a JSON
// history of about 200 KB, with and without the count.
func BenchmarkUnflattenCountTokens(b *testing.B) {
	answer := "field3 splits the line at tabs and returns its fourth field, or an error that quotes the line."
	served := &servedSet{texts: map[string]bool{answer: true}}
	var flat strings.Builder
	var msgs []map[string]string
	for flat.Len() < 200<<10 {
		q := "What does this do?\n\n```go\n" + priceSource()[:2000] + "\n```"
		flat.WriteString("User: " + q + "\nAssistant: " + answer + "\n")
		msgs = append(msgs, map[string]string{"role": "user", "content": q}, map[string]string{"role": "assistant", "content": answer})
	}
	flat.WriteString("User: And now?")
	msgs = append(msgs, map[string]string{"role": "user", "content": "And now?"})
	h, _ := json.Marshal(msgs)
	for _, c := range []struct{ name, text string }{{"transcript-200KB", flat.String()}, {"json-history-200KB", "History:\n" + string(h)}} {
		body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": c.text}}}}})
		for _, count := range []bool{false, true} {
			opts := rewrite.DefaultOptions()
			if count {
				opts.CountTokens = textTokens
			}
			b.Run(fmt.Sprintf("%s/count=%v", c.name, count), func(b *testing.B) {
				if _, rep, err := rewrite.Request(body, opts, served); err != nil || rep.UnflattenedTurns == 0 {
					b.Fatalf("not un-flattened: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					rewrite.Request(body, opts, served) //nolint:errcheck // checked above
				}
			})
		}
	}
}
