package e2e

import (
	"iter"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// callUntilAnswered is the agent loop's script: the model calls the
// first declared function until the last content holds a function
// response, then answers text.
func callUntilAnswered(rr emulator.ReplyRequest) emulator.Script {
	if len(rr.Functions) == 0 || len(rr.Contents) == 0 {
		return emulator.Script{}
	}
	for _, p := range rr.Contents[len(rr.Contents)-1].Parts {
		if p.FunctionResponse != nil {
			return emulator.Script{}
		}
	}
	return emulator.Script{FunctionCalls: []emulator.FunctionCall{{Name: rr.Functions[0]}}}
}

// loopTurn is what the agent loop saw of one model answer.
type loopTurn struct {
	Calls  []genai.FunctionCall
	Signed bool // the first function call carries a thought signature
	Text   string
}

// runAgentLoop runs a two-step tool loop with the Go SDK against baseURL:
// the model calls read_file (with an id and a thought signature on Gemini
// 3), the client echoes the model's parts as received (a stream's trailing
// empty text part included) and answers with a function response carrying
// the call's id, the model answers text.
func runAgentLoop(t *testing.T, baseURL string, stream bool) []loopTurn {
	t.Helper()
	c := newClient(t, baseURL)
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
		Name: "read_file", Description: "Read a file of the repository.",
		Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"path": {Type: genai.TypeString}}, Required: []string{"path"}},
	}}}}}
	contents := []*genai.Content{genai.NewContentFromText("What does buffer.go do?", genai.RoleUser)}
	var turns []loopTurn
	for step := 0; step < 2; step++ {
		var parts []*genai.Part
		var responses iter.Seq2[*genai.GenerateContentResponse, error]
		if stream {
			responses = c.Models.GenerateContentStream(t.Context(), "gemini-3-flash-preview", contents, cfg)
		} else {
			responses = func(yield func(*genai.GenerateContentResponse, error) bool) {
				yield(c.Models.GenerateContent(t.Context(), "gemini-3-flash-preview", contents, cfg))
			}
		}
		for r, err := range responses {
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if len(r.Candidates) > 0 && r.Candidates[0].Content != nil {
				parts = append(parts, r.Candidates[0].Content.Parts...)
			}
		}
		var turn loopTurn
		var response []*genai.Part
		for _, p := range parts {
			switch {
			case p.FunctionCall != nil:
				if len(turn.Calls) == 0 {
					turn.Signed = len(p.ThoughtSignature) > 0
				}
				turn.Calls = append(turn.Calls, *p.FunctionCall)
				response = append(response, &genai.Part{FunctionResponse: &genai.FunctionResponse{
					ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Response: map[string]any{"output": bufferGo[:200]}}})
			default:
				turn.Text += p.Text
			}
		}
		turns = append(turns, turn)
		if len(response) == 0 {
			break
		}
		contents = append(contents, &genai.Content{Role: genai.RoleModel, Parts: parts}, &genai.Content{Role: genai.RoleUser, Parts: response})
	}
	return turns
}

// TestAgentLoop runs a function-calling agent loop end to end through
// the proxy and directly against the emulator (scripted to call a
// function until it sees the result): the same calls, ids and answers,
// the Gemini 3 signature and call id survive the proxy both ways (the
// emulator refuses the second request without the signature), and the
// loop ends with text.
func TestAgentLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "unary", true: "stream"}[stream], func(t *testing.T) {
			p := newPair(t, emulator.Options{Script: callUntilAnswered})
			direct := runAgentLoop(t, p.direct.emuURL, stream)
			proxied := runAgentLoop(t, p.proxied.proxyURL, stream)
			if diff := cmp.Diff(direct, proxied); diff != "" {
				t.Errorf("agent loop through the proxy differs (-direct +proxy):\n%s", diff)
			}
			if len(proxied) != 2 || len(proxied[0].Calls) != 1 || proxied[0].Calls[0].ID == "" || !proxied[0].Signed ||
				proxied[0].Calls[0].Args["path"] == nil || len(proxied[1].Calls) != 0 || proxied[1].Text == "" {
				t.Fatalf("turns %+v, want a signed call with an id and arguments, then text", proxied)
			}
			rs := p.proxied.emu.Received()
			last := rs[len(rs)-1]
			if last.Status != 200 || len(last.Contents) != 3 {
				t.Fatalf("last upstream request: status %d, %d contents", last.Status, len(last.Contents))
			}
			fr := last.Contents[2].Parts[0].FunctionResponse
			if fr == nil || fr.ID != proxied[0].Calls[0].ID {
				t.Errorf("function response %+v, want the call's id %q", fr, proxied[0].Calls[0].ID)
			}
		})
	}
}
