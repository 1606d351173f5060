package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// ledgerBody is a request of contents, each a list of text parts.
func ledgerBody(t *testing.T, system string, contents ...[]string) []byte {
	t.Helper()
	var cs []any
	for i, parts := range contents {
		role := "user"
		if i%2 == 1 {
			role = "model"
		}
		var ps []any
		for _, p := range parts {
			ps = append(ps, map[string]string{"text": p})
		}
		cs = append(cs, map[string]any{"role": role, "parts": ps})
	}
	req := map[string]any{"contents": cs}
	if system != "" {
		req["systemInstruction"] = map[string]any{"parts": []any{map[string]string{"text": system}}}
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLayoutShared checks the prefix the counterfactual bills as cached:
// whole parts, text in ledgerChunk-byte chunks, nothing when the system
// instruction or model differs.
func TestLayoutShared(t *testing.T) {
	file := strings.Repeat("func f() {}\n", 400) // 4800 bytes
	prev := ledgerBody(t, "be brief", []string{file, "What does it do?"})
	tests := []struct {
		name  string
		body  []byte
		model string
		want  int // shared bytes of the client's text and system instruction
	}{
		{"extends", ledgerBody(t, "be brief", []string{file, "What does it do?"}, []string{"It defines f."}, []string{"Thanks."}), "m", len(file) + len("What does it do?")},
		{"same", prev, "m", len(file) + len("What does it do?")},
		{"last part edited", ledgerBody(t, "be brief", []string{file, "What does it not do?"}), "m", len(file)},
		{"file edited at 1000", ledgerBody(t, "be brief", []string{file[:1000] + "X" + file[1001:], "What does it do?"}), "m", 512},
		{"other system instruction", ledgerBody(t, "be verbose", []string{file, "What does it do?"}), "m", -1},
		{"other model", prev, "n", -1},
	}
	old, err := layoutOf(prev, "m")
	if err != nil {
		t.Fatal(err)
	}
	system := len(`{"parts":[{"text":"be brief"}]}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := layoutOf(tt.body, tt.model)
			if err != nil {
				t.Fatal(err)
			}
			i := p.sharedIn(old.sums)
			got := -1
			if i >= 0 {
				got = p.bytes[i] - system
			}
			if got != tt.want {
				t.Errorf("shared bytes = %d, want %d", got, tt.want)
			}
		})
	}
}

// sharedRef is the reference for layout.sharedIn: the last checkpoint of
// p whose hash is in a set of sums, or -1.
func sharedRef(p *layout, sums []uint64) int {
	set := make(map[uint64]struct{}, len(sums))
	for _, v := range sums {
		set[v] = struct{}{}
	}
	for i := len(p.sums) - 1; i >= 0; i-- {
		if _, ok := set[p.sums[i]]; ok {
			return i
		}
	}
	return -1
}

// TestSharedInReference: sharedIn and sharedLast find the checkpoint the
// set of sums names, for layouts and sums of every size around the probe
// (sharedProbe) and maxLedgerSums, with duplicates, no match, a match only
// past the probe, and the same pooled set used again.
func TestSharedInReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	for n := range 400 {
		ln, ls := rng.IntN(3*sharedProbe+2), rng.IntN(40)
		if n%10 == 0 {
			ln, ls = rng.IntN(2000), rng.IntN(maxLedgerSums+1)
		}
		alphabet := uint64(1 + rng.IntN(4*(ln+ls)+1))
		p := &layout{sums: make([]uint64, ln)}
		for i := range p.sums {
			p.sums[i] = rng.Uint64N(alphabet)
		}
		sums := make([]uint64, ls)
		for i := range sums {
			sums[i] = rng.Uint64N(alphabet) + uint64(n%3) // shifted: fewer matches
		}
		if got, want := p.sharedIn(sums), sharedRef(p, sums); got != want {
			t.Fatalf("case %d (%d checkpoints, %d sums): sharedIn = %d, want %d", n, ln, ls, got, want)
		}
		if got, want := p.sharedLast(sums), sharedRef(p, []uint64{last(sums)}); got != want {
			t.Fatalf("case %d: sharedLast = %d, want %d", n, got, want)
		}
	}
	// A match only before the probe, past the checkpoints compared one by
	// one, with more sums than the probe compares.
	p := &layout{sums: make([]uint64, 100)}
	for i := range p.sums {
		p.sums[i] = uint64(1000 + i)
	}
	sums := []uint64{1, 2, 3, 1010, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}
	if got := p.sharedIn(sums); got != 10 {
		t.Errorf("sharedIn with the only match at 10 = %d, want 10", got)
	}
	if got := p.sharedIn(sums[:4]); got != 10 {
		t.Errorf("sharedIn of 4 sums with the match at 10 = %d, want 10", got)
	}
}

// TestTailAfter: the tail saved for a request is its own tailOf, whether
// the state found is of the same prompt (whose tail is then reused, also
// through the store's encoding) or of another one.
func TestTailAfter(t *testing.T) {
	text := strings.Repeat("word, ", 150) + "the end of it"
	same := ledgerBody(t, "be brief", []string{text})
	other := ledgerBody(t, "be brief", []string{text + " and more"})
	grown := ledgerBody(t, "be brief", []string{text}, []string{"An answer."}, []string{"Another question?"})
	for _, prevBody := range [][]byte{same, other, grown} {
		q, err := layoutOf(prevBody, "m")
		if err != nil {
			t.Fatal(err)
		}
		prev, err := decodeLedgerState((&ledgerState{turn: 1, naive: sampleSums(q.sums), sent: sampleSums(q.sums), tail: q.tailOf()}).encode())
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range [][]byte{same, other, grown} {
			p, err := layoutOf(body, "m")
			if err != nil {
				t.Fatal(err)
			}
			want := p.tailOf()
			if len(want.ns) == 0 && bytes.Equal(body, same) {
				t.Fatal("the test prompt has no tail")
			}
			if diff := cmp.Diff(want, p.tailAfter(prev), cmp.AllowUnexported(tail{})); diff != "" {
				t.Errorf("tailAfter (-tailOf +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, p.tailAfter(nil), cmp.AllowUnexported(tail{})); diff != "" {
				t.Errorf("tailAfter(nil) (-tailOf +got):\n%s", diff)
			}
		}
	}
}

func TestLedgerStateRoundTrip(t *testing.T) {
	s := &ledgerState{at: time.UnixMilli(1764590000123), turn: 7, holdout: true, naive: []uint64{1, 2, 3}, sent: []uint64{math.MaxUint64}, sentTokens: 12345, naiveTokens: 23456, kept: true, tail: tail{pre: 4, ns: []int{300, 299}, sums: []uint64{5, 6}}}
	got, err := decodeLedgerState(s.encode())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got, cmp.AllowUnexported(ledgerState{}, tail{})); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// No holdout, not kept, no tail.
	s2 := &ledgerState{at: time.UnixMilli(1764590000123), turn: 1, naive: []uint64{1}, sent: []uint64{1}}
	if got, err := decodeLedgerState(s2.encode()); err != nil || got.holdout || got.kept || got.tail.ns != nil || got.turn != 1 {
		t.Errorf("round trip of a plain state = %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {9}, s.encode()[:12]} {
		if _, err := decodeLedgerState(bad); err == nil {
			t.Errorf("decodeLedgerState(%x) succeeded", bad)
		}
	}
	many := make([]uint64, 5000)
	for i := range many {
		many[i] = uint64(i)
	}
	if got := sampleSums(many); len(got) > maxLedgerSums || got[len(got)-1] != 4999 || !slices.IsSorted(got) {
		t.Errorf("sampleSums: %d sums ending with %d, want at most %d in order, ending with the last", len(got), got[len(got)-1], maxLedgerSums)
	}
}

// TestSampleSumsKeepsPrefixChanges: a prompt of more than maxLedgerSums
// checkpoints is stored sampled, and the next request is still compared
// with its last checkpoint. The sample used to be stored newest first,
// so last() named an early checkpoint, which a prompt changed after it
// shares: a prefix change of a large prompt went uncounted, and the
// cached rate it lost was claimed as saved.
func TestSampleSumsKeepsPrefixChanges(t *testing.T) {
	prev, changed := make([]uint64, 5000), make([]uint64, 5000)
	for i := range prev {
		prev[i], changed[i] = uint64(i), uint64(i)
		if i >= 100 {
			changed[i] = uint64(1_000_000 + i)
		}
	}
	stored := sampleSums(prev)
	if got := (&layout{sums: changed}).sharedLast(stored); got != -1 {
		t.Errorf("a prompt changed after checkpoint 100 shares the stored prompt's end up to %d, want -1", got)
	}
	if got := (&layout{sums: prev}).sharedLast(stored); got != 4999 {
		t.Errorf("the same prompt shares the stored end up to %d, want 4999", got)
	}
}

// TestLedgerPrefixChange sends a conversation whose second request
// rewrites what the first sent (as compaction of a turn already sent
// does), then one whose client edits its own first turn.
func TestLedgerPrefixChange(t *testing.T) {
	file := strings.Repeat("x := compute(y)\n", 600)
	first := ledgerBody(t, "", []string{file})
	second := ledgerBody(t, "", []string{file}, []string{"ok"}, []string{"again " + file})
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[],"usageMetadata":{"promptTokenCount":3000,"cachedContentTokenCount":0,"candidatesTokenCount":1}}`))
	})
	done := make(chan struct{}, 4)
	f := newFixture(t, be.URL, Options{
		Rewrite:    RewriteOptions{Enabled: true},
		Prices:     map[string]Price{"gemini-2.5-flash": {Input: 1, CachedInput: 0.1, Output: 2}},
		OnExchange: func(Exchange) { done <- struct{}{} },
	})
	// The rewrite of the second request replaces the first turn's copy
	// (a superseded copy in a turn already sent).
	f.h.rewriteFn = func(b []byte, _ rewrite.Options, _ rewrite.Verifier) ([]byte, *rewrite.Report, error) {
		out := b
		if string(b) == string(second) {
			out = ledgerBody(t, "", []string{"[superseded]"}, []string{"ok"}, []string{"again " + file})
		}
		return out, &rewrite.Report{}, nil
	}
	f.h.auditFn = noAudit // a fake rewrite keeps no records
	send := func(body []byte) {
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(string(body)))
		req.Header.Set("X-Goog-Api-Key", "k")
		do(t, rawClient(), req)
		<-done
	}
	send(first)
	send(second)
	if got := testutil.ToFloat64(f.m.PrefixChanges.WithLabelValues(metrics.PrefixChangeRewrite)); got != 1 {
		t.Errorf("prefix_changes_total{reason=rewrite} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.m.PrefixChangeTokens); got < 2000 {
		t.Errorf("prefix_change_tokens_total = %v, want the first request's ~2700 tokens", got)
	}
	if got := testutil.ToFloat64(f.m.LedgerRequests.WithLabelValues(metrics.GroupTreated, "2")); got != 1 {
		t.Errorf("ledger_requests_total{turn=2} = %v, want 1", got)
	}
	// The client itself goes back to its first turn, edited near its
	// end: the client's change, not the proxy's.
	send(ledgerBody(t, "", []string{file[:9000] + "Z" + file[9001:]}))
	if got := testutil.ToFloat64(f.m.PrefixChanges.WithLabelValues(metrics.PrefixChangeClient)); got != 1 {
		t.Errorf("prefix_changes_total{reason=client} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.m.LedgerRequests.WithLabelValues(metrics.GroupTreated, "3")); got != 1 {
		t.Errorf("ledger_requests_total{turn=3} = %v, want 1 (the same conversation)", got)
	}
	// A request that starts differently is another conversation.
	send(ledgerBody(t, "", []string{"y" + file}))
	if got := testutil.ToFloat64(f.m.LedgerRequests.WithLabelValues(metrics.GroupTreated, "1")); got != 2 {
		t.Errorf("ledger_requests_total{turn=1} = %v, want 2", got)
	}
}

// recordings returns the directory of the shared recordings of real
// Gemini API traffic, or skips the test: they live outside the repository
// (GEMINI_PROXY_SHARED, or a shared/ directory above it).
func recordings(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("GEMINI_PROXY_SHARED"); d != "" {
		return filepath.Join(d, "gemini-recordings")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "gemini-recordings")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("shared/gemini-recordings not found above the repository (set GEMINI_PROXY_SHARED): skipping the recorded-traffic test")
		}
		dir = parent
	}
}

