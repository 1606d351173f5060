package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// The naive client of these sessions keeps its file in a fence named
// buffer.go and re-sends it in every user turn; the scripted model answers
// from the newest full copy it finds.
const fenceOpen = "```go buffer.go\n"

// fenced is v as the client and the model quote it.
func fenced(v string) string { return fenceOpen + v + "```" }

// lastFence returns the body of the last complete buffer.go fence in text,
// or "".
func lastFence(text string) string {
	i := strings.LastIndex(text, fenceOpen)
	if i < 0 {
		return ""
	}
	body := text[i+len(fenceOpen):]
	j := strings.Index(body, "\n```")
	if j < 0 {
		return ""
	}
	return body[:j+1]
}

// edits are the questions the scripted model answers with an edited whole
// file; each edit is a deterministic function of the file it read.
var edits = map[string]func(string) string{
	"Add a method Contains(c byte) bool to Buffer.": func(f string) string {
		return f + "\n// Contains reports whether c is within the unread portion of b.\nfunc (b *Buffer) Contains(c byte) bool {\n\treturn IndexByte(b.buf[b.off:], c) >= 0\n}\n"
	},
	"Add a method Peek(n int) []byte to Buffer.": func(f string) string {
		return f + "\n// Peek returns the next n unread bytes without advancing the buffer.\nfunc (b *Buffer) Peek(n int) []byte {\n\tif n > b.Len() {\n\t\tn = b.Len()\n\t}\n\treturn b.buf[b.off : b.off+n]\n}\n"
	},
	"Add a method Last() (byte, bool) to Buffer.": func(f string) string {
		return f + "\n// Last returns the last unread byte of b, if any.\nfunc (b *Buffer) Last() (byte, bool) {\n\tif b.empty() {\n\t\treturn 0, false\n\t}\n\treturn b.buf[len(b.buf)-1], true\n}\n"
	},
}

// scriptReply is the emulator's scripted model. It answers the last line
// of the last user turn, from the newest full copy of buffer.go and the
// newest inline image that reached it, naming their SHA-256: identical
// answers with and without the proxy prove that the content reached the
// model intact.
func scriptReply(r emulator.ReplyRequest) string {
	text := strings.TrimSpace(r.LastUserText())
	q := text[strings.LastIndex(text, "\n")+1:]
	file, img := "", []byte(nil)
	for i := len(r.Contents) - 1; i >= 0; i-- {
		if file == "" {
			file = lastFence(r.Contents[i].Text())
		}
		for _, p := range r.Contents[i].Parts {
			if img == nil && p.InlineData != nil {
				img = p.InlineData.Data
			}
		}
	}
	seen := ""
	if file != "" {
		seen += fmt.Sprintf(" (I read buffer.go: %d lines, sha256 %s.)", strings.Count(file, "\n"), sha12([]byte(file)))
	}
	if img != nil {
		seen += fmt.Sprintf(" (I see an image of %d bytes, sha256 %s.)", len(img), sha12(img))
	}
	if e, ok := edits[q]; ok && file != "" {
		return "Here is the updated file:\n\n" + fenced(e(file)) + "\n\nDone." + seen
	}
	return fmt.Sprintf("About %q: noted.%s", q, seen)
}

// step is one turn of a naive client.
type step struct {
	question string
	// discard: the client does not apply the model's edit and re-sends
	// the file it had.
	discard bool
	// handEdit, when set, is an edit the user makes before asking.
	handEdit func(string) string
	// undo, when positive, takes the file back to what was sent in that
	// (1-based) turn before asking.
	undo int
	// image attaches testImage to the user turn.
	image bool
	// noFile sends the question without the file.
	noFile bool
}

// turnResult is what one turn of a session sent and got.
type turnResult struct {
	sent   []*genai.Content
	answer string
	chunks []string
	usage  *genai.GenerateContentResponseUsageMetadata
	report string
}

// session is the outcome of playing steps against one base URL.
type session struct {
	turns []turnResult
	// versions lists every distinct file version the client or the model
	// produced, in order of appearance.
	versions []string
}

