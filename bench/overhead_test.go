package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

func TestSizesExact(t *testing.T) {
	needCorpus(t)
	want := map[string]struct{ bytes, turns int }{"medium": {MediumBytes, 6}, "large": {LargeBytes, 6}}
	for _, s := range Sizes() {
		var req struct {
			Contents []json.RawMessage `json:"contents"`
		}
		if err := json.Unmarshal(s.Body, &req); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if len(req.Contents) != s.Turns {
			t.Errorf("%s: %d contents, Turns says %d", s.Name, len(req.Contents), s.Turns)
		}
		w, ok := want[s.Name]
		if !ok {
			continue
		}
		if len(s.Body) != w.bytes || s.Turns != w.turns {
			t.Errorf("%s: %d bytes in %d turns, want %d bytes in %d turns", s.Name, len(s.Body), s.Turns, w.bytes, w.turns)
		}
	}
}

func TestFitBody(t *testing.T) {
	// Escaped and multi-byte characters at the cut still give exact sizes.
	for _, n := range []int{60, 61, 62, 63, 64, 65, 80} {
		c := []map[string]any{userText(strings.Repeat("é\n<\"x", 20))}
		fitBody(c, n)
		if got := body(c); got != n {
			t.Errorf("fitBody(%d): body is %d bytes", n, got)
		}
	}
}

