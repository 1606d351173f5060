package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// unchangedReport matches a report of a rewrite that changed nothing.
var unchangedReport = regexp.MustCompile(`^bytes=(\d+)->(\d+)$`)

// checkUnchangedReport checks that rep says the body kept its size and no
// rule applied.
func checkUnchangedReport(t *testing.T, what, rep string) {
	t.Helper()
	m := unchangedReport.FindStringSubmatch(rep)
	if m == nil || m[1] != m[2] {
		t.Errorf("%s: %s = %q, want bytes=N->N with no rule", what, reportHdr, rep)
	}
}

// generateOnce sends contents and returns the answer content and the report.
func generateOnce(t *testing.T, c *genai.Client, model string, contents []*genai.Content, cfg *genai.GenerateContentConfig) (*genai.Content, string) {
	t.Helper()
	resp, err := c.Models.GenerateContent(t.Context(), model, contents, cfg)
	if err != nil {
		t.Fatalf("GenerateContent: %v", err)
	}
	return resp.Candidates[0].Content, resp.SDKHTTPResponse.Headers.Get(reportHdr)
}

// TestControlFunctionCalling plays a Gemini 3 tool session whose function
// responses carry two different whole files: function calls with their
// thought signatures are never touched, and a tool result that repeats
// nothing stays as it is (a repeated read becomes a reference:
// TestReadFileAgent), so the emulator (which rejects a current-turn
// function call without a signature) must receive the client's bytes.
func TestControlFunctionCalling(t *testing.T) {
	t.Parallel()
	const model = "gemini-3-flash-preview"
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
		Name:        "read_file",
		Description: "Returns the content of a file in the workspace.",
		Parameters: &genai.Schema{Type: genai.TypeObject, Required: []string{"path"},
			Properties: map[string]*genai.Schema{"path": {Type: genai.TypeString}}},
	}}}}}
	call := func(sig, path string) *genai.Content {
		return &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{
			FunctionCall:     &genai.FunctionCall{Name: "read_file", Args: map[string]any{"path": path}},
			ThoughtSignature: []byte("client-kept-signature/" + sig),
		}}}
	}
	result := genai.NewContentFromFunctionResponse("read_file", map[string]any{"content": bufferGo}, genai.RoleUser)
	reader := genai.NewContentFromFunctionResponse("read_file", map[string]any{"content": readerGo}, genai.RoleUser)
	run := func(c *genai.Client) (answers []*genai.Content, reports []string) {
		contents := []*genai.Content{genai.NewContentFromText("Review bytes/buffer.go.", genai.RoleUser), call("1", "bytes/buffer.go"), result}
		for _, next := range [][]*genai.Content{
			{genai.NewContentFromText("Now read bytes/reader.go and compare.", genai.RoleUser), call("2", "bytes/reader.go"), reader},
			{genai.NewContentFromText("Thanks, that is all.", genai.RoleUser)},
			nil,
		} {
			a, rep := generateOnce(t, c, model, contents, cfg)
			answers, reports = append(answers, a), append(reports, rep)
			contents = append(append(contents, a), next...) // the answer keeps its thought signature
		}
		return answers, reports
	}
	p := newPair(t, emulator.Options{Reply: scriptReply})
	direct, proxied := p.clients(t)
	wantAnswers, _ := run(direct)
	gotAnswers, reports := run(proxied)
	if diff := cmp.Diff(wantAnswers, gotAnswers); diff != "" {
		t.Errorf("answers through the proxy differ (-want +got):\n%s", diff)
	}
	for i, rep := range reports {
		checkUnchangedReport(t, fmt.Sprintf("request %d", i+1), rep)
	}
	sameWire(t, p.direct.emu.Received(), p.proxied.emu.Received())
	rec := p.proxied.emu.Received()
	if n := len(rec[len(rec)-1].Contents); n != 9 {
		t.Fatalf("last request has %d contents, want 9", n)
	}
	answer := rec[len(rec)-1].Contents[3] // the first answer, as the SDK returned it
	if sig := answer.Parts[len(answer.Parts)-1].ThoughtSignature; answer.Role != "model" || len(sig) == 0 {
		t.Error("the answer's thought signature did not reach the emulator")
	}

	// Without a signature the emulator rejects the request; the client
	// must see the same error through the proxy.
	bad := []*genai.Content{genai.NewContentFromText("Review it.", genai.RoleUser),
		{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{Name: "read_file", Args: map[string]any{"path": "a"}}}}},
		result}
	_, errDirect := direct.Models.GenerateContent(t.Context(), model, bad, cfg)
	_, errProxied := proxied.Models.GenerateContent(t.Context(), model, bad, cfg)
	if errDirect == nil || !strings.Contains(errDirect.Error(), "thought_signature") || errText(errDirect) != errText(errProxied) {
		t.Errorf("missing signature: direct error %v, through the proxy %v; want the same thought_signature error", errDirect, errProxied)
	}
}

