package emulator

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
)

// genRequest is a validated generateContent request.
type genRequest struct {
	model        string
	contents     []Content
	system       *Content
	norm         map[string]any
	cache        *cachedContent
	maxOutput    int
	candidates   int
	includeThink bool
	hasBudget    bool
	budget       int // thinkingConfig.thinkingBudget, when hasBudget
	tools        toolSet
}

// modelMethod dispatches models/{m}:{method}.
func (s *Server) modelMethod(c *call, model, method string) {
	switch method {
	case "generateContent":
		s.generate(c, model, false)
	case "streamGenerateContent":
		s.generate(c, model, true)
	case "countTokens":
		s.countTokens(c, model)
	case "embedContent", "batchEmbedContents":
		s.embed(c, model, method)
	default:
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
	}
}

func isEmbedding(model string) bool { return strings.Contains(model, "embedding") }

func (s *Server) modelError(c *call, model, method string) *apiError {
	if c.vertex {
		p := "publishers/google/models/" + model
		if c.rest[0] == "projects" {
			p = strings.Join(c.rest[:4], "/") + "/" + p
		}
		return newError(404, fmt.Sprintf("Publisher Model `%s` was not found or your project does not have access to it. Please ensure you are using a valid model version. For more information, see: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions", p))
	}
	return errModelNotFound(model, c.version, method)
}

func (s *Server) generate(c *call, model string, stream bool) {
	mode, api := modeUnary, "generateContent"
	if stream {
		api, mode = "streamGenerateContent", modeArray
		if c.r.URL.Query().Get("alt") == "sse" {
			mode = modeSSE
		}
	}
	rec := Received{Method: c.r.Method, Path: c.r.URL.Path, RawQuery: c.r.URL.RawQuery, Header: c.r.Header.Clone(),
		API: api, Model: model, Stream: stream, SSE: mode == modeSSE, Vertex: c.vertex, KeyID: c.keyID}
	fail := func(e *apiError) {
		rec.Status, rec.Error = e.Code, e.Message
		s.record(rec)
		writeError(c.w, c.r, e, mode)
	}
	raw, v, e := readBody(c)
	rec.Body = raw
	if e != nil {
		fail(e)
		return
	}
	if h := c.r.Header.Get("X-Emulator-Script"); h != "" {
		if _, err := ParseScript(h); err != nil {
			fail(errInvalid("invalid X-Emulator-Script header: " + err.Error()))
			return
		}
	}
	if !s.models[model] || isEmbedding(model) {
		fail(s.modelError(c, model, api))
		return
	}
	norm, e := s.validator(c).message(v, msgGenerate, "")
	if e != nil {
		fail(e)
		return
	}
	req, e := s.parseGenerate(c, norm, model, "GenerateContentRequest")
	if req != nil {
		rec.Contents, rec.SystemInstruction = req.contents, req.system
		rec.CachedContent, _ = norm["cachedContent"].(string)
	}
	if e != nil {
		fail(e)
		return
	}
	rr := ReplyRequest{API: api, Model: model, Contents: req.contents, KeyID: c.keyID, Stream: stream, Functions: req.tools.names()}
	sys := req.system
	if req.cache != nil {
		rr.Contents = append(append([]Content(nil), req.cache.contents...), req.contents...)
		if sys == nil {
			sys = req.cache.system
		}
	}
	if sys != nil {
		rr.SystemInstruction = sys.Text()
	}
	reply := defaultReply(rr)
	if s.opts.Reply != nil {
		reply = s.opts.Reply(rr)
	}
	rec.Reply = reply
	plan := s.plan(c, req, reply, rr)
	rec.Usage = plan.usage
	rec.Status = 200
	s.record(rec)
	chunks := plan.chunks(stream, c.vertex, s.opts.StreamChunkBytes)
	if !stream {
		b, _ := marshalIndent(chunks[0])
		writeJSON(c.w, c.r, 200, append(b, '\n'))
		return
	}
	writeStream(c, mode, chunks)
}

func readBody(c *call) ([]byte, any, *apiError) {
	raw, err := readAll(c)
	if err != nil {
		return raw, nil, err
	}
	v, e := decodeJSON(raw)
	return raw, v, e
}

