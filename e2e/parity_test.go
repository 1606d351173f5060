package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"
	"google.golang.org/genai/interactions/models/operations"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

const (
	parityModel = "gemini-2.5-flash"
	reportHdr   = "X-Gemini-Proxy-Report"
)

// errText is err's message, or "" for nil, so that errors compare.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// parityCase is one SDK surface: run performs the calls with c and returns
// everything the client saw; check, when set, inspects the pair afterwards.
type parityCase struct {
	name  string
	run   func(t *testing.T, c *genai.Client) any
	check func(t *testing.T, p pair)
}

var parityCases = []parityCase{
	{name: "GenerateContent", run: func(t *testing.T, c *genai.Client) any {
		resp, err := c.Models.GenerateContent(t.Context(), parityModel, genai.Text("Why is the sky blue?"), &genai.GenerateContentConfig{
			SystemInstruction: genai.NewContentFromText("Answer briefly.", genai.RoleUser),
			Temperature:       genai.Ptr[float32](0.2),
		})
		if err != nil {
			t.Fatalf("GenerateContent: %v", err)
		}
		return resp
	}, check: func(t *testing.T, p pair) {
		if n := counterSum(t, p.proxied.reg, "gemini_proxy_requests_total", map[string]string{"route": "generate_content", "code": "200"}); n != 1 {
			t.Errorf("proxy counted %v generate_content requests, want 1", n)
		}
	}},
	{name: "GenerateContentStream", run: func(t *testing.T, c *genai.Client) any {
		var chunks []*genai.GenerateContentResponse
		for resp, err := range c.Models.GenerateContentStream(t.Context(), "gemini-3-flash-preview", genai.Text("Tell me a long story about a proxy."), nil) {
			if err != nil {
				t.Fatalf("GenerateContentStream: %v", err)
			}
			chunks = append(chunks, resp)
		}
		if len(chunks) < 2 {
			t.Errorf("stream had %d chunks, want several", len(chunks))
		}
		var text strings.Builder
		for _, ch := range chunks {
			text.WriteString(ch.Text())
		}
		last := chunks[len(chunks)-1]
		return struct {
			Chunks []*genai.GenerateContentResponse
			Text   string
			Usage  *genai.GenerateContentResponseUsageMetadata
		}{chunks, text.String(), last.UsageMetadata}
	}},
	{name: "Chats", run: func(t *testing.T, c *genai.Client) any {
		chat, err := c.Chats.Create(t.Context(), "gemini-3-flash-preview", nil, nil)
		if err != nil {
			t.Fatalf("Chats.Create: %v", err)
		}
		var out []any
		for _, msg := range []string{"Hello there.", "What did I just say?"} {
			resp, err := chat.SendMessage(t.Context(), genai.Part{Text: msg})
			if err != nil {
				t.Fatalf("SendMessage(%q): %v", msg, err)
			}
			out = append(out, resp)
		}
		for resp, err := range chat.SendMessageStream(t.Context(), genai.Part{Text: "Now stream your answer."}) {
			if err != nil {
				t.Fatalf("SendMessageStream: %v", err)
			}
			out = append(out, resp)
		}
		return append(out, chat.History(false))
	}},
	{name: "CountTokens", run: func(t *testing.T, c *genai.Client) any {
		resp, err := c.Models.CountTokens(t.Context(), parityModel, []*genai.Content{
			genai.NewContentFromText("Here is a file:\n\n```go buffer.go\n"+bufferGo+"```\n\nCount it.", genai.RoleUser),
		}, nil)
		if err != nil {
			t.Fatalf("CountTokens: %v", err)
		}
		return resp
	}, check: func(t *testing.T, p pair) {
		rs := p.proxied.emu.Received()
		if len(rs) != 1 || rs[0].API != "countTokens" {
			t.Fatalf("emulator received %d requests through the proxy, want 1 countTokens", len(rs))
		}
	}},
	{name: "Caches", run: func(t *testing.T, c *genai.Client) any {
		ctx := t.Context()
		cc, err := c.Caches.Create(ctx, parityModel, &genai.CreateCachedContentConfig{
			Contents:          []*genai.Content{genai.NewContentFromText("```go buffer.go\n"+bufferGo+"```", genai.RoleUser)},
			SystemInstruction: genai.NewContentFromText("You review Go code.", genai.RoleUser),
			TTL:               10 * time.Minute,
			DisplayName:       "buffer.go",
		})
		if err != nil {
			t.Fatalf("Caches.Create: %v", err)
		}
		got, err := c.Caches.Get(ctx, cc.Name, nil)
		if err != nil {
			t.Fatalf("Caches.Get: %v", err)
		}
		up, err := c.Caches.Update(ctx, cc.Name, &genai.UpdateCachedContentConfig{TTL: time.Hour})
		if err != nil {
			t.Fatalf("Caches.Update: %v", err)
		}
		page, err := c.Caches.List(ctx, nil)
		if err != nil {
			t.Fatalf("Caches.List: %v", err)
		}
		gen, err := c.Models.GenerateContent(ctx, parityModel, genai.Text("What does Grow do?"), &genai.GenerateContentConfig{CachedContent: cc.Name})
		if err != nil {
			t.Fatalf("GenerateContent with cache: %v", err)
		}
		if gen.UsageMetadata == nil || gen.UsageMetadata.CachedContentTokenCount == 0 {
			t.Errorf("generate with cache: usage %+v, want cached tokens", gen.UsageMetadata)
		}
		if _, err := c.Caches.Delete(ctx, cc.Name, nil); err != nil {
			t.Fatalf("Caches.Delete: %v", err)
		}
		_, gone := c.Caches.Get(ctx, cc.Name, nil)
		if gone == nil {
			t.Error("Caches.Get after Delete: no error")
		}
		return []any{cc, got, up, page.Items, page.NextPageToken, gen, errText(gone)}
	}},
	{name: "Files", run: func(t *testing.T, c *genai.Client) any {
		ctx := t.Context()
		path := filepath.Join(t.TempDir(), "buffer.go.txt")
		if err := os.WriteFile(path, []byte(bufferGo), 0o600); err != nil {
			t.Fatal(err)
		}
		f1, err := c.Files.UploadFromPath(ctx, path, &genai.UploadFileConfig{MIMEType: "text/plain"})
		if err != nil {
			t.Fatalf("UploadFromPath: %v", err)
		}
		f2, err := c.Files.Upload(ctx, bytes.NewReader(testImage()), &genai.UploadFileConfig{MIMEType: "image/png", DisplayName: "pixel"})
		if err != nil {
			t.Fatalf("Upload: %v", err)
		}
		got, err := c.Files.Get(ctx, f1.Name, nil)
		if err != nil {
			t.Fatalf("Files.Get: %v", err)
		}
		gen, err := c.Models.GenerateContent(ctx, parityModel, []*genai.Content{{Role: genai.RoleUser, Parts: []*genai.Part{
			genai.NewPartFromURI(f1.URI, f1.MIMEType), genai.NewPartFromURI(f2.URI, f2.MIMEType), genai.NewPartFromText("Describe both files."),
		}}}, nil)
		if err != nil {
			t.Fatalf("GenerateContent with files: %v", err)
		}
		if _, err := c.Files.Delete(ctx, f1.Name, nil); err != nil {
			t.Fatalf("Files.Delete: %v", err)
		}
		_, gone := c.Files.Get(ctx, f1.Name, nil)
		if gone == nil {
			t.Error("Files.Get after Delete: no error")
		}
		return []any{f1, f2, got, gen, errText(gone)}
	}, check: func(t *testing.T, p pair) {
		// Two uploads, each a start and a final chunk: all four must have
		// gone through the proxy, so X-Goog-Upload-Url pointed back at it.
		if n := counterSum(t, p.proxied.reg, "gemini_proxy_requests_total", map[string]string{"route": "upload", "code": "200"}); n != 4 {
			t.Errorf("proxy served %v upload requests, want 4 (start and finalize of two uploads)", n)
		}
		if n := counterSum(t, p.direct.reg, "gemini_proxy_requests_total", nil); n != 0 {
			t.Errorf("the direct run went through a proxy (%v requests)", n)
		}
	}},
	{name: "Interactions", run: func(t *testing.T, c *genai.Client) any {
		ctx := t.Context()
		create := func(input, prev string, stream bool) *operations.CreateInteractionResponse {
			t.Helper()
			return testutil.CreateInteraction(t, c, input, prev, stream)
		}
		first := create("Hello, interactions.", "", false).Interaction
		if first == nil || first.ID == nil {
			t.Fatalf("first interaction = %+v", first)
		}
		second := create("And a follow-up.", *first.ID, false).Interaction
		got, err := c.Interactions.Get(ctx, operations.GetInteractionByIDRequest{ID: *second.ID})
		if err != nil {
			t.Fatalf("Interactions.Get: %v", err)
		}
		es := create("Stream it, please.", *second.ID, true).InteractionSSEStreamEvent
		if es == nil {
			t.Fatal("streamed interaction has no event stream")
		}
		var events []any
		for es.Next() {
			events = append(events, jsonValue(t, es.Value()))
		}
		if err := es.Err(); err != nil {
			t.Fatalf("interaction stream: %v", err)
		}
		if len(events) < 3 {
			t.Errorf("interaction stream had %d events, want several", len(events))
		}
		if _, err := c.Interactions.Delete(ctx, operations.DeleteInteractionRequest{ID: *first.ID}); err != nil {
			t.Fatalf("Interactions.Delete: %v", err)
		}
		_, gone := c.Interactions.Get(ctx, operations.GetInteractionByIDRequest{ID: *first.ID})
		if gone == nil {
			t.Error("Interactions.Get after Delete: no error")
		}
		return []any{jsonValue(t, first), jsonValue(t, second), jsonValue(t, got.Interaction), events, gone != nil}
	}},
	{name: "EmbedContent", run: func(t *testing.T, c *genai.Client) any {
		resp, err := c.Models.EmbedContent(t.Context(), "gemini-embedding-001", []*genai.Content{
			genai.NewContentFromText("first text", genai.RoleUser), genai.NewContentFromText("second text", genai.RoleUser),
		}, &genai.EmbedContentConfig{OutputDimensionality: genai.Ptr[int32](32)})
		if err != nil {
			t.Fatalf("EmbedContent: %v", err)
		}
		if len(resp.Embeddings) != 2 {
			t.Errorf("EmbedContent returned %d embeddings, want 2", len(resp.Embeddings))
		}
		return resp
	}},
	{name: "Models", run: func(t *testing.T, c *genai.Client) any {
		m, err := c.Models.Get(t.Context(), "gemini-2.5-pro", nil)
		if err != nil {
			t.Fatalf("Models.Get: %v", err)
		}
		page, err := c.Models.List(t.Context(), &genai.ListModelsConfig{PageSize: 5})
		if err != nil {
			t.Fatalf("Models.List: %v", err)
		}
		var all []*genai.Model
		for m, err := range c.Models.All(t.Context()) {
			if err != nil {
				t.Fatalf("Models.All: %v", err)
			}
			all = append(all, m)
		}
		if len(all) != len(emulator.DefaultModels) {
			t.Errorf("Models.All = %d models, want %d", len(all), len(emulator.DefaultModels))
		}
		_, missing := c.Models.Get(t.Context(), "gemini-0-nope", nil)
		return []any{m, page.Items, page.NextPageToken, all, errText(missing)}
	}},
}

