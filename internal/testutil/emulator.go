package testutil

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/genai"
	"google.golang.org/genai/interactions/models/interactions"
	"google.golang.org/genai/interactions/models/operations"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// StartEmulator serves a fresh emulator configured by opts on loopback
// until the test ends. Each wrap, when given, wraps the emulator's handler
// (the first one innermost), for tests that count or alter what reaches
// it.
func StartEmulator(t testing.TB, opts emulator.Options, wrap ...func(http.Handler) http.Handler) (*emulator.Server, *httptest.Server) {
	t.Helper()
	emu := emulator.New(opts)
	var h http.Handler = emu
	for _, w := range wrap {
		h = w(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return emu, ts
}

// CreateInteraction creates a gemini-3-flash-preview interaction with
// input through the SDK client c, continuing prev when it is not "" and
// streamed when stream is true; an error fails the test.
func CreateInteraction(t testing.TB, c *genai.Client, input, prev string, stream bool) *operations.CreateInteractionResponse {
	t.Helper()
	in := interactions.NewInteractionsInput(input)
	body := interactions.CreateModelInteraction{Model: interactions.ModelGemini3FlashPreview, Input: &in}
	if prev != "" {
		body.PreviousInteractionID = &prev
	}
	if stream {
		body.Stream = genai.Ptr(true)
	}
	res, err := c.Interactions.Create(t.Context(), operations.CreateInteractionRequest{Body: operations.NewCreateInteractionRequestBody(body)})
	if err != nil {
		t.Fatalf("Interactions.Create(%q): %v", input, err)
	}
	return res
}

// GenerateRequests returns the requests of rs to the generateContent and
// streamGenerateContent routes, in order: what a naive client sent,
// without the proxy's own countTokens, cachedContents or interactions
// calls.
func GenerateRequests(rs []emulator.Received) []emulator.Received {
	var out []emulator.Received
	for _, r := range rs {
		if r.API == "generateContent" || r.API == "streamGenerateContent" {
			out = append(out, r)
		}
	}
	return out
}

// NewClient returns a Gemini API client of the Go SDK that sends apiKey
// to baseURL (an emulator or a proxy); an error fails the test.
func NewClient(t testing.TB, baseURL, apiKey string) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(t.Context(), &genai.ClientConfig{
		APIKey:      apiKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: baseURL},
		HTTPClient:  &http.Client{},
	})
	if err != nil {
		t.Fatalf("genai.NewClient: %v", err)
	}
	return c
}
