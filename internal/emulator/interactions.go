package emulator

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// interaction is a stored Interactions API resource.
type interaction struct {
	id, keyID, model, prev, system string
	input                          []Content
	inputRaw                       any
	output                         string
	usage                          ordered
	status                         string
	// thoughts and signature are the thought step of a thinking model.
	thoughts         int
	signature        string
	serviceTier      string
	created, updated time.Time
}

// interactionFields are the accepted top-level fields of a create request
// (CreateModelInteraction / CreateAgentInteraction, snake_case only).
var interactionFields = map[string]bool{
	"model": true, "agent": true, "agent_config": true, "input": true, "previous_interaction_id": true,
	"store": true, "stream": true, "background": true, "system_instruction": true, "generation_config": true,
	"tools": true, "response_format": true, "response_mime_type": true, "response_modalities": true,
	"safety_settings": true, "service_tier": true, "labels": true, "webhook_config": true,
	"environment": true, "continuation_token": true, "cached_content": true,
}

var interactionGenConfigFields = map[string]bool{
	"temperature": true, "top_p": true, "seed": true, "max_output_tokens": true, "stop_sequences": true,
	"thinking_level": true, "thinking_summaries": true, "tool_choice": true, "image_config": true,
	"speech_config": true, "video_config": true, "transcription_config": true,
}

// routeInteractions serves {v}/interactions[/{id}[/cancel]]; rest is the
// path after "interactions".
func (s *Server) routeInteractions(c *call, rest []string) {
	m := c.r.Method
	switch {
	case len(rest) == 0 && m == http.MethodPost:
		s.createInteraction(c)
	case len(rest) == 1 && m == http.MethodGet:
		it := s.lookupInteraction(c, rest[0])
		if it == nil {
			return
		}
		s.mu.Lock()
		if it.status == "in_progress" { // background work finishes by the first poll
			it.status, it.updated = "completed", s.now()
		}
		s.mu.Unlock()
		if c.r.URL.Query().Get("stream") == "true" {
			s.streamInteraction(c, it)
			return
		}
		b, _ := marshalIndent(s.interactionJSON(it, c.r.URL.Query().Get("include_input") == "true", true))
		writeJSON(c.w, c.r, 200, append(b, '\n'))
	case len(rest) == 1 && m == http.MethodDelete:
		it := s.lookupInteraction(c, rest[0])
		if it == nil {
			return
		}
		s.mu.Lock()
		delete(s.interactions, it.id)
		s.mu.Unlock()
		writeJSON(c.w, c.r, 200, []byte("{}\n"))
	case len(rest) == 2 && rest[1] == "cancel" && m == http.MethodPost:
		it := s.lookupInteraction(c, rest[0])
		if it == nil {
			return
		}
		s.mu.Lock()
		ok := it.status == "in_progress"
		if ok {
			it.status, it.updated = "cancelled", s.now()
		}
		s.mu.Unlock()
		if !ok {
			writeInteractionError(c.w, c.r, 400, "invalid_request", fmt.Sprintf("Interaction %s is not in progress and cannot be cancelled.", it.id))
			return
		}
		b, _ := marshalIndent(s.interactionJSON(it, false, true))
		writeJSON(c.w, c.r, 200, append(b, '\n'))
	default:
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
	}
}

func (s *Server) lookupInteraction(c *call, id string) *interaction {
	s.mu.Lock()
	it := s.storedLocked(id, c.keyID)
	s.mu.Unlock()
	if it == nil {
		writeInteractionError(c.w, c.r, 404, "not_found", fmt.Sprintf("Interaction %s not found.", id))
		return nil
	}
	return it
}

// storedLocked returns the stored interaction id of key keyID, or nil when
// it is unknown, another key's, or past Options.InteractionRetention; an
// expired interaction is deleted. s.mu must be held.
func (s *Server) storedLocked(id, keyID string) *interaction {
	it := s.interactions[id]
	if it == nil || it.keyID != keyID {
		return nil
	}
	ret := s.opts.InteractionRetention
	if ret <= 0 {
		ret = DefaultInteractionRetention
	}
	if s.now().Sub(it.created) >= ret {
		delete(s.interactions, id)
		return nil
	}
	return it
}