// parseGenerate applies the semantic checks of a GenerateContentRequest.
// where is the message name used in error texts.
func (s *Server) parseGenerate(c *call, norm map[string]any, model, where string) (*genRequest, *apiError) {
	req := &genRequest{model: model, norm: norm, candidates: 1, tools: parseTools(norm)}
	contents, _ := norm["contents"].([]any)
	req.contents = toContents(contents)
	if si, ok := norm["systemInstruction"].(map[string]any); ok {
		sc := toContent(si)
		req.system = &sc
	}
	if len(contents) == 0 {
		return req, errInvalid(fmt.Sprintf("* %s.contents: contents is not specified\n", where))
	}
	if e := s.checkContents(c, req.contents, where, "contents"); e != nil {
		return req, e
	}
	if req.system != nil {
		if e := s.checkParts(c, req.system.Parts, where, "system_instruction"); e != nil {
			return req, e
		}
	}
	if name, ok := norm["cachedContent"].(string); ok && name != "" {
		_, hasSI := norm["systemInstruction"]
		_, hasTools := norm["tools"]
		_, hasTC := norm["toolConfig"]
		if hasSI || hasTools || hasTC {
			return req, errInvalid("Tool config, tools and system instruction should not be set in the request when using cached content.")
		}
		cc, e := s.lookupCache(c, name)
		if e != nil {
			return req, e
		}
		if cc.model != model {
			return req, errInvalid(fmt.Sprintf("Model used by GenerateContent request (models/%s) and CachedContent (models/%s) has to be the same.", model, cc.model))
		}
		req.cache = cc
	}
	if strings.HasPrefix(model, "gemini-3") {
		if e := checkSignatures(req.contents); e != nil {
			return req, e
		}
	}
	if gc, ok := norm["generationConfig"].(map[string]any); ok {
		_, presence := gc["presencePenalty"]
		_, frequency := gc["frequencyPenalty"]
		if (presence || frequency) && model == "gemini-2.5-pro" { // recorded on 2.5 Pro only
			return req, errInvalid("Penalty is not enabled for models/" + model)
		}
		if v, ok := gc["maxOutputTokens"]; ok {
			req.maxOutput = toInt(v)
			if req.maxOutput < 0 {
				return req, errInvalid("max_output_tokens must be positive.")
			}
		}
		if v, ok := gc["candidateCount"]; ok {
			req.candidates = toInt(v)
			if req.candidates < 1 || req.candidates > 8 {
				return req, errInvalid("Only values between 1 and 8 are supported for candidate_count.")
			}
		}
		if tc, ok := gc["thinkingConfig"].(map[string]any); ok {
			req.includeThink, _ = tc["includeThoughts"].(bool)
			_, hasBudget := tc["thinkingBudget"]
			_, hasLevel := tc["thinkingLevel"]
			if hasBudget && hasLevel {
				return req, errInvalid("You can only set only one of thinking budget and thinking level.")
			}
			if hasBudget && toInt(tc["thinkingBudget"]) == 0 && strings.Contains(model, "pro") {
				return req, errInvalid("Budget 0 is invalid. This model only works in thinking mode.")
			}
			req.hasBudget, req.budget = hasBudget, toInt(tc["thinkingBudget"])
			// Recorded on gemini-3.1-pro-preview; the documentation offers
			// MINIMAL on Flash models only.
			if lvl, _ := tc["thinkingLevel"].(string); lvl == "MINIMAL" && strings.HasPrefix(model, "gemini-3") && strings.Contains(model, "-pro") {
				return req, errInvalid("Thinking level MINIMAL is not supported for this model. Please retry with other thinking level.")
			}
		}
	}
	return req, nil
}

// checkContents validates roles and parts of a contents list.
func (s *Server) checkContents(c *call, cs []Content, where, field string) *apiError {
	for i, ct := range cs {
		if ct.Role != "" && ct.Role != "user" && ct.Role != "model" {
			return errInvalid("Please use a valid role: user, model.")
		}
		if e := s.checkParts(c, ct.Parts, where, fmt.Sprintf("%s[%d]", field, i)); e != nil {
			return e
		}
	}
	return nil
}

func (s *Server) checkParts(c *call, ps []Part, where, path string) *apiError {
	if len(ps) == 0 {
		return errInvalid(fmt.Sprintf("* %s.%s.parts: contents.parts must not be empty.\n", where, path))
	}
	filled := false
	for _, p := range ps {
		filled = filled || p.Kind() != "text" || p.Text != "" || len(p.ThoughtSignature) > 0
	}
	for j, p := range ps {
		// An empty string does not initialise the proto3 oneof, unless the
		// part carries a thought signature (the API itself emits those) or
		// another part of the content has data: the API accepted a model
		// turn [{"text":""}, {functionCall, thoughtSignature}] (recording
		// jsonarray-3-flash-after-functionresponse).
		if p.Kind() == "text" && p.Text == "" && len(p.ThoughtSignature) == 0 && !filled {
			return errInvalid(fmt.Sprintf("* %s.%s.parts[%d].data: required oneof field 'data' must have one initialized field\n", where, path, j))
		}
		if p.FileData != nil && !c.vertex {
			if id, ok := fileIDFromURI(p.FileData.FileURI); ok {
				if _, found := s.getFile(c.keyID, id); !found {
					return newError(403, fmt.Sprintf("You do not have permission to access the File %s or it may not exist.", id))
				}
			}
		}
	}
	return nil
}

