package bench

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/genai"
)

// Structured payloads (issue 15): an editor assistant in the shape of the
// guide the product imitates (../shared/SEED-BUILDER.md), whose turns are
// JSON texts, and an agent that re-reads a file through a tool.
func structuredSessions() []*Session {
	return []*Session{editorSession(), agentSession()}
}

// The guide's payloads, in the key order its builder writes them
// (SEED-BUILDER "Building contents", rules 2-4). Every field but mode,
// prompt, kind and explanation is left out when empty, as the guide's
// JSON.stringify leaves out undefined fields.
type (
	guideUser struct {
		Mode   string `json:"mode"`
		Prompt string `json:"prompt"`
		// CurrentSource is the document in full (rule 2, rule 4).
		CurrentSource string `json:"currentSource,omitempty"`
		// SupersededSourceSha256 replaces a copy the model has elsewhere
		// (rule 2).
		SupersededSourceSha256 string `json:"supersededSourceSha256,omitempty"`
		// SourceSynchronized says that the editor holds the source the
		// model has (rule 4).
		SourceSynchronized bool `json:"sourceSynchronized,omitempty"`
	}
	guideModel struct {
		Kind        string `json:"kind"`
		Explanation string `json:"explanation"`
		// ProposedSource is the proposal in full (rule 3).
		ProposedSource string `json:"proposedSource,omitempty"`
		// SupersededProposalSha256 replaces a proposal the model no
		// longer needs in full (rule 3).
		SupersededProposalSha256 string `json:"supersededProposalSha256,omitempty"`
	}
)

// guideJSON writes v as JSON.stringify does: no HTML escaping, no
// indentation, no trailing newline.
func guideJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("bench: encoding a guide payload: %v", err))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// sha256Hex is the full SHA-256 the guide's builder writes (64 hex
// digits).
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Edit outcomes of a history record (SEED-BUILDER "History records").
const (
	outcomeNone      = "none"
	outcomeProposed  = "proposed"
	outcomeApplied   = "applied"
	outcomeDiscarded = "discarded"
	outcomeUndone    = "undone"
)

// editorRecord is one past turn as the guide's client keeps it
// (SEED-BUILDER "History records").
type editorRecord struct {
	prompt, response, mode      string
	baseSource, baseSHA         string
	proposalSource, proposalSHA string
	outcome                     string
}

// activeProposal reports whether r is an edit whose proposal the client
// has not discarded or undone (rule 1).
func (r editorRecord) activeProposal() bool {
	return r.mode == "edit" && r.proposalSource != "" && r.outcome != outcomeDiscarded && r.outcome != outcomeUndone
}

// guideBuilder is the guide's request builder (Pattern 2: conversation
// state on the client, JSON payloads as text parts), ported from
// SEED-BUILDER.md: it is the ideal client of the editor session.
type guideBuilder struct {
	records []editorRecord
	// activeSHA is activeDocumentSha256 (rule 2, "Sync state"): the hash
	// of the source the model has.
	activeSHA string
}

