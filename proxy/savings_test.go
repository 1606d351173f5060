package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

func TestEstimateTokens(t *testing.T) {
	tests := []struct {
		name  string
		rep   *rewrite.Report
		ratio float64
		want  map[rewrite.Rule]float64
	}{
		{"nil report", nil, 0.3, map[rewrite.Rule]float64{}},
		{"text rules", &rewrite.Report{Replacements: []rewrite.Replacement{
			{Rule: rewrite.RuleUnchanged, Bytes: 1100, RefBytes: 100},
			{Rule: rewrite.RuleUnchanged, Bytes: 600, RefBytes: 100},
			{Rule: rewrite.RuleSuperseded, Bytes: 2100, RefBytes: 100},
			{Rule: rewrite.RuleSecondary, Bytes: 700, RefBytes: 200},
		}}, 0.25, map[rewrite.Rule]float64{
			rewrite.RuleUnchanged: 375, rewrite.RuleSuperseded: 500, rewrite.RuleSecondary: 125,
		}},
		// "[" 1, "same" 1, "image" 1, "/" 1, "png" 1, "sha" 1, "256" 3,
		// ":" 1, "1a2b3c4d5e6f" 12, "as" "in" "turn" 3, "1" 1, "]" 1.
		{"image costs fixed tokens minus its reference", &rewrite.Report{Replacements: []rewrite.Replacement{
			{Rule: rewrite.RuleImage, Bytes: 400000, RefBytes: 62, Reference: "[same image/png sha256:1a2b3c4d5e6f as in turn 1]"},
		}}, 0.25, map[rewrite.Rule]float64{rewrite.RuleImage: ImageTokens - 27}},
		{"unflatten removes nothing", &rewrite.Report{UnflattenedTurns: 3}, 0.25, map[rewrite.Rule]float64{}},
		// A file in a JSON string is read escaped: PromptBytes, not Bytes.
		{"json string", &rewrite.Report{Replacements: []rewrite.Replacement{
			{Rule: rewrite.RuleUnchanged, Bytes: 1000, RefBytes: 100, PromptBytes: 1100, PromptRefBytes: 110},
		}}, 0.25, map[rewrite.Rule]float64{rewrite.RuleUnchanged: 247.5}},
		// Un-flattening's count less one role token per content made.
		{"unflatten counted", &rewrite.Report{UnflattenedTurns: 2, UnflattenedBytes: 100, UnflattenedTokens: 90}, 0.25,
			map[rewrite.Rule]float64{rewrite.RuleUnflatten: 88}},
		{"unflatten not counted", &rewrite.Report{UnflattenedTurns: 2, UnflattenedBytes: 100}, 0.25,
			map[rewrite.Rule]float64{rewrite.RuleUnflatten: 25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := estimateTokens(tt.rep, tt.ratio)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("estimateTokens (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCalibrateUsage calibrates from the Report of a real rewrite: prompt
// tokens minus one per content, over the text and other prompt bytes the
// Report describes, and never from a prompt with media or cachedContent.
func TestCalibrateUsage(t *testing.T) {
	const model = "gemini-2.5-flash"
	long := strings.Repeat("a", 300)
	sys := `{"parts":[{"text":"be brief"}]}`
	call := `{"functionCall":{"name":"f"}}`
	tests := []struct {
		name      string
		body      string
		bytes     int // prompt bytes the sample divides by; 0: no sample
		contents  int
		wantRatio bool
	}{
		{"text", `{"contents":[{"role":"user","parts":[{"text":"` + long + `"},{"text":"h\u00e9"}]},{"role":"model","parts":[{"text":"ok"}]}]}`, 300 + 3 + 2, 2, true},
		{"escapes count decoded", `{"contents":[{"parts":[{"text":"a\nb\"c` + long + `"}]}]}`, 5 + 300, 1, true},
		{"system instruction and tools count raw", `{"systemInstruction":` + sys + `,"tools":[{"x":1}],"contents":[{"parts":[{"text":"` + long + `"}]}]}`, len(sys) + len(`[{"x":1}]`) + 300, 1, true},
		{"function call counts its part", `{"contents":[{"parts":[` + call + `,{"text":"` + long + `"}]}]}`, len(call) + 300, 1, true},
		{"inline data", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}},{"text":"` + long + `"}]}]}`, 0, 0, false},
		{"file data", `{"contents":[{"parts":[{"fileData":{"fileUri":"files/x"}},{"text":"` + long + `"}]}]}`, 0, 0, false},
		{"cached content", `{"cachedContent":"cachedContents/x","contents":[{"parts":[{"text":"` + long + `"}]}]}`, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rep, err := rewrite.Request([]byte(tt.body), rewrite.DefaultOptions(), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, m := newTestSavings(t, Options{})
			const tokensPerByte = 0.3
			prompt := int64(tt.contents) + int64(math.Round(tokensPerByte*float64(max(tt.bytes, 300))))
			s.calibrateUsage(&savingsJob{label: model, model: model, report: rep, usage: &Usage{PromptTokens: prompt}})
			samples := testutil.ToFloat64(m.CalibrationSamples.WithLabelValues(model, metrics.SourceUsage))
			if !tt.wantRatio {
				if samples != 0 || s.ratioFor(model) != PriorTokensPerByte {
					t.Errorf("calibrated from a prompt with media: %v samples, ratio %v", samples, s.ratioFor(model))
				}
				return
			}
			want := float64(prompt-int64(tt.contents)) / float64(tt.bytes)
			if got := s.ratioFor(model); samples != 1 || math.Abs(got-want) > 1e-12 {
				t.Errorf("after one sample: %v samples, ratio %v; want 1 sample, ratio %v (bytes %d)", samples, got, want, tt.bytes)
			}
		})
	}
}

func newTestSavings(t *testing.T, opts Options) (*savings, *metrics.Metrics) {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry())
	allow := map[string]bool{"gemini-2.5-flash": true}
	s, err := newSavings(m, opts, func(model string) string {
		if allow[model] {
			return model
		}
		return modelOther
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

func TestCalibration(t *testing.T) {
	s, m := newTestSavings(t, Options{})
	const model = "gemini-2.5-flash"
	if got := s.ratioFor(model); got != PriorTokensPerByte {
		t.Errorf("uncalibrated ratio = %v, want the prior %v", got, PriorTokensPerByte)
	}
	if got := testutil.ToFloat64(m.TokensPerByte.WithLabelValues(model)); got != PriorTokensPerByte {
		t.Errorf("gauge = %v, want the prior %v", got, PriorTokensPerByte)
	}
	s.calibrate(model, metrics.SourceUsage, 100, 100) // too small: ignored
	if got := testutil.ToFloat64(m.CalibrationSamples.WithLabelValues(model, metrics.SourceUsage)); got != 0 {
		t.Errorf("a %d-byte sample was used", 100)
	}
	s.calibrate(model, metrics.SourceUsage, 1000, 4000)
	if got := testutil.ToFloat64(m.TokensPerByte.WithLabelValues(model)); got != 0.25 {
		t.Errorf("after one usage sample: gauge = %v, want 0.25", got)
	}
	// A second sample moves the ratio towards it, weighted by bytes.
	s.calibrate(model, metrics.SourceUsage, 1500, 3000)
	want := (1000*(1-usageDecay) + 1500) / (4000*(1-usageDecay) + 3000)
	if got := s.ratioFor(model); math.Abs(got-want) > 1e-12 {
		t.Errorf("after two usage samples: ratio = %v, want %v", got, want)
	}
	// An exact sample takes precedence over usage samples.
	s.calibrate(model, metrics.SourceCountTokens, 300, 1000)
	if got := testutil.ToFloat64(m.TokensPerByte.WithLabelValues(model)); got != 0.3 {
		t.Errorf("after an exact sample: gauge = %v, want 0.3", got)
	}
	if got := testutil.ToFloat64(m.CalibrationSamples.WithLabelValues(model, metrics.SourceUsage)); got != 2 {
		t.Errorf("usage samples = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.CalibrationSamples.WithLabelValues(model, metrics.SourceCountTokens)); got != 1 {
		t.Errorf("count_tokens samples = %v, want 1", got)
	}
	// Models calibrate independently.
	if got := s.ratioFor(modelOther); got != PriorTokensPerByte {
		t.Errorf("other model ratio = %v, want the prior", got)
	}
}

func TestSpend(t *testing.T) {
	s, m := newTestSavings(t, Options{Prices: map[string]Price{
		"gemini-2.5-flash": {Input: 0.30, CachedInput: 0.03, Output: 2.50, Checked: "2025-10-31"},
		"models/gemini-9":  {Input: 1, CachedInput: 0.1, Output: 10},
	}})
	s.spend("gemini-2.5-flash", "gemini-2.5-flash", &Usage{PromptTokens: 1_000_000, CachedTokens: 400_000, CandidatesTokens: 100_000, ThoughtsTokens: 100_000, ToolUsePromptTokens: 100_000})
	want := 0.7*0.30 + 0.4*0.03 + 0.2*2.50
	if got := testutil.ToFloat64(m.SpentDollars.WithLabelValues("gemini-2.5-flash")); math.Abs(got-want) > 1e-9 {
		t.Errorf("spent = %v, want %v", got, want)
	}
	s.spend(modelOther, "gemini-9", &Usage{PromptTokens: 1_000_000})
	if got := testutil.ToFloat64(m.SpentDollars.WithLabelValues(modelOther)); math.Abs(got-1) > 1e-9 {
		t.Errorf("spent on a priced model off the allowlist = %v, want 1", got)
	}
	s.spend(modelOther, "gemini-unknown", &Usage{PromptTokens: 10})
	if got := testutil.ToFloat64(m.UnpricedRequests.WithLabelValues(modelOther)); got != 1 {
		t.Errorf("unpriced = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Price.WithLabelValues("gemini-2.5-flash", metrics.PriceCachedInput)); got != 0.03 {
		t.Errorf("cached input price gauge = %v, want 0.03", got)
	}
	d := time.Date(2025, 10, 31, 0, 0, 0, 0, time.UTC)
	if got := testutil.ToFloat64(m.PriceChecked.WithLabelValues("gemini-2.5-flash")); got != float64(d.Unix()) {
		t.Errorf("checked = %v, want %v", got, d.Unix())
	}
	if n := testutil.CollectAndCount(m.Price); n != 3 {
		t.Errorf("price series = %d, want 3 (models off the allowlist are not exported)", n)
	}
}

func TestSavingsOptionErrors(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	id := func(s string) string { return s }
	for _, opts := range []Options{
		{CountTokensSampleRate: 1.5},
		{CountTokensSampleRate: -0.1},
		{Prices: map[string]Price{"gemini-2.5-flash": {Checked: "31/10/2025"}}},
	} {
		if _, err := newSavings(m, opts, id); err == nil {
			t.Errorf("newSavings(%+v) succeeded, want an error", opts)
		}
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLimiter(2, func() time.Time { return now })
	var got []bool
	for range 3 {
		got = append(got, l.allow())
	}
	now = now.Add(500 * time.Millisecond)
	got = append(got, l.allow(), l.allow())
	now = now.Add(10 * time.Second)
	got = append(got, l.allow(), l.allow(), l.allow())
	want := []bool{true, true, false, true, false, true, true, false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allow sequence (-want +got):\n%s", diff)
	}
}

func TestCountTokensBody(t *testing.T) {
	got, err := countTokensBody([]byte(`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"temperature":0}}`), "gemini-2.5-flash")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"generateContentRequest":{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"temperature":0},"model":"models/gemini-2.5-flash"}}`
	if string(got) != want {
		t.Errorf("countTokensBody = %s, want %s", got, want)
	}
	if _, err := countTokensBody([]byte(`[1]`), "m"); err == nil {
		t.Error("countTokensBody accepted a non-object")
	}
}