// DeleteInteractions forgets every stored interaction, as if all had
// expired, and returns how many there were (fault injection for tests).
func (s *Server) DeleteInteractions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.interactions)
	s.interactions = map[string]*interaction{}
	return n
}

// history is the conversation an interaction continues from: all earlier
// inputs and outputs of the previous_interaction_id chain. ok is false
// when a member of the chain is no longer stored (deleted or expired):
// the emulator rebuilds the history from the chain, so it cannot continue.
func (s *Server) history(prev, keyID string) (out []Content, ok bool) {
	var chain []*interaction
	s.mu.Lock()
	for id, n := prev, 0; id != "" && n < 10000; n++ {
		it := s.storedLocked(id, keyID)
		if it == nil {
			s.mu.Unlock()
			return nil, false
		}
		chain = append(chain, it)
		id = it.prev
	}
	s.mu.Unlock()
	for i := len(chain) - 1; i >= 0; i-- {
		out = append(out, chain[i].input...)
		out = append(out, Content{Role: "model", Parts: []Part{{Text: chain[i].output}}})
	}
	return out, true
}

func (s *Server) createInteraction(c *call) {
	rec := Received{Method: c.r.Method, Path: c.r.URL.Path, RawQuery: c.r.URL.RawQuery, Header: c.r.Header.Clone(),
		API: "interactions", Vertex: c.vertex, KeyID: c.keyID}
	fail := func(status int, code, msg string) {
		rec.Status, rec.Error = status, msg
		s.record(rec)
		writeInteractionError(c.w, c.r, status, code, msg)
	}
	raw, v, e := readBody(c)
	rec.Body = raw
	if e != nil {
		fail(e.Code, "invalid_request", e.Message)
		return
	}
	body, ok := v.(map[string]any)
	if !ok {
		fail(400, "invalid_request", "The request body must be a JSON object.")
		return
	}
	if !s.opts.Lenient {
		for _, k := range sortedKeys(body) {
			if !interactionFields[k] {
				fail(400, "invalid_request", fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", k))
				return
			}
		}
		if gc, ok := body["generation_config"].(map[string]any); ok {
			for _, k := range sortedKeys(gc) {
				if !interactionGenConfigFields[k] {
					fail(400, "invalid_request", fmt.Sprintf("Invalid JSON payload received. Unknown name %q at 'generation_config': Cannot find field.", k))
					return
				}
			}
		}
	}
	if _, ok := body["agent"]; ok {
		fail(400, "invalid_request", "Agent interactions are not supported by the emulator.")
		return
	}
	model, _ := body["model"].(string)
	model = strings.TrimPrefix(model, "models/")
	rec.Model = model
	if model == "" {
		fail(400, "invalid_request", "model is required.")
		return
	}
	if !s.models[model] || isEmbedding(model) {
		fail(404, "not_found", fmt.Sprintf("Model %s not found.", model))
		return
	}
	in, ok := body["input"]
	if !ok || in == nil {
		fail(400, "invalid_request", "input is required.")
		return
	}
	input, err := parseInteractionInput(in)
	rec.Contents = input
	if err != "" {
		fail(400, "invalid_request", err)
		return
	}
	stream, _ := body["stream"].(bool)
	background, _ := body["background"].(bool)
	rec.Stream, rec.SSE = stream, stream
	store := true
	if st, ok := body["store"].(bool); ok {
		store = st
	}
	if background && !store {
		fail(400, "invalid_request", "background interactions require store=true.")
		return
	}
	prev, _ := body["previous_interaction_id"].(string)
	var hist []Content
	if prev != "" {
		var ok bool
		if hist, ok = s.history(prev, c.keyID); !ok {
			if s.opts.UnknownPreviousStatus == 400 {
				fail(400, "invalid_request", fmt.Sprintf("previous_interaction_id %s does not refer to a stored interaction.", prev))
			} else {
				fail(404, "not_found", fmt.Sprintf("Interaction %s not found.", prev))
			}
			return
		}
	}
	system, _ := body["system_instruction"].(string)
	maxOut := 0
	genConfig, _ := body["generation_config"].(map[string]any)
	if genConfig != nil {
		maxOut = toInt(genConfig["max_output_tokens"])
	}
	all := append(append([]Content(nil), hist...), input...)
	rr := ReplyRequest{API: "interactions", Model: model, Contents: all, SystemInstruction: system, KeyID: c.keyID, Stream: stream}
	reply := defaultReply(rr)
	if s.opts.Reply != nil {
		reply = s.opts.Reply(rr)
	}
	rec.Reply = reply
	if maxOut > 0 && CountTokens(reply) > maxOut {
		reply = truncateTokens(reply, maxOut)
	}
	fileText := func(uri string) (string, string, bool) { return s.fileText(c.keyID, uri) }
	sysTokens := CountTokens(system)
	// The stored part of the prompt (system instruction and history) and
	// all of it, by modality, as generateContent counts them.
	stored := modalityCounts{}
	if sysTokens > 0 {
		stored["TEXT"] = sysTokens
	}
	stored.add(contentsTokens(hist, fileText))
	prompt := modalityCounts{}
	prompt.add(stored)
	prompt.add(contentsTokens(input, fileText))
	inTokens := prompt.total()
	cached := 0
	var cachedBy []any
	if min := s.implicitMin(model); prev != "" && min > 0 && stored.total() >= min {
		cached = stored.total()
		cachedBy = interactionModalities(stored)
	}
	out := CountTokens(reply)
	// A thinking model thinks on every interaction: total_thought_tokens,
	// counted in total_tokens, as generateContent's thoughtsTokenCount.
	// Its thought step with a signature (recording
	// interactions-unary-2.5-flash-steps) is left out when the request
	// sets generation_config.thinking_summaries "none" (an assumption: the
	// recording does not show that case).
	thoughts, sig := 0, ""
	if traitsOf(model).thinking {
		thoughts = CountTokens(thoughtSummary(model))
		if summaries, _ := genConfig["thinking_summaries"].(string); summaries != "none" {
			sig = signature(modelVersion(model), "interaction/"+reply)
		}
	}
	// Key order as recorded.
	usage := ordered{{"total_tokens", inTokens + out + thoughts}, {"total_input_tokens", inTokens},
		{"input_tokens_by_modality", interactionModalities(prompt)}, {"total_cached_tokens", cached}}
	if cachedBy != nil {
		usage = append(usage, kv{"cached_tokens_by_modality", cachedBy})
	}
	usage = append(usage, kv{"total_output_tokens", out}, kv{"total_tool_use_tokens", 0}, kv{"total_thought_tokens", thoughts})
	tier, _ := body["service_tier"].(string)
	if tier == "" {
		tier = "standard"
	}
	now := s.now()
	it := &interaction{id: "v1_" + s.nextID("interaction", 24), keyID: c.keyID, model: model, prev: prev,
		system: system, input: input, inputRaw: in, output: reply, status: "completed", created: now, updated: now,
		usage: usage, thoughts: thoughts, signature: sig, serviceTier: tier}
	rec.Usage = Usage{PromptTokenCount: inTokens, CachedContentTokenCount: cached, CandidatesTokenCount: out,
		ThoughtsTokenCount: thoughts, TotalTokenCount: inTokens + out + thoughts}
	rec.Status = 200
	s.record(rec)
	if background {
		it.status = "in_progress"
	}
	if store {
		s.mu.Lock()
		s.interactions[it.id] = it
		s.mu.Unlock()
	}
	if stream {
		s.streamInteraction(c, it)
		return
	}
	b, _ := marshalIndent(s.interactionJSON(it, false, true))
	writeJSON(c.w, c.r, 200, append(b, '\n'))
}

// parseInteractionInput converts input (string | Content | Content[] |
// Step[]) to contents. It returns an error message for invalid input.
func parseInteractionInput(in any) ([]Content, string) {
	switch x := in.(type) {
	case string:
		if x == "" {
			return nil, "input must not be empty."
		}
		return []Content{{Role: "user", Parts: []Part{{Text: x}}}}, ""
	case map[string]any:
		return parseInteractionInput([]any{x})
	case []any:
		if len(x) == 0 {
			return nil, "input must not be empty."
		}
		var out []Content
		var loose []Part
		for i, item := range x {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Sprintf("input[%d] must be an object.", i)
			}
			typ, _ := m["type"].(string)
			switch typ {
			case "text", "image", "audio", "document", "video":
				p, err := interactionPart(m)
				if err != "" {
					return nil, fmt.Sprintf("input[%d]: %s", i, err)
				}
				loose = append(loose, p)
			case "user_input", "model_output":
				role := "user"
				if typ == "model_output" {
					role = "model"
				}
				list, _ := m["content"].([]any)
				ct := Content{Role: role}
				for j, cv := range list {
					cm, _ := cv.(map[string]any)
					p, err := interactionPart(cm)
					if err != "" {
						return nil, fmt.Sprintf("input[%d].content[%d]: %s", i, j, err)
					}
					ct.Parts = append(ct.Parts, p)
				}
				if len(ct.Parts) == 0 {
					return nil, fmt.Sprintf("input[%d].content must not be empty.", i)
				}
				out = append(out, ct)
			case "function_result":
				name, _ := m["name"].(string)
				id, _ := m["call_id"].(string)
				if id == "" {
					return nil, fmt.Sprintf("input[%d].call_id is required.", i)
				}
				out = append(out, Content{Role: "user", Parts: []Part{{FunctionResponse: &FunctionResponse{ID: id, Name: name,
					Response: map[string]any{"result": m["result"]}}}}})
			case "function_call":
				name, _ := m["name"].(string)
				id, _ := m["id"].(string)
				args, _ := m["arguments"].(map[string]any)
				out = append(out, Content{Role: "model", Parts: []Part{{FunctionCall: &FunctionCall{ID: id, Name: name, Args: args}}}})
			case "thought":
				// thoughts carry signatures only; nothing to count as input
			default:
				return nil, fmt.Sprintf("input[%d]: unknown type %q.", i, typ)
			}
		}
		if len(loose) > 0 {
			out = append(out, Content{Role: "user", Parts: loose})
		}
		return out, ""
	}
	return nil, "input must be a string, a content object or a list of contents or steps."
}