// play runs the naive client: the whole history is re-sent every turn and
// each user turn holds the current file in a fence.
func play(t *testing.T, c *genai.Client, model string, steps []step, stream bool) session {
	t.Helper()
	var s session
	addVersion := func(v string) {
		for _, o := range s.versions {
			if o == v {
				return
			}
		}
		s.versions = append(s.versions, v)
	}
	file := bufferGo
	addVersion(file)
	var history []*genai.Content
	var sentFiles []string
	for i, st := range steps {
		if st.undo > 0 {
			file = sentFiles[st.undo-1]
		}
		if st.handEdit != nil {
			file = st.handEdit(file)
			addVersion(file)
		}
		sentFiles = append(sentFiles, file)
		var parts []*genai.Part
		if st.image {
			parts = append(parts, genai.NewPartFromBytes(testImage(), "image/png"))
		}
		text := st.question
		if !st.noFile {
			text = "Here is my current file:\n\n" + fenced(file) + "\n\n" + st.question
		}
		parts = append(parts, genai.NewPartFromText(text))
		contents := append(append([]*genai.Content(nil), history...), genai.NewContentFromParts(parts, genai.RoleUser))
		r := turnResult{sent: contents}
		if stream {
			var sb strings.Builder
			for ch, err := range c.Models.GenerateContentStream(t.Context(), model, contents, nil) {
				if err != nil {
					t.Fatalf("turn %d: GenerateContentStream: %v", i+1, err)
				}
				r.chunks = append(r.chunks, ch.Text())
				sb.WriteString(ch.Text())
				r.usage = ch.UsageMetadata
				if h := ch.SDKHTTPResponse; h != nil {
					r.report = h.Headers.Get(reportHdr)
				}
			}
			r.answer = sb.String()
		} else {
			resp, err := c.Models.GenerateContent(t.Context(), model, contents, nil)
			if err != nil {
				t.Fatalf("turn %d: GenerateContent: %v", i+1, err)
			}
			r.answer, r.usage = resp.Text(), resp.UsageMetadata
			if h := resp.SDKHTTPResponse; h != nil {
				r.report = h.Headers.Get(reportHdr)
			}
		}
		if edited := lastFence(r.answer); edited != "" {
			addVersion(edited)
			if !st.discard {
				file = edited
			}
		}
		history = append(contents, genai.NewContentFromText(r.answer, genai.RoleModel))
		s.turns = append(s.turns, r)
	}
	return s
}

// refRE matches the proxy's references (rewrite package doc).
var refRE = regexp.MustCompile(`\[(unchanged|superseded): [^\[\]\n]* sha256:([0-9a-f]{12}), [^\[\]\n]*\]|\[same (\S+) sha256:([0-9a-f]{12}) as [^\[\]\n]*\]`)

// ref is one reference found in upstream text.
type ref struct {
	kind, hash string
}

// span is a replaced piece of the client's text and its reference.
type span struct {
	ref  ref
	text string
}

// replacedSpans explains got (upstream text) as sent (client text) with
// some spans replaced by references: the text between references must be
// the client's text verbatim, and each replaced span must hash to the
// prefix its reference names. It returns the spans, or an error.
func replacedSpans(sent, got string) ([]span, error) {
	locs := refRE.FindAllStringSubmatchIndex(got, -1)
	var lits []string
	var refs []ref
	prev := 0
	for _, l := range locs {
		lits = append(lits, got[prev:l[0]])
		if l[2] >= 0 {
			refs = append(refs, ref{got[l[2]:l[3]], got[l[4]:l[5]]})
		} else {
			refs = append(refs, ref{"same", got[l[8]:l[9]]})
		}
		prev = l[1]
	}
	lits = append(lits, got[prev:])
	var solve func(i, pos int) ([]span, bool)
	solve = func(i, pos int) ([]span, bool) {
		if !strings.HasPrefix(sent[pos:], lits[i]) {
			return nil, false
		}
		pos += len(lits[i])
		if i == len(refs) {
			return nil, pos == len(sent)
		}
		next := lits[i+1]
		try := func(q int) ([]span, bool) {
			if q < pos || sha12([]byte(sent[pos:q])) != refs[i].hash {
				return nil, false
			}
			rest, ok := solve(i+1, q)
			return append([]span{{refs[i], sent[pos:q]}}, rest...), ok
		}
		if i+1 == len(refs) { // the last literal ends the text
			return try(len(sent) - len(next))
		}
		for q := pos; q <= len(sent); q++ {
			j := strings.Index(sent[q:], next)
			if j < 0 {
				break
			}
			q += j
			if next == "" && q < len(sent) && sent[q] != '\n' && (q == 0 || sent[q-1] != '\n') {
				continue
			}
			if out, ok := try(q); ok {
				return out, true
			}
		}
		return nil, false
	}
	out, ok := solve(0, 0)
	if !ok {
		return nil, fmt.Errorf("upstream text is not the client's text with %d references to hashed spans", len(refs))
	}
	return out, nil
}

