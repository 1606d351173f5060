package e2e

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// figure is one row of the upstream-state table: what the emulator
// received and billed in one session with one mode off or on.
type figure struct {
	mode, state, session string
	calls                int // requests the emulator received, cache calls included
	bytes                int // their body bytes
	prompt, cached, out  int // billed tokens of the generate and interactions requests
	requests             float64
	creation, storage    float64 // context caches
}

func (f figure) full() int      { return f.prompt - f.cached }
func (f figure) total() float64 { return f.requests + f.creation + f.storage }
func (f figure) row() string {
	return fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %d | %d | %d | %.6f | %.6f | %.6f | **%.6f** |",
		f.mode, f.state, f.session, f.calls, f.bytes, f.prompt, f.cached, f.full(), f.out, f.requests, f.creation, f.storage, f.total())
}

// defaultPrice is gemini-2.5-flash's row of config.DefaultPrices.
func defaultPrice(t *testing.T, model string) proxy.Price {
	t.Helper()
	for _, p := range config.DefaultPrices {
		if p.Model == model {
			return proxy.Price{Input: p.Input, CachedInput: p.CachedInput, Output: p.Output, Storage: p.Storage, Checked: p.Checked}
		}
	}
	t.Fatalf("no default price for %s", model)
	return proxy.Price{}
}

// billed sums what an emulator received: every request's body bytes, and
// the usage of each answered generate or interactions request priced at p
// (prompt − cached at the input price, cached at the cached-input price,
// candidates and thoughts at the output price).
func billed(rs []emulator.Received, p proxy.Price) figure {
	var f figure
	for _, r := range rs {
		f.calls++
		f.bytes += len(r.Body)
		switch r.API {
		case "generateContent", "streamGenerateContent", "interactions":
		default:
			continue
		}
		if r.Status != 200 {
			continue
		}
		u := r.Usage
		f.prompt += u.PromptTokenCount
		f.cached += u.CachedContentTokenCount
		f.out += u.CandidatesTokenCount + u.ThoughtsTokenCount
		f.requests += (float64(u.PromptTokenCount-u.CachedContentTokenCount)*p.Input + float64(u.CachedContentTokenCount)*p.CachedInput +
			float64(u.CandidatesTokenCount+u.ThoughtsTokenCount)*p.Output) / 1e6
	}
	return f
}

