package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// budgetStream is an SSE answer whose middle event carries a 3 MiB image:
// a tap within a smaller memory budget must skip that event.
func budgetStream() []byte {
	ev := func(text string, usage bool) string {
		s := `data: {"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"},"index":0}]`
		if usage {
			s += `,"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":7,"totalTokenCount":12},"modelVersion":"gemini-2.5-flash"`
		}
		return s + "}\r\n\r\n"
	}
	image := `data: {"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + strings.Repeat("A", 3<<20) + `"}}],"role":"model"},"index":0}]}` + "\r\n\r\n"
	return []byte(ev("start ", false) + image + ev("end", true))
}

// TestMemoryBudgetTapSkipsEvent: with a process-wide budget smaller than
// one event, the tap skips that event (its text is marked truncated) while
// the client still gets every byte and the usage is still read; the budget
// is back to zero once the response is over, also after a response cut
// short in the middle of a large event. Without a budget the same stream
// is read whole.
func TestMemoryBudgetTapSkipsEvent(t *testing.T) {
	stream := budgetStream()
	for _, tc := range []struct {
		name          string
		budget        int64
		wantTruncated bool
	}{
		{"no budget", 0, false},
		{"budget of 1 MiB", 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Write(stream)
			})
			var mu sync.Mutex
			var exs []Exchange
			f := newFixture(t, be.URL, Options{MemoryBudgetBytes: tc.budget, OnExchange: func(e Exchange) {
				mu.Lock()
				exs = append(exs, e)
				mu.Unlock()
			}})
			req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", strings.NewReader(`{}`))
			_, body := do(t, rawClient(), req)
			if !bytes.Equal(body, stream) {
				t.Fatalf("client got %d bytes, want the %d sent", len(body), len(stream))
			}
			waitFor(t, "exchange", func() bool { mu.Lock(); defer mu.Unlock(); return len(exs) == 1 })
			ex := exs[0]
			if ex.Usage == nil || ex.Usage.TotalTokens != 12 {
				t.Errorf("usage %+v, want the last event's", ex.Usage)
			}
			if ex.TextTruncated != tc.wantTruncated || !strings.HasPrefix(ex.Text, "start ") {
				t.Errorf("text of %d bytes, truncated %v; want truncated %v", len(ex.Text), ex.TextTruncated, tc.wantTruncated)
			}
			if !tc.wantTruncated && ex.Text != "start end" {
				t.Errorf("text %q, want the whole answer", ex.Text)
			}
			refused := testutil.ToFloat64(f.m.MemoryBudgetRefusals.WithLabelValues(metrics.BudgetTap))
			if (refused > 0) != tc.wantTruncated {
				t.Errorf("memory_budget_refusals_total{consumer=tap} = %v", refused)
			}
			if got := f.h.budget.usedBytes(); got != 0 {
				t.Errorf("budget holds %d bytes after the response", got)
			}
		})
	}
	t.Run("cut in a large event", func(t *testing.T) {
		be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(stream[:len(stream)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})
		f := newFixture(t, be.URL, Options{MemoryBudgetBytes: 64 << 20})
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", strings.NewReader(`{}`))
		res, err := rawClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		waitFor(t, "abort counted", func() bool {
			return testutil.ToFloat64(f.m.UpstreamErrors.WithLabelValues(metrics.UpstreamAborted)) == 1
		})
		if got := f.h.budget.usedBytes(); got != 0 {
			t.Errorf("budget holds %d bytes after a cut response", got)
		}
	})
}