// checkUpstream checks the request the emulator received through the
// proxy for one turn against the contents the client sent: same turns and
// roles, the last one user; every difference is a reference whose hash
// matches the replaced span, and each replaced span is one copy of a known
// file version (or the repeated image); the active version of the file
// (the one in the last user turn) is present in full exactly once and no
// other version is present in full. It returns the number of references.
func checkUpstream(t *testing.T, turn int, sent []*genai.Content, got emulator.Received, versions []string) int {
	t.Helper()
	if got.Status != 200 {
		t.Fatalf("turn %d: emulator answered %d: %s", turn, got.Status, got.Error)
	}
	if len(got.Contents) != len(sent) {
		t.Fatalf("turn %d: upstream has %d contents, client sent %d", turn, len(got.Contents), len(sent))
	}
	active := ""
	for _, p := range sent[len(sent)-1].Parts {
		if f := lastFence(p.Text); f != "" {
			active = f
		}
	}
	refs := 0
	var upstream, client strings.Builder
	for i, sc := range sent {
		gc := got.Contents[i]
		if gc.Role != sc.Role || (gc.Role != "user" && gc.Role != "model") {
			t.Errorf("turn %d: content %d role %q, client sent %q", turn, i, gc.Role, sc.Role)
		}
		if len(gc.Parts) != len(sc.Parts) {
			t.Errorf("turn %d: content %d has %d parts upstream, %d sent", turn, i, len(gc.Parts), len(sc.Parts))
			continue
		}
		for j, sp := range sc.Parts {
			gp := gc.Parts[j]
			if sp.InlineData != nil {
				if gp.InlineData != nil {
					if string(gp.InlineData.Data) != string(sp.InlineData.Data) {
						t.Errorf("turn %d: content %d part %d: image bytes changed", turn, i, j)
					}
					continue
				}
				want := fmt.Sprintf("[same %s sha256:%s as ", sp.InlineData.MIMEType, sha12(sp.InlineData.Data))
				if !strings.HasPrefix(gp.Text, want) || !refRE.MatchString(gp.Text) {
					t.Errorf("turn %d: content %d part %d: image became %q, want a reference starting %q", turn, i, j, gp.Text, want)
				}
				refs++
				continue
			}
			client.WriteString(sp.Text + "\x00")
			upstream.WriteString(gp.Text + "\x00")
			if gp.Text == sp.Text {
				continue
			}
			spans, err := replacedSpans(sp.Text, gp.Text)
			if err != nil {
				t.Errorf("turn %d: content %d part %d: %v\nupstream text:\n%.600s", turn, i, j, err, gp.Text)
				continue
			}
			for _, s := range spans {
				refs++
				v, ok := copyOf(s.text, versions)
				switch {
				case !ok:
					t.Errorf("turn %d: content %d part %d: replaced span is no copy of buffer.go (%d bytes): %.200q", turn, i, j, len(s.text), s.text)
				case (v == active) != (s.ref.kind == "unchanged"):
					t.Errorf("turn %d: content %d part %d: %s reference for a copy of %s version", turn, i, j, s.ref.kind, map[bool]string{true: "the active", false: "an older"}[v == active])
				}
			}
		}
	}
	if active != "" {
		if n := strings.Count(upstream.String(), fenced(active)); n != 1 {
			t.Errorf("turn %d: active version of buffer.go present %d times upstream, want exactly 1", turn, n)
		}
	}
	for k, v := range versions {
		if v == active || strings.Count(client.String(), fenced(v)) == 0 {
			continue
		}
		if n := strings.Count(upstream.String(), fenced(v)); n != 0 {
			t.Errorf("turn %d: older version %d of buffer.go present %d times upstream, want 0 (compact_superseded)", turn, k+1, n)
		}
	}
	if len(got.Contents) > 0 && got.Contents[len(got.Contents)-1].Role != "user" {
		t.Errorf("turn %d: last upstream turn is %q, want user", turn, got.Contents[len(got.Contents)-1].Role)
	}
	return refs
}

