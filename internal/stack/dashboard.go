package stack

import (
	"bytes"
	"encoding/json"
)

// DatasourceUID is the uid of the Prometheus datasource the dashboard
// queries; examples/grafana/provisioning/datasources/prometheus.yml
// provisions a datasource with it.
const DatasourceUID = "gemini-proxy-prometheus"

// DashboardUID is the dashboard's stable uid.
const DashboardUID = "gemini-proxy"

// Panel is one dashboard panel. Width is in Grafana's 24-column grid; rows
// have Type "row" and no Targets.
type Panel struct {
	Title       string
	Type        string // "row", "stat" or "timeseries"
	Description string
	Unit        string
	Width       int
	Height      int
	Targets     []Target
}

// Target is one PromQL query of a panel, with its legend.
type Target struct {
	Expr   string
	Legend string
}

// Dashboard template variables and Grafana's built-in intervals used in
// the queries. Tests substitute them before sending a query to Prometheus.
const (
	rate  = "$__rate_interval"
	rng   = "$__range"
	model = `model=~"$model"`
)

func q(expr, legend string) Target { return Target{Expr: expr, Legend: legend} }

// Holdout arithmetic over the last hour, by turn: n, sum and sum of
// squares of each group's billed dollars per request.
func ledgerSum(name, group string) string {
	return `sum by (turn) (increase(gemini_proxy_ledger_` + name + `{group="` + group + `"}[1h]))`
}

func mean(group string) string {
	return "(" + ledgerSum("billed_dollars_total", group) + " / " + ledgerSum("requests_total", group) + ")"
}

// variance of the mean: (E[x²] − E[x]²) / n.
func meanVariance(group string) string {
	n := ledgerSum("requests_total", group)
	return "((" + ledgerSum("billed_dollars_squared_total", group) + " / " + n + " - " + mean(group) + " ^ 2) / " + n + ")"
}

// stderrBoth is the standard error of the difference of the two means.
var stderrBoth = "sqrt(" + meanVariance("holdout") + " + " + meanVariance("treated") + ")"

// measured is the measured saving per request, plus tail.
func measured(tail string) string {
	return mean("holdout") + " - " + mean("treated") + tail
}