// recording is the part of a recorded exchange these tests replay.
type recording struct {
	Method          string              `json:"method"`
	Path            string              `json:"path"`
	RequestBody     json.RawMessage     `json:"request_body"`
	Status          int                 `json:"status"`
	ResponseHeaders map[string][]string `json:"response_headers"`
	ResponseBody    string              `json:"response_body"`
	GzipBase64      string              `json:"response_body_gzip_base64"`
}

func loadRecording(t *testing.T, name string) recording {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(recordings(t), name))
	if err != nil {
		t.Fatal(err)
	}
	var r recording
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// replay serves rec's response to any request.
func replay(t *testing.T, rec recording) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body := []byte(rec.ResponseBody)
		for k, vs := range rec.ResponseHeaders {
			if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") {
				continue
			}
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if rec.GzipBase64 != "" {
			var err error
			if body, err = base64.StdEncoding.DecodeString(rec.GzipBase64); err != nil {
				t.Error(err)
			}
		} else {
			w.Header().Del("Content-Encoding")
		}
		w.WriteHeader(rec.Status)
		w.Write(body)
	})
}

// TestRecordedUsagePriced replays real responses through the proxy: an
// alias (gemini-flash-latest) is priced by the response's modelVersion,
// and a client calling the Interactions API directly has its usage (whose
// fields differ) counted and priced (issue 19).
func TestRecordedUsagePriced(t *testing.T) {
	price := Price{Input: 0.75, CachedInput: 0.075, Output: 3.75}
	tests := []struct {
		file, label                          string
		prompt, cached, candidates, thoughts int64
	}{
		{"jsonarray-flash-latest-3.6.json", "gemini-3.6-flash", 11, 0, 2, 291},
		{"interactions-unary-2.5-flash-steps.json", "gemini-2.5-flash", 7, 0, 19, 32},
		{"interactions-sse-2.5-flash-steps.json", "gemini-2.5-flash", 7, 0, 26, 115},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			rec := loadRecording(t, tt.file)
			be := replay(t, rec)
			f := newFixture(t, be.URL, Options{
				ModelAllowlist: []string{"gemini-flash-latest", "gemini-3.6-flash", "gemini-2.5-flash"},
				Prices:         map[string]Price{"gemini-3.6-flash": price, "gemini-2.5-flash": price},
			})
			req, _ := http.NewRequest(rec.Method, f.front.URL+rec.Path, strings.NewReader(string(rec.RequestBody)))
			req.Header.Set("X-Goog-Api-Key", "k")
			req.Header.Set("Content-Type", "application/json")
			res, got := do(t, http.DefaultClient, req)
			if res.StatusCode != rec.Status {
				t.Fatalf("status %d, want %d", res.StatusCode, rec.Status)
			}
			if rec.GzipBase64 == "" && string(got) != rec.ResponseBody {
				t.Errorf("body through the proxy differs from the recording")
			}
			want := map[string]int64{metrics.TokensPrompt: tt.prompt, metrics.TokensCandidates: tt.candidates, metrics.TokensThoughts: tt.thoughts}
			waitFor(t, "usage counted", func() bool {
				return testutil.ToFloat64(f.m.UsageTokens.WithLabelValues(tt.label, metrics.TokensPrompt)) == float64(tt.prompt)
			})
			for kind, n := range want {
				if got := testutil.ToFloat64(f.m.UsageTokens.WithLabelValues(tt.label, kind)); got != float64(n) {
					t.Errorf("usage_tokens_total{model=%s,kind=%s} = %v, want %d", tt.label, kind, got, n)
				}
			}
			wantDollars := (float64(tt.prompt)*price.Input + float64(tt.candidates+tt.thoughts)*price.Output) / 1e6
			if got := testutil.ToFloat64(f.m.SpentDollars.WithLabelValues(tt.label)); math.Abs(got-wantDollars) > 1e-12 {
				t.Errorf("spent_dollars_total{model=%s} = %v, want %v", tt.label, got, wantDollars)
			}
			if n := testutil.CollectAndCount(f.m.UnpricedRequests); n != 0 {
				t.Errorf("unpriced_requests_total has %d series, want none", n)
			}
		})
	}
}

