package savingspage

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

type dtoFamily = dto.MetricFamily

// fixture is a registry laid out as the proxy's, with its metrics.
type fixture struct {
	reg   *prometheus.Registry
	m     *metrics.Metrics
	stats cache.Stats
}

func newFixture() *fixture {
	f := &fixture{reg: prometheus.NewRegistry()}
	f.m = metrics.New(f.reg)
	metrics.RegisterCache(f.reg, func() cache.Stats { return f.stats })
	return f
}

// traffic adds n generate requests of model that saved tokens by rule.
func (f *fixture) traffic(model, rule string, n int, tokens, dollars float64) {
	f.m.Requests.WithLabelValues("generate_content", model, "200", "false").Add(float64(n))
	f.m.Requests.WithLabelValues("count_tokens", model, "200", "false").Add(1) // not a generate request
	f.m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeChanged).Add(float64(n - 1))
	f.m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeUnchanged).Add(1)
	f.m.TokensSaved.WithLabelValues(rule, model).Add(tokens)
	f.m.SavedDollars.WithLabelValues(model).Add(dollars)
	f.m.CostIncreaseDollars.WithLabelValues(model).Add(dollars / 4)
	f.m.RewriteSavedBytes.WithLabelValues(rule).Add(4 * tokens)
	f.m.UsageTokens.WithLabelValues(model, metrics.TokensPrompt).Add(1000)
	f.m.UsageTokens.WithLabelValues(model, metrics.TokensCached).Add(250)
}

// scrape parses /metrics as Prometheus would.
func scrape(t *testing.T, g prometheus.Gatherer) map[string]*dtoFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	defer srv.Close()
	res, body := testutil.Get(t, srv.URL)
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// sum adds the samples of a scraped family whose labels include match.
func sum(mfs map[string]*dtoFamily, name string, match map[string]string) float64 {
	var s float64
	mf := mfs[name]
	if mf == nil {
		return 0
	}
next:
	for _, m := range mf.GetMetric() {
		for k, v := range match {
			if label(m, k) != v {
				continue next
			}
		}
		s += m.GetCounter().GetValue()
	}
	return s
}

// pageFigures reads the data-total and data-hour values of the summary rows
// of a rendered page.
func pageFigures(t *testing.T, html string) map[string][2]float64 {
	t.Helper()
	out := map[string][2]float64{}
	for _, m := range regexp.MustCompile(`<tr id="([a-z-]+)" data-total="([^"]+)" data-hour="([^"]+)">`).FindAllStringSubmatch(html, -1) {
		a, err1 := strconv.ParseFloat(m[2], 64)
		b, err2 := strconv.ParseFloat(m[3], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("row %s: bad numbers %q %q", m[1], m[2], m[3])
		}
		out[m[1]] = [2]float64{a, b}
	}
	return out
}

func get(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, body := testutil.Get(t, srv.URL+"/")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s:\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	return string(body)
}

