package proxy

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// priceSource is a Go file of about 4 KB with what escapes in a JSON
// string: tabs, quotes, backslashes and newlines.
func priceSource() string {
	var b strings.Builder
	b.WriteString("package scan\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\n")
	for i := range 24 {
		fmt.Fprintf(&b, "// field%d returns the %d-th field of line, split at tabs.\nfunc field%d(line string) (string, error) {\n\tparts := strings.Split(line, \"\\t\")\n\tif len(parts) <= %d {\n\t\treturn \"\", fmt.Errorf(\"line %%q: no field %d\\n\", line)\n\t}\n\treturn parts[%d], nil\n}\n\n", i, i, i, i, i, i)
	}
	return b.String()
}

// TestRemovedTokensMatchEmulator sends each body through the proxy to the
// emulator, as the first request of its conversation, so that the
// ledger's net saving is the tokens it estimates the rewrite removed at
// the input price (nothing is cached), and compares those tokens with
// what the emulator counts for the body minus the prompt tokens it billed
// for the body the proxy sent. Un-flattening a JSON history removes its
// syntax and escapes, which tokenise three times denser than the text (the
// bench's flat-json-array, 50% low); a file in a JSON text or a tool
// result is read escaped, more bytes than the decoded ones the
// replacement reported (editor-json 8%, agent-read-file 7% low).
func TestRemovedTokensMatchEmulator(t *testing.T) {
	_, emu := tu.StartEmulator(t, emulator.Options{})
	src := priceSource()
	answer := "field3 splits the line at tabs and returns its fourth field, or an error that quotes the line."
	text := func(s string) map[string]any { return map[string]any{"text": s} }
	content := func(role string, parts ...any) map[string]any { return map[string]any{"role": role, "parts": parts} }
	body := func(contents ...any) []byte {
		b, err := json.Marshal(map[string]any{"contents": contents})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	history := func(msgs ...msg) []byte {
		h, err := json.Marshal(msgs)
		if err != nil {
			t.Fatal(err)
		}
		return body(content("user", text("Conversation so far:\n"+string(h))))
	}
	fence := "```go\n" + src + "```"
	editor := func(prompt string) string {
		b, _ := json.Marshal(map[string]string{"mode": "ask", "prompt": prompt, "currentSource": src})
		return string(b)
	}
	reply, _ := json.Marshal(map[string]string{"kind": "answer", "explanation": answer})
	read := func(id string) []any {
		return []any{
			content("model", map[string]any{"functionCall": map[string]any{"id": id, "name": "read_file", "args": map[string]any{"path": "scan/field.go"}}}),
			content("user", map[string]any{"functionResponse": map[string]any{"id": id, "name": "read_file", "response": map[string]any{"content": src}}}),
		}
	}
	tests := []struct {
		name string
		body []byte
		// rule is the rewrite's work the test is about.
		rule rewrite.Rule
	}{
		{"json history", history(msg{"user", "What does field3 do?"}, msg{"assistant", answer}, msg{"user", "And field4?"}), rewrite.RuleUnflatten},
		{"json history with a file re-sent", history(msg{"user", "What does field3 do?\n\n" + fence}, msg{"assistant", answer}, msg{"user", "And now?\n\n" + fence}), rewrite.RuleUnflatten},
		{"labelled transcript with a file re-sent", body(content("user", text("User: What does field3 do?\n\n"+fence+"\nAssistant: "+answer+"\nUser: And now?\n\n"+fence))), rewrite.RuleUnflatten},
		{"file re-sent in text", body(content("user", text("What does field3 do?\n\n"+fence)), content("model", text(answer)), content("user", text("And now?\n\n"+fence))), rewrite.RuleUnchanged},
		{"editor json text", body(content("user", text(editor("What does field3 do?"))), content("model", text(string(reply))), content("user", text(editor("And field4?")))), rewrite.RuleUnchanged},
		{"tool result re-read", body(append(append(append([]any{content("user", text("Read scan/field.go: what does field3 do?"))}, read("call-1")...),
			content("model", text(answer)), content("user", text("Read it again: and field4?"))), read("call-2")...)...), rewrite.RuleUnchanged},
	}
	price := Price{Input: 0.30, CachedInput: 0.03, Output: 2.50}
	served := &servedSet{texts: map[string]bool{answer: true}}
	exchanges := make(chan Exchange, 1)
	f := newFixture(t, emu.URL, Options{
		Rewrite:    RewriteOptions{Enabled: true},
		Prices:     map[string]Price{"gemini-2.5-flash": price},
		Verifier:   func(string) rewrite.Verifier { return served },
		OnExchange: func(e Exchange) { exchanges <- e },
	})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A key of its own: a conversation, and an implicit cache, of
			// its own.
			key := fmt.Sprintf("key-price-%d", i)
			code, got := call(t, emu.URL, "/v1beta/models/gemini-2.5-flash:countTokens", key, string(tt.body))
			var counted struct{ TotalTokens int64 }
			if code != 200 || json.Unmarshal(got, &counted) != nil {
				t.Fatalf("countTokens: status %d: %s", code, got)
			}
			if code, got := call(t, f.front.URL, genURL, key, string(tt.body)); code != 200 {
				t.Fatalf("through the proxy: status %d: %s", code, got)
			}
			e := <-exchanges
			rep, u := e.Report, e.Usage
			if rep == nil || u == nil || e.Ledger == nil {
				t.Fatalf("exchange without a report, usage or ledger: %+v", e)
			}
			did := rep.UnflattenedTurns > 0 && tt.rule == rewrite.RuleUnflatten
			for _, x := range rep.Replacements {
				did = did || x.Rule == tt.rule
			}
			if !did {
				t.Fatalf("the rewrite did no %s: report %+v", tt.rule, rep)
			}
			if u.CachedTokens != 0 || e.Ledger.Turn != 1 {
				t.Fatalf("turn %d with %d cached tokens: the net saving is not the removed tokens at the input price", e.Ledger.Turn, u.CachedTokens)
			}
			est := (e.Ledger.Counterfactual - e.Ledger.Billed) * 1e6 / price.Input
			want := float64(counted.TotalTokens - u.PromptTokens)
			t.Logf("estimated %.0f tokens removed, the emulator counts %d − %d = %.0f (%+.1f%%)", est, counted.TotalTokens, u.PromptTokens, want, 100*(est-want)/want)
			if math.Abs(est-want) > 0.05*want {
				t.Errorf("estimated %.0f tokens removed, the emulator counts %.0f (%+.1f%%)", est, want, 100*(est-want)/want)
			}
		})
	}
}