// TestLedgerGrowingTranscriptCachedShare checks the counterfactual's
// cached share of a flattened transcript, one text part that grows, against
// what the emulator's implicit cache reports for the same bodies sent
// directly: the previous request ends inside a ledgerChunk-byte chunk that
// the next one extends (appends) or whose closing tag it replaces, and
// Gemini caches all the text the two share, not only their whole chunks.
func TestLedgerGrowingTranscriptCachedShare(t *testing.T) {
	sentence := "The reader keeps a buffer of the bytes it has read and returns one record per call. "
	for _, tt := range []struct {
		name                       string
		open, close, answer, after string
	}{
		{"appends", "User: ", "\nAssistant:", " ", "\n"},
		{"replaces its end", "<turn><user>", "</user></turn>", "</user><assistant>", "</assistant></turn>\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, direct := tu.StartEmulator(t, emulator.Options{})
			history := "Previous conversation:\n"
			var prev *ledgerState
			for turn := 1; turn <= 4; turn++ {
				question := fmt.Sprintf("question %d: %s", turn, strings.Repeat(sentence, 25+7*turn))
				transcript := history + tt.open + question + tt.close
				body := ledgerBody(t, "", []string{transcript})
				code, got := call(t, direct.URL, genURL, keyA, string(body))
				if code != 200 {
					t.Fatalf("turn %d: status %d: %s", turn, code, got)
				}
				var resp struct {
					UsageMetadata struct {
						PromptTokenCount        int64 `json:"promptTokenCount"`
						CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
					} `json:"usageMetadata"`
				}
				if err := json.Unmarshal(got, &resp); err != nil {
					t.Fatal(err)
				}
				p, err := layoutOf(body, "gemini-2.5-flash")
				if err != nil {
					t.Fatal(err)
				}
				if prev != nil {
					u := resp.UsageMetadata
					ratio := float64(u.PromptTokenCount-1) / float64(len(transcript))
					est := float64(u.PromptTokenCount) * p.sharedTokens(prev, ratio) / p.total(ratio)
					if want := float64(u.CachedContentTokenCount); want == 0 || math.Abs(est-want) > 0.02*want {
						t.Errorf("turn %d: estimated cached tokens %.0f, the emulator reports %d of %d", turn, est, u.CachedContentTokenCount, u.PromptTokenCount)
					}
				}
				prev = &ledgerState{naive: sampleSums(p.sums), tail: p.tailOf()}
				history += tt.open + question + tt.answer + "Answer " + strings.Repeat("ok ", 20*turn) + tt.after
			}
		})
	}
}

