package bench

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// TestStablePrefix replays sessions through a proxy with
// rewrite.stable_prefix off and one with it on, in front of one emulator:
// the option must hurt no session, and must let the implicit cache hit on
// the stateless session, where nothing hits without it. The sessions are
// the stateless one and one of each other shape; `gemini-proxy bench
// --check` compares the whole corpus.
func TestStablePrefix(t *testing.T) {
	needCorpus(t)
	var sessions []*Session
	for _, s := range Sessions() {
		switch s.Name {
		case "stateless-go", "ask-go", "edit-go", "secondary", "images", "flat-en", "ctl-pinned", "ctl-functions":
			sessions = append(sessions, s)
		}
	}
	if len(sessions) != 8 {
		t.Fatalf("found %d of the 8 sessions", len(sessions))
	}
	replies := new(Replies)
	_, emu := testutil.StartEmulator(t, emulator.Options{Reply: replies.Reply})
	up, _ := url.Parse(emu.URL)
	run := func(on bool) *Savings {
		opts := rewrite.DefaultOptions()
		opts.StablePrefix = on
		h, err := proxy.New(proxy.Options{Upstream: up, Rewrite: proxy.RewriteOptions{Enabled: true, Options: opts}}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
		if err != nil {
			t.Fatalf("proxy.New: %v", err)
		}
		p := httptest.NewServer(h)
		defer p.Close()
		id := "off"
		if on {
			id = "on"
		}
		s, err := RunSavings(t.Context(), SavingsOptions{DirectURL: emu.URL, ProxyURL: p.URL, Replies: replies, RunID: id, Sessions: sessions})
		if err != nil {
			t.Fatalf("RunSavings: %v", err)
		}
		return s
	}
	sp := &StablePrefix{Off: run(false), On: run(true)}
	var b bytes.Buffer
	WriteStablePrefixTable(&b, sp)
	t.Logf("\n%s", b.String())
	if err := CheckStablePrefix(sp); err != nil {
		t.Error(err)
	}
	for i, off := range sp.Off.Sessions {
		on := sp.On.Sessions[i]
		if off.Kind != KindStateless {
			if on.Proxy != off.Proxy {
				t.Errorf("session %s: proxied figures changed by stable_prefix: %+v off, %+v on", off.Name, off.Proxy, on.Proxy)
			}
			continue
		}
		if off.Proxy.Cached != 0 || on.Proxy.Cached == 0 || on.Changed != on.Requests {
			t.Errorf("stateless session %s: implicit-cache tokens %d off, %d on, %d of %d requests rewritten on; want 0, > 0, all", off.Name, off.Proxy.Cached, on.Proxy.Cached, on.Changed, on.Requests)
		}
		if on.Proxy.Prompt > on.Naive.Prompt {
			t.Errorf("stateless session %s: prompt tokens %d naive, %d through the proxy", off.Name, on.Naive.Prompt, on.Proxy.Prompt)
		}
		if on.Proxy.Cached < on.Ideal.Cached*9/10 {
			t.Errorf("stateless session %s: implicit-cache tokens %d on, ideal client %d", off.Name, on.Proxy.Cached, on.Ideal.Cached)
		}
	}
}
