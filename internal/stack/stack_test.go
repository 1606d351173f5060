package stack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

const (
	prometheusBin = "/usr/bin/prometheus"
	promtoolBin   = "/usr/bin/promtool"
	// tolerance is the stated tolerance of the tokens-saved estimate.
	tolerance = 0.10
)

// requirePrometheus skips the test without a Prometheus, except in CI.
func requirePrometheus(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(prometheusBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required in CI (apt-get install prometheus): %v", prometheusBin, err)
		}
		t.Skipf("%s not installed", prometheusBin)
	}
}

func TestPromtool(t *testing.T) {
	requirePrometheus(t)
	for _, args := range [][]string{
		{"check", "config", promConfigFile},
		{"check", "rules", alertsFile},
	} {
		out, err := exec.CommandContext(t.Context(), promtoolBin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestStack is the end-to-end check of the monitoring stack: see the
// package doc.
func TestStack(t *testing.T) {
	requirePrometheus(t)
	start := time.Now()
	bin := buildProxy(t, t.Context())
	t.Logf("built gemini-proxy in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	emu := emulator.New(emulator.Options{Reply: reply, ImplicitCacheMinTokens: 256})
	rec := &recorder{h: emu}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)

	proxyAddr, adminAddr := startProxy(t, ctx, bin, up.URL, startRedis(t))
	prom := startPrometheus(t, ctx, adminAddr)

	// The naive workload, twice straight to the emulator for the naive
	// figures, then twice through the proxy with scrapes in between, so
	// that every counter grows after Prometheus first saw it (rate() over
	// a series that never grew is zero, and quantiles and ratios of zero
	// rates have no value).
	w := newWorkload(t)
	w.run(ctx, up.URL, nil)
	w.run(ctx, up.URL, nil)
	direct := emu.Received()
	emu.Reset()
	rec.reset()
	w.run(ctx, "http://"+proxyAddr, emu)
	waitQuery(t, ctx, prom, fmt.Sprintf(`sum(gemini_proxy_requests_total{route=~"generate_content|stream_generate_content"}) == %d`, w.requests))
	time.Sleep(1100 * time.Millisecond)
	w.run(ctx, "http://"+proxyAddr, nil)
	proxied := emu.Received()

	naive := summarize(direct)
	sent := summarize(proxied)
	t.Logf("direct: %d requests, %d body bytes, %d prompt tokens", naive.requests, naive.okBytes, naive.okPrompt)
	t.Logf("proxied: %d answered requests (%d countTokens), %d body bytes accepted, %d prompt tokens; %d generate body bytes on the wire",
		sent.requests, sent.countTokens, sent.okBytes, sent.okPrompt, rec.generateBytes())
	if naive.requests != 2*w.requests || naive.failed != 0 {
		t.Fatalf("direct run: %d requests, %d failed; want %d, 0", naive.requests, naive.failed, 2*w.requests)
	}

	// Wait until Prometheus has scraped the final counters at least twice.
	waitQuery(t, ctx, prom, fmt.Sprintf(`sum(gemini_proxy_requests_total{route=~"generate_content|stream_generate_content"}) == %d`, 2*w.requests))
	time.Sleep(2100 * time.Millisecond)
	t.Logf("workload and scrapes done %v after the test started", time.Since(start).Round(time.Millisecond))

	t.Run("dashboard", func(t *testing.T) {
		scraped := scrapedFamilies(t, ctx, adminAddr)
		exprs := dashboardExprs(t)
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range exprs {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			expr := substitute(exprs[k])
			if missing := missingCacheFamily(expr, scraped); missing != "" {
				// metrics/cache.go is built by its own constructor; until
				// serve wires it, its panels can only be parsed.
				if _, err := query(ctx, prom, expr); err != nil {
					t.Errorf("%s: %s: %v", k, expr, err)
				}
				t.Logf("%s: %s not exported by this build; the query parses", k, missing)
				continue
			}
			if strings.Contains(expr, `group="holdout"`) {
				// The stack runs with metrics.holdout_fraction 0: its
				// figures check that every request was rewritten. The
				// holdout's arithmetic is checked end to end by
				// e2e.TestLedgerHoldout; here the query must parse.
				if _, err := query(ctx, prom, expr); err != nil {
					t.Errorf("%s: %s: %v", k, expr, err)
				}
				t.Logf("%s: no holdout in this run; the query parses", k)
				continue
			}
			if n := waitData(ctx, prom, expr); n == 0 {
				t.Errorf("%s: no data for %s", k, expr)
			}
		}
	})

	t.Run("alerts", func(t *testing.T) {
		for _, r := range alertRules(t) {
			expr := strings.TrimSpace(r.Expr)
			if _, err := query(ctx, prom, expr); err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			m := threshold.FindStringSubmatch(expr)
			if m == nil {
				t.Errorf("alert %s: no threshold in %q", r.Alert, expr)
				continue
			}
			if n := waitData(ctx, prom, m[1]); n == 0 {
				t.Errorf("alert %s: no data for %s", r.Alert, m[1])
			}
		}
		// The rules were loaded by the Prometheus that scraped the proxy.
		var rules struct {
			Groups []struct {
				Rules []struct {
					Name   string `json:"name"`
					Health string `json:"health"`
				} `json:"rules"`
			} `json:"groups"`
		}
		getJSON(t, ctx, prom+"/api/v1/rules", &rules)
		n := 0
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health == "err" {
					t.Errorf("rule %s: health %s", r.Name, r.Health)
				}
			}
		}
		if want := len(alertRules(t)); n != want {
			t.Errorf("Prometheus loaded %d rules, want %d", n, want)
		}
	})

	t.Run("savings agree with the emulator", func(t *testing.T) {
		v := func(expr string) float64 {
			t.Helper()
			x, err := scalar(ctx, prom, expr)
			if err != nil {
				t.Fatalf("%s: %v", expr, err)
			}
			return x
		}
		// Bytes: what the proxy says it sent is what the emulator received.
		if got, want := v(`sum(gemini_proxy_request_bytes_total{stage="sent",route=~"generate_content|stream_generate_content"})`), float64(rec.generateBytes()); got != want {
			t.Errorf("request bytes sent = %v, emulator received %v", got, want)
		}
		bodySaved := float64(naive.okBytes - sent.okBytes)
		if got := v(`sum(gemini_proxy_rewrite_bytes_total{stage="before"}) - sum(gemini_proxy_rewrite_bytes_total{stage="after"})`); got != bodySaved {
			t.Errorf("rewrite bytes before - after = %v, emulator saw %v fewer body bytes", got, bodySaved)
		}
		// Saved bytes count decoded text; JSON escaping makes bodies larger.
		textSaved := v(`sum(gemini_proxy_rewrite_saved_bytes_total)`)
		if textSaved > bodySaved || textSaved < 0.8*bodySaved {
			t.Errorf("text bytes saved %v, body bytes saved %v: want 80–100%%", textSaved, bodySaved)
		}
		// Tokens: the usage the proxy saw is what the emulator charged.
		if got := v(`sum(gemini_proxy_usage_tokens_total{kind="prompt"})`); got != float64(sent.okPrompt) {
			t.Errorf("prompt tokens = %v, emulator charged %d", got, sent.okPrompt)
		}
		exact := float64(naive.okPrompt - sent.okPrompt)
		est := v(`sum(gemini_proxy_tokens_saved_total)`)
		errPct := 100 * (est - exact) / exact
		t.Logf("tokens saved: estimated %.0f, exact %.0f (naive %d − sent %d): %+.1f%%; text bytes saved %.0f, body bytes saved %.0f",
			est, exact, naive.okPrompt, sent.okPrompt, errPct, textSaved, bodySaved)
		if exact <= 0 || math.Abs(est-exact) > tolerance*exact {
			t.Errorf("estimated tokens saved %.0f vs exact %.0f: off by %.1f%%, tolerance %.0f%%", est, exact, errPct, 100*tolerance)
		}
		if got := v(`sum(gemini_proxy_rewrite_fallbacks_total)`); got != 1 {
			t.Errorf("fallbacks = %v, want 1 (the injected 500)", got)
		}
		// The sampled countTokens calls run off the request path: one may
		// still have been in flight when the emulator's requests were
		// taken after the workload (CI once saw 5 counted, 4 answered), so
		// both sides are read again until they agree.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			got := v(`sum(gemini_proxy_count_tokens_requests_total{outcome="ok"})`)
			answered := summarize(emu.Received()).countTokens
			if got >= 1 && float64(answered) == got {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("countTokens ok = %v, emulator answered %d", got, answered)
				break
			}
		}
		if got := v(`sum(gemini_proxy_unpriced_requests_total{model="gemini-2.0-flash"})`); got != float64(2*w.unpriced) {
			t.Errorf("unpriced = %v, want %d", got, 2*w.unpriced)
		}
		if got := v(`sum(gemini_proxy_spent_dollars_total)`); got <= 0 {
			t.Errorf("spent dollars = %v, want > 0", got)
		}
	})
}