func interactionPart(m map[string]any) (Part, string) {
	typ, _ := m["type"].(string)
	if typ == "text" {
		t, ok := m["text"].(string)
		if !ok {
			return Part{}, "text content requires a text field."
		}
		return Part{Text: t}, ""
	}
	if typ == "" {
		return Part{}, "content requires a type."
	}
	mime, _ := m["mime_type"].(string)
	if data, ok := m["data"].(string); ok {
		raw, err := decodeBase64(data)
		if err != nil {
			return Part{}, "data is not valid base64."
		}
		if mime == "" {
			mime = typ + "/*"
		}
		return Part{InlineData: &Blob{MIMEType: mime, Data: raw}}, ""
	}
	if uri, ok := m["uri"].(string); ok {
		return Part{FileData: &FileData{MIMEType: mime, FileURI: uri}}, ""
	}
	return Part{}, fmt.Sprintf("%s content requires data or uri.", typ)
}

// interactionJSON renders an interaction in the recorded key order: id,
// status, usage, created, updated, service_tier, steps, object, model
// (then previous_interaction_id and system_instruction). withSteps false
// leaves the steps out, as the stream's interaction.completed event does.
func (s *Server) interactionJSON(it *interaction, includeInput, withSteps bool) ordered {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ordered{{"id", it.id}, {"status", it.status}}
	if it.status == "completed" {
		out = append(out, kv{"usage", it.usage})
	}
	out = append(out, kv{"created", it.created.UTC().Format(time.RFC3339)}, kv{"updated", it.updated.UTC().Format(time.RFC3339)},
		kv{"service_tier", it.serviceTier})
	if withSteps {
		steps := []any{}
		if includeInput {
			steps = append(steps, ordered{{"content", inputContentJSON(it.input)}, {"type", "user_input"}})
		}
		if it.status == "completed" {
			if it.signature != "" {
				steps = append(steps, ordered{{"signature", it.signature}, {"type", "thought"}})
			}
			steps = append(steps, ordered{{"content", []any{ordered{{"text", it.output}, {"type", "text"}}}}, {"type", "model_output"}})
		}
		out = append(out, kv{"steps", steps})
	}
	out = append(out, kv{"object", "interaction"}, kv{"model", it.model})
	if it.prev != "" {
		out = append(out, kv{"previous_interaction_id", it.prev})
	}
	if it.system != "" {
		out = append(out, kv{"system_instruction", it.system})
	}
	return out
}

