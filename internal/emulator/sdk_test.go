package emulator_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"
	"google.golang.org/genai/interactions/models/interactions"
	"google.golang.org/genai/interactions/models/operations"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

const testKey = "test-key"

// newSDK starts an emulator and a real genai client pointed at it.
func newSDK(t *testing.T, opts emulator.Options) (*emulator.Server, *genai.Client) {
	t.Helper()
	srv, ts := testutil.StartEmulator(t, opts)
	return srv, testutil.NewClient(t, ts.URL, testKey)
}

func TestSDKGenerateContent(t *testing.T) {
	srv, client := newSDK(t, emulator.Options{})
	resp, err := client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text("Why is the sky blue?"),
		&genai.GenerateContentConfig{SystemInstruction: genai.NewContentFromText("be brief", genai.RoleUser)})
	if err != nil {
		t.Fatalf("GenerateContent: %v", err)
	}
	if !strings.Contains(resp.Text(), "gemini-2.5-flash") {
		t.Errorf("Text() = %q, want it to mention the model", resp.Text())
	}
	u := resp.UsageMetadata
	if u == nil || u.PromptTokenCount == 0 || u.CandidatesTokenCount == 0 ||
		u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount+u.ThoughtsTokenCount {
		t.Errorf("UsageMetadata = %+v, want consistent non-zero counts", u)
	}
	if resp.ResponseID == "" || resp.ModelVersion != "gemini-2.5-flash" {
		t.Errorf("ResponseID/ModelVersion = %q/%q", resp.ResponseID, resp.ModelVersion)
	}
	got := srv.Received()
	if len(got) != 1 {
		t.Fatalf("Received() has %d entries, want 1", len(got))
	}
	r := got[0]
	if r.Path != "/v1beta/models/gemini-2.5-flash:generateContent" || r.Stream || r.Status != 200 {
		t.Errorf("Received = %s stream=%v status=%d", r.Path, r.Stream, r.Status)
	}
	if len(r.Contents) != 1 || r.Contents[0].Text() != "Why is the sky blue?" || r.SystemInstruction.Text() != "be brief" {
		t.Errorf("Received contents = %+v system = %+v", r.Contents, r.SystemInstruction)
	}
	if r.Usage.TotalTokenCount != int(u.TotalTokenCount) {
		t.Errorf("Received usage total %d, response %d", r.Usage.TotalTokenCount, u.TotalTokenCount)
	}
}

func TestSDKStreamAndReply(t *testing.T) {
	reply := strings.Repeat("streamed words go here ", 20)
	_, client := newSDK(t, emulator.Options{Reply: func(r emulator.ReplyRequest) string { return reply }})
	var text strings.Builder
	chunks := 0
	var last *genai.GenerateContentResponse
	prevCand := int32(-1)
	for resp, err := range client.Models.GenerateContentStream(t.Context(), "gemini-3-flash-preview", genai.Text("hi"), nil) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		chunks++
		text.WriteString(resp.Text())
		if resp.UsageMetadata.CandidatesTokenCount < prevCand {
			t.Errorf("usage not cumulative: %d after %d", resp.UsageMetadata.CandidatesTokenCount, prevCand)
		}
		prevCand = resp.UsageMetadata.CandidatesTokenCount
		last = resp
	}
	if chunks < 3 {
		t.Errorf("got %d chunks, want several", chunks)
	}
	if text.String() != reply {
		t.Errorf("joined text = %q, want %q", text.String(), reply)
	}
	if last.Candidates[0].FinishReason != genai.FinishReasonStop {
		t.Errorf("last FinishReason = %q", last.Candidates[0].FinishReason)
	}
	if int(last.UsageMetadata.CandidatesTokenCount) != emulator.CountTokens(reply) {
		t.Errorf("final candidates = %d, want %d", last.UsageMetadata.CandidatesTokenCount, emulator.CountTokens(reply))
	}
	sig := last.Candidates[0].Content.Parts[len(last.Candidates[0].Content.Parts)-1].ThoughtSignature
	if len(sig) == 0 {
		t.Error("gemini-3 final part has no thoughtSignature")
	}
}

func TestSDKChat(t *testing.T) {
	srv, client := newSDK(t, emulator.Options{})
	chat, err := client.Chats.Create(t.Context(), "gemini-3-flash-preview", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"first", "second", "third"} {
		if _, err := chat.SendMessage(t.Context(), genai.Part{Text: msg}); err != nil {
			t.Fatalf("SendMessage(%q): %v", msg, err)
		}
	}
	for range chat.SendMessageStream(t.Context(), genai.Part{Text: "fourth"}) {
	}
	got := srv.Received()
	if len(got) != 4 {
		t.Fatalf("received %d requests, want 4", len(got))
	}
	if n := len(got[3].Contents); n != 7 {
		t.Errorf("4th request has %d contents, want 7 (history + new)", n)
	}
	for i, r := range got {
		if r.Status != 200 {
			t.Errorf("request %d status %d: %s", i, r.Status, r.Error)
		}
	}
}

