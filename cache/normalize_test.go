package cache

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"a", "a"},
		{"  a  b ", "a b"},
		{"a\r\n\tb", "a b"},
		{"a\u00a0\u3000b", "a b"},
		{"\n\n", ""},
		{"héllo  wörld", "héllo wörld"},
		{"a b", "a b"},
	}
	for _, tt := range tests {
		if got := normalize(tt.in); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := isNormalized(tt.in); got != (tt.in == tt.want) {
			t.Errorf("isNormalized(%q) = %v, want %v", tt.in, got, tt.in == tt.want)
		}
	}
}

func TestCutAt(t *testing.T) {
	s := "ab€cd" // € is three bytes at 2..4
	tests := []struct{ c, want int }{{0, 0}, {2, 2}, {3, 2}, {4, 2}, {5, 5}, {99, len(s)}}
	for _, tt := range tests {
		if got := cutAt(s, tt.c); got != tt.want {
			t.Errorf("cutAt(%q, %d) = %d, want %d", s, tt.c, got, tt.want)
		}
	}
}

func TestQueryCut(t *testing.T) {
	tests := []struct{ q, want int }{{0, 0}, {63, 0}, {64, 64}, {255, 64}, {256, 256}, {5000, 4096}, {1 << 20, 262144}}
	for _, tt := range tests {
		if got := queryCut(tt.q); got != tt.want {
			t.Errorf("queryCut(%d) = %d, want %d", tt.q, got, tt.want)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"", " a  b ", "a\r\nb", "é\u00a0x", "\xff  \xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := normalize(s)
		if normalize(n) != n || !isNormalized(n) {
			t.Errorf("normalize(%q) = %q is not a fixed point", s, n)
		}
		if want := strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " "); utf8.ValidString(s) && n != want {
			t.Errorf("normalize(%q) = %q, want %q", s, n, want)
		}
	})
}