// kv is one member of an ordered JSON object.
type kv struct {
	key string
	val any
}

// ordered is a JSON object that keeps its members' order.
type ordered []kv

// MarshalJSON implements json.Marshaler.
func (o ordered) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, marshalCompact(m.key)...)
		b = append(b, ':')
		b = append(b, marshalCompact(m.val)...)
	}
	return append(b, '}'), nil
}

// interactionModalities renders counts as an Interactions
// *_tokens_by_modality list: lower-case modality names, stable order.
func interactionModalities(m modalityCounts) []any {
	out := []any{}
	for _, d := range m.details() {
		out = append(out, map[string]any{"modality": strings.ToLower(d.Modality), "tokens": d.TokenCount})
	}
	return out
}

func inputContentJSON(cs []Content) []any {
	out := []any{}
	for _, c := range cs {
		for _, p := range c.Parts {
			if p.Kind() == "text" {
				out = append(out, map[string]any{"type": "text", "text": p.Text})
			}
		}
	}
	return out
}

// streamInteraction writes the SSE event sequence of an interaction, as
// recorded (interactions-sse-2.5-flash-steps): interaction.created,
// interaction.status_update, for a thinking model a thought step
// (step.start, a thought_signature step.delta, step.stop), the
// model_output step (step.start, step.delta…, step.stop),
// interaction.completed without steps, then "event: done" /
// "data: [DONE]". Members keep the recorded order, event_type last but
// for the emulator's event_id.
func (s *Server) streamInteraction(c *call, it *interaction) {
	if cw, ok := c.w.(*cutWriter); ok {
		// ServeHTTP took the request for a unary one (its path does not
		// say stream): DisconnectAfterChunks counts events here instead.
		c.w = cw.statusWriter
	}
	full := s.interactionJSON(it, false, false)
	created := ordered{{"id", it.id}, {"status", "in_progress"}, {"object", "interaction"}, {"model", it.model}}
	events := []ordered{
		{{"interaction", created}, {"event_type", "interaction.created"}},
		{{"interaction_id", it.id}, {"status", "in_progress"}, {"event_type", "interaction.status_update"}},
	}
	index := 0
	if it.signature != "" {
		events = append(events,
			ordered{{"index", index}, {"step", ordered{{"type", "thought"}}}, {"event_type", "step.start"}},
			ordered{{"index", index}, {"delta", ordered{{"signature", it.signature}, {"type", "thought_signature"}}}, {"event_type", "step.delta"}},
			ordered{{"index", index}, {"event_type", "step.stop"}})
		index++
	}
	events = append(events, ordered{{"index", index}, {"step", ordered{{"type", "model_output"}}}, {"event_type", "step.start"}})
	for _, piece := range splitText(it.output, s.opts.StreamChunkBytes) {
		events = append(events, ordered{{"index", index}, {"delta", ordered{{"text", piece}, {"type", "text"}}}, {"event_type", "step.delta"}})
	}
	events = append(events,
		ordered{{"index", index}, {"event_type", "step.stop"}},
		ordered{{"interaction", full}, {"event_type", "interaction.completed"}})
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	for i, ev := range events {
		if i > 0 && c.fault.ChunkDelay > 0 && !sleepCtx(c.r.Context(), c.fault.ChunkDelay) {
			return
		}
		ev = append(ev, kv{"event_id", fmt.Sprintf("%s-%d", it.id, i)})
		fmt.Fprintf(c.w, "event: %s\ndata: %s\n\n", ev[len(ev)-2].val, marshalCompact(ev))
		_ = rc.Flush()
		if n := c.fault.DisconnectAfterChunks; n > 0 && i+1 >= n {
			panic(http.ErrAbortHandler)
		}
	}
	fmt.Fprint(c.w, "event: done\ndata: [DONE]\n\n")
	_ = rc.Flush()
}
