package e2e

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

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

// waitLedger waits until the proxy of s has accounted n requests: a
// client may read its whole answer before the proxy's bookkeeping ran.
func waitLedger(t *testing.T, s *stack, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for counterSum(t, s.reg, "gemini_proxy_ledger_requests_total", nil) < float64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the ledger accounted %v requests, want %d", counterSum(t, s.reg, "gemini_proxy_ledger_requests_total", nil), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	for _, tc := range []struct {
		name                 string
		stream, interactions bool
	}{{"unary", false, false}, {"stream", true, false}, {"interactions", false, true}} {
		stream := tc.stream
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const model = "gemini-2.5-flash"
			price := flashPrice
			opts := []stackOption{withProxy(func(o *proxy.Options) { o.Prices = map[string]proxy.Price{model: price} })}
			if tc.interactions {
				// Interactions continuation: the proxy sends only the
				// new turns with previous_interaction_id.
				opts = append(opts, withInteractions(waiting))
			}
			direct := newStack(t, emulator.Options{Reply: scriptReply}, opts[0])
			proxied := newStack(t, emulator.Options{Reply: scriptReply}, opts...)
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
			waitLedger(t, proxied, 8)
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
			if n := counterSum(t, proxied.reg, "gemini_proxy_interactions_requests_total", map[string]string{"kind": "continued"}); tc.interactions && n < 5 {
				t.Errorf("interactions_requests_total{kind=continued} = %v, want most turns continued", n)
			}
			if n := counterSum(t, proxied.reg, "gemini_proxy_ledger_requests_total", map[string]string{"group": "treated", "turn": "8"}); n != 1 {
				t.Errorf("ledger_requests_total{turn=8} = %v, want 1", n)
			}
		})
	}
}

// TestLedgerHoldout runs twelve conversations of three turns through a
// proxy with metrics.holdout_fraction 0.5: each conversation stays in one
// group for all its turns, the holdout's bodies reach the upstream as the
// client wrote them, both groups' billed cost is exported by turn, and the
// measured saving per request of the last turn (holdout mean − treated
// mean) agrees with the ledger's estimate for the treated group.
func TestLedgerHoldout(t *testing.T) {
	t.Parallel()
	const model, conversations, turns = "gemini-2.5-flash", 12, 3
	price := flashPrice
	s := newStack(t, emulator.Options{Reply: scriptReply}, withProxy(func(o *proxy.Options) {
		o.Prices = map[string]proxy.Price{model: price}
		o.TenantSecret = []byte("holdout test secret")
		o.Ledger.HoldoutFraction = 0.5
	}))
	c := newClient(t, s.proxyURL)
	held := map[bool]int{}
	var billedLast [2]float64 // treated, holdout: billed at the last turn
	for n := range conversations {
		steps := append([]step(nil), askSteps[:turns]...)
		steps[0].handEdit = func(f string) string { return fmt.Sprintf("// Conversation %d.\n", n) + f }
		x := play(t, c, model, steps, false)
		holdout := strings.Contains(x.turns[0].report, "holdout")
		for i, tr := range x.turns {
			if got := strings.Contains(tr.report, "holdout"); got != holdout {
				t.Errorf("conversation %d turn %d: holdout %v, turn 1 was %v (report %q)", n, i+1, got, holdout, tr.report)
			}
		}
		held[holdout]++
		billedLast[map[bool]int{false: 0, true: 1}[holdout]] += billedDollars(price, x.turns[turns-1].usage)
	}
	waitLedger(t, s, conversations*turns)
	if held[true] == 0 || held[false] == 0 {
		t.Fatalf("groups: %d held out, %d treated; want both", held[true], held[false])
	}
	// Every request of a held-out conversation reached the upstream as
	// the client sent it: the emulator's bodies are the clients'.
	rewritten := counterSum(t, s.reg, "gemini_proxy_rewrite_saved_bytes_total", nil)
	if rewritten == 0 {
		t.Error("no treated request was rewritten")
	}
	for _, g := range []struct {
		name string
		n    int
	}{{"holdout", held[true]}, {"treated", held[false]}} {
		for turn := 1; turn <= turns; turn++ {
			labels := map[string]string{"group": g.name, "turn": strconv.Itoa(turn)}
			if got := counterSum(t, s.reg, "gemini_proxy_ledger_requests_total", labels); got != float64(g.n) {
				t.Errorf("ledger_requests_total%v = %v, want %d", labels, got, g.n)
			}
		}
	}
	last := strconv.Itoa(turns)
	q := func(name, group string) float64 {
		return counterSum(t, s.reg, name, map[string]string{"group": group, "turn": last})
	}
	if got, want := q("gemini_proxy_ledger_billed_dollars_total", "holdout"), billedLast[1]; math.Abs(got-want) > 1e-9 {
		t.Errorf("holdout billed at turn %s = %v, clients' usage bills %v", last, got, want)
	}
	if got, want := q("gemini_proxy_ledger_counterfactual_dollars_total", "holdout"), billedLast[1]; math.Abs(got-want) > 1e-9 {
		t.Errorf("holdout counterfactual = %v, want its billed %v (sent as is)", got, want)
	}
	measured := billedLast[1]/float64(held[true]) - billedLast[0]/float64(held[false])
	estimated := (q("gemini_proxy_ledger_counterfactual_dollars_total", "treated") - q("gemini_proxy_ledger_billed_dollars_total", "treated")) / float64(held[false])
	t.Logf("turn %s, per request: measured saving $%.6f (holdout %d, treated %d conversations), estimated $%.6f", last, measured, held[true], held[false], estimated)
	if measured <= 0 || math.Abs(estimated-measured)/measured > 0.10 {
		t.Errorf("estimated saving per request $%.6f, measured $%.6f: want within 10%%", estimated, measured)
	}
}
