package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// resentFile is a request that re-sends one file: the real rewriter
// replaces the second copy by a reference.
func resentFile(t *testing.T) []byte {
	t.Helper()
	var b strings.Builder
	for i := range 40 {
		b.WriteString("func handler" + strings.Repeat("x", i%7) + "() { return SECRETFILE }\n")
	}
	file := "```go a.go\n" + b.String() + "```\n"
	body, err := json.Marshal(map[string]any{"contents": []any{
		map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Here is a.go:\n" + file + "Review it."}}},
		map[string]any{"role": "model", "parts": []any{map[string]any{"text": "It looks fine."}}},
		map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Again:\n" + file + "Any bug?"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestRewriteAudit checks the audit between the rewriter and the
// upstream: a rewrite that passes goes out rewritten; one that fails (an
// audit injected to fail) sends the original bytes, counts the reason,
// says so in the report header and the access log, and logs the reason at
// Warn without content. Dry-run mode audits too.
func TestRewriteAudit(t *testing.T) {
	body := resentFile(t)
	failing := func([]byte, []byte, *rewrite.Report) error {
		return &rewrite.AuditError{Reason: rewrite.AuditTargetMissing, Replacement: 0, Detail: "injected"}
	}
	tests := []struct {
		name     string
		audit    auditFunc // nil: rewrite.Audit
		mode     string
		rewrote  bool
		fails    float64
		outcome  string
		inHeader string
	}{
		{"real audit passes", nil, "", true, 0, metrics.OutcomeChanged, "; unchanged=1"},
		{"failed audit forwards the original", failing, "", false, 1, metrics.OutcomeError, "; audit_failed=target_missing"},
		{"dry-run audits too", failing, "dry-run", false, 1, metrics.OutcomeError, "; audit_failed=target_missing; mode=dry-run"},
		{"audit panic fails closed", func([]byte, []byte, *rewrite.Report) error { panic("audit exploded") }, "", false, 1, metrics.OutcomeError, "; audit_failed=structure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
			f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
			var calls atomic.Int32
			audit := tt.audit
			if audit == nil {
				audit = rewrite.Audit
			}
			f.h.auditFn = func(orig, out []byte, rep *rewrite.Report) error {
				calls.Add(1)
				return audit(orig, out, rep)
			}
			req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(string(body)))
			if tt.mode != "" {
				req.Header.Set(HeaderRewrite, tt.mode)
			}
			res, _ := do(t, rawClient(), req)
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			in := be.last(t)
			if got := string(in.Body) != string(body); got != tt.rewrote {
				t.Errorf("upstream body rewritten = %v, want %v", got, tt.rewrote)
			}
			if !tt.rewrote && (string(in.Body) != string(body) || in.ContentLength != int64(len(body))) {
				t.Errorf("upstream did not get the original bytes")
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("audit called %d times, want 1", n)
			}
			if h := res.Header.Get(HeaderReport); !strings.HasSuffix(h, tt.inHeader) {
				t.Errorf("%s = %q, want it to end in %q", HeaderReport, h, tt.inHeader)
			}
			waitFor(t, "rewrite metric", func() bool {
				mode := metrics.ModeOn
				if tt.mode != "" {
					mode = metrics.ModeDryRun
				}
				return testutil.ToFloat64(f.m.RewriteRequests.WithLabelValues(mode, tt.outcome)) == 1
			})
			reason := string(rewrite.AuditTargetMissing)
			if strings.Contains(tt.name, "panic") {
				reason = string(rewrite.AuditStructure)
			}
			if got := testutil.ToFloat64(f.m.RewriteAuditFails.WithLabelValues(reason)); got != tt.fails {
				t.Errorf("rewrite_audit_failures_total{reason=%s} = %v, want %v", reason, got, tt.fails)
			}
			logs := f.logs.String()
			if tt.fails > 0 {
				if !strings.Contains(logs, "level=WARN msg=\"rewrite audit failed\" reason="+reason) {
					t.Errorf("no warning with the reason in the log:\n%s", logs)
				}
				waitFor(t, "the access log", func() bool {
					return strings.Contains(f.logs.String(), `rewrite_error="audit failed: `+reason+`"`)
				})
			}
			if strings.Contains(f.logs.String(), "SECRETFILE") {
				t.Errorf("log leaks the prompt:\n%s", f.logs.String())
			}
			if testutil.ToFloat64(f.m.RewriteErrors) != 0 {
				t.Errorf("an audit failure counted as a rewrite error")
			}
		})
	}
}
