package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Label values of the ledger metrics (issue 14).
const (
	// Reasons for gemini_proxy_prefix_changes_total: the rewritten request
	// did not start with what the proxy sent for the conversation's
	// previous request although the client's own request did (rewrite),
	// or the client changed its earlier turns itself (client).
	PrefixChangeRewrite = "rewrite"
	PrefixChangeClient  = "client"

	// Groups of the gemini_proxy_ledger_* metrics: conversations rewritten
	// as usual (treated) and the metrics.holdout_fraction forwarded
	// unrewritten (holdout).
	GroupTreated = "treated"
	GroupHoldout = "holdout"

	// Reasons for gemini_proxy_compaction_decisions_total, the values of
	// rewrite.CompactionReason: compaction of turns already sent saved
	// more than the cached rate it cost (pays), did not and the sent
	// prefix was kept (keeps_prefix), or changed only turns after it
	// (after_prefix).
	CompactionPays        = "pays"
	CompactionKeepsPrefix = "keeps_prefix"
	CompactionAfterPrefix = "after_prefix"
)

// PrefixChangeReasons, LedgerGroups and LedgerTurns list the label values
// above and the turn buckets of the gemini_proxy_ledger_* metrics.
var (
	PrefixChangeReasons = []string{PrefixChangeRewrite, PrefixChangeClient}
	LedgerGroups        = []string{GroupTreated, GroupHoldout}
	LedgerTurns         = []string{"1", "2", "3", "4", "5", "6", "7", "8", "9-16", "17+"}
	CompactionReasons   = []string{CompactionPays, CompactionKeepsPrefix, CompactionAfterPrefix}
)

// LedgerTurn returns the turn label of the n-th request (from 1) of a
// conversation.
func LedgerTurn(n int) string {
	switch {
	case n <= 1:
		return LedgerTurns[0]
	case n <= 8:
		return LedgerTurns[n-1]
	case n <= 16:
		return "9-16"
	}
	return "17+"
}

// newLedger creates the ledger collectors.
func (m *Metrics) newLedger(f promauto.Factory) {
	m.SavedDollars = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "saved_dollars_total",
		Help: "Net US dollars saved, per request where the proxy changed what was sent and the saving was positive: the estimated bill of the client's original request with implicit caching (the counterfactual) minus the bill of what was sent, from usageMetadata and the price table.",
	}, []string{"model"})
	m.CostIncreaseDollars = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "cost_increase_dollars_total",
		Help: "US dollars by which requests the proxy changed cost more than the counterfactual (the client's original request with implicit caching), summed over those requests; net saving = saved_dollars_total - cost_increase_dollars_total.",
	}, []string{"model"})
	m.PrefixChanges = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "prefix_changes_total",
		Help: "Requests that did not start with what the proxy sent for the previous request of their conversation, by reason: rewrite (the client's request did) or client (the client changed its earlier turns).",
	}, []string{"reason"})
	m.PrefixChangeTokens = f.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "prefix_change_tokens_total",
		Help: "Estimated prompt tokens of the previous request's prefix, as sent, that a prefix change (reason rewrite) kept from the implicit cache's cached rate.",
	})
	m.LedgerRequests = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "ledger_requests_total",
		Help: "Priced generate requests the ledger accounted, by group (treated, holdout) and turn (the request's position in its conversation).",
	}, []string{"group", "turn"})
	m.LedgerBilledDollars = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "ledger_billed_dollars_total",
		Help: "US dollars billed for those requests, from usageMetadata and the price table, by group and turn.",
	}, []string{"group", "turn"})
	m.LedgerBilledSquares = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "ledger_billed_dollars_squared_total",
		Help: "Sum of the squares of each request's billed US dollars, by group and turn, for the variance of the measured saving.",
	}, []string{"group", "turn"})
	m.LedgerCounterfactual = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "ledger_counterfactual_dollars_total",
		Help: "Estimated US dollars the client's original requests would have been billed with implicit caching, by group and turn (equal to the billed dollars where the original was sent).",
	}, []string{"group", "turn"})
	m.CompactionDecisions = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "compaction_decisions_total",
		Help: "Answered requests whose compaction changed turns the conversation's previous request had sent (rewrite.cache_aware_compaction), by reason: pays (compacted: it removed more than the cached rate it cost is worth), keeps_prefix (the sent prefix was kept as it was sent), after_prefix (compaction changed only turns after it).",
	}, []string{"reason"})
	for _, r := range PrefixChangeReasons {
		m.PrefixChanges.WithLabelValues(r)
	}
	for _, r := range CompactionReasons {
		m.CompactionDecisions.WithLabelValues(r)
	}
}
