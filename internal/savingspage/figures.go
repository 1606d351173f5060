package savingspage

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metrics the page reads, as the proxy's registry names them.
const (
	metricRequests     = "gemini_proxy_requests_total"
	metricRewrite      = "gemini_proxy_rewrite_requests_total"
	metricTokensSaved  = "gemini_proxy_tokens_saved_total"
	metricDollarsSaved = "gemini_proxy_saved_dollars_total"
	metricCostIncrease = "gemini_proxy_cost_increase_dollars_total"
	metricBytesSaved   = "gemini_proxy_rewrite_saved_bytes_total"
	metricUsageTokens  = "gemini_proxy_usage_tokens_total"
	metricCacheHits    = "gemini_proxy_cache_hits_total"
	metricCacheMisses  = "gemini_proxy_cache_misses_total"
)

// Saved is what the proxy saved for one model or one rule.
type Saved struct {
	Requests float64 // generate requests (by model only)
	Tokens   float64 // estimated prompt tokens not sent
	// Dollars is the net saving (by model only): saved_dollars_total
	// minus cost_increase_dollars_total.
	Dollars float64
}

// Totals are the page's counters at one moment, read from the registry.
type Totals struct {
	// Requests counts generate requests (both routes), Rewritten those the
	// rewriter changed.
	Requests, Rewritten float64
	Tokens              float64 // saved (estimate)
	// Saved and CostIncrease are the dollar ledger's two counters; the
	// net saving is Saved - CostIncrease.
	Saved, CostIncrease float64
	Bytes               float64 // removed from request bodies
	// PromptTokens and CachedTokens are the upstream's usageMetadata.
	PromptTokens, CachedTokens float64
	// CacheHits and CacheLookups are the proxy cache's, by area.
	CacheHits, CacheLookups map[string]float64
	ByModel, ByRule         map[string]Saved
}

// read gathers the totals from g.
func read(g prometheus.Gatherer) (Totals, error) {
	mfs, err := g.Gather()
	t := Totals{
		CacheHits: map[string]float64{}, CacheLookups: map[string]float64{},
		ByModel: map[string]Saved{}, ByRule: map[string]Saved{},
	}
	if err != nil && len(mfs) == 0 {
		return t, err
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			l := func(name string) string { return label(m, name) }
			switch mf.GetName() {
			case metricRequests:
				if r := l("route"); r == "generate_content" || r == "stream_generate_content" {
					s := t.ByModel[l("model")]
					s.Requests += v
					t.ByModel[l("model")] = s
				}
			case metricRewrite:
				t.Requests += v
				if l("outcome") == "changed" {
					t.Rewritten += v
				}
			case metricTokensSaved:
				t.Tokens += v
				add(t.ByModel, l("model"), func(s *Saved) { s.Tokens += v })
				add(t.ByRule, l("rule"), func(s *Saved) { s.Tokens += v })
			case metricDollarsSaved:
				t.Saved += v
				add(t.ByModel, l("model"), func(s *Saved) { s.Dollars += v })
			case metricCostIncrease:
				t.CostIncrease += v
				add(t.ByModel, l("model"), func(s *Saved) { s.Dollars -= v })
			case metricBytesSaved:
				t.Bytes += v
			case metricUsageTokens:
				switch l("kind") {
				case "prompt":
					t.PromptTokens += v
				case "cached":
					t.CachedTokens += v
				}
			case metricCacheHits:
				t.CacheHits[l("area")] += v
				t.CacheLookups[l("area")] += v
			case metricCacheMisses:
				t.CacheLookups[l("area")] += v
			}
		}
	}
	return t, err
}

func add(m map[string]Saved, key string, f func(*Saved)) {
	s := m[key]
	f(&s)
	m[key] = s
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// minus returns t less an earlier reading b: what happened in between.
func (t Totals) minus(b Totals) Totals {
	d := Totals{
		Requests: t.Requests - b.Requests, Rewritten: t.Rewritten - b.Rewritten,
		Tokens: t.Tokens - b.Tokens, Saved: t.Saved - b.Saved, CostIncrease: t.CostIncrease - b.CostIncrease, Bytes: t.Bytes - b.Bytes,
		PromptTokens: t.PromptTokens - b.PromptTokens, CachedTokens: t.CachedTokens - b.CachedTokens,
		CacheHits: map[string]float64{}, CacheLookups: map[string]float64{},
		ByModel: map[string]Saved{}, ByRule: map[string]Saved{},
	}
	for k, v := range t.CacheHits {
		d.CacheHits[k] = v - b.CacheHits[k]
	}
	for k, v := range t.CacheLookups {
		d.CacheLookups[k] = v - b.CacheLookups[k]
	}
	for k, s := range t.ByModel {
		o := b.ByModel[k]
		d.ByModel[k] = Saved{Requests: s.Requests - o.Requests, Tokens: s.Tokens - o.Tokens, Dollars: s.Dollars - o.Dollars}
	}
	for k, s := range t.ByRule {
		o := b.ByRule[k]
		d.ByRule[k] = Saved{Tokens: s.Tokens - o.Tokens}
	}
	return d
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	return keys
}
