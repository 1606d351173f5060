package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// structuredDedup reports whether the rewrite deduplicates JSON-text
// string values and functionResponse values (issue 15 items 1, 2 and 4).
// While it is false the tests below demand that the proxy forwards these
// sessions byte for byte and fail once it shrinks them; set it to true
// with that change: they then demand the shrink and check every reference.
const structuredDedup = true

// editorGo is the editor's document of the structured sessions:
// bufio/scan.go of the Go installation (14.5 KB, read at run time).
var editorGo = goSource("src/bufio/scan.go")

// guideJSON writes v as the guide's client does (JSON.stringify: no HTML
// escaping, no trailing newline).
func guideJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// The guide's payloads (../shared/SEED-BUILDER.md), as its naive client
// sends them: the editor's code in every user turn, every proposal in
// full in the model's turn.
type (
	editorUser struct {
		Mode          string `json:"mode"`
		Prompt        string `json:"prompt"`
		CurrentSource string `json:"currentSource"`
	}
	editorModel struct {
		Kind           string `json:"kind"`
		Explanation    string `json:"explanation"`
		ProposedSource string `json:"proposedSource,omitempty"`
	}
)

// editorChanges are the edits the scripted model makes, by prompt; each
// is a deterministic function of the source it read.
var editorChanges = map[string]func(string) string{
	"Document that Scan stops at the first I/O error.": func(s string) string {
		return strings.Replace(s, "func (s *Scanner) Scan() bool {", "// Scan stops at the first I/O error; Err reports it.\nfunc (s *Scanner) Scan() bool {", 1)
	},
	"Raise MaxScanTokenSize to 128 KiB.": func(s string) string {
		return strings.Replace(s, "MaxScanTokenSize = 64 * 1024", "MaxScanTokenSize = 128 * 1024", 1)
	},
	"Add a split function ScanCommas that splits on commas.": func(s string) string {
		return s + "\n// ScanCommas is a split function for a Scanner that returns each\n// comma-separated field of text, without the comma.\nfunc ScanCommas(data []byte, atEOF bool) (advance int, token []byte, err error) {\n\tif i := bytes.IndexByte(data, ','); i >= 0 {\n\t\treturn i + 1, data[0:i], nil\n\t}\n\tif atEOF && len(data) > 0 {\n\t\treturn len(data), data, nil\n\t}\n\treturn 0, nil, nil\n}\n"
	},
	"Make isSpace's comment say that ScanWords is its only user.": func(s string) string {
		return strings.Replace(s, "func isSpace(r rune) bool {", "// isSpace is used by ScanWords only.\nfunc isSpace(r rune) bool {", 1)
	},
	"Mention ErrFinalToken in the comment of ScanLines.": func(s string) string {
		return strings.Replace(s, "func ScanLines(", "// A split function can stop earlier by returning ErrFinalToken.\nfunc ScanLines(", 1)
	},
}

// editorStep is one request of the editor session: a hand edit made
// before it, and for edits what the user does with the proposal.
type editorStep struct {
	mode, prompt string
	hand         func(string) string
	outcome      string // "applied", "discarded" or "undone"
}

// editorSteps is issue 15's session: ask, edit applied, edit discarded,
// ask, manual edit, edit applied, edit undone, ask, edit applied, and a
// last question that sees the applied edit.
var editorSteps = []editorStep{
	{mode: "ask", prompt: "Explain what this file does."},
	{mode: "edit", prompt: "Document that Scan stops at the first I/O error.", outcome: "applied"},
	{mode: "edit", prompt: "Raise MaxScanTokenSize to 128 KiB.", outcome: "discarded"},
	{mode: "ask", prompt: "Why does Scan panic after 100 empty tokens?"},
	{mode: "ask", prompt: "I reworded the comment of ErrFinalToken by hand. Is it still accurate?", hand: func(s string) string {
		return strings.Replace(s, "// ErrFinalToken is a special sentinel error value.", "// ErrFinalToken is a sentinel error value that split functions return.", 1)
	}},
	{mode: "edit", prompt: "Add a split function ScanCommas that splits on commas.", outcome: "applied"},
	{mode: "edit", prompt: "Make isSpace's comment say that ScanWords is its only user.", outcome: "undone"},
	{mode: "ask", prompt: "Which split functions return a final token without a newline?"},
	{mode: "edit", prompt: "Mention ErrFinalToken in the comment of ScanLines.", outcome: "applied"},
	{mode: "ask", prompt: "Summarise the changes I kept."},
}