// checkSignatures enforces the Gemini 3 rule: in the current turn (every
// model content after the last user content with standard, non
// functionResponse parts) the first functionCall part of each model content
// must carry a thoughtSignature.
func checkSignatures(cs []Content) *apiError {
	start := 0
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].Role == "model" {
			continue
		}
		standard := false
		for _, p := range cs[i].Parts {
			if p.FunctionResponse == nil {
				standard = true
			}
		}
		if standard {
			start = i + 1
			break
		}
	}
	for i := start; i < len(cs); i++ {
		if cs[i].Role != "model" {
			continue
		}
		for _, p := range cs[i].Parts {
			if p.FunctionCall == nil {
				continue
			}
			if len(p.ThoughtSignature) == 0 {
				return errInvalid(fmt.Sprintf("Function call `%s` in the `%d.` content block is missing a `thought_signature`. Learn more: https://ai.google.dev/gemini-api/docs/thought-signatures", p.FunctionCall.Name, i))
			}
			break
		}
	}
	return nil
}

// toContents converts validated contents to Content values.
func toContents(list []any) []Content {
	out := make([]Content, 0, len(list))
	for _, v := range list {
		m, _ := v.(map[string]any)
		out = append(out, toContent(m))
	}
	return out
}

func toContent(m map[string]any) Content {
	var c Content
	c.Role, _ = m["role"].(string)
	parts, _ := m["parts"].([]any)
	for _, pv := range parts {
		pm, _ := pv.(map[string]any)
		c.Parts = append(c.Parts, toPart(pm))
	}
	return c
}

func toPart(pm map[string]any) Part {
	var p Part
	if t, ok := pm["text"].(string); ok {
		p.Text = t
	}
	p.Thought, _ = pm["thought"].(bool)
	if sig, ok := pm["thoughtSignature"].(string); ok {
		p.ThoughtSignature, _ = decodeBase64(sig)
		if p.ThoughtSignature == nil {
			p.ThoughtSignature = []byte{}
		}
	}
	if b, ok := pm["inlineData"].(map[string]any); ok {
		data, _ := b["data"].(string)
		raw, _ := decodeBase64(data)
		mime, _ := b["mimeType"].(string)
		p.InlineData = &Blob{MIMEType: mime, Data: raw}
	}
	if fd, ok := pm["fileData"].(map[string]any); ok {
		mime, _ := fd["mimeType"].(string)
		uri, _ := fd["fileUri"].(string)
		p.FileData = &FileData{MIMEType: mime, FileURI: uri}
	}
	if fc, ok := pm["functionCall"].(map[string]any); ok {
		p.FunctionCall = &FunctionCall{}
		p.FunctionCall.ID, _ = fc["id"].(string)
		p.FunctionCall.Name, _ = fc["name"].(string)
		p.FunctionCall.Args, _ = fc["args"].(map[string]any)
	}
	if fr, ok := pm["functionResponse"].(map[string]any); ok {
		p.FunctionResponse = &FunctionResponse{}
		p.FunctionResponse.ID, _ = fr["id"].(string)
		p.FunctionResponse.Name, _ = fr["name"].(string)
		p.FunctionResponse.Response, _ = fr["response"].(map[string]any)
	}
	for _, k := range []string{"executableCode", "codeExecutionResult", "toolCall", "toolResponse"} {
		if o, ok := pm[k].(map[string]any); ok {
			p.OtherKind, p.Other = k, o
		}
	}
	return p
}

// defaultReply is a deterministic answer derived from the request.
func defaultReply(rr ReplyRequest) string {
	last := rr.LastUserText()
	sum := sha256.Sum256([]byte(last))
	return fmt.Sprintf("This is the Gemini API emulator answering as %s. "+
		"Your last message had %d characters and its SHA-256 starts with %s. "+
		"The conversation so far has %d contents. "+
		"The same request always gets the same answer, and a streamed answer arrives in several chunks.",
		rr.Model, len([]rune(last)), hex.EncodeToString(sum[:4]), len(rr.Contents))
}

// replyPlan is the computed answer and its accounting.
type replyPlan struct {
	s       *Server
	model   string // modelVersion: the concrete model answering
	tr      traits
	text    string // after maxOutputTokens truncation
	thought string // the thought summary; a part only when showThought
	// showThought reports whether the request asked for thought summaries.
	showThought bool
	thoughts    int // thoughtsTokenCount
	calls       []FunctionCall
	code        *codeRun
	grounding   *groundingJSON
	urlContext  *urlContextJSON
	finish      string
	blocked     string // promptFeedback.blockReason
	n           int
	prompt      modalityCounts
	cached      modalityCounts
	toolUse     modalityCounts
	usage       Usage
	responseID  string
	created     string
}

// thinks reports whether the request's model thinks: thinking models do,
// unless a thinkingBudget of 0 turns it off (pro models refuse 0).
func (req *genRequest) thinks(t traits) bool {
	return t.thinking && !(req.hasBudget && req.budget == 0)
}

