package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

func TestParseStat(t *testing.T) {
	// Field 2 holds spaces and a parenthesis; utime=150, stime=50 ticks.
	line := "4242 (gemini (x) proxy) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 8 0 100 0 0"
	got, err := parseStat(line)
	if err != nil || got != 2.0 {
		t.Errorf("parseStat(%q) = %v, %v, want 2, nil", line, got, err)
	}
	if _, err := parseStat("garbage"); err == nil {
		t.Errorf("parseStat(garbage) succeeded")
	}
	rss, hwm := parseStatus("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n")
	if rss != 1<<20 || hwm != 2<<20 {
		t.Errorf("parseStatus = %d, %d, want %d, %d", rss, hwm, 1<<20, 2<<20)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := percentile(ds, c.q); got != c.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestParseReport(t *testing.T) {
	for _, c := range []struct {
		h                string
		before, after    int
		rules, ok        bool
		unflattenedTurns int
	}{
		{"bytes=100->40; unchanged=2", 100, 40, true, true, 0},
		{"bytes=100->100", 100, 100, false, true, 0},
		{"bytes=90->80; unchanged=1; unflatten=3; fallback", 90, 80, true, true, 3},
		{"", 0, 0, false, false, 0},
	} {
		b, a, r, ok := parseReport(c.h)
		if b != c.before || a != c.after || r != c.rules || ok != c.ok || unflattened(c.h) != c.unflattenedTurns {
			t.Errorf("parseReport(%q) = %d, %d, %v, %v (unflatten %d)", c.h, b, a, r, ok, unflattened(c.h))
		}
	}
}

// The ideal client's reference for a re-sent file must be what the rewrite
// engine writes for the same request, byte for byte.
func TestIdealMatchesRewrite(t *testing.T) {
	needCorpus(t)
	s := askSession()
	turn := s.Turns[2]
	body := mustJSON(map[string]any{"contents": turn.Naive})
	out, _, err := rewrite.Request(body, rewrite.DefaultOptions(), nil)
	if err != nil {
		t.Fatalf("rewrite.Request: %v", err)
	}
	want := string(mustJSON(map[string]any{"contents": turn.Ideal}))
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("ideal request differs from the proxy's rewrite (-ideal +proxy):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	good := SessionResult{Name: "a", Kind: KindDedup, Requests: 2, Naive: Tokens{Prompt: 10000}, Proxy: Tokens{Prompt: 1000}, Ideal: Tokens{Prompt: 1000}, AnswersMatch: true}
	ctl := SessionResult{Name: "c", Kind: KindControl, Requests: 1, Naive: Tokens{Prompt: 10, Bytes: 50}, Proxy: Tokens{Prompt: 10, Bytes: 50}, Ideal: Tokens{Prompt: 10}, AnswersMatch: true}
	flat := SessionResult{Name: "f", Kind: KindFlattened, Requests: 4, Naive: Tokens{Prompt: 1000}, Proxy: Tokens{Prompt: 705}, Ideal: Tokens{Prompt: 700}, Unflattened: 6, AnswersMatch: true}
	two := SessionResult{Name: "t", Kind: KindTwoDoc, Requests: 4, Naive: Tokens{Prompt: 1000}, Proxy: Tokens{Prompt: 610}, Ideal: Tokens{Prompt: 600}, AnswersMatch: true}
	mk := func(rs ...SessionResult) *Savings {
		s := &Savings{Sessions: rs, Total: SessionResult{AnswersMatch: true}, ByKind: map[Kind]SessionResult{}}
		for _, r := range rs {
			addResult(&s.Total, r)
		}
		return s
	}
	if err := Check(mk(good, ctl, flat, two), true); err != nil {
		t.Errorf("Check(good) = %v, want nil", err)
	}
	changed := ctl
	changed.Changed, changed.Proxy.Bytes = 1, 40
	short := good
	short.Proxy.Prompt = 3000 // 7/9 of the ideal savings
	flatShort := flat
	flatShort.Proxy.Prompt = 740 // 26/30 of the ideal savings
	flatNone := flat
	flatNone.Unflattened = 0
	twoShort := two
	twoShort.Proxy.Prompt = 650 // 35/40
	twoLost := two
	twoLost.Proxy.Prompt = 590 // below the ideal client: a document lost
	audited := good
	audited.AuditFailures = 1
	for name, s := range map[string]*Savings{
		"control changed":                 mk(good, changed),
		"below ideal share":               mk(short, ctl),
		"flattened session below share":   mk(good, flatShort),
		"flattened session not unflat":    mk(good, flatNone),
		"two-doc session below share":     mk(good, twoShort),
		"two-doc session below the ideal": mk(good, twoLost),
		"audit failure in a session":      mk(audited, ctl),
	} {
		if err := Check(s, true); err == nil {
			t.Errorf("Check(%s) = nil, want an error", name)
		}
	}
	// A failure counted by the proxy outside any session's replay.
	s := mk(good, ctl)
	s.Audit = AuditCount{Measured: true, Exported: true, Failures: 2, ByReason: map[string]int{"hash_mismatch": 2}}
	if err := Check(s, true); err == nil || !strings.Contains(err.Error(), "hash_mismatch=2") {
		t.Errorf("Check(audit failures) = %v, want an error naming the reason", err)
	}
}

// A pending session's misses do not fail Check but are listed; once it
// meets its targets, Check fails until its entry is removed.
func TestCheckPending(t *testing.T) {
	defer func(p map[string]string) { pending = p }(pending)
	pending = map[string]string{"t": "defect 1"}
	good := SessionResult{Name: "a", Kind: KindDedup, Requests: 2, Naive: Tokens{Prompt: 10000}, Proxy: Tokens{Prompt: 1000}, Ideal: Tokens{Prompt: 1000}, AnswersMatch: true}
	lost := SessionResult{Name: "t", Kind: KindTwoDoc, Requests: 4, Naive: Tokens{Prompt: 1000}, Proxy: Tokens{Prompt: 400}, Ideal: Tokens{Prompt: 600}, AuditFailures: 3, AnswersMatch: true}
	s := &Savings{Sessions: []SessionResult{good, lost}, Total: SessionResult{AnswersMatch: true}}
	addResult(&s.Total, good)
	addResult(&s.Total, lost)
	s.Audit = AuditCount{Measured: true, Exported: true, Failures: 3}
	if err := Check(s, true); err != nil {
		t.Errorf("Check(pending miss) = %v, want nil", err)
	}
	m := PendingMisses(s, true)
	if len(m) != 2 || !strings.Contains(strings.Join(m, "\n"), "defect 1") {
		t.Errorf("PendingMisses = %q, want the audit and the loss, naming the defect", m)
	}
	var b strings.Builder
	WritePending(&b, s, true)
	if !strings.Contains(b.String(), "t (defect 1)") {
		t.Errorf("WritePending:\n%s", b.String())
	}
	fixed := lost
	fixed.Proxy.Prompt, fixed.AuditFailures = 600, 0
	s.Sessions[1], s.Audit.Failures = fixed, 0
	if err := Check(s, true); err == nil || !strings.Contains(err.Error(), "remove it from the pending list") {
		t.Errorf("Check(pending session that meets its targets) = %v, want an error", err)
	}
}

func TestParseAudit(t *testing.T) {
	text := `# HELP gemini_proxy_rewrite_audit_failures_total Rewritten bodies that failed the audit.
# TYPE gemini_proxy_rewrite_audit_failures_total counter
gemini_proxy_rewrite_audit_failures_total{reason="hash_mismatch"} 2
gemini_proxy_rewrite_audit_failures_total{reason="text_mismatch"} 1
gemini_proxy_rewrite_audit_failures_total_other 7
gemini_proxy_requests_total{route="generate"} 40
`
	got, exported, err := parseAudit(strings.NewReader(text))
	if err != nil || !exported || got["hash_mismatch"] != 2 || got["text_mismatch"] != 1 || len(got) != 2 {
		t.Errorf("parseAudit = %v, %v, %v", got, exported, err)
	}
	got, exported, err = parseAudit(strings.NewReader("gemini_proxy_requests_total 3\n"))
	if err != nil || exported || len(got) != 0 {
		t.Errorf("parseAudit(absent) = %v, %v, %v, want nothing exported", got, exported, err)
	}
	if _, _, err := parseAudit(strings.NewReader(AuditMetric + "{reason=\"x\"} many\n")); err == nil {
		t.Errorf("parseAudit(bad value) succeeded")
	}
	n, d := auditDelta(map[string]int{"a": 1, "b": 2}, map[string]int{"a": 1, "b": 5, "c": 1})
	if n != 4 || d["b"] != 3 || d["c"] != 1 || len(d) != 2 {
		t.Errorf("auditDelta = %d, %v", n, d)
	}
}

func TestReplay(t *testing.T) {
	needCorpus(t)
	s := askSession()
	var rec strings.Builder
	for _, turn := range s.Turns[:3] {
		rec.WriteString(string(mustJSON(Record{Path: "/v1beta/models/gemini-2.5-flash:generateContent", Body: mustJSON(map[string]any{"contents": turn.Naive})})) + "\n")
	}
	rec.WriteString(`{"path":"/v1beta/models/custom-model:streamGenerateContent?alt=sse","body":{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}}` + "\n")
	models, total, err := Replay(strings.NewReader(rec.String()), rewrite.DefaultOptions(), nil)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if len(models) != 2 || total.Requests != 4 || total.Rewritten != 2 || total.Uncounted != 0 {
		t.Fatalf("Replay = %+v, total %+v; want 2 models, 4 requests, 2 rewritten, all counted", models, total)
	}
	if total.TokensAfter >= total.TokensBefore || models[1].Saved() <= 0.3 {
		t.Errorf("Replay saved %d -> %d tokens (gemini-2.5-flash %.2f), want a saving", total.TokensBefore, total.TokensAfter, models[1].Saved())
	}
}
