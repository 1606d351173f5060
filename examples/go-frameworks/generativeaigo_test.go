package frameworks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/generative-ai-go/genai"
	"google.golang.org/api/option"
)

// The deprecated Go SDK, github.com/google/generative-ai-go, through
// gemini-proxy. Pointing it at the proxy is one client option:
//
//	genai.NewClient(ctx, option.WithAPIKey(key), option.WithEndpoint("http://127.0.0.1:8080"))
//
// A ChatSession re-sends its whole history, so a document attached to every
// message travels k times on turn k. Through the proxy the upstream receives
// it once, and each answer is the upstream's answer to exactly that request.

var harbourQuestions = []string{"How many arrivals were logged on day 3?", "And departures on day 5?", "Which day had the highest tide?"}

// generativeAIGoChat runs the session against endpoint and returns the answers.
func generativeAIGoChat(t *testing.T, endpoint string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := genai.NewClient(ctx, option.WithAPIKey(apiKey), option.WithEndpoint(endpoint))
	if err != nil {
		t.Fatalf("genai.NewClient: %v", err)
	}
	defer client.Close()
	cs := client.GenerativeModel(model).StartChat()
	var answers []string
	for _, q := range harbourQuestions {
		res, err := cs.SendMessage(ctx, genai.Text("Here is the harbour log:\n\n"+harbourLog()+"\n"+q))
		if err != nil {
			t.Fatalf("SendMessage(%q): %v", q, err)
		}
		var b strings.Builder
		for _, p := range res.Candidates[0].Content.Parts {
			if txt, ok := p.(genai.Text); ok {
				b.WriteString(string(txt))
			}
		}
		answers = append(answers, b.String())
	}
	return answers
}

func TestGenerativeAIGo(t *testing.T) {
	s, _, up := runSession(t, len(harbourQuestions), generativeAIGoChat)
	for i, r := range up {
		// SendMessage streams: streamGenerateContent with $alt=json.
		if want := fmt.Sprintf("/v1beta/models/%s:streamGenerateContent", model); !strings.HasPrefix(r.Path, want) {
			t.Errorf("turn %d: upstream path %s, want %s", i+1, r.Path, want)
		}
		var text strings.Builder
		for _, c := range parseRequest(t, r.Body).Contents {
			for _, p := range c.Parts {
				text.WriteString(p.Text)
			}
		}
		if n := strings.Count(text.String(), harbourMarker); n != 1 {
			t.Errorf("turn %d: the upstream request holds %d copies of the document, want 1", i+1, n)
		}
	}
	if n := s.metricSum(t, "gemini_proxy_rewrite_replacements_total", ""); n < float64(len(harbourQuestions)-1) {
		t.Errorf("gemini_proxy_rewrite_replacements_total = %v, want at least %d", n, len(harbourQuestions)-1)
	}
	if n := s.metricSum(t, "gemini_proxy_client_requests_total", `deprecated="true"`); n != float64(len(harbourQuestions)) {
		t.Errorf(`gemini_proxy_client_requests_total{deprecated="true"} = %v, want %d`, n, len(harbourQuestions))
	}
}