// sourceValues returns the string values of currentSource and
// proposedSource in the JSON texts of contents, newest first.
func sourceValues(contents []emulator.Content) []string {
	var out []string
	for i := len(contents) - 1; i >= 0; i-- {
		var m map[string]any
		if json.Unmarshal([]byte(contents[i].Text()), &m) != nil {
			continue
		}
		for _, k := range []string{"currentSource", "proposedSource"} {
			if v, ok := m[k].(string); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// editorReply is the scripted model of the editor session. It answers in
// the guide's model-turn shape, from the newest source it finds in full
// (a value holding no reference), and names that source's length and
// SHA-256: the same answers with and without the proxy prove that the
// source the client meant reached the model, and that no older version
// was left in full after it.
func editorReply(rr emulator.ReplyRequest) string {
	var u editorUser
	if err := json.Unmarshal([]byte(rr.LastUserText()), &u); err != nil {
		return "The last user turn is not a JSON text: " + err.Error()
	}
	src := ""
	for _, v := range sourceValues(rr.Contents) {
		if !refRE.MatchString(v) {
			src = v
			break
		}
	}
	if src == "" {
		return guideJSON(editorModel{Kind: "answer", Explanation: "I found no source in full."})
	}
	read := fmt.Sprintf("I read scan.go: %d lines, sha256 %s.", strings.Count(src, "\n"), sha12([]byte(src)))
	if u.Mode != "edit" {
		return guideJSON(editorModel{Kind: "answer", Explanation: fmt.Sprintf("About %q: %s", u.Prompt, read)})
	}
	change := editorChanges[u.Prompt]
	if change == nil {
		return guideJSON(editorModel{Kind: "answer", Explanation: "I cannot make that edit."})
	}
	return guideJSON(editorModel{Kind: "code_proposal", Explanation: "Done. " + read, ProposedSource: change(src)})
}

// editorTurn is what one request of the editor session sent and got.
type editorTurn struct {
	sent   []*genai.Content
	answer string
	resp   *genai.GenerateContentResponse
}

// ignorePromptUsage ignores the usage figures of the prompt, which the
// proxy shrinks; everything else of a response must be the same with and
// without it.
var ignorePromptUsage = cmpopts.IgnoreFields(genai.GenerateContentResponseUsageMetadata{},
	"PromptTokenCount", "PromptTokensDetails", "CachedContentTokenCount", "CacheTokensDetails", "TotalTokenCount")

// playEditor runs the guide's naive client against baseURL: JSON texts in
// native turns, the editor's code in every user turn, each model turn kept
// as received (proposals in full); Apply puts the proposal in the editor,
// Discard leaves it, Undo puts back the code from before it. It returns
// the turns and every source version, in order of appearance.
func playEditor(t *testing.T, baseURL string) ([]editorTurn, []string) {
	t.Helper()
	c := newClient(t, baseURL)
	editor := editorGo
	versions := []string{editor}
	addVersion := func(v string) {
		for _, o := range versions {
			if o == v {
				return
			}
		}
		versions = append(versions, v)
	}
	var history []*genai.Content
	var turns []editorTurn
	for i, st := range editorSteps {
		if st.hand != nil {
			editor = st.hand(editor)
			addVersion(editor)
		}
		contents := append(append([]*genai.Content(nil), history...),
			genai.NewContentFromText(guideJSON(editorUser{Mode: st.mode, Prompt: st.prompt, CurrentSource: editor}), genai.RoleUser))
		resp, err := c.Models.GenerateContent(t.Context(), "gemini-2.5-flash", contents, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		answer := resp.Text()
		var m editorModel
		if err := json.Unmarshal([]byte(answer), &m); err != nil {
			t.Fatalf("request %d: the answer is not a guide model turn: %v\n%.300s", i+1, err, answer)
		}
		if (m.Kind == "code_proposal") != (st.mode == "edit") || (st.mode == "edit") != (m.ProposedSource != "") {
			t.Fatalf("request %d: %s mode answered %q: %.300s", i+1, st.mode, m.Kind, m.Explanation)
		}
		if m.ProposedSource != "" {
			addVersion(m.ProposedSource)
			if st.outcome == "applied" {
				editor = m.ProposedSource
			}
		}
		turns = append(turns, editorTurn{sent: contents, answer: answer, resp: resp})
		history = append(contents, genai.NewContentFromText(answer, genai.RoleModel))
	}
	return turns, versions
}

// upstreamBytes returns the body sizes of the generate requests the
// direct and the proxied emulator of p received, and logs their totals.
// While structuredDedup is false it demands equal totals and returns ok
// false, nothing more to check; what names the payload for the message.
func upstreamBytes(t *testing.T, p pair, what string) (direct, proxied []int, ok bool) {
	t.Helper()
	sizes := func(rs []emulator.Received) (total int, each []int) {
		for _, r := range testutil.GenerateRequests(rs) {
			total += len(r.Body)
			each = append(each, len(r.Body))
		}
		return total, each
	}
	dTotal, direct := sizes(p.direct.emu.Received())
	pTotal, proxied := sizes(p.proxied.emu.Received())
	t.Logf("upstream bytes: direct %d, through the proxy %d (%.1f%% fewer); per request direct %v, proxied %v", dTotal, pTotal, 100*(1-float64(pTotal)/float64(dTotal)), direct, proxied)
	if !structuredDedup {
		if pTotal != dTotal {
			t.Fatalf("the proxy changed the upstream bytes (%d -> %d): %s deduplicated now; set structuredDedup", dTotal, pTotal, what)
		}
		return direct, proxied, false
	}
	return direct, proxied, true
}

// TestEditorSessionJSON plays the guide's editor session (issue 15) with
// the Go SDK directly against the emulator and through the proxy: the
// client gets the same answers. With structuredDedup every request after
// the first reaches the emulator smaller, each JSON text is still a JSON
// object with the client's keys in order, a value differs from the
// client's only by references whose hashes match the replaced spans, and
// the active source is present in full exactly once, no other version at
// all.
func TestEditorSessionJSON(t *testing.T) {
	p := newPair(t, emulator.Options{Reply: editorReply})
	direct, versions := playEditor(t, p.direct.emuURL)
	proxied, _ := playEditor(t, p.proxied.proxyURL)
	for i := range direct {
		if direct[i].answer != proxied[i].answer {
			t.Errorf("request %d: answer through the proxy differs:\n direct: %.300q\nproxied: %.300q", i+1, direct[i].answer, proxied[i].answer)
		} else if diff := cmp.Diff(direct[i].resp, proxied[i].resp, ignoreSDKHTTPResponse, ignorePromptUsage, exportAll); diff != "" {
			t.Errorf("request %d: response through the proxy differs (-direct +proxy):\n%s", i+1, diff)
		}
	}
	if len(versions) != 7 {
		t.Errorf("session produced %d source versions, want 7 (the original, a hand edit, five proposals)", len(versions))
	}
	dEach, pEach, ok := upstreamBytes(t, p, "JSON texts are")
	if !ok {
		return
	}
	for i := 1; i < len(pEach); i++ {
		if pEach[i] >= dEach[i] {
			t.Errorf("request %d: %d bytes upstream through the proxy, %d directly: want fewer", i+1, pEach[i], dEach[i])
		}
	}
	for i, r := range testutil.GenerateRequests(p.proxied.emu.Received()) {
		checkEditorUpstream(t, i+1, proxied[i].sent, r, versions)
	}
}

// checkEditorUpstream checks one proxied upstream request of the editor
// session against what the client sent (see TestEditorSessionJSON).
func checkEditorUpstream(t *testing.T, n int, sent []*genai.Content, got emulator.Received, versions []string) {
	t.Helper()
	if len(got.Contents) != len(sent) {
		t.Fatalf("request %d: %d contents upstream, %d sent", n, len(got.Contents), len(sent))
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(sent[len(sent)-1].Parts[0].Text), &last); err != nil {
		t.Fatal(err)
	}
	active := last["currentSource"].(string)
	full := map[string]int{}
	for i, sc := range sent {
		var cm, gm map[string]any
		if err := json.Unmarshal([]byte(sc.Parts[0].Text), &cm); err != nil {
			t.Fatal(err)
		}
		gt := got.Contents[i].Text()
		if err := json.Unmarshal([]byte(gt), &gm); err != nil {
			t.Errorf("request %d content %d: upstream text is not JSON: %v\n%.300s", n, i, err, gt)
			continue
		}
		if ck, gk := jsonKeys(t, sc.Parts[0].Text), jsonKeys(t, gt); !cmp.Equal(ck, gk) {
			t.Errorf("request %d content %d: keys %v upstream, %v sent", n, i, gk, ck)
		}
		for k, cv := range cm {
			cs, _ := cv.(string)
			gs, _ := gm[k].(string)
			if gs == cs {
				full[gs]++
				continue
			}
			spans, err := replacedSpans(cs, gs)
			if err != nil {
				t.Errorf("request %d content %d %s: %v\nupstream: %.300q", n, i, k, err, gs)
				continue
			}
			for _, s := range spans {
				if s.ref.kind == "unchanged" && s.text != active {
					t.Errorf("request %d content %d %s: an unchanged reference to a version that is not the active one", n, i, k)
				}
			}
		}
	}
	for j, v := range versions {
		switch {
		case v == active && full[v] != 1:
			t.Errorf("request %d: the active source is in full %d times upstream, want 1", n, full[v])
		case v != active && full[v] != 0:
			t.Errorf("request %d: older version %d is in full %d times upstream, want 0", n, j+1, full[v])
		}
	}
}

// jsonKeys lists the keys of the JSON object text in order.
func jsonKeys(t *testing.T, text string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	var keys []string
	if _, err := dec.Token(); err != nil {
		t.Fatalf("jsonKeys: %v", err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatalf("jsonKeys: %v", err)
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("jsonKeys: %v", err)
		}
	}
	return keys
}

// readFileReply is the scripted model of the agent session: after a
// read_file result it names the file it read (the newest function
// response's content, a reference to an identical earlier result looked
// up by its hash), so that the same answers with and without the proxy
// prove the file reached the model every time.
func readFileReply(rr emulator.ReplyRequest) string {
	var results []string // every function response's content, in order
	for _, c := range rr.Contents {
		for _, p := range c.Parts {
			if fr := p.FunctionResponse; fr != nil {
				s, _ := fr.Response["content"].(string)
				results = append(results, s)
			}
		}
	}
	if len(results) == 0 {
		return "I will read the file."
	}
	last := results[len(results)-1]
	if m := refRE.FindStringSubmatch(last); m != nil && m[0] == last {
		last = ""
		for _, r := range results {
			if sha12([]byte(r)) == m[2] {
				last = r
				break
			}
		}
	}
	if last == "" {
		return "I could not read the file."
	}
	return fmt.Sprintf("I read the file (%d reads so far): %d lines, sha256 %s.", len(results), strings.Count(last, "\n"), sha12([]byte(last)))
}

// playReadFile runs the agent: three questions, each answered by the
// model after it called read_file, whose result is scan.go every time.
// The client echoes the model's parts as received and answers each call
// with its id.
func playReadFile(t *testing.T, baseURL string) ([]loopTurn, []*genai.GenerateContentResponse) {
	t.Helper()
	c := newClient(t, baseURL)
	cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
		Name: "read_file", Description: "Read a file of the repository.",
		Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"path": {Type: genai.TypeString}}, Required: []string{"path"}},
	}}}}}
	var contents []*genai.Content
	var turns []loopTurn
	var resps []*genai.GenerateContentResponse
	for _, q := range []string{"Read bufio/scan.go and explain Buffer.", "Read it again: what does ErrTooLong mean?", "Read it once more: which split function is the default?"} {
		contents = append(contents, genai.NewContentFromText(q, genai.RoleUser))
		for step := 0; ; step++ {
			if step == 3 {
				t.Fatalf("%q: the model still calls functions after %d steps", q, step)
			}
			resp, err := c.Models.GenerateContent(t.Context(), "gemini-3-flash-preview", contents, cfg)
			if err != nil {
				t.Fatalf("%q step %d: %v", q, step, err)
			}
			resps = append(resps, resp)
			parts := resp.Candidates[0].Content.Parts
			var turn loopTurn
			var results []*genai.Part
			for _, p := range parts {
				if p.FunctionCall != nil {
					if len(turn.Calls) == 0 {
						turn.Signed = len(p.ThoughtSignature) > 0
					}
					turn.Calls = append(turn.Calls, *p.FunctionCall)
					results = append(results, &genai.Part{FunctionResponse: &genai.FunctionResponse{
						ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Response: map[string]any{"content": editorGo}}})
					continue
				}
				turn.Text += p.Text
			}
			turns = append(turns, turn)
			contents = append(contents, &genai.Content{Role: genai.RoleModel, Parts: parts})
			if len(results) == 0 {
				break
			}
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: results})
		}
	}
	return turns, resps
}