// copyOf returns the file version whose fenced copy the replaced span s
// holds (plus at most a caption line of wrapper text).
func copyOf(s string, versions []string) (string, bool) {
	for _, v := range versions {
		if f := fenced(v); strings.Contains(s, f) && len(s)-len(f) < 100 {
			return v, true
		}
	}
	return "", false
}

// compareSessions checks that the client got the same answers with and
// without the proxy, that proxied responses carry X-Gemini-Proxy-Report,
// and that every upstream request through the proxy is a valid,
// deduplicated form of what the client sent. It returns the number of
// references per turn.
func compareSessions(t *testing.T, p pair, direct, proxied session) []int {
	t.Helper()
	if len(direct.turns) != len(proxied.turns) {
		t.Fatalf("%d turns through the proxy, %d direct", len(proxied.turns), len(direct.turns))
	}
	rec := testutil.GenerateRequests(p.proxied.emu.Received())
	if len(rec) != len(proxied.turns) {
		t.Fatalf("emulator received %d generate requests through the proxy, want %d", len(rec), len(proxied.turns))
	}
	var refs []int
	for i := range direct.turns {
		d, x := direct.turns[i], proxied.turns[i]
		if d.answer != x.answer {
			t.Errorf("turn %d: answer through the proxy differs:\n direct: %.300q\nproxied: %.300q", i+1, d.answer, x.answer)
		}
		if strings.Join(d.chunks, "\x00") != strings.Join(x.chunks, "\x00") {
			t.Errorf("turn %d: stream chunks through the proxy differ", i+1)
		}
		if d.report != "" {
			t.Errorf("turn %d: direct response has %s %q", i+1, reportHdr, d.report)
		}
		if !strings.HasPrefix(x.report, "bytes=") {
			t.Errorf("turn %d: proxied response %s = %q, want a report", i+1, reportHdr, x.report)
		}
		refs = append(refs, checkUpstream(t, i+1, x.sent, rec[i], proxied.versions))
	}
	return refs
}

// askSteps is a 10-turn ask-mode session: the same file in every turn.
var askSteps = []step{
	{question: "Explain what this file does."},
	{question: "What is the zero value of Buffer good for?"},
	{question: "Why does Grow panic with a negative count?"},
	{question: "How does ReadFrom decide how much to grow?"},
	{question: "Is Truncate safe after a Read?"},
	{question: "What does smallBufferSize control?"},
	{question: "When does tryGrowByReslice succeed?"},
	{question: "Why does UnreadRune need lastRead?"},
	{question: "Could WriteTo return a short write without an error?"},
	{question: "Summarise the invariants of Buffer."},
}

// editSteps is an edit-mode session: the model returns edited whole files;
// the client applies one, discards one, edits by hand and undoes.
var editSteps = []step{
	{question: "Explain what this file does."},
	{question: "Add a method Contains(c byte) bool to Buffer."},
	{question: "Is Grow safe with a negative n?"},
	{question: "Add a method Peek(n int) []byte to Buffer.", discard: true},
	{question: "Why does ReadFrom grow the buffer by MinRead?"},
	{question: "I reworded the comment of Len. Does it read well?", handEdit: func(f string) string {
		return strings.Replace(f, "// Len returns the number of bytes of the unread portion of the buffer;", "// Len reports how many bytes of the buffer are still unread;", 1)
	}},
	{question: "Add a method Last() (byte, bool) to Buffer."},
	{question: "I went back to the version before my comment change. Is it correct?", undo: 3},
	{question: "Summarise what we changed so far."},
	{question: "Anything else worth improving?"},
}

func runPair(t *testing.T, model string, steps []step, stream bool) (pair, session, session) {
	t.Helper()
	p := newPair(t, emulator.Options{Reply: scriptReply})
	direct, proxied := p.clients(t)
	d := play(t, direct, model, steps, stream)
	x := play(t, proxied, model, steps, stream)
	return p, d, x
}

