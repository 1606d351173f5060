package upstream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	return v
}

func TestToInteraction(t *testing.T) {
	tests := []struct {
		name     string
		req      string
		prev     string
		newTurns int
		stream   bool
		want     string
	}{
		{
			name:     "first turn",
			req:      `{"contents":[{"role":"user","parts":[{"text":"hi <b>"}]}]}`,
			newTurns: 1,
			want:     `{"model":"gemini-2.5-flash","input":[{"type":"user_input","content":[{"type":"text","text":"hi <b>"}]}],"generation_config":{"thinking_summaries":"none"},"store":true,"stream":false}`,
		},
		{
			name:     "continuation with config",
			prev:     "v1_abc",
			newTurns: 1,
			stream:   true,
			req: `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},{"parts":[{"text":"c"},{"inlineData":{"mimeType":"image/png","data":"iVBO"}},{"fileData":{"fileUri":"https://x/f","mimeType":"application/pdf"}}]}],
				"systemInstruction":{"role":"user","parts":[{"text":"be brief"}]},
				"generationConfig":{"temperature":0.20,"topP":0.9,"seed":7,"maxOutputTokens":100,"stopSequences":["END"],"candidateCount":1,
					"thinkingConfig":{"thinkingLevel":"LOW","includeThoughts":true},"responseMimeType":"application/json","responseJsonSchema":{"type": "object"}},
				"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["f"]}},
				"tools":[{"functionDeclarations":[{"name":"f","description":"d","parametersJsonSchema":{"type":"object","properties":{"x":{"type":"integer"}}}}]}],
				"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_ONLY_HIGH"}],
				"labels":{"team":"a"}}`,
			want: `{"model":"gemini-2.5-flash","input":[{"type":"user_input","content":[{"type":"text","text":"c"},{"type":"image","data":"iVBO","mime_type":"image/png"},{"type":"document","uri":"https://x/f","mime_type":"application/pdf"}]}],
				"previous_interaction_id":"v1_abc","system_instruction":"be brief",
				"generation_config":{"temperature":0.20,"top_p":0.9,"seed":7,"max_output_tokens":100,"stop_sequences":["END"],"thinking_level":"low","thinking_summaries":"auto",
					"tool_choice":{"allowed_tools":{"mode":"any","tools":["f"]}}},
				"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}],
				"response_format":{"type":"text","mime_type":"application/json","schema":{"type":"object"}},
				"safety_settings":[{"type":"harassment","threshold":"block_only_high"}],
				"labels":{"team":"a"},"store":true,"stream":true}`,
		},
		{
			name:     "snake case input",
			prev:     "v1_x",
			newTurns: 1,
			req: `{"contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"audio/mp3","data":"AAAA"}}]}],
				"system_instruction":{"parts":[{"text":"s"}]},"generation_config":{"max_output_tokens":5,"thinking_config":{"include_thoughts":false}},
				"tool_config":{"function_calling_config":{"mode":"NONE"}}}`,
			want: `{"model":"gemini-2.5-flash","input":[{"type":"user_input","content":[{"type":"audio","data":"AAAA","mime_type":"audio/mp3"}]}],
				"previous_interaction_id":"v1_x","system_instruction":"s",
				"generation_config":{"max_output_tokens":5,"thinking_summaries":"none","tool_choice":"none"},"store":true,"stream":false}`,
		},
		{
			name:     "function results",
			prev:     "v1_y",
			newTurns: 1,
			req: `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"id":"c1","name":"f","args":{"a":1}}}]},
				{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"f","response":{"output": 2}}},{"functionResponse":{"id":"c2","name":"g","response":{"error":"x"}}}]}]}`,
			want: `{"model":"gemini-2.5-flash","input":[{"type":"function_result","call_id":"c1","name":"f","result":{"output":2}},{"type":"function_result","call_id":"c2","name":"g","result":{"error":"x"}}],
				"previous_interaction_id":"v1_y","generation_config":{"thinking_summaries":"none"},"store":true,"stream":false}`,
		},
		{
			name:     "whole history without previous",
			newTurns: 4,
			req: `{"contents":[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"text":"t1"},{"text":"t2"},{"functionCall":{"id":"c1","name":"f"}}]},
				{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"f","response":{}}}]},{"role":"model","parts":[{"text":"done"}]}]}`,
			want: `{"model":"gemini-2.5-flash","input":[{"type":"user_input","content":[{"type":"text","text":"q"}]},
				{"type":"model_output","content":[{"type":"text","text":"t1"},{"type":"text","text":"t2"}]},
				{"type":"function_call","id":"c1","name":"f","arguments":{}},
				{"type":"function_result","call_id":"c1","name":"f","result":{}},
				{"type":"model_output","content":[{"type":"text","text":"done"}]}],"generation_config":{"thinking_summaries":"none"},"store":true,"stream":false}`,
		},
		{
			// A client that did not ask for thoughts gets none, whatever
			// the Interactions default.
			name:     "thinking level without includeThoughts",
			prev:     "p",
			newTurns: 1,
			req:      `{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"thinkingConfig":{"thinkingLevel":"HIGH"}}}`,
			want:     `{"model":"gemini-2.5-flash","input":[{"type":"user_input","content":[{"type":"text","text":"x"}]}],"previous_interaction_id":"p","generation_config":{"thinking_level":"high","thinking_summaries":"none"},"store":true,"stream":false}`,
		},
		{
			name:     "nulls and defaults",
			prev:     "p",
			newTurns: 1,
			req:      `{"contents":[{"parts":[{"text":"x"}]}],"systemInstruction":null,"generationConfig":{"temperature":null,"responseModalities":["TEXT"]},"tools":[],"safetySettings":[]}`,
			want:     `{"model":"gemini-2.5-flash","input":[{"type":"user_input","content":[{"type":"text","text":"x"}]}],"previous_interaction_id":"p","generation_config":{"thinking_summaries":"none"},"store":true,"stream":false}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ToInteraction([]byte(tt.req), "models/gemini-2.5-flash", tt.prev, tt.newTurns, tt.stream)
			if err != nil || !ok {
				_, why := toInteraction([]byte(tt.req), "gemini-2.5-flash", tt.prev, tt.newTurns, tt.stream)
				t.Fatalf("ToInteraction() ok=%v err=%v (%v)", ok, err, why)
			}
			if diff := cmp.Diff(decode(t, []byte(tt.want)), decode(t, got)); diff != "" {
				t.Errorf("ToInteraction() mismatch (-want +got):\n%s", diff)
			}
			if strings.ContainsAny(string(got), "\n\t") {
				t.Errorf("ToInteraction() output not compact: %s", got)
			}
		})
	}
}

func TestToInteractionNumbersExact(t *testing.T) {
	got, ok, err := ToInteraction([]byte(`{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"temperature":0.30000000000000004,"seed":-12}}`), "m", "p", 1, false)
	if err != nil || !ok {
		t.Fatalf("ToInteraction() ok=%v err=%v", ok, err)
	}
	for _, want := range []string{`"temperature":0.30000000000000004`, `"seed":-12`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("ToInteraction() = %s, want it to contain %s", got, want)
		}
	}
}

func TestToInteractionRefuses(t *testing.T) {
	user := `{"role":"user","parts":[{"text":"x"}]}`
	withContents := func(extra string) string { return `{"contents":[` + user + `]` + extra + `}` }
	withPart := func(part string) string { return `{"contents":[{"role":"user","parts":[` + part + `]}]}` }
	withModel := func(part string) string {
		return `{"contents":[{"role":"model","parts":[` + part + `]},` + user + `]}`
	}
	tests := []struct {
		name, req, why string
	}{
		{"unknown top-level", withContents(`,"foo":1`), `field "foo"`},
		{"cachedContent", withContents(`,"cachedContent":"cachedContents/a"`), "cachedContent"},
		{"serviceTier", withContents(`,"serviceTier":"flex"`), "serviceTier"},
		{"store", withContents(`,"store":false`), "store"},
		{"duplicate spelling", withContents(`,"generationConfig":{},"generation_config":{}`), "duplicate"},
		{"duplicate key", withContents(`,"labels":{},"labels":{}`), "duplicate"},
		{"system two parts", withContents(`,"systemInstruction":{"parts":[{"text":"a"},{"text":"b"}]}`), "2 parts"},
		{"system non-text", withContents(`,"systemInstruction":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA"}}]}`), "non-text"},
		{"topK", withContents(`,"generationConfig":{"topK":40}`), "topK"},
		{"thinkingBudget zero", withContents(`,"generationConfig":{"thinkingConfig":{"thinkingBudget":0}}`), "thinkingBudget"},
		{"thinkingLevel int", withContents(`,"generationConfig":{"thinkingConfig":{"thinkingLevel":2}}`), "expected a string"},
		{"candidateCount 2", withContents(`,"generationConfig":{"candidateCount":2}`), "candidateCount"},
		{"responseSchema", withContents(`,"generationConfig":{"responseSchema":{"type":"OBJECT"}}`), "responseSchema"},
		{"enum mime", withContents(`,"generationConfig":{"responseMimeType":"text/x.enum"}`), "responseMimeType"},
		{"schema with text/plain", withContents(`,"generationConfig":{"responseMimeType":"text/plain","responseJsonSchema":{}}`), "responseJsonSchema"},
		{"penalty", withContents(`,"generationConfig":{"presencePenalty":0.5}`), "presencePenalty"},
		{"image modality", withContents(`,"generationConfig":{"responseModalities":["TEXT","IMAGE"]}`), "responseModalities"},
		{"number as string", withContents(`,"generationConfig":{"maxOutputTokens":"5"}`), "expected a number"},
		{"googleSearch", withContents(`,"tools":[{"googleSearch":{}}]`), "googleSearch"},
		{"codeExecution", withContents(`,"tools":[{"codeExecution":{}}]`), "codeExecution"},
		{"openapi parameters", withContents(`,"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT"}}]}]`), `"parameters"`},
		{"function behavior", withContents(`,"tools":[{"functionDeclarations":[{"name":"f","behavior":"NON_BLOCKING"}]}]`), "behavior"},
		{"retrievalConfig", withContents(`,"toolConfig":{"retrievalConfig":{}}`), "retrievalConfig"},
		{"mode unspecified", withContents(`,"toolConfig":{"functionCallingConfig":{"mode":"MODE_UNSPECIFIED"}}`), "mode"},
		{"safety int", withContents(`,"safetySettings":[{"category":7,"threshold":"OFF"}]`), "expected a string"},
		{"safety unknown category", withContents(`,"safetySettings":[{"category":"HARM_CATEGORY_UNSPECIFIED","threshold":"OFF"}]`), "safetySettings[0]"},
		{"safety method", withContents(`,"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"OFF","method":"SEVERITY"}]`), "method"},
		{"no contents", `{"generationConfig":{}}`, "no contents"},
		{"empty parts", `{"contents":[{"role":"user","parts":[]}]}`, "no parts"},
		{"role system", `{"contents":[{"role":"system","parts":[{"text":"x"}]}]}`, "role"},
		{"content extra field", `{"contents":[{"role":"user","parts":[{"text":"x"}],"x":1}]}`, `field "x"`},
		{"empty text", withPart(`{"text":""}`), "empty text"},
		{"text with signature", withPart(`{"text":"x","thoughtSignature":"AAAA"}`), "part fields"},
		{"video metadata", withPart(`{"fileData":{"fileUri":"u","mimeType":"video/mp4"},"videoMetadata":{"fps":1}}`), "part fields"},
		{"display name", withPart(`{"inlineData":{"mimeType":"image/png","data":"AA","displayName":"x"}}`), "displayName"},
		{"text/plain data", withPart(`{"inlineData":{"mimeType":"text/plain","data":"AA"}}`), "MIME type"},
		{"executable code", withPart(`{"executableCode":{"language":"PYTHON","code":"1"}}`), "executableCode"},
		{"response without id", withPart(`{"functionResponse":{"name":"f","response":{}}}`), "needs id"},
		{"response with parts", withPart(`{"functionResponse":{"id":"1","name":"f","response":{},"parts":[]}}`), "parts"},
		{"response not object", withPart(`{"functionResponse":{"id":"1","name":"f","response":[1]}}`), "not an object"},
		{"response mixed", withPart(`{"functionResponse":{"id":"1","name":"f","response":{}}},{"text":"x"}`), "mixed"},
		{"model thought", withModel(`{"text":"x","thought":true}`), "2 fields"},
		{"model signature", withModel(`{"functionCall":{"id":"1","name":"f"},"thoughtSignature":"AA"}`), "2 fields"},
		{"model call without id", withModel(`{"functionCall":{"name":"f","args":{}}}`), "needs id"},
		{"model inline data", withModel(`{"inlineData":{"mimeType":"image/png","data":"AA"}}`), "inlineData"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body struct{ Contents []any }
			_ = json.Unmarshal([]byte(tt.req), &body)
			newTurns := max(1, len(body.Contents))
			got, ok, err := ToInteraction([]byte(tt.req), "m", "", newTurns, false)
			if err != nil || ok || got != nil {
				t.Fatalf("ToInteraction(%s) = %s, %v, %v; want nil, false, nil", tt.req, got, ok, err)
			}
			_, why := toInteraction([]byte(tt.req), "m", "", newTurns, false)
			if !errors.Is(why, errUnknown) || !strings.Contains(why.Error(), tt.why) {
				t.Errorf("reason = %v, want it to mention %q", why, tt.why)
			}
		})
	}
}

