package stack

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite examples/grafana/dashboards/gemini-proxy.json")

// Paths of the example files, relative to this package.
var (
	dashboardFile  = filepath.Join("..", "..", "examples", "grafana", "dashboards", "gemini-proxy.json")
	alertsFile     = filepath.Join("..", "..", "examples", "prometheus", "alerts.yml")
	promConfigFile = filepath.Join("..", "..", "examples", "prometheus", "prometheus.yml")
	datasourceFile = filepath.Join("..", "..", "examples", "grafana", "provisioning", "datasources", "prometheus.yml")
)

func TestDashboardFile(t *testing.T) {
	want, err := Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(dashboardFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go test ./internal/stack -run TestDashboardFile -update", dashboardFile)
	}
}

// dashboardExprs returns every PromQL expression in the dashboard file,
// keyed by "panel title/refId".
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			}
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title+"/"+tg.RefID] = tg.Expr
		}
	}
	return out
}

// alertRule is one rule of examples/prometheus/alerts.yml.
type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// threshold splits an alert expression "<inner> > <number>" into its inner
// expression.
var threshold = regexp.MustCompile(`^(.*\S)\s*>\s*[0-9.]+$`)

func TestAlertRulesShape(t *testing.T) {
	rules := alertRules(t)
	if len(rules) < 4 {
		t.Fatalf("%d alert rules, want at least 4 (rewrite errors, fallbacks, upstream errors, latency)", len(rules))
	}
	for _, r := range rules {
		if !threshold.MatchString(strings.TrimSpace(r.Expr)) {
			t.Errorf("alert %s: expr %q is not \"<expression> > <threshold>\"", r.Alert, r.Expr)
		}
	}
}

func TestDashboardShape(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 30 {
		t.Errorf("dashboard has %d queries, want the full set", len(exprs))
	}
	raw, err := os.ReadFile(datasourceFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "uid: "+DatasourceUID) {
		t.Errorf("%s does not provision the datasource uid %s the dashboard uses", datasourceFile, DatasourceUID)
	}
	// Every metric the proxy exports that an operator decides on is on
	// the dashboard.
	all := strings.Join(mapValues(exprs), "\n")
	for _, name := range []string{
		"gemini_proxy_tokens_saved_total", "gemini_proxy_saved_dollars_total", "gemini_proxy_spent_dollars_total",
		"gemini_proxy_rewrite_saved_bytes_total", "gemini_proxy_tokens_per_byte", "gemini_proxy_usage_tokens_total",
		"gemini_proxy_proxy_overhead_seconds_bucket", "gemini_proxy_upstream_duration_seconds_bucket",
		"gemini_proxy_time_to_first_byte_seconds_bucket", "gemini_proxy_rewrite_errors_total",
		"gemini_proxy_rewrite_fallbacks_total", "gemini_proxy_upstream_responses_total", "gemini_proxy_upstream_errors_total",
		"gemini_proxy_client_requests_total", "gemini_proxy_unpriced_requests_total", "gemini_proxy_sampled_prompt_tokens_total",
		"gemini_proxy_cache_hits_total", "gemini_proxy_build_info",
		"gemini_proxy_interactions_requests_total", "gemini_proxy_interactions_fallbacks_total", "gemini_proxy_interactions_saved_bytes_total",
		"gemini_proxy_cost_increase_dollars_total", "gemini_proxy_prefix_changes_total", "gemini_proxy_prefix_change_tokens_total",
		"gemini_proxy_ledger_requests_total", "gemini_proxy_ledger_billed_dollars_total", "gemini_proxy_ledger_billed_dollars_squared_total",
		"gemini_proxy_ledger_counterfactual_dollars_total", "gemini_proxy_compaction_decisions_total",
	} {
		if !strings.Contains(all, name) {
			t.Errorf("no dashboard query uses %s", name)
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