func TestRewriteAskMode(t *testing.T) {
	t.Parallel()
	p, d, x := runPair(t, "gemini-2.5-flash", askSteps, false)
	refs := compareSessions(t, p, d, x)
	for i, n := range refs {
		if n != i { // turn k re-sends the file k-1 more times
			t.Errorf("turn %d: %d references upstream, want %d", i+1, n, i)
		}
	}
	if n := counterSum(t, p.proxied.reg, "gemini_proxy_rewrite_requests_total", map[string]string{"mode": "on", "outcome": "changed"}); n != 9 {
		t.Errorf("rewrite_requests_total{mode=on,outcome=changed} = %v, want 9", n)
	}
}

func TestRewriteAskModeStream(t *testing.T) {
	t.Parallel()
	p, d, x := runPair(t, "gemini-3-flash-preview", askSteps, true)
	refs := compareSessions(t, p, d, x)
	for i, n := range refs {
		if n != i {
			t.Errorf("turn %d: %d references upstream, want %d", i+1, n, i)
		}
	}
	last := len(d.turns) - 1
	if d.turns[last].usage.CandidatesTokenCount != x.turns[last].usage.CandidatesTokenCount {
		t.Errorf("final candidates tokens: direct %d, proxied %d", d.turns[last].usage.CandidatesTokenCount, x.turns[last].usage.CandidatesTokenCount)
	}
	if dp, xp := d.turns[last].usage.PromptTokenCount, x.turns[last].usage.PromptTokenCount; xp*3 > dp {
		t.Errorf("final prompt tokens through the proxy %d, direct %d: want at most a third", xp, dp)
	}
}

func TestRewriteEditMode(t *testing.T) {
	t.Parallel()
	p, d, x := runPair(t, "gemini-2.5-flash", editSteps, false)
	if len(x.versions) != 5 {
		t.Fatalf("session produced %d file versions, want 5 (original, hand edit, 3 model edits)", len(x.versions))
	}
	refs := compareSessions(t, p, d, x)
	if refs[len(refs)-1] < 10 {
		t.Errorf("last turn has %d references upstream, want at least 10", refs[len(refs)-1])
	}
	// The undo turn: its file is the one the model wrote in turn 2.
	if lastFence(x.turns[7].sent[len(x.turns[7].sent)-1].Parts[0].Text) != lastFence(x.turns[1].answer) {
		t.Error("undo turn does not re-send the version of turn 3")
	}
	rep := x.turns[len(x.turns)-1].report
	if !strings.Contains(rep, "superseded=") || !strings.Contains(rep, "unchanged=") {
		t.Errorf("last turn report %q, want superseded and unchanged references", rep)
	}
}

func TestReplacedSpans(t *testing.T) {
	file := strings.Repeat("line of code\n", 50)
	ref := "[unchanged: a.go sha256:" + sha12([]byte("```go a.go\n"+file+"```")) + ", identical to the copy in turn 1]"
	sent := "Here:\n\n```go a.go\n" + file + "```\n\nQuestion?"
	spans, err := replacedSpans(sent, "Here:\n\n"+ref+"\n\nQuestion?")
	if err != nil || len(spans) != 1 || spans[0].text != "```go a.go\n"+file+"```" || spans[0].ref.kind != "unchanged" {
		t.Errorf("replacedSpans = %+v, %v; want the fence", spans, err)
	}
	bad := []struct{ name, got string }{
		{"wrong hash", "Here:\n\n[unchanged: a.go sha256:000000000000, identical to the copy in turn 1]\n\nQuestion?"},
		{"text changed", "Here:\n\n" + ref + "\n\nQuestion!"},
		{"text dropped", "Here:\n\n" + ref},
		{"hash of other text", "Here:\n\n[superseded: a.go sha256:" + sha12([]byte(file)) + ", replaced by the version in turn 3]\n\nQuestion?"},
	}
	for _, tc := range bad {
		if spans, err := replacedSpans(sent, tc.got); err == nil {
			t.Errorf("%s: replacedSpans = %+v, want an error", tc.name, spans)
		}
	}
}