func TestSDKCountTokens(t *testing.T) {
	_, client := newSDK(t, emulator.Options{})
	resp, err := client.Models.CountTokens(t.Context(), "gemini-2.5-flash", genai.Text("The quick brown fox jumps over the lazy dog."), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.TotalTokens != 11 { // 10 text tokens + 1 role token, as the real API says
		t.Errorf("TotalTokens = %d, want 11", resp.TotalTokens)
	}
}

func TestSDKCaches(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &now
	srv, client := newSDK(t, emulator.Options{CacheMinTokens: 10, Now: func() time.Time { return *clock }})
	doc := strings.Repeat("A long document sentence for caching. ", 50)
	cc, err := client.Caches.Create(t.Context(), "gemini-2.5-flash", &genai.CreateCachedContentConfig{
		Contents:          genai.Text(doc),
		SystemInstruction: genai.NewContentFromText("you are a cache", genai.RoleUser),
		TTL:               300 * time.Second,
		DisplayName:       "doc",
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !strings.HasPrefix(cc.Name, "cachedContents/") || cc.UsageMetadata.TotalTokenCount == 0 {
		t.Fatalf("created = %+v", cc)
	}
	if _, err := client.Caches.Get(t.Context(), cc.Name, nil); err != nil {
		t.Fatalf("Get: %v", err)
	}
	up, err := client.Caches.Update(t.Context(), cc.Name, &genai.UpdateCachedContentConfig{TTL: time.Hour})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if want := now.Add(time.Hour); !up.ExpireTime.Equal(want) {
		t.Errorf("ExpireTime = %v, want %v", up.ExpireTime, want)
	}
	page, err := client.Caches.List(t.Context(), nil)
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("List = %d items, %v", len(page.Items), err)
	}
	resp, err := client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text("summarise"),
		&genai.GenerateContentConfig{CachedContent: cc.Name})
	if err != nil {
		t.Fatalf("GenerateContent with cache: %v", err)
	}
	u := resp.UsageMetadata
	if u.CachedContentTokenCount != cc.UsageMetadata.TotalTokenCount || u.PromptTokenCount <= u.CachedContentTokenCount {
		t.Errorf("usage = %+v, want cached %d included in prompt", u, cc.UsageMetadata.TotalTokenCount)
	}
	if rr := srv.Received(); rr[len(rr)-1].CachedContent != cc.Name {
		t.Errorf("Received CachedContent = %q", rr[len(rr)-1].CachedContent)
	}
	// Using a cache with a system instruction is rejected.
	_, err = client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text("x"),
		&genai.GenerateContentConfig{CachedContent: cc.Name, SystemInstruction: genai.NewContentFromText("s", genai.RoleUser)})
	if err == nil || !strings.Contains(err.Error(), "should not be set in the request when using cached content") {
		t.Errorf("cache + systemInstruction err = %v", err)
	}
	// Another model cannot use it.
	if _, err := client.Models.GenerateContent(t.Context(), "gemini-2.5-pro", genai.Text("x"),
		&genai.GenerateContentConfig{CachedContent: cc.Name}); err == nil {
		t.Error("cache used with another model: no error")
	}
	if _, err := client.Caches.Delete(t.Context(), cc.Name, nil); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := client.Caches.Get(t.Context(), cc.Name, nil); err == nil {
		t.Error("Get after Delete: no error")
	}
	// Expiry.
	cc2, err := client.Caches.Create(t.Context(), "gemini-2.5-flash", &genai.CreateCachedContentConfig{Contents: genai.Text(doc), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(2 * time.Minute)
	clock = &later
	if _, err := client.Caches.Get(t.Context(), cc2.Name, nil); err == nil {
		t.Error("Get of an expired cache: no error")
	}
}

func TestSDKFiles(t *testing.T) {
	srv, client := newSDK(t, emulator.Options{})
	path := filepath.Join(t.TempDir(), "notes.txt")
	content := []byte(strings.Repeat("file content line\n", 100))
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := client.Files.UploadFromPath(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("UploadFromPath: %v", err)
	}
	if f.SizeBytes == nil || *f.SizeBytes != int64(len(content)) || f.State != genai.FileStateActive || !strings.HasPrefix(f.MIMEType, "text/plain") {
		t.Errorf("file = %+v", f)
	}
	f2, err := client.Files.Upload(t.Context(), bytes.NewReader([]byte{1, 2, 3}), &genai.UploadFileConfig{MIMEType: "image/png"})
	if err != nil {
		t.Fatalf("Upload: %v", err)
	}
	got, err := client.Files.Get(t.Context(), f.Name, nil)
	if err != nil || got.URI != f.URI {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	resp, err := client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", []*genai.Content{{Role: "user", Parts: []*genai.Part{
		genai.NewPartFromURI(f.URI, f.MIMEType), genai.NewPartFromURI(f2.URI, f2.MIMEType), {Text: "summarise"}}}}, nil)
	if err != nil {
		t.Fatalf("generate with files: %v", err)
	}
	want := 1 + emulator.CountTokens(string(content)) + emulator.ImageTokens + emulator.CountTokens("summarise")
	if int(resp.UsageMetadata.PromptTokenCount) != want {
		t.Errorf("PromptTokenCount = %d, want %d", resp.UsageMetadata.PromptTokenCount, want)
	}
	if _, err := client.Files.Delete(t.Context(), f.Name, nil); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := client.Files.Get(t.Context(), f.Name, nil); err == nil {
		t.Error("Get after Delete: no error")
	}
	if _, err := client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", []*genai.Content{{Role: "user", Parts: []*genai.Part{
		genai.NewPartFromURI(f.URI, f.MIMEType)}}}, nil); err == nil {
		t.Error("generate with a deleted file: no error")
	}
	_ = srv
}

