package emulator_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

const genPath = "/v1beta/models/gemini-2.5-flash:generateContent"

// do sends a raw request; the transport does not decompress (DisableCompression).
func do(t *testing.T, ts *httptest.Server, method, path, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if _, ok := hdr["x-goog-api-key"]; !ok {
		req.Header.Set("x-goog-api-key", testKey)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, b
}

type gerr struct {
	Error struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Status  string           `json:"status"`
		Details []map[string]any `json:"details"`
	} `json:"error"`
}

func TestValidationErrors(t *testing.T) {
	const ok = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	tests := []struct {
		name, path, body string
		hdr              map[string]string
		code             int
		status, msg      string
	}{
		{"missing key", genPath, ok, map[string]string{"x-goog-api-key": ""}, 403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers"},
		{"invalid key", genPath, ok, map[string]string{"x-goog-api-key": "wrong"}, 400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."},
		{"bad json", genPath, `{"contents":`, nil, 400, "INVALID_ARGUMENT", "Invalid JSON payload received."},
		{"unknown top field", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"foo":1}`, nil, 400, "INVALID_ARGUMENT", `Invalid JSON payload received. Unknown name "foo": Cannot find field.`},
		{"unknown nested field", genPath, `{"contents":[{"parts":[{"text":"a","ref":1}]}]}`, nil, 400, "INVALID_ARGUMENT", `Unknown name "ref" at 'contents[0].parts[0]': Cannot find field.`},
		{"unknown generationConfig field", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"generation_config":{"max_tokens":5}}`, nil, 400, "INVALID_ARGUMENT", `Unknown name "max_tokens" at 'generation_config'`},
		{"vertex-only field on gemini", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"labels":{"a":"b"},"modelArmorConfig":{}}`, nil, 400, "INVALID_ARGUMENT", `Unknown name "modelArmorConfig"`},
		{"bad role", genPath, `{"contents":[{"role":"assistant","parts":[{"text":"a"}]}]}`, nil, 400, "INVALID_ARGUMENT", "Please use a valid role: user, model."},
		{"system role in contents", genPath, `{"contents":[{"role":"system","parts":[{"text":"a"}]}]}`, nil, 400, "INVALID_ARGUMENT", "Please use a valid role: user, model."},
		{"no contents", genPath, `{}`, nil, 400, "INVALID_ARGUMENT", "contents is not specified"},
		{"empty contents", genPath, `{"contents":[]}`, nil, 400, "INVALID_ARGUMENT", "contents is not specified"},
		{"empty parts", genPath, `{"contents":[{"role":"user","parts":[]}]}`, nil, 400, "INVALID_ARGUMENT", "contents.parts must not be empty"},
		{"empty part", genPath, `{"contents":[{"role":"user","parts":[{}]}]}`, nil, 400, "INVALID_ARGUMENT", "required oneof field 'data' must have one initialized field"},
		{"empty text", genPath, `{"contents":[{"role":"user","parts":[{"text":""}]}]}`, nil, 400, "INVALID_ARGUMENT", "required oneof field 'data'"},
		{"two data fields", genPath, `{"contents":[{"parts":[{"text":"a","inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`, nil, 400, "INVALID_ARGUMENT", "Oneof field 'data' is already set"},
		{"bad base64", genPath, `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"!!!"}}]}]}`, nil, 400, "INVALID_ARGUMENT", "Base64 decoding failed"},
		{"bad enum", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"safetySettings":[{"category":"NOPE","threshold":"BLOCK_NONE"}]}`, nil, 400, "INVALID_ARGUMENT", "Invalid value at 'safety_settings[0].category'"},
		{"bad type", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"generationConfig":{"temperature":"hot"}}`, nil, 400, "INVALID_ARGUMENT", "Invalid value at 'generation_config.temperature' (TYPE_FLOAT)"},
		{"camel and snake duplicate", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"systemInstruction":{"parts":[{"text":"x"}]},"system_instruction":{"parts":[{"text":"y"}]}}`, nil, 400, "INVALID_ARGUMENT", "Duplicate field"},
		{"cache with system", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"cachedContent":"cachedContents/x","systemInstruction":{"parts":[{"text":"s"}]}}`, nil, 400, "INVALID_ARGUMENT", "Tool config, tools and system instruction should not be set in the request when using cached content."},
		{"cache with tools", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"cachedContent":"cachedContents/x","tools":[{"codeExecution":{}}]}`, nil, 400, "INVALID_ARGUMENT", "should not be set in the request when using cached content"},
		{"unknown cache", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"cachedContent":"cachedContents/nope"}`, nil, 403, "PERMISSION_DENIED", "CachedContent not found (or permission denied)"},
		{"unknown model", "/v1beta/models/gemini-0.1-nope:generateContent", ok, nil, 404, "NOT_FOUND", "models/gemini-0.1-nope is not found for API version v1beta, or is not supported for generateContent. Call ModelService.ListModels"},
		{"embedding model generate", "/v1beta/models/gemini-embedding-001:generateContent", ok, nil, 404, "NOT_FOUND", "is not supported for generateContent"},
		{"unknown file", genPath, `{"contents":[{"parts":[{"fileData":{"fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc","mimeType":"text/plain"}}]}]}`, nil, 403, "PERMISSION_DENIED", "You do not have permission to access the File abc or it may not exist."},
		{"gemini3 missing signature", "/v1beta/models/gemini-3-pro-preview:generateContent",
			`{"contents":[{"role":"user","parts":[{"text":"weather?"}]},{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"output":"sun"}}}]}]}`,
			nil, 400, "INVALID_ARGUMENT", "Function call `get_weather` in the `1.` content block is missing a `thought_signature`"},
		{"count both", "/v1beta/models/gemini-2.5-flash:countTokens", `{"contents":[{"parts":[{"text":"a"}]}],"generateContentRequest":{"model":"models/gemini-2.5-flash","contents":[{"parts":[{"text":"a"}]}]}}`, nil, 400, "INVALID_ARGUMENT", "not both"},
		{"unknown route", "/v1beta/whatever", ok, nil, 404, "NOT_FOUND", "Method not found."},
	}
	_, ts := testutil.StartEmulator(t, emulator.Options{ValidKeys: []string{testKey}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, ts, http.MethodPost, tt.path, tt.body, tt.hdr)
			if resp.StatusCode != tt.code {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tt.code, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=UTF-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			if !strings.HasPrefix(string(body), "{\n  \"error\": {\n    \"code\": ") {
				t.Errorf("body not pretty-printed Google style: %q", body)
			}
			var g gerr
			if err := json.Unmarshal(body, &g); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if g.Error.Code != tt.code || g.Error.Status != tt.status || !strings.Contains(g.Error.Message, tt.msg) {
				t.Errorf("error = %d %s %q, want %d %s containing %q", g.Error.Code, g.Error.Status, g.Error.Message, tt.code, tt.status, tt.msg)
			}
		})
	}
	t.Run("invalid key details", func(t *testing.T) {
		_, body := do(t, ts, http.MethodPost, genPath, ok, map[string]string{"x-goog-api-key": "wrong"})
		var g gerr
		_ = json.Unmarshal(body, &g)
		if len(g.Error.Details) == 0 || g.Error.Details[0]["reason"] != "API_KEY_INVALID" {
			t.Errorf("details = %v", g.Error.Details)
		}
	})
	t.Run("wrong http method", func(t *testing.T) {
		resp, _ := do(t, ts, http.MethodGet, genPath, "", nil)
		if resp.StatusCode != 404 {
			t.Errorf("GET generateContent = %d, want 404", resp.StatusCode)
		}
	})
}

func TestAccepted(t *testing.T) {
	tests := []struct{ name, path, body string }{
		{"snake case and int enums", genPath, `{"contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"iVBORw0KGgo"}},{"text":"x"}]}],"system_instruction":{"parts":[{"text":"s"}]},"generation_config":{"max_output_tokens":"100","thinking_config":{"thinking_budget":0}},"safety_settings":[{"category":7,"threshold":"BLOCK_NONE"}]}`},
		{"url-safe base64 padded", genPath, `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"-_-_"}}]}]}`},
		{"role omitted, consecutive user", genPath, `{"contents":[{"parts":[{"text":"a"}]},{"role":"user","parts":[{"text":"b"}]}]}`},
		{"free-form struct fields", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"tools":[{"functionDeclarations":[{"name":"f","parametersJsonSchema":{"type":"object","$schema":"x","anything":[1]}}]}],"generationConfig":{"responseJsonSchema":{"whatever":true}}}`},
		{"null field", genPath, `{"contents":[{"parts":[{"text":"a"}]}],"generationConfig":null}`},
		{"gemini3 dummy signature", "/v1beta/models/gemini-3-flash-preview:generateContent", `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"skip_thought_signature_validator"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`},
		{"gemini3 old turn without signature", "/v1beta/models/gemini-3-flash-preview:generateContent", `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]},{"role":"model","parts":[{"text":"done"}]},{"role":"user","parts":[{"text":"next"}]}]}`},
		{"empty text with signature", "/v1beta/models/gemini-3-flash-preview:generateContent", `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"text":"a"},{"text":"","thoughtSignature":"c2ln"}]},{"role":"user","parts":[{"text":"n"}]}]}`},
		{"v1 and prefix", "/pfx/v1/models/gemini-2.5-flash:generateContent?key=" + testKey, `{"contents":[{"parts":[{"text":"a"}]}]}`},
		{"count generateContentRequest", "/v1beta/models/gemini-2.5-flash:countTokens", `{"generateContentRequest":{"model":"models/gemini-2.5-flash","contents":[{"parts":[{"text":"a"}]}],"systemInstruction":{"role":"system","parts":[{"text":"s"}]},"generationConfig":{},"safetySettings":[]}}`},
	}
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, ts, http.MethodPost, tt.path, tt.body, nil)
			if resp.StatusCode != 200 {
				t.Errorf("status = %d: %s", resp.StatusCode, body)
			}
		})
	}
	t.Run("lenient", func(t *testing.T) {
		_, ts := testutil.StartEmulator(t, emulator.Options{Lenient: true})
		resp, body := do(t, ts, http.MethodPost, genPath, `{"contents":[{"parts":[{"text":"a"}]}],"foo":1}`, nil)
		if resp.StatusCode != 200 {
			t.Errorf("lenient unknown field: %d %s", resp.StatusCode, body)
		}
	})
}

func TestTooLarge(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	big := `{"contents":[{"parts":[{"text":"` + strings.Repeat("a", emulator.MaxBodyBytes) + `"}]}]}`
	resp, _ := do(t, ts, http.MethodPost, genPath, big, nil)
	if resp.StatusCode != 413 {
		t.Errorf("status = %d, want 413", resp.StatusCode)
	}
}

func TestSSEFraming(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{Reply: func(emulator.ReplyRequest) string { return strings.Repeat("word ", 60) }})
	resp, body := do(t, ts, http.MethodPost, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":80}}`, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	events := strings.Split(strings.TrimSuffix(string(body), "\r\n\r\n"), "\r\n\r\n")
	if len(events) < 2 || !strings.HasSuffix(string(body), "\r\n\r\n") {
		t.Fatalf("events = %q", events)
	}
	prev := 0
	for i, ev := range events {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.ContainsAny(data, "\r\n") {
			t.Fatalf("event %d = %q, want one data line", i, ev)
		}
		var r struct {
			Candidates []struct {
				FinishReason string `json:"finishReason"`
				Index        *int   `json:"index"`
			} `json:"candidates"`
			UsageMetadata struct {
				PromptTokenCount, CandidatesTokenCount, ThoughtsTokenCount, TotalTokenCount int
			} `json:"usageMetadata"`
			ResponseID   string `json:"responseId"`
			ModelVersion string `json:"modelVersion"`
		}
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		u := r.UsageMetadata
		// A thinking model reports its thoughts on every chunk.
		if u.CandidatesTokenCount < prev || u.ThoughtsTokenCount == 0 || u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount+u.ThoughtsTokenCount || r.ResponseID == "" || r.ModelVersion == "" {
			t.Errorf("event %d usage/ids = %+v %q %q", i, u, r.ResponseID, r.ModelVersion)
		}
		prev = u.CandidatesTokenCount
		last := i == len(events)-1
		if got := r.Candidates[0].FinishReason; (got != "") != last {
			t.Errorf("event %d finishReason = %q", i, got)
		}
		if last && (r.Candidates[0].FinishReason != "MAX_TOKENS" || u.CandidatesTokenCount+u.ThoughtsTokenCount > 80) {
			t.Errorf("last = %q with %d candidates and %d thoughts tokens, want MAX_TOKENS ≤ 80", r.Candidates[0].FinishReason, u.CandidatesTokenCount, u.ThoughtsTokenCount)
		}
		if r.Candidates[0].Index == nil {
			t.Errorf("event %d has no candidate index", i)
		}
	}
}