// TestSavingsOnlyWhenSent checks that savings are counted only for a
// rewritten body the upstream accepted: not after a fallback, not when
// the upstream refused it.
func TestSavingsOnlyWhenSent(t *testing.T) {
	tests := []struct {
		name     string
		status   int // answer to the rewritten body; the original always gets 200
		fallback bool
		saved    float64
	}{
		{"accepted", 200, false, 20},
		{"fallback after 400", 400, true, 0},
		{"fallback after 500", 500, true, 0},
		{"unavailable", 503, false, 0},
		{"rate limited", 429, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				body := make([]byte, 1024)
				n, _ := r.Body.Read(body)
				w.Header().Set("Content-Type", "application/json")
				if string(body[:n]) == rewrittenBody && tt.status != 200 {
					w.WriteHeader(tt.status)
					w.Write([]byte(`{"error":{"code":` + strconv.Itoa(tt.status) + `,"message":"no","status":"INVALID_ARGUMENT"}}`))
					return
				}
				w.Write([]byte(`{"candidates":[],"usageMetadata":{"promptTokenCount":50,"candidatesTokenCount":10}}`))
			})
			done := make(chan struct{}, 1)
			f := newFixture(t, be.URL, Options{
				Rewrite:    RewriteOptions{Enabled: true},
				Prices:     map[string]Price{"gemini-2.5-flash": {Input: 1, Output: 2}},
				OnExchange: func(Exchange) { done <- struct{}{} },
			})
			f.h.rewriteFn = changed
			f.h.auditFn = noAudit // a fake rewrite keeps no records
			req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
			req.Header.Set("X-Goog-Api-Key", "k")
			do(t, rawClient(), req)
			<-done // finish has run: background jobs, if any, were started
			f.h.sav.wait()
			if got := testutil.ToFloat64(f.m.RewriteFallbacks); got != map[bool]float64{true: 1}[tt.fallback] {
				t.Errorf("fallbacks = %v", got)
			}
			if got := testutil.ToFloat64(f.m.RewriteSavedBytes.WithLabelValues("unchanged")); got != tt.saved {
				t.Errorf("saved bytes = %v, want %v", got, tt.saved)
			}
			wantTokens := tt.saved * PriorTokensPerByte // the 79-byte body is too small to calibrate
			if got := testutil.ToFloat64(f.m.TokensSaved.WithLabelValues("unchanged", "gemini-2.5-flash")); math.Abs(got-wantTokens) > 1e-9 {
				t.Errorf("tokens saved = %v, want %v", got, wantTokens)
			}
			// The first request of its conversation: nothing was cached,
			// so every removed token would have been billed at the input
			// price.
			if got := testutil.ToFloat64(f.m.SavedDollars.WithLabelValues("gemini-2.5-flash")); math.Abs(got-wantTokens/1e6) > 1e-15 {
				t.Errorf("dollars saved = %v, want %v", got, wantTokens/1e6)
			}
			// The ledger accounts every answered request; after a fallback
			// the client's own body was sent, so its counterfactual is
			// what was billed: $50×1 + $10×2 per million tokens.
			if tt.status == 200 || tt.fallback {
				treated := func(c *prometheus.CounterVec) float64 {
					return testutil.ToFloat64(c.WithLabelValues(metrics.GroupTreated, "1"))
				}
				billed, cf := treated(f.m.LedgerBilledDollars), treated(f.m.LedgerCounterfactual)
				if math.Abs(billed-70e-6) > 1e-12 {
					t.Errorf("ledger billed = %v, want 70e-6", billed)
				}
				if want := billed + tt.saved*PriorTokensPerByte/1e6; math.Abs(cf-want) > 1e-12 {
					t.Errorf("ledger counterfactual = %v, want %v", cf, want)
				}
			}
			if n := testutil.CollectAndCount(f.m.UpstreamResponses); tt.fallback && n != 2 {
				t.Errorf("upstream response series = %d, want 2 (the rejection and the 200)", n)
			}
		})
	}
}