func TestToInteractionErrors(t *testing.T) {
	two := `{"contents":[{"parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},{"parts":[{"text":"c"}]}]}`
	tests := []struct {
		name, req, model, prev string
		newTurns               int
		turnsErr               bool
	}{
		{name: "invalid JSON", req: `{"contents":`, model: "m", prev: "p", newTurns: 1},
		{name: "not an object", req: `[1]`, model: "m", prev: "p", newTurns: 1},
		{name: "empty model", req: two, prev: "p", newTurns: 1},
		{name: "zero turns", req: two, model: "m", prev: "p", newTurns: 0, turnsErr: true},
		{name: "too many turns", req: two, model: "m", prev: "p", newTurns: 4, turnsErr: true},
		{name: "history lost", req: two, model: "m", newTurns: 1, turnsErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ToInteraction([]byte(tt.req), tt.model, tt.prev, tt.newTurns, false)
			if tt.name == "not an object" {
				// a valid non-object is untranslatable, not an error
				if err != nil || ok {
					t.Fatalf("ToInteraction() = %s, %v, %v; want ok=false, nil error", got, ok, err)
				}
				return
			}
			if err == nil || ok || got != nil {
				t.Fatalf("ToInteraction() = %s, %v, %v; want an error", got, ok, err)
			}
			if errors.Is(err, ErrTurns) != tt.turnsErr {
				t.Errorf("errors.Is(%v, ErrTurns) = %v, want %v", err, !tt.turnsErr, tt.turnsErr)
			}
		})
	}
}