func TestJSONArrayStream(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	resp, body := do(t, ts, http.MethodPost, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", `{"contents":[{"parts":[{"text":"hi"}]}]}`, nil)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=UTF-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	// As recorded: "[{…}\n,\r\n{…}\n]".
	if !strings.HasPrefix(string(body), "[{") || !strings.HasSuffix(string(body), "}\n]") || !strings.Contains(string(body), "}\n,\r\n{") {
		t.Errorf("body framing = %q…", body[:min(len(body), 80)])
	}
	var arr []map[string]any
	if err := json.Unmarshal(body, &arr); err != nil || len(arr) < 2 {
		t.Fatalf("array: %d elements, %v", len(arr), err)
	}
	// Errors in array mode are arrays too.
	_, body = do(t, ts, http.MethodPost, "/v1beta/models/nope:streamGenerateContent", `{"contents":[{"parts":[{"text":"hi"}]}]}`, nil)
	if !strings.HasPrefix(string(body), "[{") {
		t.Errorf("array-mode error = %q", body)
	}
}

func TestVertex(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	path := "/v1beta1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
	resp, body := do(t, ts, http.MethodPost, path, `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"labels":{"team":"x"}}`,
		map[string]string{"x-goog-api-key": "", "Authorization": "Bearer tok"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	events := strings.Split(strings.TrimSpace(string(body)), "\r\n\r\n")
	for i, ev := range events {
		last := i == len(events)-1
		if strings.Contains(ev, `"promptTokenCount"`) != last {
			t.Errorf("event %d token counts presence wrong: %s", i, ev)
		}
		if strings.Contains(ev, `"index"`) {
			t.Errorf("event %d has a candidate index: %s", i, ev)
		}
	}
	resp, _ = do(t, ts, http.MethodPost, strings.Replace(path, "?alt=sse", "", 1), `{}`, map[string]string{"x-goog-api-key": ""})
	if resp.StatusCode != 401 {
		t.Errorf("vertex without credentials = %d, want 401", resp.StatusCode)
	}
}

func TestGzip(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	resp, body := do(t, ts, http.MethodPost, genPath, `{"contents":[{"parts":[{"text":"hi"}]}]}`, map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding = %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !json.Valid(plain) {
		t.Errorf("gunzipped body invalid: %v %q", err, plain)
	}
	resp, _ = do(t, ts, http.MethodPost, genPath, `{"contents":[{"parts":[{"text":"hi"}]}]}`, nil)
	if resp.Header.Get("Content-Encoding") != "" {
		t.Error("gzip without Accept-Encoding")
	}
}

func TestImplicitCaching(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv, ts := testutil.StartEmulator(t, emulator.Options{ImplicitCacheMinTokens: 100, Now: clock})
	big := strings.Repeat("stable context sentence. ", 100)
	turn := func(texts ...string) string {
		var cs []string
		for i, x := range texts {
			role := "user"
			if i%2 == 1 {
				role = "model"
			}
			b, _ := json.Marshal(x)
			cs = append(cs, fmt.Sprintf(`{"role":%q,"parts":[{"text":%s}]}`, role, b))
		}
		return `{"contents":[` + strings.Join(cs, ",") + `]}`
	}
	cached := func(body string, hdr map[string]string) int {
		t.Helper()
		resp, b := do(t, ts, http.MethodPost, genPath, body, hdr)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, b)
		}
		rs := srv.Received()
		return rs[len(rs)-1].Usage.CachedContentTokenCount
	}
	if got := cached(turn(big, "answer", "q1"), nil); got != 0 {
		t.Errorf("first request cached = %d, want 0", got)
	}
	// Two whole contents, and the role of the third: "q1" and "q2" share
	// no whole token.
	want := 1 + emulator.CountTokens(big) + 1 + emulator.CountTokens("answer") + 1
	if got := cached(turn(big, "answer", "q2"), nil); got != want {
		t.Errorf("shared 2-content prefix cached = %d, want %d", got, want)
	}
	if got := cached(turn("small", "answer", "q3"), nil); got != 0 {
		t.Errorf("different first content cached = %d, want 0", got)
	}
	if got := cached(turn(big, "answer", "q2"), map[string]string{"x-goog-api-key": "other-key"}); got != 0 {
		t.Errorf("other key cached = %d, want 0", got)
	}
	mu.Lock()
	now = now.Add(6 * time.Minute)
	mu.Unlock()
	if got := cached(turn(big, "answer", "q4"), nil); got != 0 {
		t.Errorf("after the window cached = %d, want 0", got)
	}
	if got := cached(turn(big, "answer", "q5"), nil); got != want {
		t.Errorf("again within window cached = %d, want %d", got, want)
	}
}

func TestFaults(t *testing.T) {
	srv, ts := testutil.StartEmulator(t, emulator.Options{})
	body := `{"contents":[{"parts":[{"text":"hi"}]}]}`
	srv.SetFault(emulator.Fault{Status: 429, RetryAfter: "7", Times: 1})
	resp, b := do(t, ts, http.MethodPost, genPath, body, nil)
	var g gerr
	_ = json.Unmarshal(b, &g)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || g.Error.Status != "RESOURCE_EXHAUSTED" {
		t.Errorf("429 fault = %d %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), g)
	}
	if resp, _ := do(t, ts, http.MethodPost, genPath, body, nil); resp.StatusCode != 200 {
		t.Errorf("fault with Times=1 still active: %d", resp.StatusCode)
	}
	srv.SetFault(emulator.Fault{Status: 503})
	for range 2 {
		resp, b := do(t, ts, http.MethodPost, genPath, body, nil)
		_ = json.Unmarshal(b, &g)
		if resp.StatusCode != 503 || g.Error.Status != "UNAVAILABLE" {
			t.Errorf("503 fault = %d %s", resp.StatusCode, g.Error.Status)
		}
	}
	srv.SetFault(emulator.Fault{})
	srv.SetFault(emulator.Fault{HeaderDelay: 100 * time.Millisecond})
	t0 := time.Now()
	do(t, ts, http.MethodPost, genPath, body, nil)
	if d := time.Since(t0); d < 100*time.Millisecond {
		t.Errorf("header delay took %v", d)
	}
	srv.SetFault(emulator.Fault{})
	t0 = time.Now()
	_, sse := do(t, ts, http.MethodPost, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", body, map[string]string{"X-Emulator-Fault": "chunk-delay=20ms"})
	n := strings.Count(string(sse), "data: ")
	if d := time.Since(t0); n < 3 || d < time.Duration(n-1)*20*time.Millisecond {
		t.Errorf("%d chunks in %v with 20ms chunk delay", n, d)
	}
	if resp, _ := do(t, ts, http.MethodPost, genPath, body, map[string]string{"X-Emulator-Fault": "status=500"}); resp.StatusCode != 500 {
		t.Errorf("header fault status = %d", resp.StatusCode)
	}
	if resp, _ := do(t, ts, http.MethodPost, genPath, body, map[string]string{"X-Emulator-Fault": "bogus"}); resp.StatusCode != 400 {
		t.Errorf("bad fault header status = %d", resp.StatusCode)
	}
	srv.SetFault(emulator.Fault{Status: 503, Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "countTokens") }})
	if resp, _ := do(t, ts, http.MethodPost, genPath, body, nil); resp.StatusCode != 200 {
		t.Errorf("non-matching request faulted: %d", resp.StatusCode)
	}
}

func TestDisconnectMidStream(t *testing.T) {
	srv, ts := testutil.StartEmulator(t, emulator.Options{})
	srv.SetFault(emulator.Fault{DisconnectAfterChunks: 2})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		strings.NewReader(`{"contents":[{"parts":[{"text":"hi"}]}]}`))
	req.Header.Set("x-goog-api-key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if !errors.Is(sc.Err(), io.ErrUnexpectedEOF) {
		t.Errorf("scan error = %v, want unexpected EOF", sc.Err())
	}
	if events != 2 {
		t.Errorf("got %d events before the cut, want 2", events)
	}
}

func TestDisconnectUnary(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+genPath, strings.NewReader(`{"contents":[{"parts":[{"text":"hi"}]}]}`))
	req.Header.Set("x-goog-api-key", testKey)
	req.Header.Set("X-Emulator-Fault", "disconnect-after=1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return // cut before the headers arrived: also a disconnect
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("unary body read completely despite disconnect fault")
	}
}

