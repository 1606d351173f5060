package e2e

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// Savings targets (issue "rewrite engine").
const (
	// minSaved is the share of prompt tokens the proxy must save on a
	// 10-turn session that re-sends a 500-line file every turn.
	minSaved = 0.80
	// maxOverIdeal is how far the proxy may be from an ideal stateful
	// client that sends each version once.
	maxOverIdeal = 0.05
)

// idealContents is what an ideal stateful client sends for the same
// conversation: the first copy of the file in full, every later copy
// replaced by a placeholder in the proxy's reference format (so of the
// same size as the proxy's references).
func idealContents(naive []*genai.Content) []*genai.Content {
	full := fenced(bufferGo)
	placeholder := fmt.Sprintf("[unchanged: buffer.go sha256:%s, identical to the copy in turn 1]", sha12([]byte(full)))
	seen := false
	out := make([]*genai.Content, len(naive))
	for i, c := range naive {
		nc := &genai.Content{Role: c.Role}
		for _, p := range c.Parts {
			np := *p
			if strings.Contains(p.Text, full) {
				if seen {
					np.Text = strings.Replace(p.Text, full, placeholder, 1)
				}
				seen = true
			}
			nc.Parts = append(nc.Parts, &np)
		}
		out[i] = nc
	}
	return out
}

// TestSavingsTarget measures prompt tokens (the emulator's usageMetadata)
// of a 10-turn ask-mode session re-sending a 500-line file every turn:
// naive (direct), through the proxy, and an ideal stateful client.
func TestSavingsTarget(t *testing.T) {
	t.Parallel()
	const model = "gemini-2.5-flash"
	p, d, x := runPair(t, model, askSteps, false)
	compareSessions(t, p, d, x)

	ideal := newStack(t, emulator.Options{Reply: scriptReply})
	ic := newClient(t, ideal.emuURL)
	type row struct {
		naive, proxy, ideal, naiveCached, proxyCached int
		naiveBytes, proxyBytes, idealBytes            int
	}
	dr, pr := testutil.GenerateRequests(p.direct.emu.Received()), testutil.GenerateRequests(p.proxied.emu.Received())
	var rows []row
	var total row
	for i := range d.turns {
		resp, err := ic.Models.GenerateContent(t.Context(), model, idealContents(d.turns[i].sent), nil)
		if err != nil {
			t.Fatalf("turn %d: ideal request: %v", i+1, err)
		}
		r := row{
			naive: int(d.turns[i].usage.PromptTokenCount), proxy: int(x.turns[i].usage.PromptTokenCount),
			ideal:       int(resp.UsageMetadata.PromptTokenCount),
			naiveCached: int(d.turns[i].usage.CachedContentTokenCount), proxyCached: int(x.turns[i].usage.CachedContentTokenCount),
			naiveBytes: len(dr[i].Body), proxyBytes: len(pr[i].Body),
		}
		ir := ideal.emu.Received()
		r.idealBytes = len(ir[len(ir)-1].Body)
		rows = append(rows, r)
		total.naive += r.naive
		total.proxy += r.proxy
		total.ideal += r.ideal
		total.naiveCached += r.naiveCached
		total.proxyCached += r.proxyCached
		total.naiveBytes += r.naiveBytes
		total.proxyBytes += r.proxyBytes
		total.idealBytes += r.idealBytes
	}
	// The ideal client's references must be as large as the proxy's.
	rec := testutil.GenerateRequests(p.proxied.emu.Received())
	want := fmt.Sprintf("[unchanged: buffer.go sha256:%s, identical to the copy in turn 1]", sha12([]byte(fenced(bufferGo))))
	if got := refRE.FindString(rec[len(rec)-1].Contents[len(rec[len(rec)-1].Contents)-1].Text()); len(got) != len(want) {
		t.Errorf("proxy reference %q is %d bytes, the ideal placeholder %d", got, len(got), len(want))
	}

	saved := 1 - float64(total.proxy)/float64(total.naive)
	idealSaved := 1 - float64(total.ideal)/float64(total.naive)
	overIdeal := float64(total.proxy)/float64(total.ideal) - 1
	var b strings.Builder
	fmt.Fprintf(&b, "10-turn ask session, %s, bytes/buffer.go (%d lines, %d bytes) re-sent in every user turn; prompt tokens from the emulator's usageMetadata\n\n", model, strings.Count(bufferGo, "\n"), len(bufferGo))
	fmt.Fprintln(&b, "| turn | prompt tokens naive | through proxy | ideal client | cached naive | cached proxy | bytes naive | through proxy | ideal client |")
	fmt.Fprintln(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i, r := range append(rows, total) {
		turn := fmt.Sprint(i + 1)
		if i == len(rows) {
			turn = "total"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", turn, r.naive, r.proxy, r.ideal, r.naiveCached, r.proxyCached, r.naiveBytes, r.proxyBytes, r.idealBytes)
	}
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "proxy saves %.1f%% of naive prompt tokens (target >= %.0f%%); ideal saves %.1f%%; proxy is %+.2f%% from ideal (target within %.0f%%)\n",
		100*saved, 100*minSaved, 100*idealSaved, 100*overIdeal, 100*maxOverIdeal)
	t.Logf("savings:\n%s", b.String())

	if saved < minSaved {
		t.Errorf("proxy saved %.1f%% of prompt tokens (%d of %d), want at least %.0f%%", 100*saved, total.naive-total.proxy, total.naive, 100*minSaved)
	}
	if overIdeal > maxOverIdeal || overIdeal < -maxOverIdeal {
		t.Errorf("proxy sent %d prompt tokens, ideal client %d: %+.2f%%, want within %.0f%%", total.proxy, total.ideal, 100*overIdeal, 100*maxOverIdeal)
	}
}
