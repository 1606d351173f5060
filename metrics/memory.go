package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Consumers of the process-wide memory budget (memory.limit_bytes), the
// consumer label of gemini_proxy_memory_budget_refusals_total: the
// response tap's event and object buffers, request bodies being rewritten,
// and chunked request bodies buffered before they are forwarded.
const (
	BudgetTap         = "tap"
	BudgetRewrite     = "rewrite"
	BudgetChunkedBody = "chunked_body"
)

// BudgetConsumers lists the consumer label values.
var BudgetConsumers = []string{BudgetTap, BudgetRewrite, BudgetChunkedBody}

// newMemory creates the memory budget and access log collectors (issue 16
// item 10, issue 17 item 5).
func (m *Metrics) newMemory(f promauto.Factory) {
	m.MemoryBudgetLimit = f.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "memory_budget_bytes",
		Help: "The process-wide byte budget of the buffers that grow with traffic (tap, rewrite, chunked bodies): memory.limit_bytes minus cache.max_bytes, the runtime's reserve and the ledger's layout memo (at most 32 MiB, a quarter of what is left); 0 when there is no limit.",
	})
	m.MemoryBudgetUsed = f.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "memory_budget_used_bytes",
		Help: "Bytes of the memory budget held by requests in flight.",
	})
	m.MemoryBudgetRefusals = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "memory_budget_refusals_total",
		Help: "Times a buffer could not grow because the memory budget was spent, by consumer: tap (an event or object not read, its text marked truncated), rewrite (the body forwarded unchanged, rewrite_skipped=memory), chunked_body (503).",
	}, []string{"consumer"})
	m.AccessLogDropped = f.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "access_log_dropped_total",
		Help: "Log lines dropped because the asynchronous log writer's buffer (log.buffer_bytes) was full: the writer never blocks a request.",
	})
}
