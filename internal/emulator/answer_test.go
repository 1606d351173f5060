package emulator_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// gen is the part of a generate answer these tests read.
type gen struct {
	Candidates []struct {
		Content struct {
			Parts []struct {
				Text         *string `json:"text"`
				Thought      bool    `json:"thought"`
				FunctionCall *struct {
					Name string         `json:"name"`
					Args map[string]any `json:"args"`
					ID   string         `json:"id"`
				} `json:"functionCall"`
				ExecutableCode      map[string]any `json:"executableCode"`
				CodeExecutionResult map[string]any `json:"codeExecutionResult"`
				ThoughtSignature    string         `json:"thoughtSignature"`
			} `json:"parts"`
			Role string `json:"role"`
		} `json:"content"`
		FinishReason       string         `json:"finishReason"`
		FinishMessage      string         `json:"finishMessage"`
		AvgLogprobs        float64        `json:"avgLogprobs"`
		SafetyRatings      []any          `json:"safetyRatings"`
		GroundingMetadata  map[string]any `json:"groundingMetadata"`
		URLContextMetadata map[string]any `json:"urlContextMetadata"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata map[string]any `json:"usageMetadata"`
	ModelVersion  string         `json:"modelVersion"`
	ResponseID    string         `json:"responseId"`
}

func decodeGen(t *testing.T, raw json.RawMessage) gen {
	t.Helper()
	var g gen
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("answer %s: %v", raw, err)
	}
	return g
}

func num(u map[string]any, k string) int {
	f, _ := u[k].(float64)
	return int(f)
}

const multiplyTools = `"tools":[{"functionDeclarations":[{"name":"multiply","description":"Multiply two numbers.","parameters":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"]}}]}]`

// TestAnswers checks the per-model answer shapes the recordings show (see
// TestRecordings), without the recordings.
func TestAnswers(t *testing.T) {
	user := `{"role":"user","parts":[{"text":"What is 5 times 3?"}]}`
	tests := []struct {
		name, model, query, body string
		script                   emulator.Script
		check                    func(t *testing.T, events []gen)
	}{
		{name: "thinking model reports thoughts without includeThoughts", model: "gemini-2.5-flash",
			body: `{"contents":[` + user + `]}`,
			check: func(t *testing.T, ev []gen) {
				u := ev[0].UsageMetadata
				if num(u, "thoughtsTokenCount") == 0 || u["serviceTier"] != "standard" ||
					num(u, "totalTokenCount") != num(u, "promptTokenCount")+num(u, "candidatesTokenCount")+num(u, "thoughtsTokenCount") {
					t.Errorf("usage %v", u)
				}
				for _, p := range ev[0].Candidates[0].Content.Parts {
					if p.Thought || p.ThoughtSignature != "" {
						t.Errorf("part %+v: no thought summary asked for", p)
					}
				}
			}},
		{name: "thinking budget 0 turns thinking off", model: "gemini-2.5-flash",
			body: `{"contents":[` + user + `],"generationConfig":{"thinkingConfig":{"thinkingBudget":0}}}`,
			check: func(t *testing.T, ev []gen) {
				if n := num(ev[0].UsageMetadata, "thoughtsTokenCount"); n != 0 {
					t.Errorf("thoughtsTokenCount %d", n)
				}
			}},
		{name: "2.0 reports candidatesTokensDetails and avgLogprobs, no thoughts", model: "gemini-2.0-flash",
			body: `{"contents":[` + user + `]}`,
			check: func(t *testing.T, ev []gen) {
				u := ev[0].UsageMetadata
				if _, ok := u["candidatesTokensDetails"]; !ok || num(u, "thoughtsTokenCount") != 0 || u["serviceTier"] != nil {
					t.Errorf("usage %v", u)
				}
				if ev[0].Candidates[0].AvgLogprobs >= 0 {
					t.Errorf("avgLogprobs %v", ev[0].Candidates[0].AvgLogprobs)
				}
			}},
		{name: "mode ANY calls a function with generated args, id and signature on 3.x", model: "gemini-3-flash-preview",
			body: `{"contents":[` + user + `],` + multiplyTools + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`,
			check: func(t *testing.T, ev []gen) {
				p := ev[0].Candidates[0].Content.Parts[0]
				if p.FunctionCall == nil || p.FunctionCall.Name != "multiply" || p.FunctionCall.ID == "" || p.ThoughtSignature == "" ||
					p.FunctionCall.Args["x"] != float64(1) || p.FunctionCall.Args["y"] != float64(1) {
					t.Errorf("part %+v", p)
				}
				if ev[0].Candidates[0].FinishMessage != "" {
					t.Errorf("finishMessage %q on 3.x", ev[0].Candidates[0].FinishMessage)
				}
			}},
		{name: "mode AUTO answers text unless scripted", model: "gemini-3-flash-preview",
			body: `{"contents":[` + user + `],` + multiplyTools + `}`,
			check: func(t *testing.T, ev []gen) {
				if p := ev[0].Candidates[0].Content.Parts[0]; p.FunctionCall != nil || p.Text == nil {
					t.Errorf("part %+v", p)
				}
			}},
		{name: "scripted call on 2.5: signature, no id, finishMessage", model: "gemini-2.5-flash",
			body: `{"contents":[` + user + `],` + multiplyTools + `}`, script: emulator.Script{FunctionCalls: []emulator.FunctionCall{{Name: "multiply"}}},
			check: func(t *testing.T, ev []gen) {
				c := ev[0].Candidates[0]
				p := c.Content.Parts[0]
				if p.FunctionCall == nil || p.FunctionCall.ID != "" || p.ThoughtSignature == "" || c.FinishMessage != "Model generated function call(s)." {
					t.Errorf("candidate %+v", c)
				}
			}},
		{name: "scripted call to an undeclared function answers text", model: "gemini-2.5-flash",
			body: `{"contents":[` + user + `],` + multiplyTools + `}`, script: emulator.Script{FunctionCalls: []emulator.FunctionCall{{Name: "divide"}}},
			check: func(t *testing.T, ev []gen) {
				if p := ev[0].Candidates[0].Content.Parts[0]; p.FunctionCall != nil {
					t.Errorf("part %+v", p)
				}
			}},
		{name: "3.x stream ends with an empty text part carrying signature and finishReason", model: "gemini-3-flash-preview", query: "?alt=sse",
			body: `{"contents":[` + user + `]}`,
			check: func(t *testing.T, ev []gen) {
				last := ev[len(ev)-1].Candidates[0]
				if len(ev) < 2 || last.FinishReason != "STOP" || len(last.Content.Parts) != 1 || *last.Content.Parts[0].Text != "" || last.Content.Parts[0].ThoughtSignature == "" {
					t.Errorf("last chunk %+v of %d", last, len(ev))
				}
				for _, e := range ev[:len(ev)-1] {
					if e.Candidates[0].FinishReason != "" || e.Candidates[0].Content.Parts[0].ThoughtSignature != "" {
						t.Errorf("chunk %+v before the last", e.Candidates[0])
					}
				}
			}},
		{name: "3.x unary puts the signature on the last text part", model: "gemini-3.5-flash",
			body: `{"contents":[` + user + `]}`,
			check: func(t *testing.T, ev []gen) {
				ps := ev[0].Candidates[0].Content.Parts
				if len(ps) != 1 || ps[0].Text == nil || *ps[0].Text == "" || ps[0].ThoughtSignature == "" {
					t.Errorf("parts %+v", ps)
				}
			}},
		{name: "2.5 with thought summaries signs the first text part", model: "gemini-2.5-pro", query: "?alt=sse",
			body: `{"contents":[` + user + `],"generationConfig":{"thinkingConfig":{"includeThoughts":true}}}`,
			check: func(t *testing.T, ev []gen) {
				if p := ev[0].Candidates[0].Content.Parts[0]; !p.Thought {
					t.Errorf("first chunk %+v, want the thought summary", p)
				}
				if p := ev[1].Candidates[0].Content.Parts[0]; p.Thought || p.ThoughtSignature == "" {
					t.Errorf("second chunk %+v, want signed text", p)
				}
			}},
		{name: "code execution: code, result without index and prompt-only usage, text", model: "gemini-3-flash-preview", query: "?alt=sse",
			body: `{"contents":[` + user + `],"tools":[{"codeExecution":{}}]}`,
			check: func(t *testing.T, ev []gen) {
				if ev[0].Candidates[0].Content.Parts[0].ExecutableCode == nil || ev[0].Candidates[0].Content.Parts[0].ThoughtSignature == "" {
					t.Fatalf("first chunk %+v", ev[0].Candidates[0])
				}
				if ev[1].Candidates[0].Content.Parts[0].CodeExecutionResult == nil || num(ev[1].UsageMetadata, "candidatesTokenCount") != 0 ||
					num(ev[1].UsageMetadata, "totalTokenCount") != num(ev[1].UsageMetadata, "promptTokenCount") {
					t.Errorf("second chunk %+v usage %v", ev[1].Candidates[0], ev[1].UsageMetadata)
				}
				if u := ev[len(ev)-1].UsageMetadata; num(u, "toolUsePromptTokenCount") == 0 || u["toolUsePromptTokensDetails"] == nil {
					t.Errorf("last usage %v", u)
				}
			}},
		{name: "google search grounds the answer", model: "gemini-2.5-pro",
			body: `{"contents":[` + user + `],"tools":[{"googleSearch":{}}]}`,
			check: func(t *testing.T, ev []gen) {
				g := ev[0].Candidates[0].GroundingMetadata
				if g["webSearchQueries"] == nil || g["groundingChunks"] == nil || g["groundingSupports"] == nil || g["searchEntryPoint"] == nil {
					t.Errorf("groundingMetadata %v", g)
				}
			}},
		{name: "url context lists the prompt's URLs", model: "gemini-2.5-flash",
			body: `{"contents":[{"parts":[{"text":"Summarise https://example.org/a."}]}],"tools":[{"urlContext":{}}]}`,
			check: func(t *testing.T, ev []gen) {
				b, _ := json.Marshal(ev[0].Candidates[0].URLContextMetadata)
				if !strings.Contains(string(b), `"retrievedUrl":"https://example.org/a"`) {
					t.Errorf("urlContextMetadata %s", b)
				}
			}},
		{name: "blocked prompt: promptFeedback, no candidates", model: "gemini-3.7-flash",
			body: `{"contents":[` + user + `]}`, script: emulator.Script{BlockReason: "PROHIBITED_CONTENT"},
			check: func(t *testing.T, ev []gen) {
				g := ev[0]
				if g.PromptFeedback == nil || g.PromptFeedback.BlockReason != "PROHIBITED_CONTENT" || len(g.Candidates) != 0 ||
					num(g.UsageMetadata, "totalTokenCount") != num(g.UsageMetadata, "promptTokenCount") {
					t.Errorf("answer %+v", g)
				}
			}},
		{name: "safety stop: empty content, safety ratings", model: "gemini-2.5-flash",
			body: `{"contents":[` + user + `]}`, script: emulator.Script{FinishReason: "SAFETY"},
			check: func(t *testing.T, ev []gen) {
				c := ev[0].Candidates[0]
				if c.FinishReason != "SAFETY" || len(c.Content.Parts) != 0 || c.Content.Role != "" || len(c.SafetyRatings) == 0 {
					t.Errorf("candidate %+v", c)
				}
			}},
		{name: "max tokens spent on thinking: content with the role only", model: "gemini-2.5-pro",
			body: `{"contents":[` + user + `],"generationConfig":{"maxOutputTokens":5}}`,
			check: func(t *testing.T, ev []gen) {
				c := ev[0].Candidates[0]
				if c.FinishReason != "MAX_TOKENS" || len(c.Content.Parts) != 0 || c.Content.Role != "model" || num(ev[0].UsageMetadata, "thoughtsTokenCount") != 5 {
					t.Errorf("candidate %+v usage %v", c, ev[0].UsageMetadata)
				}
			}},
		{name: "gemini-flash-latest answers as a concrete model", model: "gemini-flash-latest",
			body: `{"contents":[` + user + `]}`,
			check: func(t *testing.T, ev []gen) {
				if ev[0].ModelVersion != "gemini-3.6-flash" {
					t.Errorf("modelVersion %q", ev[0].ModelVersion)
				}
			}},
		{name: "an empty text part beside a signed function call is accepted", model: "gemini-3-flash-preview",
			body: `{"contents":[` + user + `,{"role":"model","parts":[{"text":""},{"functionCall":{"name":"multiply","args":{"x":5,"y":3}},"thoughtSignature":"c2ln"}]},` +
				`{"role":"user","parts":[{"functionResponse":{"name":"multiply","response":{"output":"15"}}}]}],` + multiplyTools + `}`,
			check: func(t *testing.T, ev []gen) {
				if len(ev[0].Candidates) == 0 {
					t.Errorf("answer %+v", ev[0])
				}
			}},
	}
	idRE := regexp.MustCompile(`^[A-Za-z0-9_-]{23}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ts := testutil.StartEmulator(t, emulator.Options{Models: append(emulator.DefaultModels, "gemini-3.7-flash"),
				Script: func(emulator.ReplyRequest) emulator.Script { return tt.script }})
			method := "generateContent"
			if tt.query != "" {
				method = "streamGenerateContent"
			}
			x := send(t, ts, http.MethodPost, "/v1beta/models/"+tt.model+":"+method+tt.query, tt.body, nil)
			if x.status != 200 {
				t.Fatalf("status %d: %s", x.status, x.raw)
			}
			var events []gen
			for _, raw := range x.events {
				g := decodeGen(t, raw)
				if !idRE.MatchString(g.ResponseID) {
					t.Errorf("responseId %q, want 23 base64url characters", g.ResponseID)
				}
				events = append(events, g)
			}
			tt.check(t, events)
		})
	}
}

// TestEmptyTextPartAlone keeps the API's refusal of a content whose only
// part is an empty text.
func TestEmptyTextPartAlone(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	x := send(t, ts, http.MethodPost, genPath, `{"contents":[{"role":"user","parts":[{"text":""}]}]}`, nil)
	if x.status != 400 || !strings.Contains(string(x.raw), "required oneof field 'data'") {
		t.Errorf("status %d: %s", x.status, x.raw)
	}
}

// TestImplicitCacheMinimumByModel checks the per-model minimum of
// implicit caching: a repeated ~1,500-token prompt is cached on 2.5 Flash
// (minimum 512, recorded) but not on 3.5 Flash (4,096, documented) nor
// 2.0 Flash (no implicit caching).
func TestImplicitCacheMinimumByModel(t *testing.T) {
	body := `{"contents":[{"parts":[{"text":"` + strings.Repeat("alpha beta gamma delta ", 400) + `"}]}]}`
	for model, cached := range map[string]bool{"gemini-2.5-flash": true, "gemini-3.5-flash": false, "gemini-2.0-flash": false} {
		t.Run(model, func(t *testing.T) {
			_, ts := testutil.StartEmulator(t, emulator.Options{})
			path := "/v1beta/models/" + model + ":generateContent"
			send(t, ts, http.MethodPost, path, body, nil)
			x := send(t, ts, http.MethodPost, path, body, nil)
			g := decodeGen(t, x.events[0])
			p, c := num(g.UsageMetadata, "promptTokenCount"), num(g.UsageMetadata, "cachedContentTokenCount")
			if p < 1200 || p > 4000 || (c > 0) != cached {
				t.Errorf("prompt %d, cached %d; want cached %v", p, c, cached)
			}
		})
	}
}

// TestCachedContentFields checks the recorded cachedContents shape: an
// empty displayName is sent, expireTime has nanoseconds.
func TestCachedContentFields(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{CacheMinTokens: -1})
	x := send(t, ts, http.MethodPost, "/v1beta/cachedContents", `{"model":"models/gemini-2.5-flash","contents":[{"parts":[{"text":"hi"}]}],"ttl":"60s"}`, nil)
	var cc map[string]any
	if err := json.Unmarshal(x.raw, &cc); err != nil || x.status != 200 {
		t.Fatalf("status %d: %s", x.status, x.raw)
	}
	if dn, ok := cc["displayName"]; !ok || dn != "" {
		t.Errorf("displayName %v (present %v)", dn, ok)
	}
	if et, _ := cc["expireTime"].(string); !regexp.MustCompile(`\.\d{9}Z$`).MatchString(et) {
		t.Errorf("expireTime %q, want nanoseconds", et)
	}
}

// TestInteractionShape checks the recorded Interactions shape: key
// order, service_tier, a thought step with a signature and
// total_thought_tokens on a thinking model; in a stream, status_update,
// the thought step's signature delta and a completed event without steps.
func TestInteractionShape(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	x := send(t, ts, http.MethodPost, "/v1beta/interactions", `{"model":"gemini-2.5-flash","input":"Hello"}`, nil)
	keys := regexp.MustCompile(`(?m)^  "([a-z_]+)":`).FindAllStringSubmatch(string(x.raw), -1)
	var order []string
	for _, k := range keys {
		order = append(order, k[1])
	}
	if got := strings.Join(order, ","); got != "id,status,usage,created,updated,service_tier,steps,object,model" {
		t.Errorf("key order %s\n%s", got, x.raw)
	}
	var it struct {
		ServiceTier string `json:"service_tier"`
		Usage       map[string]any
		Steps       []map[string]any
	}
	if err := json.Unmarshal(x.raw, &it); err != nil {
		t.Fatal(err)
	}
	u := it.Usage
	if it.ServiceTier != "standard" || num(u, "total_thought_tokens") == 0 ||
		num(u, "total_tokens") != num(u, "total_input_tokens")+num(u, "total_output_tokens")+num(u, "total_thought_tokens") ||
		len(it.Steps) != 2 || it.Steps[0]["type"] != "thought" || it.Steps[0]["signature"] == nil {
		t.Errorf("interaction %s", x.raw)
	}
	x = send(t, ts, http.MethodPost, "/v1beta/interactions", `{"model":"gemini-2.5-flash","input":"Hello","stream":true}`, nil)
	var types []string
	for _, ev := range x.events {
		var e struct {
			EventType   string         `json:"event_type"`
			Delta       map[string]any `json:"delta"`
			Interaction map[string]any `json:"interaction"`
		}
		if err := json.Unmarshal(ev, &e); err != nil {
			t.Fatal(err)
		}
		types = append(types, e.EventType)
		if e.EventType == "interaction.completed" {
			if _, ok := e.Interaction["steps"]; ok || e.Interaction["service_tier"] != "standard" {
				t.Errorf("completed %v", e.Interaction)
			}
		}
		if e.Delta != nil && e.Delta["type"] == "thought_signature" && e.Delta["signature"] == nil {
			t.Errorf("signature delta %v", e.Delta)
		}
	}
	want := "interaction.created,interaction.status_update,step.start,step.delta,step.stop,step.start"
	if got := strings.Join(types, ","); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "step.stop,interaction.completed") {
		t.Errorf("events %s", got)
	}
	// Without thought summaries, no thought step (the proxy's requests).
	x = send(t, ts, http.MethodPost, "/v1beta/interactions", `{"model":"gemini-2.5-flash","input":"Hello","generation_config":{"thinking_summaries":"none"}}`, nil)
	if strings.Contains(string(x.raw), `"thought"`) || !strings.Contains(string(x.raw), `"total_thought_tokens": `) {
		t.Errorf("thinking_summaries none: %s", x.raw)
	}
}

// TestScriptHeader scripts a request with X-Emulator-Script, for clients
// of the emulator binary; a malformed header is a 400.
func TestScriptHeader(t *testing.T) {
	_, ts := testutil.StartEmulator(t, emulator.Options{})
	body := `{"contents":[{"parts":[{"text":"What is 5 times 3?"}]}],` + multiplyTools + `}`
	x := send(t, ts, http.MethodPost, "/v1beta/models/gemini-3-flash-preview:generateContent", body, http.Header{"X-Emulator-Script": {"call=multiply"}})
	if p := decodeGen(t, x.events[0]).Candidates[0].Content.Parts[0]; p.FunctionCall == nil || p.FunctionCall.Name != "multiply" {
		t.Errorf("call=multiply: %s", x.raw)
	}
	x = send(t, ts, http.MethodPost, genPath, body, http.Header{"X-Emulator-Script": {"block=SAFETY"}})
	if g := decodeGen(t, x.events[0]); g.PromptFeedback == nil || g.PromptFeedback.BlockReason != "SAFETY" {
		t.Errorf("block=SAFETY: %s", x.raw)
	}
	x = send(t, ts, http.MethodPost, genPath, body, http.Header{"X-Emulator-Script": {"jump=1"}})
	if x.status != 400 {
		t.Errorf("jump=1: status %d", x.status)
	}
}
