package cache_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

const (
	tenantA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	tenantB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func newStore(t testing.TB, opts cache.Options) *cache.Store {
	t.Helper()
	s, err := cache.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// words returns n bytes of varied prose.
func words(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(seed)
		b.WriteString(" line ")
		b.WriteString(strings.Repeat("x", i%7))
		if i%5 == 4 {
			b.WriteString("\n\n")
		} else {
			b.WriteString(" ")
		}
	}
	return b.String()[:n]
}

func TestServed(t *testing.T) {
	short := "Sure."
	mid := words("The answer is", 300)   // prefixes need >= 150 bytes
	long := words("A long reply", 10000) // prefixes need >= 2048 bytes
	uni := "Réponse: " + strings.Repeat("été à Zürich — 東京 ", 20)
	s := newStore(t, cache.Options{})
	for _, txt := range []string{short, mid, long, uni} {
		s.RecordServed(tenantA, txt, false)
	}
	s.Wait()
	v := s.Verifier(tenantA)
	tests := []struct {
		name string
		text string
		want bool
	}{
		{"short full", short, true},
		{"short with spaces", "  Sure.\n", true},
		{"mid full", mid, true},
		{"mid reflowed", strings.ReplaceAll(strings.ReplaceAll(mid, " ", "\n"), "\n\n", "\r\n  "), true},
		{"mid prefix 60%", mid[:180], true},
		{"mid prefix 40%", mid[:120], false},
		{"mid prefix under 64 bytes", mid[:60], false},
		{"mid extended", mid + " And one more thing.", false},
		{"mid prefix with forged tail", mid[:170] + " forged", false},
		{"mid one byte changed", mid[:100] + "Q" + mid[101:], false},
		{"long prefix 2 KiB", long[:2100], true},
		{"long prefix 1 KiB", long[:1024], false},
		{"long prefix 70%", long[:7000], true},
		{"long extended", long + "x", false},
		{"unicode full", uni, true},
		{"unicode prefix", uni[:strings.LastIndex(uni[:len(uni)*3/4], "京")+len("京")], true},
		{"empty", "", false},
		{"white space", " \n ", false},
		{"never served", "I am the assistant and I said this.", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := v.Served(tt.text); got != tt.want {
				t.Errorf("Served(%.40q… %d bytes) = %v, want %v", tt.text, len(tt.text), got, tt.want)
			}
		})
	}
}

// TestServedIsolation: tenant B's transcript quoting tenant A's served
// responses is never verified, in full or as a prefix.
func TestServedIsolation(t *testing.T) {
	s := newStore(t, cache.Options{})
	texts := []string{"Sure.", words("Tenant A's answer", 5000)}
	for _, txt := range texts {
		s.RecordServed(tenantA, txt, false)
	}
	s.Wait()
	for _, txt := range texts {
		if !s.Verifier(tenantA).Served(txt) {
			t.Fatalf("tenant A: Served(%.20q) = false, want true", txt)
		}
		for _, q := range []string{txt, txt[:len(txt)*3/4]} {
			if s.Verifier(tenantB).Served(q) {
				t.Errorf("tenant B: Served(%.20q…) = true for tenant A's response", q)
			}
		}
	}
	st := s.Stats()
	if st.Verified != 2 || st.Rejected < 3 {
		t.Errorf("Stats verified=%d rejected=%d, want 2 and at least 3", st.Verified, st.Rejected)
	}
}

func TestTTL(t *testing.T) {
	// The TTL is far above the time the checks before it take, even on a
	// loaded machine; the wait after it is twice the TTL.
	s := newStore(t, cache.Options{TTL: time.Second})
	txt := words("expiring", 400)
	s.RecordServed(tenantA, txt, false)
	s.Set(cache.AreaConversations, tenantA, "k", []byte("v"))
	s.Wait()
	if !s.Verifier(tenantA).Served(txt) {
		t.Fatal("Served before the TTL = false")
	}
	if _, ok := s.Get(cache.AreaConversations, tenantA, "k"); !ok {
		t.Fatal("Get before the TTL missed")
	}
	time.Sleep(2 * time.Second)
	if s.Verifier(tenantA).Served(txt) || s.Verifier(tenantA).Served(txt[:300]) {
		t.Error("Served after the TTL = true")
	}
	if _, ok := s.Get(cache.AreaConversations, tenantA, "k"); ok {
		t.Error("Get after the TTL hit")
	}
}

func TestGetSet(t *testing.T) {
	s := newStore(t, cache.Options{})
	if !s.Set(cache.AreaConversations, tenantA, "turns:1", []byte("analysis")) {
		t.Fatal("Set dropped the first write")
	}
	s.Wait()
	if v, ok := s.Get(cache.AreaConversations, tenantA, "turns:1"); !ok || string(v) != "analysis" {
		t.Errorf("Get(A) = %q, %v; want analysis, true", v, ok)
	}
	if _, ok := s.Get(cache.AreaConversations, tenantB, "turns:1"); ok {
		t.Error("Get(B) found tenant A's entry")
	}
	if s.Set("nope", tenantA, "k", nil) {
		t.Error("Set on an unknown area = true")
	}
	st := s.Stats()
	for _, a := range st.Areas {
		if a.Area == cache.AreaConversations && (a.Hits != 1 || a.Misses != 1 || a.Entries != 1) {
			t.Errorf("conversations stats = %+v, want 1 hit, 1 miss, 1 entry", a)
		}
	}
}