// plan computes the answer, usage, truncation and implicit caching for a
// request. Function calls, code execution and grounding follow the
// request's tools and the script (see Script and doc.go, "Answers").
func (s *Server) plan(c *call, req *genRequest, reply string, rr ReplyRequest) *replyPlan {
	p := &replyPlan{s: s, model: modelVersion(req.model), tr: traitsOf(req.model), n: req.candidates, finish: "STOP",
		responseID: s.responseID(), created: s.timestamp(s.now()), showThought: req.includeThink}
	fileText := func(uri string) (string, string, bool) { return s.fileText(c.keyID, uri) }
	base := modalityCounts{}
	if req.system != nil {
		base.add(contentsTokens([]Content{*req.system}, fileText))
		base["TEXT"]-- // no role token for the system instruction
	}
	base["TEXT"] += jsonTokens(req.norm["tools"]) + jsonTokens(req.norm["toolConfig"])
	p.prompt = modalityCounts{}
	p.prompt.add(base)
	p.prompt.add(contentsTokens(req.contents, fileText))
	if req.cache != nil {
		p.cached = req.cache.counts
		p.prompt.add(req.cache.counts)
	} else if !c.vertex {
		p.cached = s.implicitHit(c.keyID, req, base, fileText)
	}
	var sc Script
	if h := c.r.Header.Get("X-Emulator-Script"); h != "" {
		sc, _ = ParseScript(h) // validated in generate
	} else if s.opts.Script != nil {
		sc = s.opts.Script(rr)
	}
	if sc.BlockReason != "" {
		p.blocked = sc.BlockReason
		p.finish = ""
		p.usage = Usage{PromptTokenCount: p.prompt.total(), CachedContentTokenCount: p.cached.total(), TotalTokenCount: p.prompt.total()}
		return p
	}
	if req.thinks(p.tr) {
		p.thought = thoughtSummary(req.model)
		p.thoughts = CountTokens(p.thought)
	}
	query := rr.LastUserText()
	p.calls = req.tools.calls(sc)
	for i := range p.calls {
		if p.tr.gen3 && p.calls[i].ID == "" {
			p.calls[i].ID = callID(fmt.Sprintf("%s/%d/%s/%s", p.model, i, p.calls[i].Name, query))
		}
	}
	if len(p.calls) == 0 {
		p.text = reply
		switch {
		case req.tools.codeExec:
			run := codeExecution(p.model, query, p.tr)
			p.code = &run
		case req.tools.fileSearch:
			run := fileSearchCode(p.model, query, p.tr)
			p.code = &run
		}
	}
	if f := sc.FinishReason; f != "" && f != "STOP" && f != "MAX_TOKENS" {
		p.finish, p.text, p.calls, p.code = f, "", nil, nil
	}
	if req.maxOutput > 0 && p.finish == "STOP" {
		budget := req.maxOutput
		if p.thoughts > budget {
			p.thought = truncateTokens(p.thought, budget)
			p.thoughts = budget
		}
		perCandidate := (budget - p.thoughts) / p.n
		if len(p.calls) == 0 && CountTokens(p.text) > perCandidate {
			p.text = truncateTokens(p.text, perCandidate)
			p.finish = "MAX_TOKENS"
		}
	}
	if p.finish == "STOP" || p.finish == "MAX_TOKENS" {
		p.grounding, p.urlContext = req.tools.grounding(query, p.text)
	}
	p.toolUse = modalityCounts{}
	if p.code != nil {
		p.toolUse["TEXT"] += CountTokens(p.code.code) + CountTokens(p.code.output)
	}
	if p.grounding != nil {
		p.toolUse["TEXT"] += jsonTokens(p.grounding.GroundingChunks) + 1
	}
	if p.toolUse.total() == 0 {
		p.toolUse = nil
	}
	p.usage = Usage{
		PromptTokenCount:        p.prompt.total(),
		CachedContentTokenCount: p.cached.total(),
		CandidatesTokenCount:    p.n * p.candidateTokens(len(p.text)),
		ThoughtsTokenCount:      p.thoughts,
		ToolUsePromptTokenCount: p.toolUse.total(),
	}
	p.usage.TotalTokenCount = p.usage.PromptTokenCount + p.usage.CandidatesTokenCount + p.usage.ThoughtsTokenCount + p.usage.ToolUsePromptTokenCount
	return p
}

// candidateTokens is the output tokens of one candidate up to byte textEnd
// of its text: function calls, the executed code and the text.
func (p *replyPlan) candidateTokens(textEnd int) int {
	n := CountTokens(p.text[:textEnd])
	for _, fc := range p.calls {
		n += CountTokens(fc.Name) + jsonTokens(fc.Args)
	}
	if p.code != nil {
		n += CountTokens(p.code.code)
	}
	return n
}

