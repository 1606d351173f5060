package emulator

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
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
	rr := ReplyRequest{API: api, Model: model, Contents: req.contents, KeyID: c.keyID, Stream: stream}
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
	plan := s.plan(c, req, reply)
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
	req := &genRequest{model: model, norm: norm, candidates: 1}
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
	for j, p := range ps {
		// An empty string does not initialise the proto3 oneof, unless the
		// part carries a thought signature (the API itself emits those).
		if p.Kind() == "text" && p.Text == "" && len(p.ThoughtSignature) == 0 {
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
	s          *Server
	model      string
	text       string // after maxOutputTokens truncation
	thought    string
	finish     string
	n          int
	signature  string
	prompt     modalityCounts
	cached     modalityCounts
	usage      Usage
	responseID string
	created    string
}

// plan computes usage, truncation and implicit caching for a request.
func (s *Server) plan(c *call, req *genRequest, reply string) *replyPlan {
	p := &replyPlan{s: s, model: req.model, n: req.candidates, finish: "STOP",
		responseID: s.responseID(), created: s.timestamp(s.now())}
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
	if req.includeThink {
		p.thought = fmt.Sprintf("**Considering the request**\n\nThe emulator for %s is preparing a deterministic answer.", req.model)
	}
	thoughts := CountTokens(p.thought)
	p.text = reply
	if req.maxOutput > 0 {
		budget := req.maxOutput
		if thoughts > budget {
			p.thought = truncateTokens(p.thought, budget)
			thoughts = CountTokens(p.thought)
		}
		perCandidate := (budget - thoughts) / p.n
		if CountTokens(reply) > perCandidate {
			p.text = truncateTokens(reply, perCandidate)
			p.finish = "MAX_TOKENS"
		}
	}
	if strings.HasPrefix(req.model, "gemini-3") {
		sum := sha256.Sum256([]byte("emulator-signature/" + req.model + "/" + p.text))
		p.signature = base64.StdEncoding.EncodeToString(append([]byte("emu1"), sum[:12]...))
	}
	p.usage = Usage{
		PromptTokenCount:        p.prompt.total(),
		CachedContentTokenCount: p.cached.total(),
		CandidatesTokenCount:    p.n * CountTokens(p.text),
		ThoughtsTokenCount:      thoughts,
	}
	p.usage.TotalTokenCount = p.usage.PromptTokenCount + p.usage.CandidatesTokenCount + p.usage.ThoughtsTokenCount + p.usage.ToolUsePromptTokenCount
	return p
}

func (s *Server) responseID() string { return s.nextID("response", 22) }

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
	Candidates    []candidate `json:"candidates,omitempty"`
	UsageMetadata *usageJSON  `json:"usageMetadata,omitempty"`
	ModelVersion  string      `json:"modelVersion,omitempty"`
	CreateTime    string      `json:"createTime,omitempty"`
	ResponseID    string      `json:"responseId,omitempty"`
}

type candidate struct {
	Content      respContent `json:"content"`
	FinishReason string      `json:"finishReason,omitempty"`
	Index        *int        `json:"index,omitempty"`
}

type respContent struct {
	Parts []respPart `json:"parts"`
	Role  string     `json:"role"`
}

type respPart struct {
	Text             string `json:"text"`
	Thought          bool   `json:"thought,omitempty"`
	ThoughtSignature string `json:"thoughtSignature,omitempty"`
}

