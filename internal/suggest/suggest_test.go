package suggest

import "testing"

func TestNearest(t *testing.T) {
	flags := []string{"config", "listen", "admin-listen", "upstream", "record"}
	tests := []struct {
		name string
		want string
	}{
		{"lisen", "listen"},
		{"listne", "listen"}, // a transposition is two edits; six letters allow two
		{"upstrem", "upstream"},
		{"admin-lisen", "admin-listen"},
		{"confg", "config"},
		{"frobnicate", ""},
		{"x", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Nearest(tt.name, flags); got != tt.want {
			t.Errorf("Nearest(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "", 3},
		{"", "abc", 3},
		{"kitten", "sitting", 3},
		{"flaw", "lawn", 2},
		{"größe", "grösse", 2},
	}
	for _, tt := range tests {
		if got := distance(tt.a, tt.b); got != tt.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