// TestUpstreamStateFigures runs one representative session per
// upstream-state mode with the mode off and on, and prints the issue #8
// table (Markdown, for BENCHMARKS.md): bytes the emulator received, prompt
// tokens billed at the cached and at the full rate, and dollars at
// gemini-2.5-flash's config.DefaultPrices. It fails when a mode goes the
// wrong way: interactions must upload fewer bytes, context caching must be
// cheaper where it pays, prefix stabilisation must give more cached and
// never more prompt tokens.
func TestUpstreamStateFigures(t *testing.T) {
	const model = "gemini-2.5-flash"
	price := defaultPrice(t, model)
	if p := price; p.Input != flashPrice.Input || p.CachedInput != flashPrice.CachedInput || p.Output != flashPrice.Output || p.Storage != flashPrice.Storage {
		// The context-cache stacks price with flashPrice.
		t.Fatalf("config.DefaultPrices %s = %+v, the context-cache tests use %+v", model, price, flashPrice)
	}
	var rows []figure

	// upstream_state.interactions: a 10-turn chat re-sending buffer.go in
	// every user turn; off is rewriting only (default rewrite options).
	// The emulator's implicit cache is on, as in real Gemini.
	ixSession := func(st *stack) (figure, []string) {
		chat, err := newClient(t, st.proxyURL).Chats.Create(t.Context(), ixModel, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		for i := range 10 {
			texts = append(texts, send(t, chat, i%2 == 1, fenced(bufferGo)+fmt.Sprintf("\nQuestion %d about this file?", i+1)).Text)
		}
		return billed(st.emu.Received(), price), texts
	}
	ixOff, want := ixSession(newStack(t, oneChunk))
	ixOn, got := ixSession(newIxStack(t, oneChunk))
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Errorf("interactions: answers with continuation differ from rewriting only")
	}
	const ixDesc = "10-turn chat re-sending a 500-line file; implicit cache on"
	ixOff.mode, ixOff.state, ixOff.session = "upstream_state.interactions", "off", ixDesc
	ixOn.mode, ixOn.state, ixOn.session = "upstream_state.interactions", "on", ixDesc
	rows = append(rows, ixOff, ixOn)
	if ixOn.bytes >= ixOff.bytes/2 {
		t.Errorf("interactions: on uploaded %d bytes, want well under off's %d", ixOn.bytes, ixOff.bytes)
	}
	if ixOn.prompt != ixOff.prompt {
		t.Errorf("interactions: on billed %d prompt tokens, off %d; the model sees the same conversation", ixOn.prompt, ixOff.prompt)
	}

	// upstream_state.context_cache: TestContextCacheSession's session
	// (system instruction, tools, buffer.go re-sent in each of 10 turns 30
	// s apart, TTL 5 min), with the emulator's implicit cache off and on.
	for _, implicit := range []bool{false, true} {
		off, on := newCCStackImplicit(t, false, implicit), newCCStackImplicit(t, true, implicit)
		ccSessions(t, fmt.Sprintf("context cache (implicit %v)", implicit), off, on, nil)
		desc := "10 turns, system+tools+500-line file, 30 s apart, TTL 5m; implicit cache off"
		if implicit {
			desc = strings.TrimSuffix(desc, "off") + "on"
		}
		var fs [2]figure
		for i, s := range []*ccStack{off, on} {
			f := billed(s.emu.Received(), price)
			// Received lists generate calls only; count the
			// cachedContents calls (create, renew) too.
			f.calls, f.bytes = int(s.upCalls.Load()), int(s.upBytes.Load())
			d := sessionDollars(t, s, price)
			if d.prompt != f.prompt || d.cached != f.cached {
				t.Fatalf("context cache: sessionDollars billed %d/%d prompt/cached tokens, the table %d/%d", d.prompt, d.cached, f.prompt, f.cached)
			}
			f.creation, f.storage = d.creation, d.storage
			f.mode, f.state, f.session = "upstream_state.context_cache", []string{"off", "on"}[i], desc
			fs[i] = f
		}
		// The creation cost the proxy exports equals the emulator's caches'.
		if m := counterSum(t, on.reg, "gemini_proxy_context_cache_cost_dollars_total", map[string]string{"kind": metrics.CacheCostCreation}); fmt.Sprintf("%.9f", m) != fmt.Sprintf("%.9f", fs[1].creation) {
			t.Errorf("context cache (implicit %v): proxy's creation cost metric $%.9f, emulator's caches $%.9f", implicit, m, fs[1].creation)
		}
		t.Logf("context cache, implicit cache %v: %d caches made; proxy metrics: saved $%.6f before costs, creation $%.6f, storage $%.6f (storage counts when a cache ends; the table prices every cache to its expiry)",
			implicit, int(counterSum(t, on.reg, "gemini_proxy_context_cache_created_total", nil)),
			counterSum(t, on.reg, "gemini_proxy_context_cache_saved_dollars_total", nil),
			counterSum(t, on.reg, "gemini_proxy_context_cache_cost_dollars_total", map[string]string{"kind": metrics.CacheCostCreation}),
			counterSum(t, on.reg, "gemini_proxy_context_cache_cost_dollars_total", map[string]string{"kind": metrics.CacheCostStorage}))
		rows = append(rows, fs[0], fs[1])
		if fs[0].prompt != fs[1].prompt {
			t.Errorf("context cache (implicit %v): prompt tokens on %d, off %d", implicit, fs[1].prompt, fs[0].prompt)
		}
		if !implicit && fs[1].total() >= fs[0].total() {
			t.Errorf("context cache (implicit off): on cost $%.6f, off $%.6f; it pays here", fs[1].total(), fs[0].total())
		}
		if implicit && fs[1].total() > fs[0].total()*1.01 {
			t.Errorf("context cache (implicit on): on cost $%.6f, off $%.6f; the price model should not make a cache that does not pay", fs[1].total(), fs[0].total())
		}
	}

	// rewrite.stable_prefix: a stateless client sending "question, then
	// the file" six times with different questions (bench's stateless-go
	// session, with buffer.go); implicit cache on.
	questions := []string{
		"Why does Grow panic with a negative count?",
		"When does ReadFrom return io.EOF to its caller?",
		"What does Truncate(0) keep of the buffer's storage?",
		"How does WriteRune encode an ASCII rune?",
		"Why does UnreadRune fail once a Write has happened?",
		"What does ReadBytes return when the delimiter is missing?",
	}
	spSession := func(st *stack) figure {
		c := newClient(t, st.proxyURL)
		for _, q := range questions {
			if _, err := c.Models.GenerateContent(t.Context(), model, genai.Text(q+"\n\n```go buffer.go\n"+bufferGo+"```\n"), nil); err != nil {
				t.Fatalf("GenerateContent(%q): %v", q, err)
			}
		}
		return billed(st.emu.Received(), price)
	}
	noStable := rewrite.DefaultOptions()
	noStable.StablePrefix = false
	spOff := spSession(newStack(t, emulator.Options{}, withRewrite(noStable)))
	spOn := spSession(newStack(t, emulator.Options{}))
	const spDesc = "stateless: question then a 500-line file, 6 requests; implicit cache on"
	spOff.mode, spOff.state, spOff.session = "rewrite.stable_prefix", "off", spDesc
	spOn.mode, spOn.state, spOn.session = "rewrite.stable_prefix", "on", spDesc
	rows = append(rows, spOff, spOn)
	if spOn.cached <= spOff.cached {
		t.Errorf("stable prefix: on billed %d cached tokens, off %d; want more", spOn.cached, spOff.cached)
	}
	if spOn.prompt > spOff.prompt {
		t.Errorf("stable prefix: on billed %d prompt tokens, off %d; want never more", spOn.prompt, spOff.prompt)
	}

	var tb strings.Builder
	fmt.Fprintf(&tb, "\nUpstream-state modes, %s at config.DefaultPrices ($%.2f input, $%.2f cached input, $%.2f output per 1M tokens, $%.2f per 1M token-hours of cache storage):\n\n",
		model, price.Input, price.CachedInput, price.Output, price.Storage)
	tb.WriteString("| mode | state | session | upstream requests | request bytes | prompt tokens | at cached rate | at full rate | output tokens | $ requests | $ cache creation | $ cache storage | $ total |\n")
	tb.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, f := range rows {
		tb.WriteString(f.row() + "\n")
	}
	t.Log(tb.String())
}