// Panels lists the dashboard, top to bottom.
var Panels = []Panel{
	{Title: "Savings", Type: "row"},
	{Title: "Prompt tokens saved", Type: "stat", Unit: "short", Width: 4, Height: 4,
		Description: "Estimated prompt tokens the rewrite kept from being sent, in the selected time range: text bytes removed × the calibrated tokens per byte.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_tokens_saved_total{`+model+`}[`+rng+`]))`, "")}},
	{Title: "Share of prompt tokens saved", Type: "stat", Unit: "percentunit", Width: 4, Height: 4,
		Description: "Tokens saved ÷ (tokens saved + prompt tokens sent): how much of what the clients asked to send was not sent.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_tokens_saved_total{`+model+`}[`+rng+`])) / (sum(increase(gemini_proxy_tokens_saved_total{`+model+`}[`+rng+`])) + sum(increase(gemini_proxy_usage_tokens_total{kind="prompt",`+model+`}[`+rng+`])))`, "")}},
	{Title: "Net dollars saved", Type: "stat", Unit: "currencyUSD", Width: 4, Height: 4,
		Description: "The ledger: per request, the estimated bill of the client's own request with implicit caching (the counterfactual) minus the bill of what was sent, from usageMetadata; savings minus cost increases. An estimate: the holdout panel below measures.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_saved_dollars_total{`+model+`}[`+rng+`])) - sum(increase(gemini_proxy_cost_increase_dollars_total{`+model+`}[`+rng+`]))`, "")}},
	{Title: "Dollars spent", Type: "stat", Unit: "currencyUSD", Width: 4, Height: 4,
		Description: "Estimated spend of the generate requests that went through, from usageMetadata and the price table.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_spent_dollars_total{`+model+`}[`+rng+`]))`, "")}},
	{Title: "Request bytes saved", Type: "stat", Unit: "bytes", Width: 4, Height: 4,
		Description: "Bytes the rewrite removed from request bodies the upstream accepted.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_rewrite_saved_bytes_total[`+rng+`]))`, "")}},
	{Title: "Unpriced requests", Type: "stat", Unit: "short", Width: 4, Height: 4,
		Description: "Generate responses whose model is not in the price table: their dollars are not estimated. Add the model to metrics.prices.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_unpriced_requests_total{`+model+`}[`+rng+`]))`, "")}},
	{Title: "Tokens saved by rule", Type: "timeseries", Unit: "short", Width: 12, Height: 8,
		Description: "Estimated prompt tokens saved per second by each rewrite rule.",
		Targets:     []Target{q(`sum by (rule) (rate(gemini_proxy_tokens_saved_total{`+model+`}[`+rate+`]))`, "{{rule}}")}},
	{Title: "Tokens saved by model", Type: "timeseries", Unit: "short", Width: 12, Height: 8,
		Description: "Estimated prompt tokens saved per second, by model.",
		Targets:     []Target{q(`sum by (model) (rate(gemini_proxy_tokens_saved_total{`+model+`}[`+rate+`]))`, "{{model}}")}},
	{Title: "Dollars per hour: saved and spent", Type: "timeseries", Unit: "currencyUSD", Width: 12, Height: 8,
		Description: "Estimated dollars saved and spent per hour, by model.",
		Targets: []Target{
			q(`sum by (model) (rate(gemini_proxy_saved_dollars_total{`+model+`}[`+rate+`])) * 3600`, "saved {{model}}"),
			q(`sum by (model) (rate(gemini_proxy_spent_dollars_total{`+model+`}[`+rate+`])) * 3600`, "spent {{model}}"),
		}},
	{Title: "Net dollars saved and cost increases", Type: "timeseries", Unit: "currencyUSD", Width: 12, Height: 8,
		Description: "Per hour, by model: the ledger's net saving (counterfactual − billed over the requests the proxy changed), and the part of it that went the wrong way (requests that cost more than the client's own would have, such as a compaction that cost the implicit cache more than it removed).",
		Targets: []Target{
			q(`(sum by (model) (rate(gemini_proxy_saved_dollars_total{`+model+`}[`+rate+`])) - sum by (model) (rate(gemini_proxy_cost_increase_dollars_total{`+model+`}[`+rate+`]))) * 3600`, "net {{model}}"),
			q(`sum by (model) (rate(gemini_proxy_cost_increase_dollars_total{`+model+`}[`+rate+`])) * 3600`, "cost increases {{model}}"),
		}},
	{Title: "Prefix changes", Type: "timeseries", Unit: "short", Width: 12, Height: 8,
		Description: "Requests per second that did not start with what the proxy sent for their conversation's previous request, by reason (rewrite: the proxy changed a turn it had sent, such as compaction; client: the client changed its history), the estimated prompt tokens per second that lost the implicit cache's cached rate to a rewrite, and what rewrite.cache_aware_compaction decided for requests whose compaction changed turns already sent (pays: compacted; keeps_prefix: the sent prefix kept; after_prefix: only new turns changed).",
		Targets: []Target{
			q(`sum by (reason) (rate(gemini_proxy_prefix_changes_total[`+rate+`]))`, "{{reason}}"),
			q(`sum(rate(gemini_proxy_prefix_change_tokens_total[`+rate+`]))`, "tokens off the cached rate"),
			q(`sum by (reason) (rate(gemini_proxy_compaction_decisions_total[`+rate+`]))`, "compaction {{reason}}"),
		}},
	{Title: "Saving per request by turn: estimated and measured (holdout)", Type: "timeseries", Unit: "currencyUSD", Width: 24, Height: 8,
		Description: "Over the last hour, by the request's position in its conversation. Estimated: the ledger's counterfactual − billed per treated request. Measured (with metrics.holdout_fraction > 0): mean bill of held-out requests (sent as the client wrote them) − mean bill of treated ones, with a 95% confidence band (±1.96 standard errors).",
		Targets: []Target{
			q(`(sum by (turn) (increase(gemini_proxy_ledger_counterfactual_dollars_total{group="treated"}[1h])) - sum by (turn) (increase(gemini_proxy_ledger_billed_dollars_total{group="treated"}[1h]))) / sum by (turn) (increase(gemini_proxy_ledger_requests_total{group="treated"}[1h]))`, "estimated, turn {{turn}}"),
			q(measured(""), "measured, turn {{turn}}"),
			q(measured(" - 1.96 * "+stderrBoth), "measured −95%, turn {{turn}}"),
			q(measured(" + 1.96 * "+stderrBoth), "measured +95%, turn {{turn}}"),
		}},
	{Title: "Share of prompt tokens saved, by model", Type: "timeseries", Unit: "percentunit", Width: 8, Height: 8,
		Description: "Tokens saved ÷ (tokens saved + prompt tokens sent), by model.",
		Targets:     []Target{q(`sum by (model) (rate(gemini_proxy_tokens_saved_total{`+model+`}[`+rate+`])) / (sum by (model) (rate(gemini_proxy_tokens_saved_total{`+model+`}[`+rate+`])) + sum by (model) (rate(gemini_proxy_usage_tokens_total{kind="prompt",`+model+`}[`+rate+`])))`, "{{model}}")}},
	{Title: "Request bytes saved by rule", Type: "timeseries", Unit: "Bps", Width: 8, Height: 8,
		Description: "Bytes removed per second by each rule, and the share of rewritten request bytes removed.",
		Targets: []Target{
			q(`sum by (rule) (rate(gemini_proxy_rewrite_saved_bytes_total[`+rate+`]))`, "{{rule}}"),
		}},
	{Title: "Share of request bytes removed", Type: "timeseries", Unit: "percentunit", Width: 8, Height: 8,
		Description: "1 − bytes after ÷ bytes before, over generate requests rewritten in mode on.",
		Targets:     []Target{q(`1 - sum(rate(gemini_proxy_rewrite_bytes_total{stage="after"}[`+rate+`])) / sum(rate(gemini_proxy_rewrite_bytes_total{stage="before"}[`+rate+`]))`, "bytes removed")}},
	{Title: "Tokens per byte in use", Type: "timeseries", Unit: "short", Width: 8, Height: 8,
		Description: "The per-model ratio that turns bytes removed into tokens saved: calibrated from usageMetadata of rewritten requests, or from exact countTokens samples when metrics.count_tokens_sample_rate > 0.",
		Targets:     []Target{q(`max by (model) (gemini_proxy_tokens_per_byte{`+model+`})`, "{{model}}")}},
	{Title: "Estimate ÷ exact (countTokens samples)", Type: "timeseries", Unit: "percentunit", Width: 8, Height: 8,
		Description: "For sampled requests: the estimated original prompt tokens over the exact count from countTokens. 100% is a perfect estimate.",
		Targets:     []Target{q(`sum by (model) (rate(gemini_proxy_sampled_prompt_tokens_total{kind="original_estimated",`+model+`}[`+rate+`])) / sum by (model) (rate(gemini_proxy_sampled_prompt_tokens_total{kind="original_exact",`+model+`}[`+rate+`]))`, "{{model}}")}},
	{Title: "Calibration samples", Type: "timeseries", Unit: "short", Width: 8, Height: 8,
		Description: "Requests per second that calibrated the ratio, by source (usage, count_tokens), and countTokens calls by outcome.",
		Targets: []Target{
			q(`sum by (source) (rate(gemini_proxy_tokens_per_byte_samples_total{`+model+`}[`+rate+`]))`, "{{source}}"),
			q(`sum by (outcome) (rate(gemini_proxy_count_tokens_requests_total[`+rate+`]))`, "countTokens {{outcome}}"),
		}},

	{Title: "Traffic", Type: "row"},
	{Title: "Requests by route and status", Type: "timeseries", Unit: "reqps", Width: 12, Height: 8,
		Description: "Requests per second served by the proxy, by route and final status (499: the client went away).",
		Targets:     []Target{q(`sum by (route, code) (rate(gemini_proxy_requests_total{`+model+`}[`+rate+`]))`, "{{route}} {{code}}")}},
	{Title: "Usage tokens by kind", Type: "timeseries", Unit: "short", Width: 12, Height: 8,
		Description: "Tokens per second from usageMetadata: prompt (includes cached), cached, candidates, thoughts, tool use.",
		Targets:     []Target{q(`sum by (kind) (rate(gemini_proxy_usage_tokens_total{`+model+`}[`+rate+`]))`, "{{kind}}")}},
	{Title: "Implicit caching: cached share of prompt tokens", Type: "timeseries", Unit: "percentunit", Width: 8, Height: 8,
		Description: "cachedContentTokenCount ÷ promptTokenCount, by model. Compaction of superseded versions restarts the cacheable prefix; compare with tokens saved.",
		Targets:     []Target{q(`sum by (model) (rate(gemini_proxy_usage_tokens_total{kind="cached",`+model+`}[`+rate+`])) / sum by (model) (rate(gemini_proxy_usage_tokens_total{kind="prompt",`+model+`}[`+rate+`]))`, "{{model}}")}},
	{Title: "Request bytes received and sent", Type: "timeseries", Unit: "Bps", Width: 8, Height: 8,
		Description: "Request body bytes per second from clients (received) and to the upstream (sent, fallback retries included).",
		Targets:     []Target{q(`sum by (stage) (rate(gemini_proxy_request_bytes_total[`+rate+`]))`, "{{stage}}")}},
	{Title: "Rewrite outcomes", Type: "timeseries", Unit: "reqps", Width: 8, Height: 8,
		Description: "Generate requests per second by rewrite mode (on, dry-run, off, disabled) and outcome.",
		Targets:     []Target{q(`sum by (mode, outcome) (rate(gemini_proxy_rewrite_requests_total[`+rate+`]))`, "{{mode}} {{outcome}}")}},
	{Title: "Client SDK families", Type: "timeseries", Unit: "reqps", Width: 12, Height: 8,
		Description: "Requests per second by client SDK (x-goog-api-client). deprecated=true marks google-generativeai / @google/generative-ai clients to migrate.",
		Targets:     []Target{q(`sum by (sdk, deprecated) (rate(gemini_proxy_client_requests_total[`+rate+`]))`, "{{sdk}} deprecated={{deprecated}}")}},
	{Title: "In-flight requests", Type: "timeseries", Unit: "short", Width: 12, Height: 8,
		Description: "Requests being served right now, summed over replicas.",
		Targets:     []Target{q(`sum(gemini_proxy_in_flight_requests)`, "in flight")}},

	{Title: "Latency", Type: "row"},
	{Title: "Latency added by the proxy", Type: "timeseries", Unit: "s", Width: 12, Height: 8,
		Description: "Time spent inside the proxy before the upstream call (routing, decode, rewrite, encode; the client's upload excluded), 50th and 99th percentile by route.",
		Targets: []Target{
			q(`histogram_quantile(0.5, sum by (le, route) (rate(gemini_proxy_proxy_overhead_seconds_bucket[`+rate+`])))`, "p50 {{route}}"),
			q(`histogram_quantile(0.99, sum by (le, route) (rate(gemini_proxy_proxy_overhead_seconds_bucket[`+rate+`])))`, "p99 {{route}}"),
		}},
	{Title: "Proxy share of request time", Type: "timeseries", Unit: "percentunit", Width: 12, Height: 8,
		Description: "Total time inside the proxy ÷ total request duration.",
		Targets:     []Target{q(`sum(rate(gemini_proxy_proxy_overhead_seconds_sum[`+rate+`])) / sum(rate(gemini_proxy_request_duration_seconds_sum[`+rate+`]))`, "proxy share")}},
	{Title: "Upstream latency (to response headers)", Type: "timeseries", Unit: "s", Width: 8, Height: 8,
		Description: "Time from sending the upstream request until its headers arrive, 50th and 99th percentile.",
		Targets: []Target{
			q(`histogram_quantile(0.5, sum by (le) (rate(gemini_proxy_upstream_duration_seconds_bucket[`+rate+`])))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(gemini_proxy_upstream_duration_seconds_bucket[`+rate+`])))`, "p99"),
		}},
	{Title: "Time to first byte (streams)", Type: "timeseries", Unit: "s", Width: 8, Height: 8,
		Description: "Streaming responses: time from request arrival until the first byte reached the client.",
		Targets: []Target{
			q(`histogram_quantile(0.5, sum by (le) (rate(gemini_proxy_time_to_first_byte_seconds_bucket[`+rate+`])))`, "p50"),
			q(`histogram_quantile(0.99, sum by (le) (rate(gemini_proxy_time_to_first_byte_seconds_bucket[`+rate+`])))`, "p99"),
		}},
	{Title: "Request duration", Type: "timeseries", Unit: "s", Width: 8, Height: 8,
		Description: "Time from request arrival until the response body is complete, by stream flag.",
		Targets:     []Target{q(`histogram_quantile(0.99, sum by (le, stream) (rate(gemini_proxy_request_duration_seconds_bucket[`+rate+`])))`, "p99 stream={{stream}}")}},

	{Title: "Errors", Type: "row"},
	{Title: "Rewrite errors and fallbacks", Type: "timeseries", Unit: "reqps", Width: 8, Height: 8,
		Description: "Rewrites that failed (the original was forwarded) and rewritten requests the upstream rejected (retried with the original).",
		Targets: []Target{
			q(`sum(rate(gemini_proxy_rewrite_errors_total[`+rate+`]))`, "rewrite errors"),
			q(`sum(rate(gemini_proxy_rewrite_fallbacks_total[`+rate+`]))`, "fallbacks"),
		}},
	{Title: "Upstream responses by status", Type: "timeseries", Unit: "reqps", Width: 8, Height: 8,
		Description: "Responses from the upstream by HTTP status, including rejected first attempts of fallbacks.",
		Targets:     []Target{q(`sum by (code) (rate(gemini_proxy_upstream_responses_total[`+rate+`]))`, "{{code}}")}},
	{Title: "Upstream failures and client cancels", Type: "timeseries", Unit: "reqps", Width: 8, Height: 8,
		Description: "Upstream failures without a response (timeout, unreachable, tls, aborted mid-response, other) and clients that went away.",
		Targets: []Target{
			q(`sum by (kind) (rate(gemini_proxy_upstream_errors_total[`+rate+`]))`, "{{kind}}"),
			q(`sum(rate(gemini_proxy_client_cancels_total[`+rate+`]))`, "client cancels"),
		}},

	{Title: "Cache", Type: "row"},
	{Title: "Conversation cache hit ratio", Type: "timeseries", Unit: "percentunit", Width: 8, Height: 8,
		Description: "Hits ÷ (hits + misses) by cache area (served: transcript segments verified as served responses; blocks: blocks seen before; conversations).",
		Targets:     []Target{q(`sum by (area) (rate(gemini_proxy_cache_hits_total[`+rate+`])) / (sum by (area) (rate(gemini_proxy_cache_hits_total[`+rate+`])) + sum by (area) (rate(gemini_proxy_cache_misses_total[`+rate+`])))`, "{{area}}")}},
	{Title: "Cache memory", Type: "timeseries", Unit: "bytes", Width: 8, Height: 8,
		Description: "Bytes held by the local cache and its bound, by area, summed over replicas.",
		Targets: []Target{
			q(`sum by (area) (gemini_proxy_cache_bytes)`, "{{area}}"),
			q(`sum by (area) (gemini_proxy_cache_max_bytes)`, "bound {{area}}"),
		}},
	{Title: "Cache entries and evictions", Type: "timeseries", Unit: "short", Width: 8, Height: 8,
		Description: "Entries held, by area, and evictions per second (room or TTL).",
		Targets: []Target{
			q(`sum by (area) (gemini_proxy_cache_entries)`, "entries {{area}}"),
			q(`sum by (area) (rate(gemini_proxy_cache_evictions_total[`+rate+`]))`, "evictions/s {{area}}"),
		}},
	{Title: "Un-flattening checks", Type: "timeseries", Unit: "ops", Width: 8, Height: 8,
		Description: "Flattened-transcript segments checked against responses this proxy served: verified ones may become model turns, rejected ones stay user text.",
		Targets: []Target{
			q(`sum by (result) (rate(gemini_proxy_cache_unflatten_checks_total[`+rate+`]))`, "{{result}}"),
			q(`sum(rate(gemini_proxy_cache_served_responses_total[`+rate+`]))`, "responses recorded"),
		}},
	{Title: "Redis (shared mode)", Type: "timeseries", Unit: "short", Width: 16, Height: 8,
		Description: "Only with cache.backend redis: 1 while Redis answers (0: running local-only after an error), Redis errors by operation and dropped writes per second.",
		Targets: []Target{
			q(`min(gemini_proxy_cache_redis_up)`, "redis up (min over replicas)"),
			q(`sum by (op) (rate(gemini_proxy_cache_redis_errors_total[`+rate+`]))`, "errors/s {{op}}"),
			q(`sum(rate(gemini_proxy_cache_redis_dropped_writes_total[`+rate+`]))`, "dropped writes/s"),
		}},

	{Title: "Upstream state", Type: "row"},
	{Title: "Interactions continuation", Type: "timeseries", Unit: "reqps", Width: 12, Height: 8,
		Description: "With upstream_state.interactions: generate requests by how they were sent (continued: only the new turns with previous_interaction_id; session: an X-Gemini-Proxy-Session continuation; started: a new stored interaction; full: generateContent), and interaction requests replaced by the full request before any byte reached the client, by reason.",
		Targets: []Target{
			q(`sum by (kind) (rate(gemini_proxy_interactions_requests_total[`+rate+`]))`, "{{kind}}"),
			q(`sum by (reason) (rate(gemini_proxy_interactions_fallbacks_total[`+rate+`]))`, "fallback {{reason}}"),
		}},
	{Title: "Bytes not uploaded (continuation)", Type: "stat", Unit: "bytes", Width: 4, Height: 8,
		Description: "Request body bytes continuation kept from being uploaded in the selected time range: the generateContent body minus the interaction body sent instead.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_interactions_saved_bytes_total[`+rng+`]))`, "")}},
	{Title: "Context caching", Type: "row"},
	{Title: "Context cache: net dollars saved", Type: "stat", Unit: "currencyUSD", Width: 6, Height: 4,
		Description: "upstream_state.context_cache: dollars the proxy's explicit caches saved (cached tokens × (input − cached input price)) minus what they cost (creation at the input price and storage), in the selected time range. Storage is counted when a cache ends.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_context_cache_saved_dollars_total{`+model+`}[`+rng+`])) - sum(increase(gemini_proxy_context_cache_cost_dollars_total{`+model+`}[`+rng+`]))`, "")}},
	{Title: "Context caches live", Type: "stat", Unit: "short", Width: 6, Height: 4,
		Description: "Explicit caches the proxy made that have not expired or been deleted, summed over replicas.",
		Targets:     []Target{q(`sum(gemini_proxy_context_cache_live{`+model+`})`, "")}},
	{Title: "Context caches created", Type: "stat", Unit: "short", Width: 6, Height: 4,
		Description: "Explicit caches the proxy created in the selected time range.",
		Targets:     []Target{q(`sum(increase(gemini_proxy_context_cache_created_total{`+model+`}[`+rng+`]))`, "")}},
	{Title: "Context cache storage", Type: "stat", Unit: "short", Width: 6, Height: 4,
		Description: "Token-hours of cache storage billed in the selected time range (counted when each cache ends).",
		Targets:     []Target{q(`sum(increase(gemini_proxy_context_cache_storage_token_seconds_total{`+model+`}[`+rng+`])) / 3600`, "")}},
	{Title: "Tokens billed at the cached rate", Type: "timeseries", Unit: "short", Width: 8, Height: 8,
		Description: "cachedContentTokenCount per second of requests that named a proxy-made cache, by model, next to all prompt tokens.",
		Targets: []Target{
			q(`sum by (model) (rate(gemini_proxy_context_cache_cached_tokens_total{`+model+`}[`+rate+`]))`, "cached {{model}}"),
			q(`sum by (model) (rate(gemini_proxy_usage_tokens_total{kind="prompt",`+model+`}[`+rate+`]))`, "prompt {{model}}"),
		}},
	{Title: "Context cache dollars per hour", Type: "timeseries", Unit: "currencyUSD", Width: 8, Height: 8,
		Description: "Dollars per hour the explicit caches saved, and cost by kind (creation, storage).",
		Targets: []Target{
			q(`sum(rate(gemini_proxy_context_cache_saved_dollars_total{`+model+`}[`+rate+`])) * 3600`, "saved"),
			q(`sum by (kind) (rate(gemini_proxy_context_cache_cost_dollars_total{`+model+`}[`+rate+`])) * 3600`, "cost {{kind}}"),
		}},
	{Title: "Context cache requests, calls and fallbacks", Type: "timeseries", Unit: "ops", Width: 8, Height: 8,
		Description: "Requests that named a proxy-made cache or went out in full; cachedContents calls by operation and result; requests whose cache the upstream had lost, resent in full.",
		Targets: []Target{
			q(`sum by (outcome) (rate(gemini_proxy_context_cache_requests_total{`+model+`}[`+rate+`]))`, "requests {{outcome}}"),
			q(`sum by (op, result) (rate(gemini_proxy_context_cache_operations_total[`+rate+`]))`, "{{op}} {{result}}"),
			q(`sum(rate(gemini_proxy_context_cache_fallbacks_total{`+model+`}[`+rate+`]))`, "fallbacks"),
		}},

	{Title: "Build", Type: "row"},
	{Title: "Running versions", Type: "timeseries", Unit: "short", Width: 8, Height: 8,
		Description: "Replicas by gemini-proxy version and Go version.",
		Targets:     []Target{q(`count by (version, goversion) (gemini_proxy_build_info)`, "{{version}} {{goversion}}")}},
}

// Dashboard renders Panels as Grafana dashboard JSON (schema version 39),
// the file examples/grafana/dashboards/gemini-proxy.json.
func Dashboard() ([]byte, error) {
	ds := map[string]any{"type": "prometheus", "uid": DatasourceUID}
	var panels []any
	x, y, rowHeight := 0, 0, 0
	for i, p := range Panels {
		id := i + 1
		if p.Type == "row" {
			if x > 0 {
				y += rowHeight
			}
			x, rowHeight = 0, 0
			panels = append(panels, map[string]any{
				"type": "row", "id": id, "title": p.Title, "collapsed": false, "panels": []any{},
				"gridPos": map[string]int{"x": 0, "y": y, "w": 24, "h": 1},
			})
			y++
			continue
		}
		if x+p.Width > 24 {
			x, y, rowHeight = 0, y+rowHeight, 0
		}
		var targets []any
		for j, t := range p.Targets {
			targets = append(targets, map[string]any{
				"datasource":   ds,
				"refId":        string(rune('A' + j)),
				"expr":         t.Expr,
				"legendFormat": legend(t.Legend),
				"range":        p.Type != "stat",
				"instant":      p.Type == "stat",
			})
		}
		panel := map[string]any{
			"type": p.Type, "id": id, "title": p.Title, "description": p.Description,
			"datasource": ds,
			"gridPos":    map[string]int{"x": x, "y": y, "w": p.Width, "h": p.Height},
			"targets":    targets,
			"fieldConfig": map[string]any{
				"defaults":  map[string]any{"unit": p.Unit},
				"overrides": []any{},
			},
		}
		if p.Type == "stat" {
			panel["options"] = map[string]any{
				"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
				"colorMode":     "value", "graphMode": "none", "textMode": "auto",
			}
		} else {
			panel["options"] = map[string]any{
				"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
				"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
			}
		}
		panels = append(panels, panel)
		x += p.Width
		rowHeight = max(rowHeight, p.Height)
		if x >= 24 {
			x, y, rowHeight = 0, y+rowHeight, 0
		}
	}
	d := map[string]any{
		"uid":           DashboardUID,
		"title":         "gemini-proxy",
		"description":   "What gemini-proxy saves (tokens, bytes, dollars, by rule and model), what it costs in latency, and whether anything goes wrong. Generated by internal/stack (go test ./internal/stack -run TestDashboardFile -update).",
		"tags":          []string{"gemini-proxy", "gemini"},
		"editable":      true,
		"schemaVersion": 39,
		"version":       1,
		"refresh":       "30s",
		"time":          map[string]string{"from": "now-6h", "to": "now"},
		"timezone":      "browser",
		"graphTooltip":  1,
		"panels":        panels,
		"templating": map[string]any{"list": []any{map[string]any{
			"name": "model", "label": "Model", "type": "query", "datasource": ds,
			"query":      map[string]any{"query": "label_values(gemini_proxy_requests_total, model)", "refId": "model"},
			"definition": "label_values(gemini_proxy_requests_total, model)",
			"refresh":    2, "includeAll": true, "multi": true, "allValue": ".*",
			"current": map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}},
		}}},
		"annotations": map[string]any{"list": []any{}},
		"links":       []any{},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func legend(s string) string {
	if s == "" {
		return "__auto"
	}
	return s
}
