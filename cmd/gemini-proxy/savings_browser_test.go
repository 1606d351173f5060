package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// TestSavingsPageInBrowser loads the savings page of a running demo
// --serve in headless Chromium (Debian's chromium package), checks the
// figures of the rendered page against /metrics, and saves a screenshot:
// to $BENCH_OUT/savings-page.png when BENCH_OUT is set (CI keeps it with
// the bench results), else to a temporary directory. Without chromium it
// skips, unless CI=true, where it fails.
func TestSavingsPageInBrowser(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
		}
		t.Skip("chromium is not installed (apt-get install chromium); skipping the browser check of the savings page")
	}
	clearEnv(t)
	_, adminAddr, stop := startDemoServe(t)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	url := "http://" + adminAddr + "/"

	chromium := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
			"--user-data-dir=" + t.TempDir(), "--window-size=1000,1700"}, args...)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, browser, append(args, url)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}

	before := scrapeTotals(t, adminAddr)
	dom := string(chromium("--dump-dom"))
	if after := scrapeTotals(t, adminAddr); after != before {
		t.Fatalf("metrics moved while the page loaded: %v then %v", before, after)
	}
	rows := map[string]float64{}
	for _, m := range regexp.MustCompile(`<tr id="([a-z-]+)" data-total="([^"]+)"`).FindAllStringSubmatch(dom, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("row %s: %v", m[1], err)
		}
		rows[m[1]] = v
	}
	for id, want := range map[string]float64{"requests": before.requests, "rewritten": before.rewritten, "tokens": before.tokens, "dollars": before.dollars, "bytes": before.bytes} {
		got, ok := rows[id]
		if !ok {
			t.Errorf("rendered page has no row %q:\n%.2000s", id, dom)
			continue
		}
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("rendered page: %s = %v, /metrics says %v", id, got, want)
		}
	}
	if before.requests != 5 || before.tokens <= 0 {
		t.Errorf("after the demo /metrics counts %v generate requests and %v tokens saved, want 5 and some", before.requests, before.tokens)
	}
	for _, want := range []string{"The demo conversation", "<svg", "bytes=50966-&gt;"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}

	dir := os.Getenv("BENCH_OUT")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "savings-page.png")
	chromium("--screenshot=" + shot)
	b, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 10_000 {
		t.Fatalf("screenshot %s: %d bytes, %v; want a PNG", shot, len(b), err)
	}
	t.Logf("screenshot of the savings page: %s", shot)
}

// pageTotals are the /metrics sums the savings page's summary shows.
type pageTotals struct{ requests, rewritten, tokens, dollars, bytes float64 }

func scrapeTotals(t *testing.T, adminAddr string) pageTotals {
	t.Helper()
	res, body := testutil.Get(t, "http://"+adminAddr+"/metrics")
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name, label, value string) float64 {
		var s float64
		for _, m := range mfs[name].GetMetric() {
			ok := label == ""
			for _, lp := range m.GetLabel() {
				ok = ok || (lp.GetName() == label && lp.GetValue() == value)
			}
			if ok {
				s += m.GetCounter().GetValue()
			}
		}
		return s
	}
	return pageTotals{
		requests:  sum("gemini_proxy_rewrite_requests_total", "", ""),
		rewritten: sum("gemini_proxy_rewrite_requests_total", "outcome", "changed"),
		tokens:    sum("gemini_proxy_tokens_saved_total", "", ""),
		dollars:   sum("gemini_proxy_saved_dollars_total", "", "") - sum("gemini_proxy_cost_increase_dollars_total", "", ""),
		bytes:     sum("gemini_proxy_rewrite_saved_bytes_total", "", ""),
	}
}