// naiveBody builds a naive two-turn request that re-sends the same file.
func naiveBody(file string) []byte {
	turn := func(role, text string) map[string]any {
		return map[string]any{"role": role, "parts": []map[string]string{{"text": text}}}
	}
	b, _ := json.Marshal(map[string]any{
		"contents": []any{
			turn("user", "Here is my file:\n\n```go main.go\n"+file+"```\n\nWhat does it do?"),
			turn("model", "It prints numbers."),
			turn("user", "Here is my file:\n\n```go main.go\n"+file+"```\n\nAdd a comment to each function."),
		},
		"generationConfig": map[string]any{"temperature": 0},
	})
	return b
}

func goFile(funcs int) string {
	var b strings.Builder
	b.WriteString("package main\n\nimport \"fmt\"\n")
	for i := range funcs {
		fmt.Fprintf(&b, "\nfunc step%d(values []int) int {\n\ttotal := 0\n\tfor _, v := range values {\n\t\ttotal += v * %d\n\t}\n\tfmt.Println(\"step\", %d, total)\n\treturn total\n}\n", i, i+1, i)
	}
	return b.String()
}

// TestCountTokensSample runs the proxy in front of the emulator with every
// rewritten request sampled: the exact original count must equal what the
// emulator charges for the original request, and the estimate must be close.
func TestCountTokensSample(t *testing.T) {
	emu, up := tu.StartEmulator(t, emulator.Options{})
	done := make(chan struct{}, 1)
	f := newFixture(t, up.URL, Options{
		Rewrite:               RewriteOptions{Enabled: true},
		CountTokensSampleRate: 1,
		CountTokensPerSecond:  100,
		OnExchange:            func(Exchange) { done <- struct{}{} },
	})
	body := naiveBody(goFile(12))

	// What the original costs, straight from the emulator.
	direct, _ := http.NewRequest("POST", up.URL+"/v1beta/models/gemini-2.5-flash:generateContent", bytes.NewReader(body))
	direct.Header.Set("X-Goog-Api-Key", "k")
	if res, _ := do(t, rawClient(), direct); res.StatusCode != 200 {
		t.Fatalf("direct: status %d", res.StatusCode)
	}
	naive := emu.Received()[0].Usage.PromptTokenCount

	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", bytes.NewReader(body))
	req.Header.Set("X-Goog-Api-Key", "k")
	res, _ := do(t, rawClient(), req)
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get(HeaderReport), "unchanged=1") {
		t.Fatalf("proxied: status %d, report %q", res.StatusCode, res.Header.Get(HeaderReport))
	}
	<-done
	f.h.sav.wait()

	rec := emu.Received()
	var sent int
	var countCalls int
	for _, r := range rec[1:] {
		switch r.API {
		case "generateContent":
			sent = r.Usage.PromptTokenCount
		case "countTokens":
			countCalls++
			if r.Header.Get("X-Goog-Api-Key") != "k" || r.Status != 200 {
				t.Errorf("countTokens call: key %q, status %d (%s)", r.Header.Get("X-Goog-Api-Key"), r.Status, r.Error)
			}
		}
	}
	if countCalls != 1 {
		t.Fatalf("emulator saw %d countTokens calls, want 1", countCalls)
	}
	const model = "gemini-2.5-flash"
	if got := testutil.ToFloat64(f.m.CountTokens.WithLabelValues(metrics.CountTokensOK)); got != 1 {
		t.Errorf("count_tokens ok = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.m.SampledTokens.WithLabelValues(model, metrics.SampledOriginalExact)); got != float64(naive) {
		t.Errorf("exact original tokens = %v, want %d (the emulator's promptTokenCount of the original)", got, naive)
	}
	if got := testutil.ToFloat64(f.m.SampledTokens.WithLabelValues(model, metrics.SampledSent)); got != float64(sent) {
		t.Errorf("sent tokens = %v, want %d", got, sent)
	}
	exactSaved := float64(naive - sent)
	est := testutil.ToFloat64(f.m.TokensSaved.WithLabelValues("unchanged", model))
	if exactSaved <= 0 || math.Abs(est-exactSaved)/exactSaved > 0.10 {
		t.Errorf("estimated saved %v tokens, exact %v: off by more than 10%%", est, exactSaved)
	}
	if got := testutil.ToFloat64(f.m.SampledTokens.WithLabelValues(model, metrics.SampledOriginalEstimated)); math.Abs(got-(float64(sent)+est)) > 1e-6 {
		t.Errorf("estimated original = %v, want sent+estimate %v", got, float64(sent)+est)
	}
	// The exact sample now drives the ratio: saved tokens over removed bytes.
	removed := testutil.ToFloat64(f.m.RewriteSavedBytes.WithLabelValues("unchanged"))
	if got, want := testutil.ToFloat64(f.m.TokensPerByte.WithLabelValues(model)), exactSaved/removed; math.Abs(got-want) > 1e-9 {
		t.Errorf("tokens_per_byte = %v, want exact saved / removed bytes = %v", got, want)
	}
	t.Logf("naive %d, sent %d, exact saved %v, estimated %.1f (%.1f%%)", naive, sent, exactSaved, est, 100*(est-exactSaved)/exactSaved)
}

