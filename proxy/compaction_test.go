package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// TestCacheAwareCompaction runs a conversation of three requests through
// the proxy: each user turn re-sends a small file and a large one after
// it, and the third edits the small one. Compaction would supersede the
// small file's copy in the first turn, which the previous request sent,
// and break the implicit-cache prefix from there: most of the prompt, for
// a small saving. With LedgerOptions.WeighCompaction the proxy passes the
// rewrite what the previous request sent (rewrite.Options.Sent), the
// rewrite keeps the prefix, the report header says so and the metric
// counts it, and no prefix change is counted; without, the first turn's
// copy is superseded and the prefix change is counted. The rewrite
// metrics, the audit and the ledger see the request as any other.
func TestCacheAwareCompaction(t *testing.T) {
	small := func(v int) string {
		var b strings.Builder
		for i := range 60 {
			fmt.Fprintf(&b, "func small%d() int { return %d }\n", i, i+v)
		}
		return "```go small.go\n" + b.String() + "```\n"
	}
	var big strings.Builder
	big.WriteString("```go big.go\n")
	for i := range 900 {
		fmt.Fprintf(&big, "func big%d(x int) int { return x * %d }\n", i, i)
	}
	big.WriteString("```\n")
	turn := func(v int, q string) string { return "Files:\n\n" + small(v) + "\n" + big.String() + "\n" + q }
	bodies := [][]byte{
		ledgerBody(t, "", []string{turn(0, "What does small0 return?")}),
		ledgerBody(t, "", []string{turn(0, "What does small0 return?")}, []string{"It returns 0."}, []string{turn(0, "And big1?")}),
		ledgerBody(t, "", []string{turn(0, "What does small0 return?")}, []string{"It returns 0."}, []string{turn(0, "And big1?")}, []string{"It doubles x."}, []string{turn(1, "I edited small.go. What does small0 return now?")}),
	}
	for _, weigh := range []bool{true, false} {
		t.Run(fmt.Sprintf("weigh=%v", weigh), func(t *testing.T) {
			var mu sync.Mutex
			var received []string
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				received = append(received, string(b))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]}}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":1}}`, len(b)/4)
			})
			done := make(chan struct{}, 4)
			f := newFixture(t, be.URL, Options{
				Rewrite:    RewriteOptions{Enabled: true},
				Prices:     map[string]Price{"gemini-2.5-flash": {Input: 0.30, CachedInput: 0.03, Output: 2.50}},
				Ledger:     LedgerOptions{WeighCompaction: weigh},
				OnExchange: func(Exchange) { done <- struct{}{} },
			})
			var reports []string
			for _, body := range bodies {
				req, _ := http.NewRequest("POST", f.front.URL+genURL, strings.NewReader(string(body)))
				req.Header.Set("X-Goog-Api-Key", keyA)
				res, _ := do(t, rawClient(), req)
				if res.StatusCode != 200 {
					t.Fatalf("status %d", res.StatusCode)
				}
				reports = append(reports, res.Header.Get("X-Gemini-Proxy-Report"))
				<-done
			}
			last := received[len(received)-1]
			kept := testutil.ToFloat64(f.m.CompactionDecisions.WithLabelValues(metrics.CompactionKeepsPrefix))
			changes := testutil.ToFloat64(f.m.PrefixChanges.WithLabelValues(metrics.PrefixChangeRewrite))
			if weigh {
				if !strings.Contains(reports[2], "compaction=keeps_prefix") || strings.Contains(last, "[superseded:") || kept != 1 || changes != 0 {
					t.Errorf("report %q, superseded sent %v, compaction_decisions_total{keeps_prefix} %v, prefix changes %v: want the prefix kept", reports[2], strings.Contains(last, "[superseded:"), kept, changes)
				}
				// The sent prefix is what the second request sent.
				prevSent := received[1]
				cut := strings.Index(prevSent, `]}`) // the end of the first content's parts
				if cut < 0 || !strings.HasPrefix(last, prevSent[:cut]) {
					t.Error("the third request does not start with what the second sent")
				}
			} else if strings.Contains(reports[2], "compaction=") || !strings.Contains(last, "[superseded:") || kept != 0 || changes != 1 {
				t.Errorf("report %q, superseded sent %v, kept %v, prefix changes %v: want compaction as before", reports[2], strings.Contains(last, "[superseded:"), kept, changes)
			}
			for _, r := range rewrite.AuditReasons {
				if got := testutil.ToFloat64(f.m.RewriteAuditFails.WithLabelValues(string(r))); got != 0 {
					t.Errorf("audit failures (%s) %v", r, got)
				}
			}
		})
	}
}

// TestCompactionReasonsMatch keeps the label values of
// gemini_proxy_compaction_decisions_total equal to the rewrite's reasons.
func TestCompactionReasonsMatch(t *testing.T) {
	var got []string
	for _, r := range rewrite.CompactionReasons {
		got = append(got, string(r))
	}
	if strings.Join(got, ",") != strings.Join(metrics.CompactionReasons, ",") {
		t.Errorf("rewrite.CompactionReasons %q, metrics.CompactionReasons %q", got, metrics.CompactionReasons)
	}
}