// TestControlPinnedContext plays a pinned-context session: the file is
// sent once in the first turn, acknowledged, and then only questions
// follow, so nothing may change; when the user pastes it again later, only
// that later copy may become a reference.
func TestControlPinnedContext(t *testing.T) {
	t.Parallel()
	const model = "gemini-2.5-flash"
	doc := "<file path=\"bytes/buffer.go\">\n" + bufferGo + "</file>"
	pinned := []*genai.Content{
		genai.NewContentFromText(doc+"\nPlease keep this file in mind for the questions that follow.", genai.RoleUser),
		genai.NewContentFromText("Got it. Thanks for the context!", genai.RoleModel),
	}
	questions := []string{"What does Grow do?", "Why is smallBufferSize 64?", "Is Reset cheap?"}
	run := func(c *genai.Client) (answers []string, reports []string, last []*genai.Content) {
		contents := append([]*genai.Content(nil), pinned...)
		for i, q := range questions {
			if i == len(questions)-1 {
				q = "I paste it again to be sure:\n" + doc + "\n" + q
			}
			contents = append(contents, genai.NewContentFromText(q, genai.RoleUser))
			a, rep := generateOnce(t, c, model, contents, nil)
			answers, reports = append(answers, a.Parts[0].Text), append(reports, rep)
			last = append([]*genai.Content(nil), contents...)
			contents = append(contents, a)
		}
		return answers, reports, last
	}
	p := newPair(t, emulator.Options{Reply: scriptReply})
	direct, proxied := p.clients(t)
	wantAnswers, _, _ := run(direct)
	gotAnswers, reports, last := run(proxied)
	if diff := cmp.Diff(wantAnswers, gotAnswers); diff != "" {
		t.Errorf("answers through the proxy differ (-want +got):\n%s", diff)
	}
	n := len(questions) - 1
	for i, rep := range reports[:n] {
		checkUnchangedReport(t, fmt.Sprintf("request %d", i+1), rep)
	}
	dr, pr := p.direct.emu.Received(), p.proxied.emu.Received()
	sameWire(t, dr[:n], pr[:n])

	// The re-paste: the pinned turns stay byte for byte, the later copy is
	// an unchanged reference to turn 1.
	if !strings.Contains(reports[n], "unchanged=1") {
		t.Errorf("re-paste report %q, want unchanged=1", reports[n])
	}
	got := pr[n]
	for i := range 2 + 2*n {
		if got.Contents[i].Text() != last[i].Parts[0].Text {
			t.Errorf("content %d changed upstream though it precedes the re-paste", i)
		}
	}
	sent, up := last[len(last)-1].Parts[0].Text, got.Contents[len(got.Contents)-1].Text()
	spans, err := replacedSpans(sent, up)
	if err != nil || len(spans) != 1 || spans[0].ref.kind != "unchanged" || !strings.Contains(spans[0].text, bufferGo) {
		t.Errorf("re-pasted copy upstream = %.300q (%v), want one unchanged reference to the file", up, err)
	}
	if !strings.Contains(up, "turn 1") {
		t.Errorf("reference %q does not point at turn 1", up)
	}
}

// TestControlCachedContent plays a session on an explicit cache: requests
// with cachedContent and nothing repeated pass through byte for byte; when
// the user pastes the file twice, only contents change and cachedContent
// and every other field stay as sent.
func TestControlCachedContent(t *testing.T) {
	t.Parallel()
	const model = "gemini-2.5-flash"
	run := func(c *genai.Client) (answers, reports []string, cache string) {
		cc, err := c.Caches.Create(t.Context(), model, &genai.CreateCachedContentConfig{
			Contents:          []*genai.Content{genai.NewContentFromText(fenced(bufferGo), genai.RoleUser)},
			SystemInstruction: genai.NewContentFromText("You review Go code.", genai.RoleUser),
			TTL:               time.Hour,
		})
		if err != nil {
			t.Fatalf("Caches.Create: %v", err)
		}
		cfg := &genai.GenerateContentConfig{CachedContent: cc.Name, Temperature: genai.Ptr[float32](0)}
		var contents []*genai.Content
		for _, q := range []string{
			"What does Grow do?", "And Truncate?", "Is the zero value usable?",
			"Here is my copy of the file:\n\n" + fenced(bufferGo) + "\n\nIs it the same as the cached one?",
			"And again:\n\n" + fenced(bufferGo) + "\n\nStill the same?",
		} {
			contents = append(contents, genai.NewContentFromText(q, genai.RoleUser))
			a, rep := generateOnce(t, c, model, contents, cfg)
			answers, reports = append(answers, a.Parts[0].Text), append(reports, rep)
			contents = append(contents, a)
		}
		return answers, reports, cc.Name
	}
	p := newPair(t, emulator.Options{Reply: scriptReply})
	direct, proxied := p.clients(t)
	wantAnswers, _, wantCache := run(direct)
	gotAnswers, reports, gotCache := run(proxied)
	if diff := cmp.Diff(wantAnswers, gotAnswers); diff != "" {
		t.Errorf("answers through the proxy differ (-want +got):\n%s", diff)
	}
	for i, rep := range reports[:4] {
		checkUnchangedReport(t, fmt.Sprintf("request %d", i+1), rep)
	}
	dr, pr := p.direct.emu.Received(), p.proxied.emu.Received()
	sameWire(t, dr[:4], pr[:4])
	if !strings.Contains(reports[4], "unchanged=1") {
		t.Errorf("last report %q, want unchanged=1", reports[4])
	}
	last := pr[len(pr)-1]
	if last.CachedContent != gotCache || gotCache != wantCache || last.Status != 200 {
		t.Errorf("last request: cachedContent %q (want %q), status %d", last.CachedContent, gotCache, last.Status)
	}
	// Everything outside contents is byte-for-byte the client's.
	outside := func(body []byte) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("upstream body: %v", err)
		}
		delete(m, "contents")
		return m
	}
	if diff := cmp.Diff(outside(dr[len(dr)-1].Body), outside(last.Body)); diff != "" {
		t.Errorf("fields outside contents changed (-client +upstream):\n%s", diff)
	}
	if len(last.Body) >= len(dr[len(dr)-1].Body) {
		t.Errorf("last body %d bytes upstream, %d sent: want it deduplicated", len(last.Body), len(dr[len(dr)-1].Body))
	}
}
