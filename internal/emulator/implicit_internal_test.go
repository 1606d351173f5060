package emulator

import (
	"strings"
	"testing"
)

func TestRunStart(t *testing.T) {
	texts := []string{
		"The quick brown fox's tail, 1234 times!!  \n\tdone",
		"don't stop—über naïve 中文字 emoji 🙂 x_y z'",
		"func F3() int { return 3 }\n// comment ...\n",
		"   leading spaces and trailing   ",
		"a'b 'c d'",
	}
	for _, text := range texts {
		prev := 0
		for pos := 0; pos < len(text); pos++ {
			k := runStart(text, pos)
			if k > pos || k < prev {
				t.Fatalf("runStart(%q, %d) = %d, want in [%d, %d]", text, pos, k, prev, pos)
			}
			prev = k
			if got, want := CountTokens(text[:k])+CountTokens(text[k:]), CountTokens(text); got != want {
				t.Errorf("runStart(%q, %d) = %d is not a run boundary: %d + %d tokens, whole %d", text, pos, k, CountTokens(text[:k]), CountTokens(text[k:]), want)
			}
		}
	}
	tests := []struct {
		text string
		pos  int
		want int
	}{
		{"hello world", 3, 0},
		{"hello world", 5, 5},
		{"hello world", 7, 6},
		{"ab12", 3, 3},
		{"x == y", 3, 2},
	}
	for _, tt := range tests {
		if got := runStart(tt.text, tt.pos); got != tt.want {
			t.Errorf("runStart(%q, %d) = %d, want %d", tt.text, tt.pos, got, tt.want)
		}
	}
}

func TestSharedTokens(t *testing.T) {
	doc := strings.Repeat("word ", 10)
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "xyz", 0},
		{doc + "alpha", doc + "beta", CountTokens(doc)},
		{doc + "alpha", doc + "alphabet", CountTokens(doc)},
		{doc, doc, CountTokens(doc)},
		{doc, doc + "more", CountTokens(strings.TrimSuffix(doc, " "))},
	}
	for _, tt := range tests {
		if got := sharedTokens(tt.a, tt.b); got != tt.want {
			t.Errorf("sharedTokens(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