func TestFakeGemini(t *testing.T) {
	needCorpus(t)
	srv := httptest.NewServer(FakeGemini())
	defer srv.Close()
	post := func(path string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		return testutil.Do(t, nil, req)
	}
	large := Sizes()[2].Body
	res, b := post("/v1beta/models/gemini-2.5-flash:generateContent", large)
	if res.StatusCode != http.StatusOK || !bytes.Equal(b, fakeUnary) {
		t.Fatalf("unary: status %d, body %.80q", res.StatusCode, b)
	}
	var unary struct {
		Candidates []struct{ FinishReason string }    `json:"candidates"`
		Usage      struct{ CandidatesTokenCount int } `json:"usageMetadata"`
	}
	if err := json.Unmarshal(b, &unary); err != nil || len(unary.Candidates) != 1 || unary.Candidates[0].FinishReason != "STOP" {
		t.Errorf("unary answer is not a finished GenerateContentResponse: %v %+v", err, unary)
	}
	res, b = post("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", []byte(`{"contents":[]}`))
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" || !bytes.Equal(b, fakeStream) {
		t.Fatalf("sse: status %d, %q, body %.80q", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	events := strings.Split(strings.TrimSuffix(string(b), "\r\n\r\n"), "\r\n\r\n")
	var counts []int
	var finish []string
	for _, e := range events {
		var ev struct {
			Candidates []struct{ FinishReason string }    `json:"candidates"`
			Usage      struct{ CandidatesTokenCount int } `json:"usageMetadata"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(e, "data: ")), &ev); err != nil || !strings.HasPrefix(e, "data: ") {
			t.Fatalf("event %.60q: %v", e, err)
		}
		counts = append(counts, ev.Usage.CandidatesTokenCount)
		finish = append(finish, ev.Candidates[0].FinishReason)
	}
	if len(events) < 3 {
		t.Errorf("stream has %d events, want several", len(events))
	}
	for i := 1; i < len(counts); i++ {
		if counts[i] <= counts[i-1] {
			t.Errorf("usage not cumulative: %v", counts)
		}
	}
	if counts[len(counts)-1] != unary.Usage.CandidatesTokenCount {
		t.Errorf("stream's final usage %d, unary's %d", counts[len(counts)-1], unary.Usage.CandidatesTokenCount)
	}
	wantFinish := make([]string, len(events))
	wantFinish[len(wantFinish)-1] = "STOP"
	if diff := cmp.Diff(wantFinish, finish); diff != "" {
		t.Errorf("finishReason per event (-want +got):\n%s", diff)
	}
	if res, _ := post("/v1beta/models/gemini-2.5-flash:countTokens", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("countTokens: status %d, want 404", res.StatusCode)
	}
}

// RunOverhead measures every target in every cell and divides by the plain
// Go proxy of the same cell.
func TestRunOverheadRatios(t *testing.T) {
	needCorpus(t)
	up := httptest.NewServer(FakeGemini())
	defer up.Close()
	u, _ := url.Parse(up.URL)
	// A stock ReverseProxy now and then cuts a streamed response on
	// net/http's body-close race (testutil.EOFAtLength); the full bench
	// reports those failures of the plain proxy, while this test checks
	// the bench's bookkeeping and wants cells without errors.
	plain := httptest.NewServer(testutil.EOFAtLength(PlainProxy(u)))
	defer plain.Close()
	o, err := RunOverhead(t.Context(), OverheadOptions{
		Targets:     []Target{{Name: TargetDirect, URL: up.URL}, {Name: TargetPlain, URL: plain.URL}, {Name: TargetPassThrough, URL: plain.URL}},
		Sizes:       Sizes()[:1],
		Concurrency: []int{2},
		CellTime:    20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Cells) != 2*3 {
		t.Fatalf("%d cells, want 6 (unary and sse, three targets)", len(o.Cells))
	}
	for _, c := range o.Cells {
		if c.Errors != 0 || c.Requests < 2*batchSize(2, Sizes()[0]) || c.P50 <= 0 {
			t.Errorf("cell %+v: want two rounds without errors", c)
		}
		i := slices.IndexFunc(o.Cells, func(p Cell) bool { return p.Mode == c.Mode && p.Target == TargetPlain })
		if want := float64(c.P50) / float64(o.Cells[i].P50); c.RatioP50 != want {
			t.Errorf("%s/%s: RatioP50 %v, want %v", c.Mode, c.Target, c.RatioP50, want)
		}
	}
	names := map[string]bool{}
	for _, r := range Targets(o) {
		names[r.Name] = true
	}
	if !names["pass-through p50 ≤ 1.3× plain Go proxy (worst cell)"] || !names["pass-through p99 ≤ 1.5× plain Go proxy (worst cell)"] {
		t.Errorf("Targets lacks the pass-through ratios: %v", names)
	}
}

// TestCPUTargets: issue 17's targets come from the loaded cells' CPU per
// request (weighted by requests) and the c1 unary cells' added p50.
func TestCPUTargets(t *testing.T) {
	cell := func(size, target string, conc, reqs int, cpu float64, added time.Duration) Cell {
		return Cell{Size: size, Mode: "unary", Concurrency: conc, Target: target, Requests: reqs, CPUPer1000: cpu, AddedP50: added}
	}
	o := &Overhead{Cells: []Cell{
		cell("small", TargetPlain, 16, 1000, 0.10, 0), cell("small", TargetPlain, 64, 3000, 0.10, 0),
		cell("small", TargetPassThrough, 16, 1000, 0.11, 0), cell("small", TargetPassThrough, 64, 3000, 0.11, 0),
		// 0.10 ms at c16 on 1,000 requests and 0.14 ms at c64 on 3,000:
		// 0.13 ms per request, 1.3× plain (missed), 1.18× off (missed).
		cell("small", TargetRewrite, 16, 1000, 0.10, 0), cell("small", TargetRewrite, 64, 3000, 0.14, 0),
		cell("small", TargetRewrite, 1, 500, 9, 100*time.Microsecond), cell("small", TargetPlain, 1, 500, 9, 50*time.Microsecond),
		cell("large", TargetPlain, 64, 100, 1.0, 0), cell("large", TargetRewrite, 64, 100, 1.5, 0),
	}}
	got := map[string]TargetResult{}
	for _, r := range CPUTargets(o) {
		got[r.Name] = r
	}
	for name, want := range map[string]bool{
		"rewrite on, small, CPU per request ≤ 1.2× plain Go proxy (c16 and c64, unary and sse)": false,
		"rewrite on, large, CPU per request ≤ 1.9× plain Go proxy (c16 and c64, unary and sse)": true,
		"rewrite on, small, p50 added over direct ≤ 0.15ms (unary, c1)":                         true,
		"request that cannot change (small): CPU rewrite on ≤ 1.1× rewrite off (c16 and c64)":   false,
	} {
		r, ok := got[name]
		if !ok || r.Met != want {
			t.Errorf("%s: %+v (present %v), want met %v", name, r, ok, want)
		}
	}
	if r := got["rewrite on, small, CPU per request ≤ 1.2× plain Go proxy (c16 and c64, unary and sse)"]; !strings.HasPrefix(r.Measured, "1.30×") {
		t.Errorf("small CPU ratio %q, want 1.30×", r.Measured)
	}
	if len(got) != 4 {
		t.Errorf("%d targets, want 4 (no medium cells): %v", len(got), got)
	}
}

// TestParseHeapCounters reads the two runtime counters from a text
// exposition, in either order and in exponent notation, and refuses one
// that lacks either.
func TestParseHeapCounters(t *testing.T) {
	b, n, err := parseHeapCounters(strings.NewReader("# HELP go_memstats_alloc_bytes_total x\n# TYPE go_memstats_alloc_bytes_total counter\ngo_memstats_mallocs_total 1234\ngo_memstats_alloc_bytes 5\ngo_memstats_alloc_bytes_total 1.5e+06\n"))
	if err != nil || b != 1.5e6 || n != 1234 {
		t.Errorf("parseHeapCounters = %v, %v, %v; want 1.5e6, 1234, nil", b, n, err)
	}
	for _, text := range []string{"", "go_memstats_alloc_bytes_total 1\n", "go_memstats_mallocs_total 1\n", "go_memstats_alloc_bytes_total x\ngo_memstats_mallocs_total 1\n"} {
		if _, _, err := parseHeapCounters(strings.NewReader(text)); err == nil {
			t.Errorf("parseHeapCounters(%q): no error", text)
		}
	}
}

// TestHeapMeter: a target whose scrape allocates 700 bytes and 7 objects
// and whose requests allocate 1,000 bytes and 10 objects each is measured
// at 1,000 and 10 per request, the scrapes taken out.
func TestHeapMeter(t *testing.T) {
	var mu sync.Mutex
	var allocB, allocN float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprintf(w, "go_memstats_alloc_bytes_total %g\ngo_memstats_mallocs_total %g\n", allocB, allocN)
			allocB, allocN = allocB+700, allocN+7 // after the values are read, as a real scrape
		default:
			allocB, allocN = allocB+1000, allocN+10
		}
	}))
	defer srv.Close()
	o, err := RunOverhead(t.Context(), OverheadOptions{
		Targets:     []Target{{Name: TargetDirect, URL: srv.URL}, {Name: TargetPassThrough, URL: srv.URL, MetricsURL: srv.URL + "/metrics"}},
		Sizes:       []Size{{Name: "tiny", Body: []byte(`{}`)}},
		Concurrency: []int{2},
		CellTime:    time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range o.Cells {
		switch c.Target {
		case TargetDirect:
			if c.AllocBytes != 0 || c.AllocObjects != 0 {
				t.Errorf("direct (no MetricsURL): %v B, %v objects per request, want none", c.AllocBytes, c.AllocObjects)
			}
		default:
			// The direct target's requests hit the same server between
			// this target's scrapes only when batches overlap, which they
			// never do: batches run one after the other.
			if c.AllocBytes != 1000 || c.AllocObjects != 10 {
				t.Errorf("%s/%s: %v B, %v objects per request, want 1000 and 10", c.Mode, c.Target, c.AllocBytes, c.AllocObjects)
			}
		}
	}
}

// TestAllocAndAnswerTargets: the allocation and answer targets from
// cells of known figures.
func TestAllocAndAnswerTargets(t *testing.T) {
	needCorpus(t) // the small request's size
	cell := func(size, mode, target string, cpu, allocB, allocN float64) Cell {
		return Cell{Size: size, Mode: mode, Concurrency: 16, Target: target, Requests: 100, CPUPer1000: cpu, AllocBytes: allocB, AllocObjects: allocN}
	}
	o := &Overhead{Cells: []Cell{
		cell("large", "unary", TargetRewrite, 2, 150<<10, 900), cell("large", "sse", TargetRewrite, 2, 170<<10, 1100),
		cell("small", "unary", TargetPassThrough, 0.1, 10<<10, 50), cell("large", "unary", TargetPassThrough, 0.7, 30<<10, 60),
		// 256 KB unary: 0.9 ms against 0.5 ms, 1.8× (missed).
		cell(answersName, "unary", TargetRewrite, 0.9, 0, 0), cell(answersName, "unary", TargetPlain, 0.5, 0, 0),
		// SSE: ((400 − 250) − (160 − 100)) / 94 = 0.96 µs a chunk (met);
		// (300 − 112) / 94 = 2 objects a chunk (missed).
		cell(answersName, "sse", TargetRewrite, 0.400, 90<<10, 300), cell(answersName, "sse", TargetPlain, 0.250, 0, 0),
		cell("small", "sse", TargetRewrite, 0.160, 20<<10, 112), cell("small", "sse", TargetPlain, 0.100, 0, 0),
	}}
	got := map[string]TargetResult{}
	for _, r := range append(AllocTargets(o), AnswerTargets(o)...) {
		got[r.Name] = r
	}
	for name, want := range map[string]struct {
		met      bool
		measured string
	}{
		"rewrite on, large: allocated per request ≤ 200 KB (c16 and c64, unary and sse)":                     {true, "160.0 KB, 1000 objects"},
		"rewrite off: allocation growing with the body ≤ 0.05 B per body byte (small to large, c16 and c64)": {true, "0.020 B/B"},
		"256 KB unary answer: CPU per request rewrite on ≤ 1.5× plain Go proxy (c16 and c64)":                {false, "1.80×"},
		"SSE: CPU per chunk above the plain Go proxy ≤ 1 µs (rewrite on, 100 events against 6, c16 and c64)": {true, "0.96 µs"},
		"SSE: allocations per chunk ≤ 1 (rewrite on's own, 100 events against 6, c16 and c64)":               {false, "2.00 "},
	} {
		r, ok := got[name]
		if !ok || r.Met != want.met || !strings.HasPrefix(r.Measured, want.measured) {
			t.Errorf("%s: %+v (present %v), want met %v, measured %q…", name, r, ok, want.met, want.measured)
		}
	}
	if len(got) != 5 {
		t.Errorf("%d targets, want 5: %v", len(got), got)
	}
}

// TestFakeGeminiAll: the long answers for LongAnswersModel, the short
// ones for any other model.
func TestFakeGeminiAll(t *testing.T) {
	needCorpus(t) // AnswersSize
	srv := httptest.NewServer(FakeGeminiAll())
	defer srv.Close()
	long, stream := LongAnswers(AnswerUnaryBytes, AnswerEvents)
	for _, c := range []struct {
		path string
		want []byte
	}{
		{"/v1beta/models/" + LongAnswersModel + ":generateContent", long},
		{"/v1beta/models/" + LongAnswersModel + ":streamGenerateContent?alt=sse", stream},
		{"/v1beta/models/gemini-2.5-flash:generateContent", fakeUnary},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", fakeStream},
	} {
		res, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: %d bytes, want %d", c.path, len(got), len(c.want))
		}
	}
	if AnswersSize().Model != LongAnswersModel || !bytes.Equal(AnswersSize().Body, Sizes()[0].Body) {
		t.Error("AnswersSize is not the small request to LongAnswersModel")
	}
}