// TestLedgerStateAllocs checks that a state is encoded in one allocation
// of at most encodedMax bytes and decoded in three, also at its largest
// (every list full, varints at their longest), and that the decoded lists,
// which share one array, do not overlap.
func TestLedgerStateAllocs(t *testing.T) {
	full := func(n int, base uint64) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = base + uint64(i)*0x9e3779b97f4a7c15
		}
		return out
	}
	ns := make([]int, maxTailSums)
	for i := range ns {
		ns[i] = ledgerChunk - 1 - i
	}
	for _, s := range []*ledgerState{
		{at: time.UnixMilli(1764590000123), turn: math.MaxInt32, holdout: true, kept: true, naive: full(maxLedgerSums, 1), sent: full(maxLedgerSums, 2),
			sentTokens: 1 << 62, naiveTokens: 1 << 62, tail: tail{pre: math.MaxUint64, ns: ns, sums: full(maxTailSums, 3)}},
		{at: time.UnixMilli(1764590000123), turn: 2, naive: full(4, 1), sent: full(4, 1), tail: tail{pre: 7, ns: ns, sums: full(maxTailSums, 3)}},
		{at: time.UnixMilli(1764590000123), turn: 1, naive: full(1, 1), sent: full(1, 1)},
	} {
		var b []byte
		if n := testing.AllocsPerRun(20, func() { b = s.encode() }); n != 1 {
			t.Errorf("encode of a state of %d+%d sums and %d tail hashes: %v allocations, want 1", len(s.naive), len(s.sent), len(s.tail.ns), n)
		}
		if len(b) > s.encodedMax() {
			t.Errorf("encode: %d bytes, more than encodedMax %d", len(b), s.encodedMax())
		}
		var got *ledgerState
		var err error
		if n := testing.AllocsPerRun(20, func() { got, err = decodeLedgerState(b) }); n > 3 {
			t.Errorf("decode of a state of %d+%d sums and %d tail hashes: %v allocations, want at most 3", len(s.naive), len(s.sent), len(s.tail.ns), n)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := *s
		if len(want.tail.ns) == 0 {
			want.tail.ns, want.tail.sums = nil, nil
		}
		if diff := cmp.Diff(&want, got, cmp.AllowUnexported(ledgerState{}, tail{})); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
		// Growing one list must not write into the next.
		sent0 := slices.Clone(got.sent)
		tail0 := slices.Clone(got.tail.sums)
		_ = append(got.naive, 0)
		_ = append(got.sent, 0)
		if !slices.Equal(sent0, got.sent) || !slices.Equal(tail0, got.tail.sums) {
			t.Error("the decoded lists overlap")
		}
	}
}