// recorder counts the generate request body bytes that reach the
// emulator, including requests it answers with an injected fault (which
// it does not record).
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	n  int
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if p := req.URL.Path; strings.HasSuffix(p, ":generateContent") || strings.HasSuffix(p, ":streamGenerateContent") {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.n += len(body)
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.h.ServeHTTP(w, req)
}

func (r *recorder) generateBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.n = 0
	r.mu.Unlock()
}

// summary adds up what the emulator received and answered.
type summary struct {
	requests, failed, countTokens int
	okBytes, okPrompt             int // generate requests answered 200
}

func summarize(rs []emulator.Received) summary {
	var s summary
	for _, r := range rs {
		if r.API == "countTokens" {
			s.countTokens++
			continue
		}
		s.requests++
		if r.Status != http.StatusOK {
			s.failed++
			continue
		}
		s.okBytes += len(r.Body)
		s.okPrompt += r.Usage.PromptTokenCount
	}
	return s
}

// substitute replaces the dashboard's variables as Grafana would.
func substitute(expr string) string {
	return strings.NewReplacer("$__rate_interval", "1m", "$__range", "5m", "$model", ".*").Replace(expr)
}

// missingCacheFamily returns the first gemini_proxy_cache_ metric the
// expression uses that the scrape lacks.
func missingCacheFamily(expr string, scraped map[string]bool) string {
	for _, f := range strings.FieldsFunc(expr, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if strings.HasPrefix(f, "gemini_proxy_cache_") {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(f, "_bucket"), "_sum"), "_count")
			if !scraped[base] && !scraped[f] {
				return f
			}
		}
	}
	return ""
}