func TestCountTokensLimits(t *testing.T) {
	s, m := newTestSavings(t, Options{CountTokensSampleRate: 1, CountTokensPerSecond: 1})
	if !s.reserveSample() {
		t.Fatal("first sample refused")
	}
	if s.reserveSample() {
		t.Error("second sample within a second allowed at 1/s")
	}
	if got := testutil.ToFloat64(m.CountTokens.WithLabelValues(metrics.CountTokensRateLimited)); got != 1 {
		t.Errorf("rate_limited = %v, want 1", got)
	}
	s.limit = newLimiter(1000, time.Now)
	for range maxCountTokens - 1 {
		if !s.reserveSample() {
			t.Fatal("sample refused below the concurrency limit")
		}
	}
	if s.reserveSample() {
		t.Error("sample allowed above the concurrency limit")
	}
	if got := testutil.ToFloat64(m.CountTokens.WithLabelValues(metrics.CountTokensBusy)); got != 1 {
		t.Errorf("busy = %v, want 1", got)
	}
}

// TestEstimateUsageOnly plays a naive multi-turn conversation (a real Go
// file re-sent in every turn, edited by the model three times) through
// the proxy without countTokens sampling: the estimate then rests on
// usageMetadata calibration alone and must be within 10% of the exact
// saving the emulator's tokenizer gives.
func TestEstimateUsageOnly(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(tu.GOROOT(t), "src", "container", "list", "list.go"))
	if err != nil {
		t.Skipf("no Go source to use as the workload: %v", err)
	}
	edits := map[string]string{
		"Add a Contains method.": "\n// Contains reports whether l holds v.\nfunc (l *List) Contains(v any) bool {\n\tfor e := l.Front(); e != nil; e = e.Next() {\n\t\tif e.Value == v {\n\t\t\treturn true\n\t\t}\n\t}\n\treturn false\n}\n",
		"Add a Clear method.":    "\n// Clear removes every element of l.\nfunc (l *List) Clear() { l.Init() }\n",
		"Add a Sum method.":      "\n// Sum adds up the int values of l.\nfunc (l *List) Sum() (n int) {\n\tfor e := l.Front(); e != nil; e = e.Next() {\n\t\tn += e.Value.(int)\n\t}\n\treturn n\n}\n",
	}
	questions := []string{"Explain this file.", "Add a Contains method.", "Is Remove O(1)?", "Add a Clear method.", "What does lazyInit do?", "Add a Sum method.", "Summarise our changes."}
	_, up := tu.StartEmulator(t, emulator.Options{Reply: func(r emulator.ReplyRequest) string {
		q := r.LastUserText()
		q = q[strings.LastIndexByte(q, '\n')+1:]
		if e, ok := edits[q]; ok {
			return "Append this:\n\n```go\n" + e + "```\n"
		}
		return "About " + q + ": it is a doubly linked list."
	}})
	var exchanges atomic.Int64
	f := newFixture(t, up.URL, Options{Rewrite: RewriteOptions{Enabled: true}, OnExchange: func(Exchange) { exchanges.Add(1) }})

	play := func(base string) (prompt int) {
		file := string(src)
		var contents []any
		for _, q := range questions {
			contents = append(contents, map[string]any{"role": "user", "parts": []any{map[string]any{"text": "My file:\n\n```go list.go\n" + file + "```\n\n" + q}}})
			body, _ := json.Marshal(map[string]any{"contents": contents})
			req, _ := http.NewRequest("POST", base+"/v1beta/models/gemini-2.5-flash:generateContent", bytes.NewReader(body))
			req.Header.Set("X-Goog-Api-Key", "k")
			res, raw := do(t, rawClient(), req)
			var out struct {
				Candidates []struct {
					Content json.RawMessage `json:"content"`
				} `json:"candidates"`
				UsageMetadata struct {
					PromptTokenCount int `json:"promptTokenCount"`
				} `json:"usageMetadata"`
			}
			if res.StatusCode != 200 || json.Unmarshal(raw, &out) != nil || len(out.Candidates) == 0 {
				t.Fatalf("%s: %d %s", q, res.StatusCode, raw)
			}
			prompt += out.UsageMetadata.PromptTokenCount
			contents = append(contents, out.Candidates[0].Content)
			if e, ok := edits[q]; ok {
				file += e
			}
		}
		return prompt
	}
	naive := play(up.URL)
	sent := play(f.front.URL)
	// OnExchange runs after the savings job of its request was started.
	waitFor(t, "all exchanges", func() bool { return exchanges.Load() == int64(len(questions)) })
	f.h.sav.wait()
	exact := float64(naive - sent)
	var est float64
	for _, r := range rewrite.Rules {
		est += testutil.ToFloat64(f.m.TokensSaved.WithLabelValues(string(r), "gemini-2.5-flash"))
	}
	t.Logf("naive %d, sent %d prompt tokens: exact saving %.0f, estimate %.0f (%+.1f%%), ratio %.4f tokens/byte from %v usage samples",
		naive, sent, exact, est, 100*(est-exact)/exact, testutil.ToFloat64(f.m.TokensPerByte.WithLabelValues("gemini-2.5-flash")),
		testutil.ToFloat64(f.m.CalibrationSamples.WithLabelValues("gemini-2.5-flash", metrics.SourceUsage)))
	if exact <= 0 || math.Abs(est-exact) > 0.10*exact {
		t.Errorf("estimate %.0f vs exact %.0f: off by more than 10%%", est, exact)
	}
}
