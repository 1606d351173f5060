package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// memBudget is the process-wide byte budget of the buffers that grow with
// traffic (issue 16 item 10): the response tap's event and object buffers,
// request bodies being rewritten (with the rewrite's output and records)
// and chunked request bodies buffered before they are forwarded. Each of
// them takes bytes before it grows and gives them back when its request
// ends; when the budget is spent, the one that asked does without: the tap
// skips the event (its text is marked truncated), the rewrite is skipped
// (the body goes out as it came, rewrite_skipped=memory), a chunked body is
// refused with 503. None of them waits, so the budget never blocks a copy.
// The cache has its own bound (cache.max_bytes), which the configuration
// subtracts from memory.limit_bytes to size this budget. A nil *memBudget
// has no limit. Safe for concurrent use.
type memBudget struct {
	limit    int64
	used     atomic.Int64
	gauge    prometheus.Gauge
	refusals *prometheus.CounterVec
}

// Consumers of the memory budget, the consumer label of
// gemini_proxy_memory_budget_refusals_total.
const (
	budgetTap         = metrics.BudgetTap
	budgetRewrite     = metrics.BudgetRewrite
	budgetChunkedBody = metrics.BudgetChunkedBody
)

func newMemBudget(limit int64, m *metrics.Metrics) *memBudget {
	if limit <= 0 {
		return nil
	}
	m.MemoryBudgetLimit.Set(float64(limit))
	for _, c := range metrics.BudgetConsumers {
		m.MemoryBudgetRefusals.WithLabelValues(c)
	}
	return &memBudget{limit: limit, gauge: m.MemoryBudgetUsed, refusals: m.MemoryBudgetRefusals}
}

// take reserves n bytes for consumer and reports whether it could; a
// refusal is counted.
func (b *memBudget) take(n int64, consumer string) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		cur := b.used.Load()
		if cur+n > b.limit {
			b.refusals.WithLabelValues(consumer).Inc()
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			b.gauge.Add(float64(n))
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *memBudget) give(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.used.Add(-n)
	b.gauge.Sub(float64(n))
}

// usedBytes returns the bytes taken and not given back.
func (b *memBudget) usedBytes() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// rewriteBudgetFactor times its body is what a rewritten request takes
// from the budget until it ends: the body, the rewrite's output and its
// decoding arena, and the ledger's layouts (the ledger settles after the
// response, while the rest is still held). Counting less let 64
// concurrent 1 MB rewrites hold more than the limit, and the collector
// ran without pause. That was measured while the ledger still decoded
// copies of both bodies. Re-measured on 2026-12-02 (BENCHMARKS "The
// memory budget's rewrite factor", BenchmarkRewriteLiveHeap in
// cmd/gemini-proxy): 32 concurrent 1 MB rewrites peak at 1.9-2.0 times their
// bodies live; 4 leaves the collector about as much again for what they
// allocate between collections under the memory limit.
const rewriteBudgetFactor = 4

// tapFreeBytes is what a tap's buffers may hold without drawing on the
// budget: an ordinary event or answer (a few KiB) never touches it, so the
// budget costs nothing per chunk. It bounds the unbudgeted part of the
// taps at tapFreeBytes per response being copied.
const tapFreeBytes = 64 << 10

// tapBudgetStep is the unit in which a tap takes from the budget, so that
// a growing buffer asks once per step, not once per chunk.
const tapBudgetStep = 256 << 10
