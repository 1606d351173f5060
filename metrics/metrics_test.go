package metrics_test

import (
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// metricCase touches one metric of a fresh Metrics and says what the
// registry must then hold.
type metricCase struct {
	name   string
	typ    dto.MetricType
	labels []string
	touch  func(m *metrics.Metrics)
	value  float64 // the touched series' value (sample count for histograms)
}

var metricCases = []metricCase{
	{"gemini_proxy_requests_total", dto.MetricType_COUNTER, []string{"code", "model", "route", "stream"},
		func(m *metrics.Metrics) {
			m.Requests.WithLabelValues("generate_content", "gemini-2.5-flash", "200", "false").Inc()
		}, 1},
	{"gemini_proxy_request_duration_seconds", dto.MetricType_HISTOGRAM, []string{"route", "stream"},
		func(m *metrics.Metrics) { m.RequestDuration.WithLabelValues("generate_content", "false").Observe(1) }, 1},
	{"gemini_proxy_upstream_duration_seconds", dto.MetricType_HISTOGRAM, []string{"route"},
		func(m *metrics.Metrics) { m.UpstreamDuration.WithLabelValues("generate_content").Observe(1) }, 1},
	{"gemini_proxy_time_to_first_byte_seconds", dto.MetricType_HISTOGRAM, []string{"route"},
		func(m *metrics.Metrics) { m.TimeToFirstByte.WithLabelValues("stream_generate_content").Observe(1) }, 1},
	{"gemini_proxy_proxy_overhead_seconds", dto.MetricType_HISTOGRAM, []string{"route"},
		func(m *metrics.Metrics) { m.ProxyOverhead.WithLabelValues("generate_content").Observe(0.0001) }, 1},
	{"gemini_proxy_in_flight_requests", dto.MetricType_GAUGE, nil,
		func(m *metrics.Metrics) { m.InFlight.Add(2) }, 2},
	{"gemini_proxy_request_bytes_total", dto.MetricType_COUNTER, []string{"route", "stage"},
		func(m *metrics.Metrics) {
			m.RequestBytes.WithLabelValues("generate_content", metrics.StageReceived).Add(10)
		}, 10},
	{"gemini_proxy_response_bytes_total", dto.MetricType_COUNTER, []string{"route"},
		func(m *metrics.Metrics) { m.ResponseBytes.WithLabelValues("generate_content").Add(7) }, 7},
	{"gemini_proxy_usage_tokens_total", dto.MetricType_COUNTER, []string{"kind", "model"},
		func(m *metrics.Metrics) {
			m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensPrompt).Add(5)
		}, 5},
	{"gemini_proxy_client_requests_total", dto.MetricType_COUNTER, []string{"deprecated", "sdk"},
		func(m *metrics.Metrics) { m.ClientRequests.WithLabelValues("google-genai-go", "false").Inc() }, 1},
	{"gemini_proxy_rewrite_requests_total", dto.MetricType_COUNTER, []string{"mode", "outcome"},
		func(m *metrics.Metrics) {
			m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeChanged).Inc()
		}, 1},
	{"gemini_proxy_rewrite_bytes_total", dto.MetricType_COUNTER, []string{"stage"},
		func(m *metrics.Metrics) { m.RewriteBytes.WithLabelValues(metrics.StageBefore).Add(100) }, 100},
	{"gemini_proxy_rewrite_saved_bytes_total", dto.MetricType_COUNTER, []string{"rule"},
		func(m *metrics.Metrics) { m.RewriteSavedBytes.WithLabelValues("unchanged").Add(90) }, 90},
	{"gemini_proxy_rewrite_replacements_total", dto.MetricType_COUNTER, []string{"rule"},
		func(m *metrics.Metrics) { m.RewriteReplacements.WithLabelValues("unchanged").Add(3) }, 3},
	{"gemini_proxy_rewrite_source_saved_bytes_total", dto.MetricType_COUNTER, []string{"source"},
		func(m *metrics.Metrics) { m.RewriteSourceSavedBytes.WithLabelValues("json_text").Add(80) }, 80},
	{"gemini_proxy_rewrite_source_replacements_total", dto.MetricType_COUNTER, []string{"source"},
		func(m *metrics.Metrics) { m.RewriteSourceReplacements.WithLabelValues("tool_result").Add(2) }, 2},
	{"gemini_proxy_rewrite_errors_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.RewriteErrors.Inc() }, 1},
	{"gemini_proxy_rewrite_audit_failures_total", dto.MetricType_COUNTER, []string{"reason"},
		func(m *metrics.Metrics) { m.RewriteAuditFails.WithLabelValues("ref_mismatch").Inc() }, 1},
	{"gemini_proxy_rewrite_fallbacks_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.RewriteFallbacks.Inc() }, 1},
	{"gemini_proxy_rewrite_rejections_total", dto.MetricType_COUNTER, []string{"case"},
		func(m *metrics.Metrics) { m.RewriteRejections.WithLabelValues(metrics.RejectionUnavailable).Inc() }, 1},
	{"gemini_proxy_tokens_saved_total", dto.MetricType_COUNTER, []string{"model", "rule"},
		func(m *metrics.Metrics) { m.TokensSaved.WithLabelValues("unchanged", "gemini-2.5-flash").Add(25.5) }, 25.5},
	{"gemini_proxy_tokens_per_byte", dto.MetricType_GAUGE, []string{"model"},
		func(m *metrics.Metrics) { m.TokensPerByte.WithLabelValues("gemini-2.5-flash").Set(0.29) }, 0.29},
	{"gemini_proxy_tokens_per_byte_samples_total", dto.MetricType_COUNTER, []string{"model", "source"},
		func(m *metrics.Metrics) {
			m.CalibrationSamples.WithLabelValues("gemini-2.5-flash", metrics.SourceUsage).Inc()
		}, 1},
	{"gemini_proxy_saved_dollars_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.SavedDollars.WithLabelValues("gemini-2.5-flash").Add(0.25) }, 0.25},
	{"gemini_proxy_cost_increase_dollars_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.CostIncreaseDollars.WithLabelValues("gemini-2.5-flash").Add(0.125) }, 0.125},
	{"gemini_proxy_prefix_changes_total", dto.MetricType_COUNTER, []string{"reason"},
		func(m *metrics.Metrics) { m.PrefixChanges.WithLabelValues(metrics.PrefixChangeRewrite).Inc() }, 1},
	{"gemini_proxy_prefix_change_tokens_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.PrefixChangeTokens.Add(5000) }, 5000},
	{"gemini_proxy_ledger_requests_total", dto.MetricType_COUNTER, []string{"group", "turn"},
		func(m *metrics.Metrics) {
			m.LedgerRequests.WithLabelValues(metrics.GroupHoldout, metrics.LedgerTurn(3)).Inc()
		}, 1},
	{"gemini_proxy_ledger_billed_dollars_total", dto.MetricType_COUNTER, []string{"group", "turn"},
		func(m *metrics.Metrics) { m.LedgerBilledDollars.WithLabelValues(metrics.GroupTreated, "1").Add(0.5) }, 0.5},
	{"gemini_proxy_ledger_billed_dollars_squared_total", dto.MetricType_COUNTER, []string{"group", "turn"},
		func(m *metrics.Metrics) { m.LedgerBilledSquares.WithLabelValues(metrics.GroupTreated, "1").Add(0.25) }, 0.25},
	{"gemini_proxy_ledger_counterfactual_dollars_total", dto.MetricType_COUNTER, []string{"group", "turn"},
		func(m *metrics.Metrics) { m.LedgerCounterfactual.WithLabelValues(metrics.GroupTreated, "17+").Add(2) }, 2},
	{"gemini_proxy_compaction_decisions_total", dto.MetricType_COUNTER, []string{"reason"},
		func(m *metrics.Metrics) { m.CompactionDecisions.WithLabelValues(metrics.CompactionKeepsPrefix).Inc() }, 1},
	{"gemini_proxy_spent_dollars_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.SpentDollars.WithLabelValues("gemini-2.5-flash").Add(1.5) }, 1.5},
	{"gemini_proxy_unpriced_requests_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.UnpricedRequests.WithLabelValues("_other").Inc() }, 1},
	{"gemini_proxy_price_dollars_per_million_tokens", dto.MetricType_GAUGE, []string{"kind", "model"},
		func(m *metrics.Metrics) {
			m.Price.WithLabelValues("gemini-2.5-flash", metrics.PriceInput).Set(0.3)
		}, 0.3},
	{"gemini_proxy_price_checked_timestamp_seconds", dto.MetricType_GAUGE, []string{"model"},
		func(m *metrics.Metrics) { m.PriceChecked.WithLabelValues("gemini-2.5-flash").Set(1761868800) }, 1761868800},
	{"gemini_proxy_count_tokens_requests_total", dto.MetricType_COUNTER, []string{"outcome"},
		func(m *metrics.Metrics) { m.CountTokens.WithLabelValues(metrics.CountTokensOK).Inc() }, 1},
	{"gemini_proxy_sampled_prompt_tokens_total", dto.MetricType_COUNTER, []string{"kind", "model"},
		func(m *metrics.Metrics) {
			m.SampledTokens.WithLabelValues("gemini-2.5-flash", metrics.SampledOriginalExact).Add(1000)
		}, 1000},
	{"gemini_proxy_upstream_errors_total", dto.MetricType_COUNTER, []string{"kind"},
		func(m *metrics.Metrics) { m.UpstreamErrors.WithLabelValues(metrics.UpstreamTimeout).Inc() }, 1},
	{"gemini_proxy_upstream_responses_total", dto.MetricType_COUNTER, []string{"code", "route"},
		func(m *metrics.Metrics) { m.UpstreamResponses.WithLabelValues("generate_content", "400").Inc() }, 1},
	{"gemini_proxy_client_cancels_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.ClientCancels.Inc() }, 1},
	{"gemini_proxy_memory_budget_bytes", dto.MetricType_GAUGE, nil,
		func(m *metrics.Metrics) { m.MemoryBudgetLimit.Set(1) }, 1},
	{"gemini_proxy_memory_budget_used_bytes", dto.MetricType_GAUGE, nil,
		func(m *metrics.Metrics) { m.MemoryBudgetUsed.Set(1) }, 1},
	{"gemini_proxy_memory_budget_refusals_total", dto.MetricType_COUNTER, []string{"consumer"},
		func(m *metrics.Metrics) { m.MemoryBudgetRefusals.WithLabelValues(metrics.BudgetTap).Inc() }, 1},
	{"gemini_proxy_access_log_dropped_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.AccessLogDropped.Inc() }, 1},
	{"gemini_proxy_stall_grace_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.StallGrace.Inc() }, 1},
	{"gemini_proxy_build_info", dto.MetricType_GAUGE, []string{"goversion", "version"},
		func(m *metrics.Metrics) { m.SetBuildInfo("v0.0.0-test") }, 1},
	{"gemini_proxy_interactions_requests_total", dto.MetricType_COUNTER, []string{"kind"},
		func(m *metrics.Metrics) { m.InteractionRequests.WithLabelValues(metrics.InteractionContinued).Inc() }, 1},
	{"gemini_proxy_interactions_saved_bytes_total", dto.MetricType_COUNTER, nil,
		func(m *metrics.Metrics) { m.InteractionSavedBytes.Add(4096) }, 4096},
	{"gemini_proxy_interactions_fallbacks_total", dto.MetricType_COUNTER, []string{"reason"},
		func(m *metrics.Metrics) { m.InteractionFallbacks.WithLabelValues(metrics.FallbackNotFound).Inc() }, 1},
	{"gemini_proxy_context_cache_created_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.ContextCacheCreated.WithLabelValues("gemini-2.5-flash").Inc() }, 1},
	{"gemini_proxy_context_cache_live", dto.MetricType_GAUGE, []string{"model"},
		func(m *metrics.Metrics) { m.ContextCacheLive.WithLabelValues("gemini-2.5-flash").Set(2) }, 2},
	{"gemini_proxy_context_cache_storage_token_seconds_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) {
			m.ContextCacheStorageTokenSeconds.WithLabelValues("gemini-2.5-flash").Add(3600)
		}, 3600},
	{"gemini_proxy_context_cache_cached_tokens_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.ContextCacheCachedTokens.WithLabelValues("gemini-2.5-flash").Add(4096) }, 4096},
	{"gemini_proxy_context_cache_saved_dollars_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.ContextCacheSavedDollars.WithLabelValues("gemini-2.5-flash").Add(0.5) }, 0.5},
	{"gemini_proxy_context_cache_cost_dollars_total", dto.MetricType_COUNTER, []string{"kind", "model"},
		func(m *metrics.Metrics) {
			m.ContextCacheCostDollars.WithLabelValues("gemini-2.5-flash", metrics.CacheCostStorage).Add(0.25)
		}, 0.25},
	{"gemini_proxy_context_cache_fallbacks_total", dto.MetricType_COUNTER, []string{"model"},
		func(m *metrics.Metrics) { m.ContextCacheFallbacks.WithLabelValues("gemini-2.5-flash").Inc() }, 1},
	{"gemini_proxy_context_cache_requests_total", dto.MetricType_COUNTER, []string{"model", "outcome"},
		func(m *metrics.Metrics) {
			m.ContextCacheRequests.WithLabelValues("gemini-2.5-flash", metrics.CacheOutcomeCached).Inc()
		}, 1},
	{"gemini_proxy_context_cache_operations_total", dto.MetricType_COUNTER, []string{"op", "result"},
		func(m *metrics.Metrics) {
			m.ContextCacheOperations.WithLabelValues(metrics.CacheOpCreate, metrics.CacheResultOK).Inc()
		}, 1},
}

// gatherOne returns the family called name from reg, or nil.
func gatherOne(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// value returns a series' value: counter, gauge, or histogram sample count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.Label {
		out = append(out, l.GetName())
	}
	return out
}

// TestEveryMetric touches each metric on a fresh registry and checks its
// name, type, label names and value.
func TestEveryMetric(t *testing.T) {
	for _, tc := range metricCases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			tc.touch(m)
			mf := gatherOne(t, reg, tc.name)
			if mf == nil {
				t.Fatalf("%s not gathered", tc.name)
			}
			if mf.GetType() != tc.typ {
				t.Errorf("type %v, want %v", mf.GetType(), tc.typ)
			}
			if mf.GetHelp() == "" || !strings.HasSuffix(mf.GetHelp(), ".") {
				t.Errorf("help %q is not a sentence", mf.GetHelp())
			}
			var touched *dto.Metric
			for _, s := range mf.Metric {
				if diff := cmp.Diff(tc.labels, labelNames(s)); diff != "" {
					t.Errorf("label names (-want +got):\n%s", diff)
				}
				if value(s) != 0 || touched == nil {
					touched = s
				}
			}
			if got := value(touched); got != tc.value {
				t.Errorf("value = %v, want %v", got, tc.value)
			}
		})
	}
}

func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	for _, tc := range metricCases {
		tc.touch(m)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(metricCases) {
		t.Errorf("gathered %d families, want %d: a metric has no case in metricCases", len(mfs), len(metricCases))
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "gemini_proxy_") {
			t.Errorf("metric %s lacks the gemini_proxy_ prefix", mf.GetName())
		}
	}
}

// TestDocTable checks the table in doc.go against the registry: every
// metric New registers has a row with its type and labels. Rows for the
// cache metrics (metrics/cache.go, built by its own constructor) are
// checked only for their prefix.
func TestDocTable(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][2]string{} // name -> type, labels
	cols := regexp.MustCompile(`\s{2,}`)
	for line := range strings.SplitSeq(string(src), "\n") {
		line, ok := strings.CutPrefix(line, "//\tgemini_proxy_")
		if !ok {
			continue
		}
		f := cols.Split("gemini_proxy_"+line, 4)
		if len(f) < 4 {
			t.Errorf("doc row %q has fewer than 4 columns", line)
			continue
		}
		rows[f[0]] = [2]string{f[1], f[2]}
	}
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	seen := map[string]bool{}
	for _, tc := range metricCases {
		seen[tc.name] = true
		row, ok := rows[tc.name]
		if !ok {
			t.Errorf("doc.go has no row for %s", tc.name)
			continue
		}
		labels := "-"
		if len(tc.labels) > 0 {
			labels = strings.Join(tc.labels, ", ")
		}
		docLabels := strings.Split(row[1], ", ")
		slices.Sort(docLabels)
		if got := strings.Join(docLabels, ", "); row[0] != types[tc.typ] || got != labels {
			t.Errorf("doc row %s: %s {%s}, want %s {%s}", tc.name, row[0], got, types[tc.typ], labels)
		}
	}
	for name := range rows {
		if !seen[name] && !strings.HasPrefix(name, "gemini_proxy_cache_") {
			t.Errorf("doc.go documents %s, which New does not register", name)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.SetBuildInfo("v1.2.3")
	if got := testutil.ToFloat64(m.BuildInfo.WithLabelValues("v1.2.3", runtime.Version())); got != 1 {
		t.Errorf("build_info = %v, want 1", got)
	}
}

func TestPreinitialisedSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want int
	}{
		{"upstream error kinds", m.UpstreamErrors, 5},
		{"rewrite byte stages", m.RewriteBytes, 2},
		{"count tokens outcomes", m.CountTokens, 4},
	} {
		if got := testutil.CollectAndCount(c.c); got != c.want {
			t.Errorf("%s: %d series at start, want %d (so rate() has a zero to start from)", c.name, got, c.want)
		}
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}