// contents builds the request for a new turn (SEED-BUILDER "Building
// contents"). The session has no secondary context, so rule 5 adds
// nothing.
func (g *guideBuilder) contents(mode, prompt, editor string) []*genai.Content {
	// "Before a new turn, sourceSynchronized is sha256(editorCode) ==
	// activeDocumentSha256."
	synced := g.activeSHA != "" && sha256Hex(editor) == g.activeSHA
	// Rule 1: the latest turn holding the active source, searched
	// backwards, only when the source is synchronized or absent: an edit
	// whose proposal is not discarded or undone, or a turn with a
	// baseSource.
	latest := -1
	if synced || editor == "" {
		for i := len(g.records) - 1; i >= 0; i-- {
			if r := g.records[i]; r.activeProposal() || r.baseSource != "" {
				latest = i
				break
			}
		}
	}
	var out []*genai.Content
	for i, r := range g.records {
		// Rule 2: currentSource only for the latest turn when it has no
		// active proposal; otherwise the base's hash.
		u := guideUser{Mode: r.mode, Prompt: r.prompt}
		if i == latest && !r.activeProposal() {
			u.CurrentSource = r.baseSource
		} else {
			u.SupersededSourceSha256 = r.baseSHA
		}
		// Rule 3: proposedSource only for the latest turn when its
		// proposal is active; otherwise the proposal's hash.
		m := guideModel{Kind: "answer", Explanation: r.response}
		if r.mode == "edit" {
			m.Kind = "code_proposal"
		}
		if i == latest && r.activeProposal() {
			m.ProposedSource = r.proposalSource
		} else {
			m.SupersededProposalSha256 = r.proposalSHA
		}
		out = append(out, genai.NewContentFromText(guideJSON(u), genai.RoleUser), genai.NewContentFromText(guideJSON(m), genai.RoleModel))
	}
	// Rule 4: the new user content.
	u := guideUser{Mode: mode, Prompt: prompt}
	if synced && latest >= 0 {
		u.SourceSynchronized = true
	} else {
		u.CurrentSource = editor
	}
	return append(out, genai.NewContentFromText(guideJSON(u), genai.RoleUser))
}

// record appends the finished turn and moves activeDocumentSha256 as the
// guide's sync state does: after an ask, the hash of the document sent;
// after an edit with a proposal, the proposal's hash.
func (g *guideBuilder) record(r editorRecord) {
	r.baseSHA = sha256Hex(r.baseSource)
	g.activeSHA = r.baseSHA
	r.outcome = outcomeNone
	if r.proposalSource != "" {
		r.proposalSHA = sha256Hex(r.proposalSource)
		r.outcome = outcomeProposed
		g.activeSHA = r.proposalSHA
	}
	g.records = append(g.records, r)
}

// settle records what the client did with the last proposal: Apply keeps
// the proposal's hash, Discard and Undo revert to the base hash from
// before it (SEED-BUILDER "Sync state").
func (g *guideBuilder) settle(outcome string) {
	r := &g.records[len(g.records)-1]
	r.outcome = outcome
	if outcome == outcomeDiscarded || outcome == outcomeUndone {
		g.activeSHA = r.baseSHA
	}
}

// editorStep is one request of the editor session: the user's prompt in
// ask or edit mode, a hand edit made before it, the model's change for an
// edit and what the user does with the proposal.
type editorStep struct {
	mode, prompt string
	// hand, when set, is the user's own edit of the editor's code before
	// the request.
	hand func(string) string
	// change makes the model's proposal from the source it was sent.
	change func(string) string
	// outcome is applied, discarded or undone (edits only).
	outcome     string
	explanation string
}

// replaceOnce replaces old by new in s and panics when s lacks old, so that
// an edit that no longer matches the corpus is noticed.
func replaceOnce(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic(fmt.Sprintf("bench: editor session: %q not found in the source", old))
	}
	return strings.Replace(s, old, new, 1)
}

