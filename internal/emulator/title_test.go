package emulator

import "testing"

func TestTitleASCII(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"gemini 2.5 flash", "Gemini 2.5 Flash"},
		{"text embedding 004", "Text Embedding 004"},
		{"gemini  2.0 flash lite", "Gemini  2.0 Flash Lite"},
		{"", ""},
	} {
		if got := titleASCII(tt.in); got != tt.want {
			t.Errorf("titleASCII(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
