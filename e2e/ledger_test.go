package e2e

import (
	"math"
	"testing"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

// billedDollars is what the usageMetadata a client received is billed at
// price, as the proxy's ledger bills it.
func billedDollars(p proxy.Price, u *genai.GenerateContentResponseUsageMetadata) float64 {
	if u == nil {
		return 0
	}
	cached := float64(u.CachedContentTokenCount)
	return ((float64(u.PromptTokenCount)-cached+float64(u.ToolUsePromptTokenCount))*p.Input +
		cached*p.CachedInput + float64(u.CandidatesTokenCount+u.ThoughtsTokenCount)*p.Output) / 1e6
}

// TestLedgerMatchesBill replays issue 14's scenario: an 8-turn naive
// session that re-sends and edits an 18 KB file, against two fresh
// emulators (which model implicit caching), once directly and once through
// the proxy. Billed from the usageMetadata each client received at the
// proxy's prices, the saving must equal the proxy's net ledger
// (saved_dollars_total − cost_increase_dollars_total) within ±10%, and the
// ledger must not price the removed tokens at the full input price.
func TestLedgerMatchesBill(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "unary", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const model = "gemini-2.5-flash"
			price := flashPrice
			prices := withProxy(func(o *proxy.Options) { o.Prices = map[string]proxy.Price{model: price} })
			direct := newStack(t, emulator.Options{Reply: scriptReply}, prices)
			proxied := newStack(t, emulator.Options{Reply: scriptReply}, prices)
			d := play(t, newClient(t, direct.emuURL), model, editSteps[:8], stream)
			x := play(t, newClient(t, proxied.proxyURL), model, editSteps[:8], stream)

			var naive, through, gross float64
			var cachedNaive int32
			for i := range d.turns {
				naive += billedDollars(price, d.turns[i].usage)
				through += billedDollars(price, x.turns[i].usage)
				cachedNaive += d.turns[i].usage.CachedContentTokenCount
				gross += float64(d.turns[i].usage.PromptTokenCount-x.turns[i].usage.PromptTokenCount) * price.Input / 1e6
			}
			if cachedNaive == 0 {
				t.Fatal("the naive session got no implicit-cache hits: the scenario does not test the counterfactual")
			}
			billedSaving := naive - through
			saved := counterSum(t, proxied.reg, "gemini_proxy_saved_dollars_total", nil)
			increase := counterSum(t, proxied.reg, "gemini_proxy_cost_increase_dollars_total", nil)
			ledger := saved - increase
			t.Logf("per 1,000 sessions: naive $%.2f, through the proxy $%.2f, billed saving $%.2f; ledger $%.2f (saved $%.2f, increases $%.2f); removed tokens at the input price $%.2f",
				naive*1000, through*1000, billedSaving*1000, ledger*1000, saved*1000, increase*1000, gross*1000)
			if billedSaving <= 0 {
				t.Fatalf("billed saving = %v, want > 0", billedSaving)
			}
			if rel := math.Abs(ledger-billedSaving) / billedSaving; rel > 0.10 {
				t.Errorf("ledger $%.6f differs from the billed saving $%.6f by %.1f%%, want ≤ 10%%", ledger, billedSaving, 100*rel)
			}
			spent := counterSum(t, proxied.reg, "gemini_proxy_ledger_billed_dollars_total", nil)
			if math.Abs(spent-through) > 1e-9 {
				t.Errorf("ledger billed = $%.6f, the client's usageMetadata bills $%.6f", spent, through)
			}
			if n := counterSum(t, proxied.reg, "gemini_proxy_ledger_requests_total", map[string]string{"group": "treated", "turn": "8"}); n != 1 {
				t.Errorf("ledger_requests_total{turn=8} = %v, want 1", n)
			}
		})
	}
}