// editorSteps is the session issue 15 asks for: ask, edit applied, edit
// discarded, ask, manual edit, edit applied, edit undone, ask, edit
// applied, and a last question, over bufio/scan.go.
var editorSteps = []editorStep{
	{mode: "ask", prompt: "Explain what this file does.",
		explanation: "scan.go defines Scanner, which reads input through a split function that cuts it into tokens: lines, words, runes or bytes."},
	{mode: "edit", prompt: "Document that Scan stops at the first I/O error.", outcome: outcomeApplied,
		change: func(s string) string {
			return replaceOnce(s, "func (s *Scanner) Scan() bool {", "// Scan stops at the first I/O error; Err reports it.\nfunc (s *Scanner) Scan() bool {")
		},
		explanation: "I added a comment before Scan saying that it stops at the first I/O error and that Err reports it."},
	{mode: "edit", prompt: "Raise MaxScanTokenSize to 128 KiB.", outcome: outcomeDiscarded,
		change: func(s string) string {
			return replaceOnce(s, "MaxScanTokenSize = 64 * 1024", "MaxScanTokenSize = 128 * 1024")
		},
		explanation: "MaxScanTokenSize is now 128 KiB; callers that need more still call Buffer."},
	{mode: "ask", prompt: "Why does Scan panic after 100 empty tokens?",
		explanation: "A split function that keeps returning empty tokens without advancing would loop forever; after 100 such calls Scan panics to expose the bug."},
	{mode: "ask", prompt: "I reworded the comment of ErrFinalToken by hand. Is it still accurate?",
		hand: func(s string) string {
			return replaceOnce(s, "// ErrFinalToken is a special sentinel error value.", "// ErrFinalToken is a sentinel error value that split functions return.")
		},
		explanation: "Yes: split functions return ErrFinalToken to stop the scan after the token they return with it."},
	{mode: "edit", prompt: "Add a split function ScanCommas that splits on commas.", outcome: outcomeApplied,
		change: func(s string) string {
			return s + "\n// ScanCommas is a split function for a Scanner that returns each\n// comma-separated field of text, without the comma.\nfunc ScanCommas(data []byte, atEOF bool) (advance int, token []byte, err error) {\n\tif atEOF && len(data) == 0 {\n\t\treturn 0, nil, nil\n\t}\n\tif i := bytes.IndexByte(data, ','); i >= 0 {\n\t\treturn i + 1, data[0:i], nil\n\t}\n\tif atEOF {\n\t\treturn len(data), data, nil\n\t}\n\treturn 0, nil, nil\n}\n"
		},
		explanation: "ScanCommas is added at the end of the file; it mirrors ScanLines with ',' as the separator."},
	{mode: "edit", prompt: "Make isSpace treat U+00A0 as a space only in ScanWords.", outcome: outcomeUndone,
		change: func(s string) string {
			return replaceOnce(s, "func isSpace(r rune) bool {", "// isSpace is used by ScanWords only; U+00A0 counts as a space.\nfunc isSpace(r rune) bool {")
		},
		explanation: "isSpace already treats U+00A0 as a space; I documented that ScanWords is its only user."},
	{mode: "ask", prompt: "Which split functions return a final token without a newline?",
		explanation: "ScanLines returns the last line even without a trailing newline, and ScanCommas returns the last field; ScanWords and ScanRunes have no separator to wait for."},
	{mode: "edit", prompt: "Mention ErrFinalToken in the comment of ScanLines.", outcome: outcomeApplied,
		change: func(s string) string {
			return replaceOnce(s, "func ScanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {", "// A split function can stop earlier by returning ErrFinalToken.\nfunc ScanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {")
		},
		explanation: "ScanLines' comment now says that a split function can stop earlier with ErrFinalToken."},
	{mode: "ask", prompt: "Summarise the changes I kept.",
		explanation: "You kept the note on Scan's first I/O error, your ErrFinalToken wording, ScanCommas and the ErrFinalToken note of ScanLines; the larger token size and the isSpace note were dropped."},
}

// editorSession replays editorSteps over bufio/scan.go (14.5 KB) twice
// over: the naive client of the guide's shape (SEED-BUILDER "The naive
// client of the same shape": the editor's code in every user turn, every
// proposal in full in its model turn) and the guide's builder, the ideal,
// which keeps the active source once and every other copy as its SHA-256.
// The answers are the model turns' JSON texts.
func editorSession() *Session {
	s := &Session{Name: "editor-json", Kind: KindJSON, Model: defaultModel,
		Description: "editor assistant in the guide's JSON shape (SEED-BUILDER): bufio/scan.go as currentSource/proposedSource; ask, apply, discard, ask, hand edit, apply, undo, ask, apply, ask; 10 turns"}
	editor := Document("scan.go")
	var naive []*genai.Content
	var g guideBuilder
	for _, st := range editorSteps {
		if st.hand != nil {
			editor = st.hand(editor)
		}
		u := genai.NewContentFromText(guideJSON(guideUser{Mode: st.mode, Prompt: st.prompt, CurrentSource: editor}), genai.RoleUser)
		naive = append(naive, u)
		ans := guideModel{Kind: "answer", Explanation: st.explanation}
		rec := editorRecord{prompt: st.prompt, response: st.explanation, mode: st.mode, baseSource: editor}
		if st.mode == "edit" {
			ans.Kind, ans.ProposedSource = "code_proposal", st.change(editor)
			rec.proposalSource = ans.ProposedSource
		}
		answer := guideJSON(ans)
		s.Turns = append(s.Turns, Turn{Naive: append([]*genai.Content(nil), naive...), Ideal: g.contents(st.mode, st.prompt, editor), Answer: answer})
		naive = append(naive, genai.NewContentFromText(answer, genai.RoleModel))
		g.record(rec)
		if st.mode == "edit" {
			g.settle(st.outcome)
			if st.outcome == outcomeApplied {
				editor = rec.proposalSource
			}
		}
	}
	return s
}