// TestMemoryBudgetRewriteSkipped: a body whose rewrite the budget cannot
// hold goes out as it came (rewrite_skipped=memory), counted; the next
// request, with the budget free, is rewritten.
func TestMemoryBudgetRewriteSkipped(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[]}`))
	})
	f := newFixture(t, be.URL, Options{MemoryBudgetBytes: 100, Rewrite: RewriteOptions{Enabled: true}})
	f.h.rewriteFn = changed
	f.h.auditFn = noAudit
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
	res, _ := do(t, rawClient(), req)
	if got := res.Header.Get(HeaderReport); got != "skipped" {
		t.Errorf("report %q, want skipped", got)
	}
	if got := string(be.last(t).Body); got != origBody {
		t.Errorf("upstream got %q, want the original", got)
	}
	// The access log line is written after the client has the answer.
	waitFor(t, "log with rewrite_skipped=memory", func() bool { return strings.Contains(f.logs.String(), "rewrite_skipped=memory") })
	if got := testutil.ToFloat64(f.m.MemoryBudgetRefusals.WithLabelValues(metrics.BudgetRewrite)); got != 1 {
		t.Errorf("memory_budget_refusals_total{consumer=rewrite} = %v, want 1", got)
	}
	waitFor(t, "budget free", func() bool { return f.h.budget.usedBytes() == 0 })

	f2 := newFixture(t, be.URL, Options{MemoryBudgetBytes: 1 << 20, Rewrite: RewriteOptions{Enabled: true}})
	f2.h.rewriteFn = changed
	f2.h.auditFn = noAudit
	req, _ = http.NewRequest("POST", f2.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
	do(t, rawClient(), req)
	if got := string(be.last(t).Body); got != rewrittenBody {
		t.Errorf("within the budget the upstream got %q, want the rewritten body", got)
	}
	waitFor(t, "budget free", func() bool { return f2.h.budget.usedBytes() == 0 })
}

// TestMemoryBudgetChunkedBody: a chunked body the budget cannot buffer is
// refused with 503 before any byte reaches the upstream; a smaller one
// goes through, and the budget is free again afterwards.
func TestMemoryBudgetChunkedBody(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{MemoryBudgetBytes: 1 << 20})
	big := strings.Repeat("x", 2<<20)
	req, _ := http.NewRequest("POST", f.front.URL+"/upload/v1beta/files", io.MultiReader(strings.NewReader(big)))
	res, body := do(t, rawClient(), req)
	checkGeminiError(t, res, body, http.StatusServiceUnavailable, "UNAVAILABLE")
	if reqs := be.requests(); len(reqs) != 0 {
		t.Errorf("%d requests reached the upstream", len(reqs))
	}
	if got := testutil.ToFloat64(f.m.MemoryBudgetRefusals.WithLabelValues(metrics.BudgetChunkedBody)); got != 1 {
		t.Errorf("memory_budget_refusals_total{consumer=chunked_body} = %v, want 1", got)
	}
	// The refused request gives its share back when its handler ends,
	// which may be after the client has the 503.
	waitFor(t, "budget free", func() bool { return f.h.budget.usedBytes() == 0 })
	req, _ = http.NewRequest("POST", f.front.URL+"/upload/v1beta/files", io.MultiReader(strings.NewReader(big[:300<<10])))
	if res, _ := do(t, rawClient(), req); res.StatusCode != 200 {
		t.Errorf("small chunked body: status %d", res.StatusCode)
	}
	if got := len(be.last(t).Body); got != 300<<10 {
		t.Errorf("upstream got %d bytes, want %d", got, 300<<10)
	}
	waitFor(t, "budget free", func() bool { return f.h.budget.usedBytes() == 0 })
}

// TestMemoryBudgetHoldsLedgerMemo: the ledger's layout memo is inside
// the process-wide budget, at most a quarter of it, so that what it keeps
// never takes memory.limit_bytes past the runtime's soft limit; without
// a budget it keeps its own bound.
func TestMemoryBudgetHoldsLedgerMemo(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	for _, tc := range []struct {
		budget, wantTraffic int64
		wantMemo            int
	}{
		{0, 0, ledgerMemoBytes},
		{144 << 20, 112 << 20, 32 << 20},
		{16 << 20, 12 << 20, 4 << 20},
	} {
		f := newFixture(t, be.URL, Options{MemoryBudgetBytes: tc.budget})
		if got := f.h.ledger.memo.max; got != tc.wantMemo {
			t.Errorf("budget %d: the memo holds up to %d bytes, want %d", tc.budget, got, tc.wantMemo)
		}
		if got := int64(testutil.ToFloat64(f.m.MemoryBudgetLimit)); got != tc.wantTraffic {
			t.Errorf("budget %d: memory_budget_bytes = %d, want %d", tc.budget, got, tc.wantTraffic)
		}
	}
}