// TestPageAgreesWithMetrics checks every summary figure and the by-model
// and by-rule rows against a scrape of the same registry.
func TestPageAgreesWithMetrics(t *testing.T) {
	f := newFixture()
	f.traffic("gemini-2.5-flash", "superseded", 5, 40000, 0.012)
	f.traffic("gemini-2.5-pro", "unchanged", 3, 9000, 0.0113)
	f.stats.Areas = []cache.AreaStats{{Area: cache.AreaServed, Hits: 3, Misses: 1}, {Area: cache.AreaBlocks, Hits: 1, Misses: 4}}
	p := New(Options{Gatherer: f.reg})
	html := get(t, p)
	mfs := scrape(t, f.reg)

	got := pageFigures(t, html)
	want := map[string]float64{
		"requests":               sum(mfs, "gemini_proxy_rewrite_requests_total", nil),
		"rewritten":              sum(mfs, "gemini_proxy_rewrite_requests_total", map[string]string{"outcome": "changed"}),
		"tokens":                 sum(mfs, "gemini_proxy_tokens_saved_total", nil),
		"dollars":                sum(mfs, "gemini_proxy_saved_dollars_total", nil) - sum(mfs, "gemini_proxy_cost_increase_dollars_total", nil),
		"cost-increase":          sum(mfs, "gemini_proxy_cost_increase_dollars_total", nil),
		"bytes":                  sum(mfs, "gemini_proxy_rewrite_saved_bytes_total", nil),
		"cached-share":           sum(mfs, "gemini_proxy_usage_tokens_total", map[string]string{"kind": "cached"}) / sum(mfs, "gemini_proxy_usage_tokens_total", map[string]string{"kind": "prompt"}),
		"cache-hit-share-served": 0.75,
		"cache-hit-share-blocks": 0.2,
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("page has no row %q", id)
			continue
		}
		// The process is younger than an hour: the last hour is all of it.
		if !near(g[0], w) || !near(g[1], w) {
			t.Errorf("row %q = %v (since start, last hour), want %v from /metrics", id, g, w)
		}
	}
	if w := 8.0; !near(want["requests"], w) {
		t.Errorf("fixture: %v generate requests, want %v", want["requests"], w)
	}
	for _, model := range []string{"gemini-2.5-flash", "gemini-2.5-pro"} {
		m := regexp.MustCompile(`<tr data-name="` + regexp.QuoteMeta(model) + `" data-tokens="([^"]+)" data-dollars="([^"]+)">`).FindStringSubmatch(html)
		if m == nil {
			t.Errorf("by-model has no row %s", model)
			continue
		}
		tokens, _ := strconv.ParseFloat(m[1], 64)
		dollars, _ := strconv.ParseFloat(m[2], 64)
		match := map[string]string{"model": model}
		if w := sum(mfs, "gemini_proxy_tokens_saved_total", match); !near(tokens, w) {
			t.Errorf("by-model %s tokens = %v, /metrics says %v", model, tokens, w)
		}
		if w := sum(mfs, "gemini_proxy_saved_dollars_total", match) - sum(mfs, "gemini_proxy_cost_increase_dollars_total", match); !near(dollars, w) {
			t.Errorf("by-model %s net dollars = %v, /metrics says %v", model, dollars, w)
		}
	}
	for _, rule := range []string{"superseded", "unchanged"} {
		m := regexp.MustCompile(`<tr data-name="` + rule + `" data-tokens="([^"]+)">`).FindStringSubmatch(html)
		if m == nil {
			t.Errorf("by-rule has no row %s", rule)
			continue
		}
		tokens, _ := strconv.ParseFloat(m[1], 64)
		if w := sum(mfs, "gemini_proxy_tokens_saved_total", map[string]string{"rule": rule}); !near(tokens, w) {
			t.Errorf("by-rule %s tokens = %v, /metrics says %v", rule, tokens, w)
		}
	}
	for _, bad := range []string{"<script", "src=", "https://", "@import", "url("} {
		if strings.Contains(html, bad) {
			t.Errorf("page contains %q: it must need no script and no external asset", bad)
		}
	}
}