func TestUploadOffsets(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	resp, _ := do(t, ts, http.MethodPost, "/upload/v1beta/files", `{"file":{"displayName":"a.txt"}}`, map[string]string{
		"X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start",
		"X-Goog-Upload-Header-Content-Type": "text/plain", "X-Goog-Upload-Header-Content-Length": "6"})
	loc := resp.Header.Get("X-Goog-Upload-Url")
	if resp.StatusCode != 200 || !strings.HasPrefix(loc, ts.URL+"/upload/v1beta/files?upload_id=") || !strings.HasSuffix(loc, "&upload_protocol=resumable") ||
		resp.Header.Get("X-Goog-Upload-Status") != "active" {
		t.Fatalf("start = %d %q", resp.StatusCode, loc)
	}
	rel := strings.TrimPrefix(loc, ts.URL)
	chunk := func(data, cmd, off string) (*http.Response, []byte) {
		return do(t, ts, http.MethodPost, rel, data, map[string]string{"X-Goog-Upload-Command": cmd, "X-Goog-Upload-Offset": off, "x-goog-api-key": ""})
	}
	if resp, _ := chunk("abc", "upload", "0"); resp.StatusCode != 200 || resp.Header.Get("X-Goog-Upload-Status") != "active" {
		t.Errorf("chunk 1 = %d", resp.StatusCode)
	}
	if resp, _ := chunk("def", "upload, finalize", "1"); resp.StatusCode != 400 {
		t.Errorf("wrong offset = %d, want 400", resp.StatusCode)
	}
	resp, b := chunk("def", "upload, finalize", "3")
	var out struct {
		File struct{ Name, SizeBytes, MimeType, DisplayName string }
	}
	_ = json.Unmarshal(b, &out)
	want := struct{ Name, SizeBytes, MimeType, DisplayName string }{out.File.Name, "6", "text/plain", "a.txt"}
	if resp.Header.Get("X-Goog-Upload-Status") != "final" || !strings.HasPrefix(out.File.Name, "files/") {
		t.Errorf("finalize = %q %s", resp.Header.Get("X-Goog-Upload-Status"), b)
	}
	if diff := cmp.Diff(want, out.File); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
}