// TestSDKParity runs every SDK surface directly against an emulator and
// through the proxy against an identical one: the client must see the
// same results and the emulator must receive the same bytes.
func TestSDKParity(t *testing.T) {
	t.Parallel()
	for _, tc := range parityCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, emulator.Options{})
			direct, proxied := p.clients(t)
			want := tc.run(t, direct)
			got := tc.run(t, proxied)
			if diff := cmp.Diff(want, got, ignoreSDKHTTPResponse, exportAll); diff != "" {
				t.Errorf("results through the proxy differ from direct results (-want +got):\n%s", diff)
			}
			sameWire(t, p.direct.emu.Received(), p.proxied.emu.Received())
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

// TestSDKReportHeader checks that generate responses through the proxy
// carry X-Gemini-Proxy-Report and direct ones do not.
func TestSDKReportHeader(t *testing.T) {
	t.Parallel()
	p := newPair(t, emulator.Options{})
	direct, proxied := p.clients(t)
	for name, c := range map[string]*genai.Client{"direct": direct, "proxied": proxied} {
		resp, err := c.Models.GenerateContent(t.Context(), parityModel, genai.Text("hi"), nil)
		if err != nil {
			t.Fatalf("%s: GenerateContent: %v", name, err)
		}
		h := resp.SDKHTTPResponse.Headers.Get(reportHdr)
		if name == "direct" && h != "" {
			t.Errorf("direct response has %s: %q", reportHdr, h)
		}
		if name == "proxied" && !strings.HasPrefix(h, "bytes=") {
			t.Errorf("proxied response %s = %q, want bytes=N->N", reportHdr, h)
		}
	}
}