// TestDecodePooled checks that a pooled state decodes as decodeLedgerState
// does, also after a larger or a smaller state was decoded in its arrays
// (nothing of the previous one shows through), and that decoding into
// arrays with room allocates nothing.
func TestDecodePooled(t *testing.T) {
	mk := func(n, tails int, base uint64) *ledgerState {
		s := &ledgerState{at: time.UnixMilli(1764590000123 + int64(n)), turn: n, kept: n%2 == 0, naive: make([]uint64, n), sent: make([]uint64, n/2+1), sentTokens: float64(n), naiveTokens: float64(2 * n)}
		for i := range s.naive {
			s.naive[i] = base + uint64(i)
		}
		for i := range s.sent {
			s.sent[i] = base<<1 + uint64(i)
		}
		if tails > 0 {
			s.tail = tail{pre: base, ns: make([]int, tails), sums: make([]uint64, tails)}
			for i := range tails {
				s.tail.ns[i], s.tail.sums[i] = ledgerChunk-1-i, base<<2+uint64(i)
			}
		}
		return s
	}
	for _, s := range []*ledgerState{mk(maxLedgerSums, maxTailSums, 1), mk(3, 0, 2), mk(40, 5, 3), mk(1, 32, 4), mk(700, 0, 5)} {
		b := s.encode()
		want, err := decodeLedgerState(b)
		if err != nil {
			t.Fatal(err)
		}
		got := decodePooled(b)
		if got == nil {
			t.Fatal("decodePooled failed")
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(ledgerState{}, tail{}), cmpopts.IgnoreFields(ledgerState{}, "bufs")); diff != "" {
			t.Errorf("decodePooled (-decodeLedgerState +got):\n%s", diff)
		}
		releaseState(got)
	}
	if decodePooled([]byte{9}) != nil {
		t.Error("decodePooled of a malformed state succeeded")
	}
	s := &ledgerState{bufs: &stateBufs{}}
	b := mk(maxLedgerSums, maxTailSums, 1).encode()
	sums, ns, _ := s.decode(b, nil, nil)
	if n := testing.AllocsPerRun(20, func() { sums, ns, _ = s.decode(b, sums, ns) }); n != 0 {
		t.Errorf("decode into arrays with room: %v allocations, want 0", n)
	}
}
