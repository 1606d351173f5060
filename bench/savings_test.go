package bench

import (
	"log/slog"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

// stack starts the emulator with the bench's scripted replies and the
// proxy in front of it, on loopback.
func stack(t *testing.T) (emuURL, proxyURL string, replies *Replies) {
	t.Helper()
	replies = new(Replies)
	emu := httptest.NewServer(emulator.New(emulator.Options{Reply: replies.Reply}))
	t.Cleanup(emu.Close)
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
