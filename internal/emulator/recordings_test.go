package emulator_test

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// freeFields are response paths whose members are the caller's or the
// model's data (function arguments), not API field names.
var freeFields = []string{
	"candidates[].content.parts[].functionCall.args",
	"steps[].arguments",
}

// recordedModels are the model ids the recordings call successfully,
// served in addition to the defaults.
func recordedModels(recs []*testutil.Recording) []string {
	models := slices.Clone(emulator.DefaultModels)
	for _, r := range recs {
		if r.Status != 200 {
			continue
		}
		_, rest, ok := strings.Cut(r.Path, "/models/")
		if !ok {
			continue
		}
		m, _, _ := strings.Cut(rest, ":")
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	return models
}

// recordedScript makes the emulator take the decision the real model took
// in r where the request alone does not determine it: which function it
// called (when function calling was AUTO), whether the prompt was blocked
// or the answer stopped for safety. Values are the emulator's own.
func recordedScript(t *testing.T, r *testutil.Recording) emulator.Script {
	t.Helper()
	events, err := r.Events()
	if err != nil {
		t.Fatalf("recorded body: %v", err)
	}
	var sc emulator.Script
	for _, ev := range events {
		var g struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						FunctionCall *struct {
							Name string `json:"name"`
						} `json:"functionCall"`
					} `json:"parts"`
				} `json:"content"`
				FinishReason string `json:"finishReason"`
			} `json:"candidates"`
			PromptFeedback *struct {
				BlockReason string `json:"blockReason"`
			} `json:"promptFeedback"`
		}
		if json.Unmarshal(ev, &g) != nil {
			continue
		}
		if g.PromptFeedback != nil {
			sc.BlockReason = g.PromptFeedback.BlockReason
		}
		for _, c := range g.Candidates {
			for _, p := range c.Content.Parts {
				if p.FunctionCall != nil {
					sc.FunctionCalls = append(sc.FunctionCalls, emulator.FunctionCall{Name: p.FunctionCall.Name})
				}
			}
			if c.FinishReason != "" && c.FinishReason != "STOP" && c.FinishReason != "MAX_TOKENS" {
				sc.FinishReason = c.FinishReason
			}
		}
	}
	return sc
}

// exchange is one request to the emulator and its decoded answer.
type exchange struct {
	status   int
	header   http.Header
	transfer []string
	raw      []byte // decompressed body
	events   []json.RawMessage
}

func send(t *testing.T, ts *httptest.Server, method, path, body string, hdr http.Header) exchange {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-goog-api-key", testKey)
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var rd io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		rd = zr
	}
	raw, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	x := exchange{status: resp.StatusCode, header: resp.Header, transfer: resp.TransferEncoding, raw: raw}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && resp.StatusCode == 200
	x.events, err = testutil.SplitEvents(raw, sse)
	if err != nil {
		t.Fatalf("answer %q: %v", raw, err)
	}
	return x
}

