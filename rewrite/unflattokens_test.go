package rewrite

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
)

// testTokens is a tokenizer model for the tests of Options.CountTokens: a
// run of letters is one token, any other byte but a space one token.
func testTokens(s string) int {
	n, word := 0, false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r):
			if !word {
				n++
			}
		case r != ' ':
			n++
		}
		word = unicode.IsLetter(r)
	}
	return n
}

// checkUnflattenedTokens rewrites body with Options.CountTokens and checks
// that the output is the same as without it (out) and that
// Report.UnflattenedTokens is the count of the request's last text minus
// the counts of the texts of the contents made of it.
func checkUnflattenedTokens(t *testing.T, body, out []byte, v Verifier) {
	t.Helper()
	opts := DefaultOptions()
	calls := 0
	opts.CountTokens = func(s string) int { calls++; return testTokens(s) }
	got, rep, err := Request(body, opts, v)
	if err != nil {
		t.Fatalf("Request with CountTokens: %v", err)
	}
	if !bytes.Equal(got, out) {
		t.Fatalf("CountTokens changed the output:\nwithout: %s\nwith:    %s", out, got)
	}
	var in, sent wireRequest
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &sent); err != nil {
		t.Fatal(err)
	}
	last := len(in.Contents) - 1
	text, _ := wireText(in.Contents[last].Parts[0])
	want := testTokens(text)
	for _, c := range sent.Contents[last:] {
		for _, p := range c.Parts {
			if s, ok := wireText(p); ok {
				want -= testTokens(s)
			}
		}
	}
	if len(rep.Replacements) == 0 && rep.UnflattenedTokens != want {
		t.Errorf("UnflattenedTokens = %d, want %d", rep.UnflattenedTokens, want)
	}
	if calls != rep.UnflattenedTurns+2 {
		t.Errorf("CountTokens called %d times for %d turns made, want once for the text and once per turn", calls, rep.UnflattenedTurns+1)
	}
}

func TestUnflattenedTokens(t *testing.T) {
	doc := "func main() {\n\tfmt.Println(\"hi\")\n}\n"
	tests := []struct {
		name string
		text string
		v    servedSet
	}{
		{"labelled transcript", "User: hi\nAssistant: " + hello + "\nUser: more", servedSet{hello}},
		{"chinese labels", "用户：你好\n助手：你好！有什么可以帮你的吗？\n用户：谢谢", servedSet{"你好！有什么可以帮你的吗？"}},
		{"json history", `[{"role":"user","content":"hi"},{"role":"assistant","content":` + jq(hello) + `},{"role":"user","content":"more"}]`, servedSet{hello}},
		{"json history with escapes", "Conversation so far:\n" + `[{"role":"user","content":` + jq("Look:\n"+doc) + `},{"role":"assistant","content":` + jq(hello) + `},{"role":"user","content":` + jq("And \"this\"?\n"+doc) + `}]`, servedSet{hello}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": tt.text}}}}})
			out, rep, err := Request(body, DefaultOptions(), tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if rep.UnflattenedTurns == 0 {
				t.Fatalf("not un-flattened: %s", out)
			}
			if rep.UnflattenedTokens != 0 {
				t.Errorf("UnflattenedTokens = %d without CountTokens, want 0", rep.UnflattenedTokens)
			}
			checkUnflattenedTokens(t, body, out, tt.v)
		})
	}
	// A request that is not un-flattened never calls CountTokens.
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"` + strings.Repeat("plain prose ", 100) + `"}]}]}`)
	opts := DefaultOptions()
	opts.CountTokens = func(string) int { t.Error("CountTokens called on a request that is not un-flattened"); return 0 }
	if _, rep, err := Request(body, opts, servedSet{hello}); err != nil || rep.UnflattenedTokens != 0 {
		t.Errorf("Request = %v, UnflattenedTokens %d", err, rep.UnflattenedTokens)
	}
}