// scrapedFamilies returns the metric family names the admin listener serves.
func scrapedFamilies(t *testing.T, ctx context.Context, adminAddr string) map[string]bool {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = true
		}
	}
	return out
}

// buildProxy builds the gemini-proxy binary into a temporary directory.
func buildProxy(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gemini-proxy")
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := testutil.BuildProxy(ctx, bin, false); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startProxy runs `gemini-proxy serve` in front of upstream on kernel-chosen
// loopback ports, with every rewritten request sampled for countTokens
// (rate-limited), and returns the proxy and admin addresses.
func startProxy(t *testing.T, ctx context.Context, bin, upstream, redisURL string) (proxyAddr, adminAddr string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = os.Environ()
	if redisURL != "" {
		cmd.Env = append(cmd.Env,
			"GEMINI_PROXY_CACHE_BACKEND=redis",
			"GEMINI_PROXY_CACHE_REDIS_URL="+redisURL,
			"GEMINI_PROXY_CACHE_TENANT_SECRET=stack-test-tenant-secret-0123456789",
		)
	}
	cmd.Env = append(cmd.Env,
		"GEMINI_PROXY_UPSTREAM_URL="+upstream,
		"GEMINI_PROXY_SERVER_LISTEN=127.0.0.1:0",
		"GEMINI_PROXY_ADMIN_LISTEN=127.0.0.1:0",
		"GEMINI_PROXY_SERVER_SHUTDOWN_GRACE=1s",
		"GEMINI_PROXY_LOG_FORMAT=json",
		"GEMINI_PROXY_METRICS_COUNT_TOKENS_SAMPLE_RATE=1",
		"GEMINI_PROXY_METRICS_COUNT_TOKENS_PER_SECOND=2",
		"GEMINI_PROXY_UPSTREAM_STATE_CONTEXT_CACHE=true",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		testutil.Stop(cmd.Process, done, os.Interrupt, 5*time.Second)
	})
	select {
	case a := <-testutil.Listening(stderr):
		return a[0], a[1]
	case <-time.After(15 * time.Second):
		t.Fatal("gemini-proxy did not log its listening addresses")
	}
	return "", ""
}