func (s *Server) responseID() string { return base64URLID(s.nextID("response", 22)) }

// truncateTokens returns the longest prefix of text, cut at a run boundary,
// that costs at most n tokens.
func truncateTokens(text string, n int) string {
	if n <= 0 {
		return ""
	}
	cut := 0
	for i, r := range text {
		if i > 0 && (unicode.IsSpace(r) || unicode.IsPunct(r)) {
			if CountTokens(text[:i]) > n {
				break
			}
			cut = i
		}
	}
	if CountTokens(text) <= n {
		return text
	}
	return text[:cut]
}

// Response JSON, in the API's field order.
type genResponse struct {
	Candidates     []candidate     `json:"candidates,omitempty"`
	PromptFeedback *promptFeedback `json:"promptFeedback,omitempty"`
	UsageMetadata  *usageJSON      `json:"usageMetadata,omitempty"`
	ModelVersion   string          `json:"modelVersion,omitempty"`
	CreateTime     string          `json:"createTime,omitempty"`
	ResponseID     string          `json:"responseId,omitempty"`
}

type promptFeedback struct {
	BlockReason string `json:"blockReason"`
}

type candidate struct {
	Content            respContent     `json:"content"`
	FinishReason       string          `json:"finishReason,omitempty"`
	AvgLogprobs        float64         `json:"avgLogprobs,omitempty"`
	Index              *int            `json:"index,omitempty"`
	SafetyRatings      []safetyRating  `json:"safetyRatings,omitempty"`
	GroundingMetadata  *groundingJSON  `json:"groundingMetadata,omitempty"`
	URLContextMetadata *urlContextJSON `json:"urlContextMetadata,omitempty"`
	FinishMessage      string          `json:"finishMessage,omitempty"`
}

type safetyRating struct {
	Category    string `json:"category"`
	Probability string `json:"probability"`
	Blocked     bool   `json:"blocked,omitempty"`
}

type respContent struct {
	Parts []respPart `json:"parts,omitempty"`
	Role  string     `json:"role,omitempty"`
}

type respPart struct {
	Text                *string     `json:"text,omitempty"`
	Thought             bool        `json:"thought,omitempty"`
	FunctionCall        *respCall   `json:"functionCall,omitempty"`
	ExecutableCode      *execCode   `json:"executableCode,omitempty"`
	CodeExecutionResult *execResult `json:"codeExecutionResult,omitempty"`
	ThoughtSignature    string      `json:"thoughtSignature,omitempty"`
}

type respCall struct {
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
	ID   string         `json:"id,omitempty"`
}

type execCode struct {
	Language string `json:"language"`
	Code     string `json:"code"`
	ID       string `json:"id,omitempty"`
}

type execResult struct {
	Outcome string `json:"outcome"`
	Output  string `json:"output"`
	ID      string `json:"id,omitempty"`
}

func textPart(s string) respPart { return respPart{Text: &s} }