type usageJSON struct {
	PromptTokenCount        int              `json:"promptTokenCount,omitempty"`
	CandidatesTokenCount    int              `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount         int              `json:"totalTokenCount,omitempty"`
	CachedContentTokenCount int              `json:"cachedContentTokenCount,omitempty"`
	PromptTokensDetails     []modalityTokens `json:"promptTokensDetails,omitempty"`
	CacheTokensDetails      []modalityTokens `json:"cacheTokensDetails,omitempty"`
	ThoughtsTokenCount      int              `json:"thoughtsTokenCount,omitempty"`
	ToolUsePromptTokenCount int              `json:"toolUsePromptTokenCount,omitempty"`
	TrafficType             string           `json:"trafficType,omitempty"`
}

func (p *replyPlan) usageJSON(candidates int, vertex bool) *usageJSON {
	u := &usageJSON{
		PromptTokenCount:        p.usage.PromptTokenCount,
		CandidatesTokenCount:    candidates,
		CachedContentTokenCount: p.usage.CachedContentTokenCount,
		PromptTokensDetails:     p.prompt.details(),
		ThoughtsTokenCount:      p.usage.ThoughtsTokenCount,
	}
	if p.cached != nil {
		u.CacheTokensDetails = p.cached.details()
	}
	u.TotalTokenCount = u.PromptTokenCount + u.CandidatesTokenCount + u.ThoughtsTokenCount + u.ToolUsePromptTokenCount
	if vertex {
		u.TrafficType = "ON_DEMAND"
	}
	return u
}

// chunks renders the answer: one response for unary calls, several for
// streams (thought summary first, then the text in pieces of about size
// bytes, usage cumulative on every chunk, finishReason on the last).
func (p *replyPlan) chunks(stream, vertex bool, size int) []genResponse {
	var pieces []string
	if stream {
		pieces = splitText(p.text, size)
	} else {
		pieces = []string{p.text}
	}
	type step struct {
		part    respPart
		textEnd int
	}
	var steps []step
	if p.thought != "" {
		steps = append(steps, step{part: respPart{Text: p.thought, Thought: true}})
	}
	end := 0
	for _, pc := range pieces {
		end += len(pc)
		steps = append(steps, step{part: respPart{Text: pc}, textEnd: end})
	}
	if !stream && p.thought != "" {
		// unary: thought and text parts in one response
		steps = []step{{part: respPart{Text: p.thought, Thought: true}}, {part: respPart{Text: p.text}, textEnd: len(p.text)}}
	}
	var out []genResponse
	emit := func(parts []respPart, textEnd int, last bool) {
		cands := make([]candidate, p.n)
		for i := range cands {
			ps := append([]respPart(nil), parts...)
			if last && p.signature != "" {
				ps[len(ps)-1].ThoughtSignature = p.signature
			}
			cands[i] = candidate{Content: respContent{Parts: ps, Role: "model"}}
			if !vertex {
				idx := i
				cands[i].Index = &idx
			}
			if last {
				cands[i].FinishReason = p.finish
			}
		}
		r := genResponse{Candidates: cands, ModelVersion: p.model, ResponseID: p.responseID}
		if vertex {
			r.CreateTime = p.created
			if last {
				r.UsageMetadata = p.usageJSON(p.n*CountTokens(p.text[:textEnd]), true)
			} else {
				r.UsageMetadata = &usageJSON{TrafficType: "ON_DEMAND"}
			}
		} else {
			r.UsageMetadata = p.usageJSON(p.n*CountTokens(p.text[:textEnd]), false)
		}
		out = append(out, r)
	}
	if !stream {
		var parts []respPart
		for _, st := range steps {
			parts = append(parts, st.part)
		}
		emit(parts, len(p.text), true)
		return out
	}
	for i, st := range steps {
		te := st.textEnd
		if st.part.Thought {
			te = 0
		}
		emit([]respPart{st.part}, te, i == len(steps)-1)
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
// the call's chunk delay and disconnect fault.
func writeStream(c *call, mode streamMode, chunks []genResponse) {
	h := c.w.Header()
	if mode == modeSSE {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Content-Disposition", "attachment")
	} else {
		h.Set("Content-Type", "application/json; charset=UTF-8")
	}
	h.Set("Vary", "Origin, X-Origin, Referer")
	h.Set("X-Content-Type-Options", "nosniff")
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
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
		}
		if _, err := c.w.Write(b); err != nil {
			return
		}
		_ = rc.Flush()
		if n := c.fault.DisconnectAfterChunks; n > 0 && i+1 >= n {
			panic(http.ErrAbortHandler)
		}
	}
	if c.fault.DisconnectAfterChunks > 0 {
		panic(http.ErrAbortHandler)
	}
	if mode == modeArray {
		_, _ = c.w.Write([]byte("]"))
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
