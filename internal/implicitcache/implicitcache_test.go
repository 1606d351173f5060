package implicitcache

import "testing"

func TestMin(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  int
	}{
		{"gemini-2.5-flash", 512},
		{"gemini-2.5-flash-preview-09-2025", 512},
		{"gemini-2.5-flash-lite", 2048},
		{"gemini-2.5-pro", 2048},
		{"gemini-2.0-flash", 0},
		{"gemini-1.5-flash", 0},
		{"gemini-3.6-flash", 4096},
		{"some-future-model", 2048},
	} {
		if got := Min(tc.model); got != tc.want {
			t.Errorf("Min(%q) = %d, want %d", tc.model, got, tc.want)
		}
	}
}