// shapes is the union of the field paths of events.
func shapes(t *testing.T, events []json.RawMessage) []string {
	t.Helper()
	set := map[string]bool{}
	for _, ev := range events {
		var v any
		if err := json.Unmarshal(ev, &v); err != nil {
			t.Fatalf("event %s: %v", ev, err)
		}
		for _, p := range testutil.Shape(v, freeFields...) {
			set[p] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func missing(want, got []string) []string {
	var out []string
	for _, p := range want {
		if !slices.Contains(got, p) {
			out = append(out, p)
		}
	}
	return out
}

// frame is the skeleton of a body: each top-level JSON value is "{}",
// runs of stream elements collapse to one, separators stay.
func frame(body string) string {
	var b strings.Builder
	depth, inStr, esc := 0, false, false
	for _, c := range body {
		switch {
		case inStr:
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
			continue
		case c == '"' && depth > 0:
			inStr = true
			continue
		case c == '{':
			depth++
			if depth == 1 {
				b.WriteString("{")
			}
			continue
		case c == '}':
			depth--
			if depth == 0 {
				b.WriteString("}")
			}
			continue
		}
		if depth == 0 {
			b.WriteRune(c)
		}
	}
	out := b.String()
	for _, run := range []string{"{}\n,\r\n", "data: {}\r\n\r\n"} {
		for strings.Contains(out, run+run) {
			out = strings.ReplaceAll(out, run+run, run)
		}
	}
	return out
}

// checkHeaders compares the headers the recording kept that the
// emulator models: gzip when the client accepted it, chunked transfer,
// the Server and Server-Timing headers, three Vary lines.
func checkHeaders(t *testing.T, r *testutil.Recording, got exchange) {
	t.Helper()
	if r.ResponseHeadersKnown != nil && !*r.ResponseHeadersKnown {
		return
	}
	// Only llm-gemini's cassettes keep Content-Encoding (and the gzip
	// bytes); pydantic-ai's drop it with the decoded body.
	if enc := r.Header("Content-Encoding"); r.ResponseBodyGzipBase64 != "" && enc != got.header.Get("Content-Encoding") {
		t.Errorf("Content-Encoding %q, recorded %q", got.header.Get("Content-Encoding"), enc)
	}
	if r.Header("Transfer-Encoding") == "chunked" && !slices.Contains(got.transfer, "chunked") {
		t.Errorf("Transfer-Encoding %q, recorded chunked", got.transfer)
	}
	for _, k := range []string{"Server", "Server-Timing", "X-Content-Type-Options"} {
		if r.Header(k) != "" && got.header.Get(k) == "" {
			t.Errorf("no %s header, recorded %q", k, r.Header(k))
		}
	}
	for k, vs := range r.ResponseHeaders {
		if strings.EqualFold(k, "Vary") && !slices.Equal(got.header.Values("Vary"), vs) {
			t.Errorf("Vary %q, recorded %q", got.header.Values("Vary"), vs)
		}
	}
}

// TestRecordings replays every recorded request against the emulator:
// what the real API accepted, the emulator accepts with the same status,
// and its answer has every field (name and JSON type) the real answer
// has, on the whole answer and on the last stream event; error answers
// have the recorded status and shape. Requests the source did not record
// are replaced by the nearest request the emulator can be asked (noted
// per case).
func TestRecordings(t *testing.T) {
	recs := testutil.Recordings(t)
	byName := map[string]*testutil.Recording{}
	for _, r := range recs {
		byName[r.Name] = r
	}
	models := recordedModels(recs)
	for _, r := range recs {
		t.Run(r.Name, func(t *testing.T) {
			sc := recordedScript(t, r)
			opts := emulator.Options{Models: models, Script: func(emulator.ReplyRequest) emulator.Script { return sc }}
			if r.Name == "unary-2.5-flash-implicit-cache-video" {
				// The emulator prices a video part like an image (258
				// tokens; the API counted 17,713 for this prompt), so the
				// prompt stays below 2.5 Flash's minimum: lower it here.
				opts.ImplicitCacheMinTokens = 1
			}
			_, ts := testutil.StartEmulator(t, opts)
			path, body := r.Path, ""
			if r.RequestBody != nil {
				body = *r.RequestBody
			}
			hdr := http.Header{}
			for _, k := range []string{"Accept-Encoding", "User-Agent"} {
				for rk, vs := range r.RequestHeaders {
					if strings.EqualFold(rk, k) {
						hdr[k] = vs
					}
				}
			}
			switch {
			case r.Status == 429:
				// A quota error does not follow from the request: inject it.
				body = `{"contents":[{"parts":[{"text":"hello"}]}]}`
				hdr.Set("X-Emulator-Fault", "status=429, retry-after=34.4s")
			case r.RequestBody == nil:
				body = `{"contents":[{"parts":[{"text":"hello"}],"role":"user"}]}`
			}
			// Exchanges that need state the recording's cassette built first.
			if strings.Contains(body, `"cachedContent":"cachedContents/`) || r.Method == http.MethodDelete && strings.Contains(path, "/cachedContents/") {
				create := byName["cachedcontents-create"]
				cx := send(t, ts, create.Method, create.Path, *create.RequestBody, nil)
				var cc struct{ Name string }
				if cx.status != 200 || json.Unmarshal(cx.raw, &cc) != nil {
					t.Fatalf("creating the cache: %d %s", cx.status, cx.raw)
				}
				old := "cachedContents/7lf5him5ev4iemi1yjv2gwli5bhpz3yidzejwllo"
				body = strings.ReplaceAll(body, old, cc.Name)
				path = strings.ReplaceAll(path, old, cc.Name)
			}
			if strings.Contains(r.Name, "implicit-cache") {
				// The prefix was cached by an earlier request (the cassette's
				// previous interaction, or another caller's for the video).
				if x := send(t, ts, r.Method, path, body, hdr); x.status != 200 {
					t.Fatalf("priming request: %d %s", x.status, x.raw)
				}
			}
			got := send(t, ts, r.Method, path, body, hdr)
			if got.status != r.Status {
				t.Fatalf("status %d, recorded %d; answer %s", got.status, r.Status, got.raw)
			}
			want, err := r.Events()
			if err != nil {
				t.Fatal(err)
			}
			if len(got.events) == 0 {
				t.Fatalf("no events in answer %q", got.raw)
			}
			if m := missing(shapes(t, want), shapes(t, got.events)); len(m) > 0 {
				t.Errorf("answer lacks recorded fields %q\nanswer: %s", m, got.raw)
			}
			if r.Stream() {
				if m := missing(shapes(t, want[len(want)-1:]), shapes(t, got.events[len(got.events)-1:])); len(m) > 0 {
					t.Errorf("last event lacks recorded fields %q\nanswer: %s", m, got.raw)
				}
			}
			if r.ResponseBodyExact && r.Status == 200 {
				if w, g := frame(r.ResponseBody), frame(string(got.raw)); w != g {
					t.Errorf("framing %q, recorded %q", g, w)
				}
			}
			checkHeaders(t, r, got)
			if r.Status != 200 {
				var we, ge struct {
					Error struct {
						Code    int
						Status  string
						Message string
					}
				}
				_ = json.Unmarshal(want[0], &we)
				_ = json.Unmarshal(got.events[0], &ge)
				if r.Status == 429 { // injected: the message is the emulator's
					ge.Error.Message = we.Error.Message
				}
				if we.Error != ge.Error {
					t.Errorf("error %+v, recorded %+v", ge.Error, we.Error)
				}
			}
		})
	}
}
