package upstream

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"
)

func TestFromInteraction(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "text",
			in: `{"id":"v1_a","object":"interaction","status":"completed","model":"gemini-2.5-flash",
				"steps":[{"type":"user_input","content":[{"type":"text","text":"hi"}]},{"type":"model_output","content":[{"type":"text","text":"hello <b>"}]}],
				"usage":{"total_input_tokens":10,"total_output_tokens":3,"total_cached_tokens":4,"total_thought_tokens":0,"total_tool_use_tokens":0,"total_tokens":13,
					"input_tokens_by_modality":[{"modality":"text","tokens":10}]}}`,
			want: `{"candidates":[{"content":{"parts":[{"text":"hello <b>"}],"role":"model"},"finishReason":"STOP","index":0}],
				"usageMetadata":{"promptTokenCount":10,"cachedContentTokenCount":4,"candidatesTokenCount":3,"totalTokenCount":13,"promptTokensDetails":[{"modality":"TEXT","tokenCount":10}]},
				"modelVersion":"gemini-2.5-flash","responseId":"v1_a"}`,
		},
		{
			name: "thought and function call",
			in: `{"id":"v1_b","status":"requires_action","steps":[
				{"type":"thought","signature":"c2ln","summary":[{"type":"text","text":"thinking"}]},
				{"type":"function_call","id":"c1","name":"f","arguments":{"a": 1}},
				{"type":"function_call","id":"c2","name":"g","arguments":null}],
				"usage":{"total_input_tokens":5,"total_output_tokens":7,"total_thought_tokens":20,"total_tool_use_tokens":2,"total_tokens":34}}`,
			want: `{"candidates":[{"content":{"parts":[{"text":"thinking","thought":true},{"functionCall":{"id":"c1","name":"f","args":{"a":1}},"thoughtSignature":"c2ln"},{"functionCall":{"id":"c2","name":"g","args":{}}}],"role":"model"},"finishReason":"STOP","index":0}],
				"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":7,"toolUsePromptTokenCount":2,"thoughtsTokenCount":20,"totalTokenCount":34},
				"modelVersion":"gemini-3-flash-preview","responseId":"v1_b"}`,
		},
		{
			name: "trailing signature and max tokens",
			in: `{"id":"v1_c","status":"incomplete","steps":[{"type":"model_output","content":[{"type":"text","text":"cut"},{"type":"image","data":"AAAA","mime_type":"image/png"}]},{"type":"thought","signature":"eA=="}],
				"usage":{"total_input_tokens":1,"total_output_tokens":2}}`,
			want: `{"candidates":[{"content":{"parts":[{"text":"cut"},{"inlineData":{"data":"AAAA","mimeType":"image/png"}},{"text":"","thoughtSignature":"eA=="}],"role":"model"},"finishReason":"MAX_TOKENS","index":0}],
				"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"totalTokenCount":3},
				"modelVersion":"gemini-3-flash-preview","responseId":"v1_c"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := "models/gemini-3-flash-preview"
			if tt.name == "text" {
				model = "gemini-2.5-flash"
			}
			got, err := FromInteraction([]byte(tt.in), model)
			if err != nil {
				t.Fatalf("FromInteraction() error = %v", err)
			}
			if diff := cmp.Diff(decode(t, []byte(tt.want)), decode(t, got)); diff != "" {
				t.Errorf("FromInteraction() mismatch (-want +got):\n%s", diff)
			}
			var r genai.GenerateContentResponse
			if err := json.Unmarshal(got, &r); err != nil {
				t.Fatalf("genai cannot parse %s: %v", got, err)
			}
			if r.ResponseID == "" || r.UsageMetadata == nil || len(r.Candidates) != 1 {
				t.Errorf("genai parse = %+v, want responseId, usage and one candidate", r)
			}
		})
	}
}

func TestFromInteractionSDK(t *testing.T) {
	in := `{"id":"v1_s","status":"completed","steps":[{"type":"thought","summary":[{"type":"text","text":"hmm"}],"signature":"+//+"},{"type":"model_output","content":[{"type":"text","text":"Hello"},{"type":"text","text":", world"}]}],
		"usage":{"total_input_tokens":8,"total_output_tokens":3,"total_thought_tokens":4,"total_cached_tokens":2,"total_tokens":15}}`
	got, err := FromInteraction([]byte(in), "gemini-2.5-pro")
	if err != nil {
		t.Fatal(err)
	}
	var r genai.GenerateContentResponse
	if err := json.Unmarshal(got, &r); err != nil {
		t.Fatal(err)
	}
	if r.Text() != "Hello, world" {
		t.Errorf("Text() = %q, want %q", r.Text(), "Hello, world")
	}
	wantUsage := &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 8, CandidatesTokenCount: 3, ThoughtsTokenCount: 4, CachedContentTokenCount: 2, TotalTokenCount: 15}
	if diff := cmp.Diff(wantUsage, r.UsageMetadata); diff != "" {
		t.Errorf("UsageMetadata mismatch (-want +got):\n%s", diff)
	}
	if r.Candidates[0].FinishReason != genai.FinishReasonStop || r.ModelVersion != "gemini-2.5-pro" || r.ResponseID != "v1_s" {
		t.Errorf("candidate = %+v, model %q, id %q", r.Candidates[0], r.ModelVersion, r.ResponseID)
	}
	if sig := r.Candidates[0].Content.Parts[1].ThoughtSignature; string(sig) != "\xfb\xff\xfe" {
		t.Errorf("ThoughtSignature = %x, want fbfffe", sig)
	}
}

func TestFromInteractionErrors(t *testing.T) {
	tests := []struct {
		name, in       string
		untranslatable bool
	}{
		{"invalid JSON", `{"id":`, false},
		{"failed", `{"id":"x","status":"failed","steps":[]}`, true},
		{"in progress", `{"id":"x","status":"in_progress"}`, true},
		{"cancelled", `{"id":"x","status":"cancelled","steps":[{"type":"model_output","content":[{"type":"text","text":"a"}]}]}`, true},
		{"no output", `{"id":"x","status":"completed","steps":[{"type":"user_input","content":[{"type":"text","text":"a"}]}]}`, true},
		{"search step", `{"id":"x","status":"completed","steps":[{"type":"google_search_call","id":"s"},{"type":"model_output","content":[{"type":"text","text":"a"}]}]}`, true},
		{"output error", `{"id":"x","status":"completed","steps":[{"type":"model_output","error":{"code":3}}]}`, true},
		{"audio without data", `{"id":"x","status":"completed","steps":[{"type":"model_output","content":[{"type":"audio","uri":"u"}]}]}`, true},
		{"two signatures", `{"id":"x","status":"completed","steps":[{"type":"thought","signature":"a"},{"type":"thought","signature":"b"},{"type":"model_output","content":[{"type":"text","text":"a"}]}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromInteraction([]byte(tt.in), "m")
			if err == nil {
				t.Fatalf("FromInteraction(%s) = %s, want an error", tt.in, got)
			}
			if errors.Is(err, ErrUntranslatable) != tt.untranslatable {
				t.Errorf("errors.Is(%v, ErrUntranslatable) = %v, want %v", err, !tt.untranslatable, tt.untranslatable)
			}
		})
	}
}