func near(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

// TestLastHour checks the last-hour figures: all of the process's life
// while it is younger than an hour, then what changed since the newest
// per-minute snapshot at least an hour old.
func TestLastHour(t *testing.T) {
	f := newFixture()
	clock := testutil.NewClock(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	p := New(Options{Gatherer: f.reg, Now: clock.Now})
	f.traffic("gemini-2.5-flash", "superseded", 2, 100, 0.5)
	for range 30 {
		clock.Advance(time.Minute)
		if err := p.Tick(); err != nil {
			t.Fatal(err)
		}
	}
	// Snapshots at 03:01..03:30 hold tokens=100. More traffic, then ticks
	// up to 04:30.
	f.traffic("gemini-2.5-flash", "superseded", 2, 40, 0.25)
	fig, err := p.Figures()
	if err != nil {
		t.Fatal(err)
	}
	if fig.LastHourFull || fig.LastHour.Tokens != 140 {
		t.Errorf("at 03:30 last hour = %v tokens (full %v), want all 140 since start", fig.LastHour.Tokens, fig.LastHourFull)
	}
	for range 60 {
		clock.Advance(time.Minute)
		if err := p.Tick(); err != nil {
			t.Fatal(err)
		}
	}
	f.traffic("gemini-2.5-flash", "unchanged", 2, 7, 0.125)
	fig, err = p.Figures()
	if err != nil {
		t.Fatal(err)
	}
	// Now 04:30: the baseline is the 03:30 snapshot, taken just before
	// the second traffic (tokens 100): the last hour saw the second and
	// the third.
	if !fig.LastHourFull || fig.LastHour.Tokens != 47 || fig.Total.Tokens != 147 {
		t.Errorf("at 04:30 last hour = %v tokens (full %v), total %v; want 47 of 147", fig.LastHour.Tokens, fig.LastHourFull, fig.Total.Tokens)
	}
	if got := fig.LastHour.ByModel["gemini-2.5-flash"].Dollars; got != 0.75*(0.25+0.125) {
		t.Errorf("last hour net dollars of gemini-2.5-flash = %v, want %v", got, 0.75*(0.25+0.125))
	}
	if got := fig.LastHour.ByRule["unchanged"].Tokens; got != 7 {
		t.Errorf("last hour tokens by rule unchanged = %v, want 7", got)
	}
	if got := fig.LastHour.ByModel["gemini-2.5-flash"].Requests; got != 4 {
		t.Errorf("last hour requests of gemini-2.5-flash = %v, want 4", got)
	}
	if n := len(p.snapshots); n > keepSnapshots {
		t.Errorf("%d snapshots kept, want at most %d", n, keepSnapshots)
	}
}

// TestRecentReportsBounded checks the ring of recent reports: newest
// first, the oldest dropped beyond the bound, and shown on the page with no
// more than the report header.
func TestRecentReportsBounded(t *testing.T) {
	f := newFixture()
	p := New(Options{Gatherer: f.reg, Recent: 3})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 5 {
		p.Record(Report{At: at.Add(time.Duration(i) * time.Second), Model: "gemini-2.5-flash", Status: 200,
			Header: "bytes=" + strconv.Itoa(1000+i) + "->500; superseded=1", BytesBefore: 1000 + i, BytesAfter: 500})
	}
	fig, err := p.Figures()
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range fig.Recent {
		got = append(got, r.BytesBefore)
	}
	if want := []int{1004, 1003, 1002}; !slices.Equal(got, want) {
		t.Errorf("recent reports = %v, want %v (newest first)", got, want)
	}
	html := get(t, p)
	for _, want := range []string{"bytes=1004-&gt;500; superseded=1", "03:04:09", "bytes=1002-&gt;500"} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(html, "bytes=1001") {
		t.Error("page lists a report beyond the bound")
	}
}

// TestConversationChart checks the chart of a conversation: one pair of
// bars per turn, the naive bar of the largest turn at full height.
func TestConversationChart(t *testing.T) {
	p := New(Options{Gatherer: newFixture().reg})
	p.SetConversation("The demo conversation", []Turn{{2000, 2000}, {4000, 2100}, {8000, 2200}})
	html := get(t, p)
	if !strings.Contains(html, "The demo conversation") || !strings.Contains(html, "14000 naive against 6300 through the proxy: 55% saved") {
		t.Errorf("page lacks the conversation summary:\n%s", html)
	}
	for _, want := range []string{"turn 3, naive client: 8,000 prompt tokens", "turn 1, through the proxy: 2,000 prompt tokens", `height="180"`} {
		if !strings.Contains(html, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if n := strings.Count(html, "<rect "); n != 6 {
		t.Errorf("chart has %d bars, want 6", n)
	}
}
