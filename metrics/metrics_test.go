package metrics_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	// Touch every vector so that each family is gathered.
	m.Requests.WithLabelValues("generate_content", "gemini-2.5-flash", "200", "false").Inc()
	m.RequestDuration.WithLabelValues("generate_content", "false").Observe(1)
	m.UpstreamDuration.WithLabelValues("generate_content").Observe(1)
	m.TimeToFirstByte.WithLabelValues("stream_generate_content").Observe(1)
	m.ProxyOverhead.WithLabelValues("generate_content").Observe(0.0001)
	m.InFlight.Inc()
	m.RequestBytes.WithLabelValues("generate_content", metrics.StageReceived).Add(1)
	m.ResponseBytes.WithLabelValues("generate_content").Add(1)
	m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensPrompt).Add(1)
	m.ClientRequests.WithLabelValues("google-genai-go", "false").Inc()
	m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeChanged).Inc()
	m.RewriteSavedBytes.WithLabelValues("unchanged").Add(1)
	m.RewriteReplacements.WithLabelValues("unchanged").Inc()
	m.RewriteErrors.Inc()
	m.RewriteFallbacks.Inc()
	m.ClientCancels.Inc()
	m.SetBuildInfo("v0.0.0-test")

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
	if len(mfs) != 19 {
		t.Errorf("gathered %d families, want 19", len(mfs))
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "gemini_proxy_") {
			t.Errorf("metric %s lacks the gemini_proxy_ prefix", mf.GetName())
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