// TestReadFileAgent runs an agent that reads the same 14.5 KB file three
// times through a read_file tool (Gemini 3: signed calls with ids),
// directly and through the proxy: the same calls and answers. With
// structuredDedup the first result reaches the emulator in full and each
// repeated one as an unchanged reference to it inside the same response
// object, under the call's id and name.
func TestReadFileAgent(t *testing.T) {
	p := newPair(t, emulator.Options{Script: callUntilAnswered, Reply: readFileReply})
	direct, dResps := playReadFile(t, p.direct.emuURL)
	proxied, pResps := playReadFile(t, p.proxied.proxyURL)
	if diff := cmp.Diff(direct, proxied); diff != "" {
		t.Errorf("agent through the proxy differs (-direct +proxy):\n%s", diff)
	}
	if diff := cmp.Diff(dResps, pResps, ignoreSDKHTTPResponse, ignorePromptUsage, exportAll); diff != "" {
		t.Errorf("responses through the proxy differ (-direct +proxy):\n%s", diff)
	}
	if len(proxied) != 6 || !strings.Contains(proxied[5].Text, "(3 reads so far)") {
		t.Fatalf("turns %+v, want three calls each followed by an answer naming the read", proxied)
	}
	dEach, pEach, ok := upstreamBytes(t, p, "tool results are")
	if !ok {
		return
	}
	for i, r := range testutil.GenerateRequests(p.proxied.emu.Received()) {
		reads := 0
		for _, c := range r.Contents {
			for _, part := range c.Parts {
				fr := part.FunctionResponse
				if fr == nil {
					continue
				}
				reads++
				got, _ := fr.Response["content"].(string)
				if fr.Name != "read_file" || fr.ID == "" || len(fr.Response) != 1 {
					t.Errorf("request %d: function response %d: name %q, id %q, %d response fields", i+1, reads, fr.Name, fr.ID, len(fr.Response))
				}
				if reads == 1 {
					if got != editorGo {
						t.Errorf("request %d: the first read is not in full upstream: %.200q", i+1, got)
					}
					continue
				}
				if m := refRE.FindStringSubmatch(got); m == nil || m[0] != got || m[1] != "unchanged" || m[2] != sha12([]byte(editorGo)) {
					t.Errorf("request %d: read %d upstream is %.200q, want an unchanged reference to the first", i+1, reads, got)
				}
			}
		}
		if reads > 1 && pEach[i] >= dEach[i]-len(editorGo)*(reads-1)/2 {
			t.Errorf("request %d: %d bytes upstream through the proxy, %d directly, for %d reads", i+1, pEach[i], dEach[i], reads)
		}
	}
}