func TestConcurrency(t *testing.T) {
	srv, ts := testutil.StartEmulator(t, emulator.Options{ImplicitCacheMinTokens: 10})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			path := genPath
			if i%2 == 0 {
				path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
			}
			for j := range 5 {
				body := fmt.Sprintf(`{"contents":[{"parts":[{"text":"shared prefix text for everyone %d"}]},{"role":"model","parts":[{"text":"ok"}]},{"parts":[{"text":"q%d"}]}]}`, i%3, j)
				resp, b := do(t, ts, http.MethodPost, path, body, map[string]string{"x-goog-api-key": fmt.Sprintf("k%d", i%4)})
				if resp.StatusCode != 200 {
					t.Errorf("status %d: %s", resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	if n := len(srv.Received()); n != 80 {
		t.Errorf("Received() = %d, want 80", n)
	}
	srv.Reset()
	if n := len(srv.Received()); n != 0 {
		t.Errorf("after Reset Received() = %d", n)
	}
}

func TestCountTokensRule(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"The quick brown fox jumps over the lazy dog.", 10},
		{"internationalization", 5},
		{"2048", 4},
		{"a\n\n\tb", 3},
		{"if (x != nil) {", 7},
		{"日本語", 3},
	}
	for _, tt := range tests {
		if got := emulator.CountTokens(tt.in); got != tt.want {
			t.Errorf("CountTokens(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
