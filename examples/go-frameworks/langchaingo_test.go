package frameworks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms/googleai"
	"github.com/tmc/langchaingo/memory"
	"google.golang.org/api/option"
)

// langchaingo (github.com/tmc/langchaingo/llms/googleai) through
// gemini-proxy. googleai has no endpoint option of its own, but an Option is
// a func(*googleai.Options), so one line adds the client option:
//
//	func(o *googleai.Options) { o.ClientOptions = append(o.ClientOptions, option.WithEndpoint(proxyURL)) }
//
// chains.NewConversation with a ConversationBuffer flattens the history
// into one prompt ("Current conversation:\nHuman: …\nAI: …"). Through the
// proxy the upstream receives real user/model turns instead (the model
// lines are answers the proxy served), and each answer is the upstream's
// answer to exactly that request.

var colourQuestions = []string{"My favourite colour is teal.", "I live in Lisbon.", "What is my favourite colour?"}

// withEndpoint points a langchaingo googleai client at endpoint.
func withEndpoint(endpoint string) googleai.Option {
	return func(o *googleai.Options) {
		o.ClientOptions = append(o.ClientOptions, option.WithEndpoint(endpoint))
	}
}

// langchaingoConversation runs the chain against endpoint and returns the answers.
func langchaingoConversation(t *testing.T, endpoint string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	llm, err := googleai.New(ctx, googleai.WithAPIKey(apiKey), googleai.WithDefaultModel(model), withEndpoint(endpoint))
	if err != nil {
		t.Fatalf("googleai.New: %v", err)
	}
	chain := chains.NewConversation(llm, memory.NewConversationBuffer())
	var answers []string
	for _, q := range colourQuestions {
		out, err := chains.Run(ctx, chain, q)
		if err != nil {
			t.Fatalf("chains.Run(%q): %v", q, err)
		}
		answers = append(answers, out)
	}
	return answers
}

func TestLangchaingo(t *testing.T) {
	s, viaProxy, up := runSession(t, len(colourQuestions), langchaingoConversation)
	for i, r := range up {
		contents := parseRequest(t, r.Body).Contents
		if len(contents) != 2*i+1 {
			t.Fatalf("turn %d: %d contents upstream, want %d (user, model, …, user)\n%s", i+1, len(contents), 2*i+1, r.Body)
		}
		for k, c := range contents {
			wantRole := "user"
			if k%2 == 1 {
				wantRole = "model"
			}
			if c.Role != wantRole {
				t.Errorf("turn %d: content %d has role %q, want %q", i+1, k, c.Role, wantRole)
			}
			if k%2 == 1 {
				var text strings.Builder
				for _, p := range c.Parts {
					text.WriteString(p.Text)
				}
				if got := strings.TrimSpace(text.String()); got != strings.TrimSpace(viaProxy[k/2]) {
					t.Errorf("turn %d: model content %d = %q, want the answer served %q", i+1, k, got, viaProxy[k/2])
				}
			}
		}
	}
	if n := s.metricSum(t, "gemini_proxy_rewrite_replacements_total", `rule="unflatten"`); n < 2 {
		t.Errorf(`gemini_proxy_rewrite_replacements_total{rule="unflatten"} = %v, want at least 2`, n)
	}
}