func TestSDKEmbeddingsAndModels(t *testing.T) {
	_, client := newSDK(t, emulator.Options{})
	dim := int32(16)
	resp, err := client.Models.EmbedContent(t.Context(), "gemini-embedding-001", genai.Text("a"), &genai.EmbedContentConfig{OutputDimensionality: &dim})
	if err != nil {
		t.Fatalf("EmbedContent: %v", err)
	}
	if len(resp.Embeddings) != 1 || len(resp.Embeddings[0].Values) != 16 {
		t.Fatalf("embeddings = %+v", resp.Embeddings)
	}
	again, _ := client.Models.EmbedContent(t.Context(), "gemini-embedding-001", genai.Text("a"), &genai.EmbedContentConfig{OutputDimensionality: &dim})
	if again.Embeddings[0].Values[3] != resp.Embeddings[0].Values[3] {
		t.Error("embeddings are not deterministic")
	}
	if _, err := client.Models.EmbedContent(t.Context(), "gemini-2.5-flash", genai.Text("a"), nil); err == nil {
		t.Error("EmbedContent on a generative model: no error")
	}
	m, err := client.Models.Get(t.Context(), "gemini-2.5-pro", nil)
	if err != nil || m.Name != "models/gemini-2.5-pro" || m.InputTokenLimit == 0 {
		t.Fatalf("Get = %+v, %v", m, err)
	}
	if _, err := client.Models.Get(t.Context(), "gemini-0-nope", nil); err == nil {
		t.Error("Get unknown model: no error")
	}
	n := 0
	for m, err := range client.Models.All(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		if m.Name == "" {
			t.Error("model without name")
		}
		n++
	}
	if n != len(emulator.DefaultModels) {
		t.Errorf("All() = %d models, want %d", n, len(emulator.DefaultModels))
	}
}

func TestSDKInteractions(t *testing.T) {
	srv, client := newSDK(t, emulator.Options{})
	ctx := t.Context()
	create := func(input string, prev string, stream bool) *operations.CreateInteractionResponse {
		t.Helper()
		return testutil.CreateInteraction(t, client, input, prev, stream)
	}
	first := create("hello", "", false).Interaction
	// A thinking model: a thought step with its signature, then the output.
	if first == nil || first.ID == nil || first.Status != interactions.InteractionStatusCompleted || len(first.Steps) != 2 ||
		first.Steps[0].ThoughtStep == nil || first.Steps[0].ThoughtStep.Signature == nil || first.Steps[1].ModelOutputStep == nil {
		t.Fatalf("first = %+v", first)
	}
	second := create("again", *first.ID, false).Interaction
	if second.PreviousInteractionID == nil || *second.PreviousInteractionID != *first.ID {
		t.Errorf("PreviousInteractionID = %v", second.PreviousInteractionID)
	}
	got, err := client.Interactions.Get(ctx, operations.GetInteractionByIDRequest{ID: *second.ID})
	if err != nil || got.Interaction == nil || *got.Interaction.ID != *second.ID {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	// Streaming.
	res := create("stream please", *second.ID, true)
	es := res.InteractionSSEStreamEvent
	if es == nil {
		t.Fatal("stream response has no event stream")
	}
	var types []string
	for es.Next() {
		types = append(types, string(es.Value().Data.Type))
	}
	if err := es.Err(); err != nil {
		t.Fatalf("stream Err: %v", err)
	}
	if len(types) < 5 || types[0] != "interaction.created" || types[len(types)-1] != "interaction.completed" {
		t.Errorf("event types = %v", types)
	}
	// Unknown previous id → 404.
	in := interactions.NewInteractionsInput("x")
	bad := "v1_doesnotexist"
	_, err = client.Interactions.Create(ctx, operations.CreateInteractionRequest{Body: operations.NewCreateInteractionRequestBody(
		interactions.CreateModelInteraction{Model: interactions.ModelGemini3FlashPreview, Input: &in, PreviousInteractionID: &bad})})
	if err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("unknown previous_interaction_id err = %v", err)
	}
	if _, err := client.Interactions.Delete(ctx, operations.DeleteInteractionRequest{ID: *first.ID}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := client.Interactions.Get(ctx, operations.GetInteractionByIDRequest{ID: *first.ID}); err == nil {
		t.Error("Get after Delete: no error")
	}
	var last emulator.Received
	for _, r := range srv.Received() {
		if r.API == "interactions" && r.Status == 200 {
			last = r
		}
	}
	if !last.Stream || last.Contents[0].Text() != "stream please" {
		t.Errorf("last interaction received = %+v", last)
	}
}

var _ = context.Background