// TestSDKEnvBaseURL points the SDK at the proxy with the
// GOOGLE_GEMINI_BASE_URL environment variable instead of HTTPOptions.
func TestSDKEnvBaseURL(t *testing.T) {
	p := newPair(t, emulator.Options{})
	t.Setenv("GOOGLE_GEMINI_BASE_URL", p.proxied.proxyURL)
	proxied, err := genai.NewClient(t.Context(), &genai.ClientConfig{APIKey: testKey, Backend: genai.BackendGeminiAPI})
	if err != nil {
		t.Fatalf("genai.NewClient: %v", err)
	}
	direct := newClient(t, p.direct.emuURL) // an explicit BaseURL wins over the environment
	run := func(c *genai.Client) any {
		resp, err := c.Models.GenerateContent(t.Context(), parityModel, genai.Text("Hello through the environment."), nil)
		if err != nil {
			t.Fatalf("GenerateContent: %v", err)
		}
		var chunks []*genai.GenerateContentResponse
		for ch, err := range c.Models.GenerateContentStream(t.Context(), parityModel, genai.Text("And a stream."), nil) {
			if err != nil {
				t.Fatalf("GenerateContentStream: %v", err)
			}
			chunks = append(chunks, ch)
		}
		ct, err := c.Models.CountTokens(t.Context(), parityModel, genai.Text("count me"), nil)
		if err != nil {
			t.Fatalf("CountTokens: %v", err)
		}
		return []any{resp, chunks, ct}
	}
	want, got := run(direct), run(proxied)
	if diff := cmp.Diff(want, got, ignoreSDKHTTPResponse, exportAll); diff != "" {
		t.Errorf("results through the proxy differ (-want +got):\n%s", diff)
	}
	sameWire(t, p.direct.emu.Received(), p.proxied.emu.Received())
	if n := counterSum(t, p.proxied.reg, "gemini_proxy_requests_total", nil); n != 3 {
		t.Errorf("proxy served %v requests, want 3: the SDK did not use GOOGLE_GEMINI_BASE_URL", n)
	}
}