// agentSession is an agent that reads bufio/scan.go through a read_file
// tool three times, the file unchanged, on a Gemini 3 model (signed
// function calls with ids). The ideal client sends each repeated read as
// a reference in the proxy's format (rewrite/doc.go "Reference format") in
// the same response object, so that "each repeated read costs at most a
// reference" is Proxy ≤ Ideal (Check).
func agentSession() *Session {
	s := &Session{Name: "agent-read-file", Kind: KindToolResult, Model: "gemini-3-flash-preview",
		Description: "agent: read_file tool returns bufio/scan.go three times, unchanged (functionCall/functionResponse, Gemini 3 signed calls), 6 requests"}
	s.Config = &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
		Name: "read_file", Description: "Reads a file of the workspace.",
		Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"path": {Type: genai.TypeString}}, Required: []string{"path"}},
	}}}}}
	file := Document("scan.go")
	questions := []struct{ q, a string }{
		{"Read bufio/scan.go and explain what Buffer does.", "Buffer sets the initial buffer and the maximum token size; it panics if called after Scan started."},
		{"Read it again: what happens when a token exceeds the maximum?", "Scan stops and Err returns ErrTooLong."},
		{"Read it once more and tell me which split function Scanner uses by default.", "NewScanner sets ScanLines as the default split function."},
	}
	var naive, ideal []*genai.Content
	first := -1 // the content index of the first full read
	add := func(role string, np, ip *genai.Part) {
		naive = append(naive, &genai.Content{Role: role, Parts: []*genai.Part{np}})
		ideal = append(ideal, &genai.Content{Role: role, Parts: []*genai.Part{ip}})
	}
	turn := func(answer string) {
		s.Turns = append(s.Turns, Turn{Naive: append([]*genai.Content(nil), naive...), Ideal: append([]*genai.Content(nil), ideal...), Answer: answer})
	}
	for i, q := range questions {
		text := &genai.Part{Text: q.q}
		add(genai.RoleUser, text, text)
		turn(fmt.Sprintf("Reading bufio/scan.go (%d).", i+1))
		call := &genai.Part{FunctionCall: &genai.FunctionCall{ID: fmt.Sprintf("call-%d", i+1), Name: "read_file", Args: map[string]any{"path": "bufio/scan.go"}},
			ThoughtSignature: []byte(fmt.Sprintf("signature-of-read-%d", i+1))}
		add(genai.RoleModel, call, call)
		resp := func(content string) *genai.Part {
			return &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: call.FunctionCall.ID, Name: "read_file", Response: map[string]any{"content": content}}}
		}
		if first < 0 {
			first = len(naive)
			add(genai.RoleUser, resp(file), resp(file))
		} else {
			add(genai.RoleUser, resp(file), resp(toolRef(file, first)))
		}
		turn(q.a)
		add(genai.RoleModel, &genai.Part{Text: q.a}, &genai.Part{Text: q.a})
	}
	return s
}

// toolRef is the reference an ideal client sends for a tool result that
// repeats the one in content index at (rewrite/doc.go "Reference format":
// NAME is the first line of a block without a file name).
func toolRef(content string, at int) string {
	name, _, _ := strings.Cut(content, "\n")
	return fmt.Sprintf("[unchanged: %s sha256:%s, identical to the copy in turn %d]", name, sha256Hex(content)[:12], at+1)
}
