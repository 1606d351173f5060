package contextcache

import (
	"math"
	"testing"
	"time"
)

var flash = Price{Input: 0.30, CachedInput: 0.03, Storage: 1.00}

func TestPays(t *testing.T) {
	// Break-even reuses for 2.5 Flash: (input + storage × TTL_h) / (input − cached).
	// 5 min: (0.30 + 1/12) / 0.27 = 1.42; 1 h: 1.30 / 0.27 = 4.81.
	for _, tc := range []struct {
		name   string
		p      Price
		tokens float64
		reuses float64
		ttl    time.Duration
		want   bool
	}{
		{"flash 5m 2 reuses", flash, 10000, 2, 5 * time.Minute, true},
		{"flash 5m 1 reuse", flash, 10000, 1, 5 * time.Minute, false},
		{"flash 5m 1.4 reuses", flash, 10000, 1.4, 5 * time.Minute, false},
		{"flash 5m 1.5 reuses", flash, 10000, 1.5, 5 * time.Minute, true},
		{"flash 1h 4 reuses", flash, 10000, 4, time.Hour, false},
		{"flash 1h 5 reuses", flash, 10000, 5, time.Hour, true},
		{"pro 1h 4 reuses", Price{Input: 1.25, CachedInput: 0.125, Storage: 4.50}, 10000, 4, time.Hour, false},
		{"pro 1h 6 reuses", Price{Input: 1.25, CachedInput: 0.125, Storage: 4.50}, 10000, 6, time.Hour, true},
		{"3.7 flash 5m 2 reuses", Price{Input: 0.75, CachedInput: 0.075, Storage: 0.50}, 10000, 2, 5 * time.Minute, true},
		{"no storage price", Price{Input: 0.30, CachedInput: 0.03}, 10000, 100, 5 * time.Minute, false},
		{"cached not cheaper", Price{Input: 0.30, CachedInput: 0.30, Storage: 1}, 10000, 100, 5 * time.Minute, false},
		{"no reuse", flash, 1e6, 0, 5 * time.Minute, false},
	} {
		if got := tc.p.Pays(tc.tokens, tc.reuses, tc.ttl); got != tc.want {
			t.Errorf("%s: Pays = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNet checks the refinements of the inequality: tokens a live cache
// already covers and tokens implicit caching already bills at the cached
// rate are not gains.
func TestNet(t *testing.T) {
	base := estimate{tokens: 10000, reuses: 3, ttl: 5 * time.Minute}
	want := (3*10000*0.27 - 10000*0.30 - 10000*1.0/12) / 1e6
	if got := flash.net(base); math.Abs(got-want) > 1e-12 {
		t.Errorf("net = %v, want %v", got, want)
	}
	covered := base
	covered.covered = 9000
	if flash.net(covered) > 0 {
		t.Error("a cache adding 1000 tokens to a 9000-token live cache pays with 3 reuses")
	}
	implicit := base
	implicit.share = 1
	if flash.net(implicit) > 0 {
		t.Error("a prefix implicit caching already covers pays")
	}
}

func TestKeeps(t *testing.T) {
	// Storage 1.00/h against 0.27 saved per use: 3.7 uses an hour break even.
	for _, tc := range []struct {
		rate, share float64
		want        bool
	}{{4, 0, true}, {3, 0, false}, {40, 0.95, false}, {0, 0, false}} {
		if got := flash.keeps(tc.rate, tc.share); got != tc.want {
			t.Errorf("keeps(%v, %v) = %v, want %v", tc.rate, tc.share, got, tc.want)
		}
	}
}

func TestExpectedReuses(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ttl := 5 * time.Minute
	for _, tc := range []struct {
		name string
		n    int
		gap  time.Duration
		want float64
	}{
		{"one sighting", 1, 0, 0},
		{"burst of two", 2, 0, 1},                       // capped by n−1
		{"three a minute apart", 3, 2 * time.Minute, 2}, // rate 1/min × 5 = 5, capped at 2
		{"ten a minute apart", 10, 9 * time.Minute, 5},
		{"three an hour apart", 3, 2 * time.Hour, 2.0 / 7200 * 300},
	} {
		got := ExpectedReuses(tc.n, t0, t0.Add(tc.gap), ttl)
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: ExpectedReuses = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMinTokens(t *testing.T) {
	m, err := New(Options{Transport: nopTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]int{"gemini-2.5-flash": 2048, "gemini-2.5-pro": 2048, "gemini-3.7-flash": 4096, "gemini-3.1-pro-preview": 4096} {
		if got := m.minTokens(model); got != want {
			t.Errorf("minTokens(%s) = %d, want %d", model, got, want)
		}
	}
	m, _ = New(Options{Transport: nopTransport{}, MinTokens: map[string]int{"gemini-2.5-flash": 1024}, DefaultMinTokens: 32768})
	if m.minTokens("gemini-2.5-flash") != 1024 || m.minTokens("gemini-2.5-pro") != 32768 {
		t.Errorf("configured minimums not used: %d %d", m.minTokens("gemini-2.5-flash"), m.minTokens("gemini-2.5-pro"))
	}
}