// startRedis runs redis-server on a free loopback port, so that the
// dashboard's shared-mode panels have data, and returns its URL; without
// redis-server it returns "" (those panels are then only parsed), except
// in CI, where it is installed.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required in CI: %v", err)
		}
		t.Log("redis-server not installed: the Redis panels are only parsed")
		return ""
	}
	return cachetest.StartRedis(t).URL()
}

// startPrometheus runs Prometheus on a free loopback port, scraping
// adminAddr every second with the example alert rules, and returns its
// base URL once it is ready.
func startPrometheus(t *testing.T, ctx context.Context, adminAddr string) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: gemini-proxy
    static_configs:
      - targets: [%q]
`, rules, adminAddr)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, prometheusBin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.console.templates="+filepath.Join(dir, "consoles"),
		"--web.console.libraries="+filepath.Join(dir, "console_libraries"),
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		testutil.Stop(cmd.Process, exited, os.Interrupt, 5*time.Second)
		if t.Failed() {
			t.Logf("prometheus log:\n%s", lastLines(logs.String(), 30))
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", lastLines(logs.String(), 30))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return base
			}
		}
	}
	t.Fatalf("prometheus not ready:\n%s", lastLines(logs.String(), 30))
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// queryResult is the data of an instant query.
type queryResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	} `json:"result"`
}

// query evaluates expr now through the HTTP API.
func query(ctx context.Context, prom, expr string) (*queryResult, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, prom+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Status string      `json:"status"`
		Error  string      `json:"error"`
		Data   queryResult `json:"data"`
	}
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("status %d: %s", res.StatusCode, raw)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query failed: %s", body.Error)
	}
	return &body.Data, nil
}

// waitData returns the number of series expr yields, retrying for a few
// scrapes while it yields none (a rate needs two samples in its window).
func waitData(ctx context.Context, prom, expr string) int {
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		r, err := query(ctx, prom, expr)
		n := 0
		if err == nil {
			for _, s := range r.Result {
				if v, ok := s.Value[1].(string); ok && v != "NaN" {
					n++
				}
			}
		}
		if n > 0 || time.Now().After(deadline) {
			return n
		}
	}
}

// waitQuery waits until expr yields data.
func waitQuery(t *testing.T, ctx context.Context, prom, expr string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if r, err := query(ctx, prom, expr); err == nil && len(r.Result) > 0 {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", expr)
}

// scalar evaluates expr and returns its single value.
func scalar(ctx context.Context, prom, expr string) (float64, error) {
	r, err := query(ctx, prom, expr)
	if err != nil {
		return 0, err
	}
	if len(r.Result) != 1 {
		return 0, fmt.Errorf("%d series, want 1", len(r.Result))
	}
	s, _ := r.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

func getJSON(t *testing.T, ctx context.Context, u string, v any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body.Data, v); err != nil {
		t.Fatal(err)
	}
}

// The scripted workload: naive clients that re-send the whole file (and,
// in one conversation, the same screenshot) in every user turn.

// edits are what the scripted model adds to the file, by question.
var edits = map[string]string{
	"Add a Contains method.": "\n// Contains reports whether l holds an element with value v.\nfunc (l *List) Contains(v any) bool {\n\tfor e := l.Front(); e != nil; e = e.Next() {\n\t\tif e.Value == v {\n\t\t\treturn true\n\t\t}\n\t}\n\treturn false\n}\n",
	"Add a Clear method.":    "\n// Clear removes every element of l.\nfunc (l *List) Clear() { l.Init() }\n",
	"Add an Index method.":   "\n// Index returns the position of the first element with value v, or -1.\nfunc (l *List) Index(v any) int {\n\ti := 0\n\tfor e := l.Front(); e != nil; e = e.Next() {\n\t\tif e.Value == v {\n\t\t\treturn i\n\t\t}\n\t\ti++\n\t}\n\treturn -1\n}\n",
}

// reply is the emulator's scripted model: it answers from the question
// alone, so that the direct and the proxied run see the same answers.
func reply(r emulator.ReplyRequest) string {
	q := strings.TrimSpace(r.LastUserText())
	if i := strings.LastIndexByte(q, '\n'); i >= 0 {
		q = q[i+1:]
	}
	if e, ok := edits[q]; ok {
		return "Add this to the end of the file:\n\n```go\n" + e + "```\n"
	}
	return fmt.Sprintf("About %q: the file implements a doubly linked list; every operation is O(1) except the walks.", q)
}

type workload struct {
	t        *testing.T
	file     string
	image    []byte
	requests int // generate requests per run
	unpriced int // of which to a model without a price
}

func newWorkload(t *testing.T) *workload {
	src, err := os.ReadFile(filepath.Join(testutil.GOROOT(t), "src", "container", "list", "list.go"))
	if err != nil {
		t.Fatalf("reading a Go source file for the workload: %v", err)
	}
	img := make([]byte, 3000)
	for i := range img {
		img[i] = byte(i * 7 % 251)
	}
	return &workload{t: t, file: string(src), image: img}
}

var questions = []string{
	"Explain what this file does.",
	"Add a Contains method.",
	"Is PushBackList safe when other is l?",
	"Add a Clear method.",
	"What does lazyInit do?",
	"Add an Index method.",
	"Summarise what we changed.",
}

// run plays the workload against base. With emu set (the proxied run), it
// makes the emulator answer one rewritten request with a 500 first (a
// status the rewrite can cause; 503 is never retried), so that the proxy
// falls back to the original body once.
func (w *workload) run(ctx context.Context, base string, emu *emulator.Server) {
	t := w.t
	w.requests, w.unpriced = 0, 0
	client := testutil.NewClient(t, base, "stack-key")
	// Conversation 1: the Go SDK, gemini-2.5-flash, alternating unary and
	// streaming calls; the model edits the file three times.
	file := w.file
	var history []*genai.Content
	for i, q := range questions {
		if i == 4 && emu != nil {
			emu.SetFault(emulator.Fault{Status: http.StatusInternalServerError, Times: 1,
				Match: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, ":generateContent") }})
		}
		user := genai.NewContentFromText("Here is my current file:\n\n```go list.go\n"+file+"```\n\n"+q, genai.RoleUser)
		contents := append(history, user)
		var answer string
		if i%2 == 1 {
			for resp, err := range client.Models.GenerateContentStream(ctx, "gemini-2.5-flash", contents, nil) {
				if err != nil {
					t.Fatalf("turn %d (stream): %v", i, err)
				}
				answer += resp.Text()
			}
		} else {
			resp, err := client.Models.GenerateContent(ctx, "gemini-2.5-flash", contents, nil)
			if err != nil {
				t.Fatalf("turn %d: %v", i, err)
			}
			answer = resp.Text()
		}
		w.requests++
		if e, ok := edits[q]; ok {
			file += e
		}
		history = append(contents, genai.NewContentFromText(answer, genai.RoleModel))
	}

	// Conversation 2: a deprecated-SDK client on gemini-2.0-flash (not in
	// the price table) re-sending the same screenshot every turn.
	img := base64.StdEncoding.EncodeToString(w.image)
	var turns []any
	for i, q := range []string{"What is on this screenshot?", "Which button should I press?", "And after that?"} {
		turns = append(turns, map[string]any{"role": "user", "parts": []any{
			map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": img}},
			map[string]any{"text": q},
		}})
		body, _ := json.Marshal(map[string]any{"contents": turns})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1beta/models/gemini-2.0-flash:generateContent", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Goog-Api-Key", "stack-key-2")
		req.Header.Set("X-Goog-Api-Client", "genai-js/0.24.1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("image turn %d: %d %s", i, res.StatusCode, raw)
		}
		var out struct {
			Candidates []struct {
				Content json.RawMessage `json:"content"`
			} `json:"candidates"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Candidates) == 0 {
			t.Fatalf("image turn %d: %v %s", i, err, raw)
		}
		turns = append(turns, json.RawMessage(out.Candidates[0].Content))
		w.requests++
		w.unpriced++
	}
	if err := ctx.Err(); err != nil {
		t.Fatal(errors.Join(errors.New("workload"), err))
	}
}