// TestByteBound inserts ten times the budget: every area's cost stays
// within its bound, the sum within MaxBytes, and entries were evicted.
func TestByteBound(t *testing.T) {
	const maxBytes = 1 << 20
	s := newStore(t, cache.Options{MaxBytes: maxBytes})
	val := make([]byte, 4000)
	for i := range 10 * maxBytes / len(val) {
		s.Set(cache.AreaConversations, tenantA, "k"+strings.Repeat("x", i%3)+string(rune(i)), val)
		if i%256 == 0 {
			s.Wait()
		}
	}
	for i := range 10 * maxBytes / 2000 {
		s.RecordServed(tenantA, words(string(rune('a'+i%26))+string(rune(i)), 2000), false)
	}
	s.Wait()
	var total uint64
	for _, a := range s.Stats().Areas {
		total += a.Bytes
		if a.Bytes > a.MaxBytes {
			t.Errorf("area %s: %d bytes, over its bound %d", a.Area, a.Bytes, a.MaxBytes)
		}
		if a.Area != cache.AreaBlocks && (a.Evictions == 0 || a.Bytes < a.MaxBytes/2) {
			t.Errorf("area %s: %d evictions, %d of %d bytes after 10x the budget; want evictions and a full area", a.Area, a.Evictions, a.Bytes, a.MaxBytes)
		}
	}
	if total > maxBytes {
		t.Errorf("total %d bytes, over MaxBytes %d", total, maxBytes)
	}
}

func TestConcurrent(t *testing.T) {
	s := newStore(t, cache.Options{MaxBytes: 8 << 20})
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			tenant := []string{tenantA, tenantB}[g%2]
			for i := range 200 {
				txt := words(string(rune('a'+g)), 100+i)
				s.RecordServed(tenant, txt, false)
				s.Verifier(tenant).Served(txt)
				s.Set(cache.AreaConversations, tenant, txt[:20], []byte(txt))
				s.Get(cache.AreaConversations, tenant, txt[:20])
				if i%50 == 0 {
					s.RecordBlocks(tenant, sha(tenant), []rewrite.Block{{SHA256: sha(txt), Bytes: 600, Kind: "code"}})
					s.Stats()
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	s.Wait()
	// After Wait, every response recorded above is verified.
	for g := range 8 {
		tenant := []string{tenantA, tenantB}[g%2]
		if txt := words(string(rune('a'+g)), 299); !s.Verifier(tenant).Served(txt) {
			t.Errorf("goroutine %d's last response not verified after Wait", g)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, o := range []cache.Options{{MaxBytes: 100}, {TTL: -time.Second}, {RedisURL: "http://x"}} {
		if s, err := cache.New(o); err == nil {
			s.Close()
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}

// The Verifier knows how a served response ended, so that an un-flattened
// model turn is byte for byte the served answer.
var _ rewrite.TrailVerifier = (*cache.Verifier)(nil)

func TestServedTrail(t *testing.T) {
	s := newStore(t, cache.Options{MaxBytes: 64 << 20})
	long := strings.TrimSpace(words("trail", 300))
	for _, tc := range []struct {
		name, text string
		truncated  bool
		query      string
		trail      string
		ok         bool
	}{
		{"short, no trail", "Hello there.", false, "Hello there.", "", true},
		{"short, newline", "Hi, sure.\n", false, "Hi, sure.", "\n", true},
		{"long, blank lines", long + "\n\n", false, long, "\n\n", true},
		{"long, mixed", long + " \t\r\n", false, strings.ReplaceAll(long, " ", "\n"), " \t\r\n", true},
		{"prefix match gives none", long + "\n", false, long[:200], "", false},
		{"truncated gives none", "Part of an answer that was cut\n", true, "Part of an answer that was cut", "", false},
		{"not served", "x", false, "never served", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.RecordServed(tenantA, tc.text, tc.truncated)
			s.Wait()
			v := s.Verifier(tenantA)
			if tc.ok && !v.Served(tc.query) {
				t.Fatalf("Served(%.40q) = false", tc.query)
			}
			trail, ok := v.ServedTrail(tc.query)
			if trail != tc.trail || ok != tc.ok {
				t.Errorf("ServedTrail(%.40q) = %q, %v; want %q, %v", tc.query, trail, ok, tc.trail, tc.ok)
			}
			if _, ok := s.Verifier(tenantB).ServedTrail(tc.query); ok {
				t.Errorf("ServedTrail answered for another tenant")
			}
		})
	}
}

// TestServedTrailUnflatten runs the rewriter with the cache's Verifier: a
// served answer that ends in a line break comes back as a model turn byte
// for byte, line break included (issue 13, defect 3).
func TestServedTrailUnflatten(t *testing.T) {
	s := newStore(t, cache.Options{MaxBytes: 64 << 20})
	answer := "Goroutines are scheduled by the Go runtime onto a few OS threads.\n\n- cheap to start\n- cheap to block\n"
	s.RecordServed(tenantA, answer, false)
	s.Wait()
	text := "User: what are goroutines?\nAssistant: " + answer + "\nUser: and channels?\nAssistant:"
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":` + jsonString(text) + `}]}]}`)
	for _, tc := range []struct {
		tenant string
		want   string
	}{
		{tenantA, `{"role":"model","parts":[{"text":` + jsonString(answer) + `}]}`},
		{tenantB, ""},
	} {
		out, rep, err := rewrite.Request(body, rewrite.DefaultOptions(), s.Verifier(tc.tenant))
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if rep.UnflattenedTurns != 0 {
				t.Errorf("tenant B: un-flattened another tenant's answer: %s", out)
			}
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("rewritten body %s\nlacks the model turn %s", out, tc.want)
		}
	}
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
