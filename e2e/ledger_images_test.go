package e2e

import (
	"math"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

// TestLedgerMatchesBillImages is the bench's images session end to end:
// the same image attached to every turn of a five-turn conversation with
// nothing else to replace. Implicit caching bills most of the naive
// prompt at the cached rate, so the net saving is small next to the
// tokens replaced, and an error of a few tokens per image reference was
// most of it (the ledger said $0.02 per 1,000 sessions where the bill
// saved $0.01). The ledger must be within 5% of the billed saving.
func TestLedgerMatchesBillImages(t *testing.T) {
	t.Parallel()
	const model = "gemini-2.5-flash"
	price := flashPrice
	withPrices := withProxy(func(o *proxy.Options) { o.Prices = map[string]proxy.Price{model: price} })
	reply := func(emulator.ReplyRequest) string {
		return "It is a frame from a test video used by Go's image decoders."
	}
	direct := newStack(t, emulator.Options{Reply: reply}, withPrices)
	proxied := newStack(t, emulator.Options{Reply: reply}, withPrices)
	steps := []step{
		{question: "What is in this picture?", image: true, noFile: true},
		{question: "Which colours dominate?", image: true, noFile: true},
		{question: "Describe the lower half.", image: true, noFile: true},
		{question: "Is there any text in it?", image: true, noFile: true},
		{question: "Suggest a caption.", image: true, noFile: true},
	}
	d := play(t, newClient(t, direct.emuURL), model, steps, false)
	x := play(t, newClient(t, proxied.proxyURL), model, steps, false)
	var naive, through float64
	var cachedNaive int32
	for i := range d.turns {
		naive += billedDollars(price, d.turns[i].usage)
		through += billedDollars(price, x.turns[i].usage)
		cachedNaive += d.turns[i].usage.CachedContentTokenCount
	}
	if cachedNaive == 0 {
		t.Fatal("the naive session got no implicit-cache hits: the scenario does not test the counterfactual")
	}
	billedSaving := naive - through
	waitLedger(t, proxied, len(steps))
	ledger := counterSum(t, proxied.reg, "gemini_proxy_saved_dollars_total", nil) -
		counterSum(t, proxied.reg, "gemini_proxy_cost_increase_dollars_total", nil)
	t.Logf("per 1,000 sessions: naive $%.4f, through the proxy $%.4f, billed saving $%.4f, ledger $%.4f", naive*1000, through*1000, billedSaving*1000, ledger*1000)
	if billedSaving <= 0 {
		t.Fatalf("billed saving = %v, want > 0", billedSaving)
	}
	if rel := math.Abs(ledger-billedSaving) / billedSaving; rel > 0.05 {
		t.Errorf("ledger $%.6f differs from the billed saving $%.6f by %.1f%%, want ≤ 5%%", ledger, billedSaving, 100*rel)
	}
}
