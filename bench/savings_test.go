package bench

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

// stack starts the emulator with the bench's scripted replies and the
// proxy in front of it, on loopback.
func stack(t *testing.T) (emuURL, proxyURL string, replies *Replies) {
	t.Helper()
	replies = new(Replies)
	_, emu := testutil.StartEmulator(t, emulator.Options{Reply: replies.Reply})
	up, _ := url.Parse(emu.URL)
	h, err := proxy.New(proxy.Options{Upstream: up, Rewrite: proxy.RewriteOptions{Enabled: true}}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	p := httptest.NewServer(h)
	t.Cleanup(p.Close)
	return emu.URL, p.URL, replies
}

func TestRunSavings(t *testing.T) {
	needCorpus(t)
	emuURL, proxyURL, replies := stack(t)
	s, err := RunSavings(t.Context(), SavingsOptions{DirectURL: emuURL, ProxyURL: proxyURL, Replies: replies, Progress: t.Output()})
	if err != nil {
		t.Fatalf("RunSavings: %v", err)
	}
	for _, r := range append(s.Sessions, s.Total) {
		t.Logf("%-14s %-9s naive %8d proxy %8d ideal %8d saved %5.1f%% ideal %5.1f%% share %5.1f%% changed %d unflat %d match %v cached n/p/i %d/%d/%d bytes %d/%d/%d err %v",
			r.Name, r.Kind, r.Naive.Prompt, r.Proxy.Prompt, r.Ideal.Prompt, 100*r.Saved(), 100*r.IdealSaved(), 100*r.ShareOfIdeal(), r.Changed, r.Unflattened, r.AnswersMatch,
			r.Naive.Cached, r.Proxy.Cached, r.Ideal.Cached, r.Naive.Bytes, r.Proxy.Bytes, r.Ideal.Bytes, r.Errors)
	}
}

func TestRunOverheadAndChart(t *testing.T) {
	needCorpus(t)
	emuURL, proxyURL, _ := stack(t)
	up, _ := url.Parse(emuURL)
	plain := httptest.NewServer(PlainProxy(up))
	t.Cleanup(plain.Close)
	targets := []Target{{Name: TargetDirect, URL: emuURL}, {Name: TargetPlain, URL: plain.URL}, {Name: TargetRewrite, URL: proxyURL}}
	o, err := RunOverhead(t.Context(), OverheadOptions{Targets: targets, Sizes: Sizes()[:2], Concurrency: []int{2}, CellTime: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("RunOverhead: %v", err)
	}
	if want := 2 * 2 * len(targets); len(o.Cells) != want {
		t.Fatalf("RunOverhead gave %d cells, want %d", len(o.Cells), want)
	}
	for _, c := range o.Cells {
		if c.Errors > 0 || c.Requests == 0 || c.P50 <= 0 || c.P99 < c.P50 {
			t.Errorf("cell %+v: want requests without errors and 0 < p50 <= p99", c)
		}
	}
	s := &Savings{Sessions: []SessionResult{{Name: "a", Naive: Tokens{Prompt: 1000}, Proxy: Tokens{Prompt: 100}, Ideal: Tokens{Prompt: 90}}}}
	path := filepath.Join(t.TempDir(), "chart.png")
	if err := WriteChart(path, s, o); err != nil {
		t.Fatalf("WriteChart: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("chart is not a PNG (%d bytes, %v)", len(b), err)
	}
}

// With an admin URL, RunSavings counts each session's audit failures: the
// proxied replays take turns, so the increase of the metric during one is
// that session's.
func TestRunSavingsAudit(t *testing.T) {
	needCorpus(t)
	emuURL, proxyURL, replies := stack(t)
	up, _ := url.Parse(proxyURL)
	var proxied atomic.Int64 // every proxied request "fails the audit"
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		httputil.NewSingleHostReverseProxy(up).ServeHTTP(w, r)
	}))
	t.Cleanup(counting.Close)
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s{reason=\"test\"} %d\n", AuditMetric, proxied.Load())
	}))
	t.Cleanup(admin.Close)
	var sessions []*Session
	for _, s := range Sessions() {
		if s.Name == "ctl-side-task" || s.Name == "ctl-functions" || s.Name == "two-doc-envs" {
			sessions = append(sessions, s)
		}
	}
	s, err := RunSavings(t.Context(), SavingsOptions{DirectURL: emuURL, ProxyURL: counting.URL, AdminURL: admin.URL, Replies: replies, Sessions: sessions, Parallel: 3})
	if err != nil {
		t.Fatalf("RunSavings: %v", err)
	}
	total := 0
	for i, r := range s.Sessions {
		if r.AuditFailures != len(sessions[i].Turns) {
			t.Errorf("session %s: %d audit failures, want one per request (%d)", r.Name, r.AuditFailures, len(sessions[i].Turns))
		}
		total += r.AuditFailures
	}
	if !s.Audit.Measured || !s.Audit.Exported || s.Audit.Failures != total || s.Audit.ByReason["test"] != total {
		t.Errorf("Audit = %+v, want %d failures for reason test", s.Audit, total)
	}
	if err := Check(s, false); err == nil {
		t.Errorf("Check passed with audit failures")
	}
}