type usageJSON struct {
	PromptTokenCount           int              `json:"promptTokenCount,omitempty"`
	CandidatesTokenCount       int              `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount            int              `json:"totalTokenCount,omitempty"`
	CachedContentTokenCount    int              `json:"cachedContentTokenCount,omitempty"`
	PromptTokensDetails        []modalityTokens `json:"promptTokensDetails,omitempty"`
	CacheTokensDetails         []modalityTokens `json:"cacheTokensDetails,omitempty"`
	CandidatesTokensDetails    []modalityTokens `json:"candidatesTokensDetails,omitempty"`
	ToolUsePromptTokenCount    int              `json:"toolUsePromptTokenCount,omitempty"`
	ToolUsePromptTokensDetails []modalityTokens `json:"toolUsePromptTokensDetails,omitempty"`
	ThoughtsTokenCount         int              `json:"thoughtsTokenCount,omitempty"`
	ServiceTier                string           `json:"serviceTier,omitempty"`
	TrafficType                string           `json:"trafficType,omitempty"`
}

// usage kinds of a stream chunk.
const (
	usageFull       = iota // cumulative counts
	usagePromptOnly        // prompt and total only (chunks before the model wrote, legacy models' non-final chunks)
)

func (p *replyPlan) usageJSON(candidates int, kind int, toolUse, final, vertex bool) *usageJSON {
	u := &usageJSON{
		PromptTokenCount:        p.usage.PromptTokenCount,
		CachedContentTokenCount: p.usage.CachedContentTokenCount,
		PromptTokensDetails:     p.prompt.details(),
	}
	if p.cached != nil {
		u.CacheTokensDetails = p.cached.details()
	}
	if kind == usageFull {
		u.CandidatesTokenCount = candidates
		u.ThoughtsTokenCount = p.usage.ThoughtsTokenCount
		if toolUse && p.toolUse != nil {
			u.ToolUsePromptTokenCount = p.toolUse.total()
			u.ToolUsePromptTokensDetails = p.toolUse.details()
		}
		if p.tr.legacy && final && candidates > 0 {
			u.CandidatesTokensDetails = []modalityTokens{{Modality: "TEXT", TokenCount: candidates}}
		}
	}
	u.TotalTokenCount = u.PromptTokenCount + u.CandidatesTokenCount + u.ThoughtsTokenCount + u.ToolUsePromptTokenCount
	switch {
	case vertex:
		u.TrafficType = "ON_DEMAND"
	case !p.tr.legacy:
		u.ServiceTier = "standard"
	}
	return u
}

// chunkStep is one stream chunk of an answer (a unary answer joins them).
type chunkStep struct {
	parts   []respPart
	textEnd int  // bytes of the text written up to and including this step
	cand    int  // output tokens of one candidate up to and including this step
	usage   int  // usageFull or usagePromptOnly
	toolUse bool // the server-side tools have run
	noIndex bool // the candidate has no index (the code result chunk)
}

// steps lays the answer out in stream order: thought summary, code
// execution, function calls or the text in pieces of about size bytes,
// and on Gemini 3 streams a trailing empty text part. Thought signatures
// go where the model family puts them: Gemini 3 on the first function
// call, every executable code part and the last part (in streams the
// trailing one); Gemini 2.5 on the first function call, or on the first
// text part when thought summaries were asked for.
func (p *replyPlan) steps(stream bool, size int) []chunkStep {
	var out []chunkStep
	sig := func(what string) string { return signature(p.model, what) }
	if p.showThought && p.thought != "" {
		out = append(out, chunkStep{parts: []respPart{{Text: &p.thought, Thought: true}}})
	}
	toolUse := false
	if p.code != nil {
		ec := respPart{ExecutableCode: &execCode{Language: "PYTHON", Code: p.code.code, ID: p.code.id}}
		if p.tr.gen3 {
			ec.ThoughtSignature = sig(p.code.code)
		}
		ct := CountTokens(p.code.code)
		out = append(out, chunkStep{parts: []respPart{ec}, cand: ct})
		if !p.code.noResult {
			out = append(out, chunkStep{parts: []respPart{{CodeExecutionResult: &execResult{Outcome: "OUTCOME_OK", Output: p.code.output, ID: p.code.id}}},
				usage: usagePromptOnly, noIndex: true, cand: ct})
		}
		toolUse = true
	}
	if p.grounding != nil {
		toolUse = true
	}
	switch {
	case len(p.calls) > 0:
		var parts []respPart
		for i, fc := range p.calls {
			args := fc.Args
			if args == nil {
				args = map[string]any{}
			}
			part := respPart{FunctionCall: &respCall{Name: fc.Name, Args: args, ID: fc.ID}}
			if i == 0 && p.tr.thinking {
				part.ThoughtSignature = sig(fc.Name + "/" + fc.ID)
			}
			parts = append(parts, part)
		}
		out = append(out, chunkStep{parts: parts, toolUse: toolUse, cand: p.candidateTokens(0)})
	case p.text != "":
		pieces := []string{p.text}
		if stream {
			pieces = splitText(p.text, size)
		}
		end := 0
		for i, pc := range pieces {
			end += len(pc)
			part := textPart(pc)
			if i == 0 && !p.tr.gen3 && p.tr.thinking && p.showThought {
				part.ThoughtSignature = sig(p.text)
			}
			out = append(out, chunkStep{parts: []respPart{part}, textEnd: end, toolUse: toolUse, cand: p.candidateTokens(end)})
		}
	case p.finish == "STOP" && p.code == nil:
		// An empty reply: one empty text part.
		out = append(out, chunkStep{parts: []respPart{textPart("")}, toolUse: toolUse, cand: p.candidateTokens(0)})
	}
	if len(out) == 0 || p.text == "" && len(p.calls) == 0 && p.finish != "STOP" {
		// No parts (MAX_TOKENS spent on thinking, SAFETY): content with
		// the role only.
		out = append(out, chunkStep{toolUse: toolUse, textEnd: len(p.text), cand: p.candidateTokens(len(p.text))})
	}
	if p.tr.gen3 && stream && p.finish != "SAFETY" {
		tail := chunkStep{parts: []respPart{textPart("")}, textEnd: len(p.text), toolUse: toolUse,
			cand: p.candidateTokens(len(p.text))}
		if len(p.calls) == 0 {
			tail.parts[0].ThoughtSignature = sig(p.text)
		}
		out = append(out, tail)
	} else if p.tr.gen3 && len(p.calls) == 0 {
		last := &out[len(out)-1]
		if n := len(last.parts); n > 0 && last.parts[n-1].ThoughtSignature == "" {
			last.parts[n-1].ThoughtSignature = sig(p.text)
		}
	}
	return out
}

// chunks renders the answer: one response for unary calls, several for
// streams (see steps), usage cumulative on every chunk but the ones
// without model output (Vertex: usage on the last chunk only),
// finishReason and grounding on the last.
func (p *replyPlan) chunks(stream, vertex bool, size int) []genResponse {
	if p.blocked != "" {
		r := genResponse{PromptFeedback: &promptFeedback{BlockReason: p.blocked}, ModelVersion: p.model, ResponseID: p.responseID}
		r.UsageMetadata = p.usageJSON(0, usagePromptOnly, false, true, vertex)
		if vertex {
			r.CreateTime = p.created
		}
		return []genResponse{r}
	}
	steps := p.steps(stream, size)
	if !stream {
		joined := chunkStep{textEnd: len(p.text), cand: p.candidateTokens(len(p.text))}
		for _, st := range steps {
			joined.parts = append(joined.parts, st.parts...)
			joined.toolUse = joined.toolUse || st.toolUse
		}
		joined.toolUse = joined.toolUse || p.toolUse != nil
		steps = []chunkStep{joined}
	}
	var out []genResponse
	for i, st := range steps {
		last := i == len(steps)-1
		cands := make([]candidate, p.n)
		for j := range cands {
			cd := candidate{Content: respContent{Parts: append([]respPart(nil), st.parts...), Role: "model"}}
			if !vertex && !st.noIndex {
				idx := j
				cd.Index = &idx
			}
			if last {
				cd.FinishReason = p.finish
				if len(p.calls) > 0 && p.tr.thinking && !p.tr.gen3 {
					cd.FinishMessage = "Model generated function call(s)."
				}
				cd.GroundingMetadata, cd.URLContextMetadata = p.grounding, p.urlContext
				if p.finish == "SAFETY" {
					cd.Content = respContent{}
					cd.SafetyRatings = []safetyRating{
						{Category: "HARM_CATEGORY_HATE_SPEECH", Probability: "LOW", Blocked: true},
						{Category: "HARM_CATEGORY_DANGEROUS_CONTENT", Probability: "NEGLIGIBLE"},
						{Category: "HARM_CATEGORY_HARASSMENT", Probability: "NEGLIGIBLE"},
						{Category: "HARM_CATEGORY_SEXUALLY_EXPLICIT", Probability: "NEGLIGIBLE"},
					}
				}
				if p.tr.legacy && !stream && len(st.parts) > 0 {
					cd.AvgLogprobs = avgLogprobs(p.text)
				}
			}
			cands[j] = cd
		}
		r := genResponse{Candidates: cands, ModelVersion: p.model, ResponseID: p.responseID}
		kind := st.usage
		if p.tr.legacy && stream && !last {
			kind = usagePromptOnly
		}
		cand := p.n * st.cand
		switch {
		case vertex && !last:
			r.CreateTime = p.created
			r.UsageMetadata = &usageJSON{TrafficType: "ON_DEMAND"}
		case vertex:
			r.CreateTime = p.created
			r.UsageMetadata = p.usageJSON(p.usage.CandidatesTokenCount, usageFull, true, true, true)
		default:
			r.UsageMetadata = p.usageJSON(cand, kind, st.toolUse, last, false)
		}
		out = append(out, r)
	}
	return out
}

// splitText cuts text into pieces of about size bytes, after whitespace
// where possible. It always returns at least one piece.
func splitText(text string, size int) []string {
	if len(text) <= size {
		return []string{text}
	}
	var out []string
	for len(text) > size {
		cut := strings.LastIndexAny(text[:size], " \n\t")
		if cut <= 0 {
			cut = size
			for cut < len(text) && !utf8Start(text[cut]) {
				cut++
			}
		} else {
			cut++
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
	if text != "" {
		out = append(out, text)
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// writeStream writes chunks as SSE events or as one JSON array, honouring
// the call's chunk delay and disconnect fault. A JSON array is framed as
// recorded, "[" obj "\n" then ",\r\n" obj "\n" per further chunk and a
// final "]", and gzip-compressed (flushed per chunk) when the client
// accepts gzip; SSE events are "data: " obj "\r\n\r\n", uncompressed.
func writeStream(c *call, mode streamMode, chunks []genResponse) {
	h := c.w.Header()
	if mode == modeSSE {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Content-Disposition", "attachment")
	} else {
		h.Set("Content-Type", "application/json; charset=UTF-8")
	}
	var w io.Writer = c.w
	var zw *gzip.Writer
	if mode == modeArray && acceptsGzip(c.r) {
		h.Set("Content-Encoding", "gzip")
		zw = gzip.NewWriter(c.w)
		w = zw
	}
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	flush := func() {
		if zw != nil {
			_ = zw.Flush()
		}
		_ = rc.Flush()
	}
	for i, ch := range chunks {
		if i > 0 && c.fault.ChunkDelay > 0 && !sleepCtx(c.r.Context(), c.fault.ChunkDelay) {
			return
		}
		var b []byte
		if mode == modeSSE {
			b = append(append([]byte("data: "), marshalLine(ch)...), "\r\n\r\n"...)
		} else {
			obj, _ := marshalIndent(ch)
			if i == 0 {
				b = append([]byte("["), obj...)
			} else {
				b = append([]byte(",\r\n"), obj...)
			}
			b = append(b, '\n')
		}
		if _, err := w.Write(b); err != nil {
			return
		}
		flush()
		if n := c.fault.DisconnectAfterChunks; n > 0 && i+1 >= n {
			panic(http.ErrAbortHandler)
		}
	}
	if c.fault.DisconnectAfterChunks > 0 {
		panic(http.ErrAbortHandler)
	}
	if mode == modeArray {
		_, _ = w.Write([]byte("]"))
	}
	if zw != nil {
		_ = zw.Close()
	}
}

// countTokens serves models/{m}:countTokens.
func (s *Server) countTokens(c *call, model string) {
	rec := Received{Method: c.r.Method, Path: c.r.URL.Path, RawQuery: c.r.URL.RawQuery, Header: c.r.Header.Clone(),
		API: "countTokens", Model: model, Vertex: c.vertex, KeyID: c.keyID}
	fail := func(e *apiError) {
		rec.Status, rec.Error = e.Code, e.Message
		s.record(rec)
		writeError(c.w, c.r, e, modeUnary)
	}
	raw, v, e := readBody(c)
	rec.Body = raw
	if e != nil {
		fail(e)
		return
	}
	if !s.models[model] {
		fail(s.modelError(c, model, "countTokens"))
		return
	}
	norm, e := s.validator(c).message(v, msgCountTokens, "")
	if e != nil {
		fail(e)
		return
	}
	fileText := func(uri string) (string, string, bool) { return s.fileText(c.keyID, uri) }
	_, hasContents := norm["contents"]
	gcr, hasGCR := norm["generateContentRequest"].(map[string]any)
	var counts, cached modalityCounts
	switch {
	case hasContents && hasGCR:
		fail(errInvalid("CountTokensRequest must have one of contents or generateContentRequest, not both."))
		return
	case hasGCR:
		if m, ok := gcr["model"].(string); ok && strings.TrimPrefix(m, "models/") != model {
			fail(errInvalid(fmt.Sprintf("* CountTokensRequest.generate_content_request.model: model %s does not match the request's model models/%s.\n", m, model)))
			return
		}
		req, e := s.parseGenerate(c, gcr, model, "CountTokensRequest.generate_content_request")
		if req != nil {
			rec.Contents, rec.SystemInstruction = req.contents, req.system
			rec.CachedContent, _ = gcr["cachedContent"].(string)
		}
		if e != nil {
			fail(e)
			return
		}
		counts = modalityCounts{}
		if req.system != nil {
			counts.add(contentsTokens([]Content{*req.system}, fileText))
			counts["TEXT"]--
		}
		counts["TEXT"] += jsonTokens(gcr["tools"]) + jsonTokens(gcr["toolConfig"])
		counts.add(contentsTokens(req.contents, fileText))
		if req.cache != nil {
			cached = req.cache.counts
			counts.add(cached)
		}
	default:
		list, _ := norm["contents"].([]any)
		cs := toContents(list)
		rec.Contents = cs
		if len(cs) == 0 {
			fail(errInvalid("* CountTokensRequest.contents: contents is not specified\n"))
			return
		}
		if e := s.checkContents(c, cs, "CountTokensRequest", "contents"); e != nil {
			fail(e)
			return
		}
		counts = contentsTokens(cs, fileText)
		if si, ok := norm["systemInstruction"].(map[string]any); ok { // Vertex only
			sc := toContent(si)
			rec.SystemInstruction = &sc
			counts.add(contentsTokens([]Content{sc}, fileText))
			counts["TEXT"]--
		}
		counts["TEXT"] += jsonTokens(norm["tools"])
	}
	type resp struct {
		TotalTokens             int              `json:"totalTokens"`
		CachedContentTokenCount int              `json:"cachedContentTokenCount,omitempty"`
		PromptTokensDetails     []modalityTokens `json:"promptTokensDetails,omitempty"`
		CacheTokensDetails      []modalityTokens `json:"cacheTokensDetails,omitempty"`
	}
	out := resp{TotalTokens: counts.total(), CachedContentTokenCount: cached.total(), PromptTokensDetails: counts.details(), CacheTokensDetails: cached.details()}
	rec.Status = 200
	rec.Usage = Usage{PromptTokenCount: out.TotalTokens, CachedContentTokenCount: out.CachedContentTokenCount, TotalTokenCount: out.TotalTokens}
	s.record(rec)
	b, _ := marshalIndent(out)
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}
