package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrUntranslatable is returned by FromInteraction and the StreamTranslator
// when an interaction holds something a GenerateContentResponse cannot carry
// exactly (server-side tool steps, non-text output, a failed or unfinished
// status). The proxy then retries with the full request, which is only
// possible before any byte reached the client.
var ErrUntranslatable = errors.New("upstream: interaction not translatable")

// interaction is the subset of an Interaction resource the translation
// reads (gemini-api.md §7.2).
type interaction struct {
	ID     string            `json:"id"`
	Status string            `json:"status"`
	Steps  []json.RawMessage `json:"steps"`
	Usage  *usage            `json:"usage"`
	// ServiceTier is the tier that served the interaction (e.g.
	// "standard"); generateContent reports it as usageMetadata.serviceTier.
	ServiceTier string `json:"service_tier"`
}

type usage struct {
	Input     *int             `json:"total_input_tokens"`
	Output    *int             `json:"total_output_tokens"`
	Thought   *int             `json:"total_thought_tokens"`
	Cached    *int             `json:"total_cached_tokens"`
	ToolUse   *int             `json:"total_tool_use_tokens"`
	Total     *int             `json:"total_tokens"`
	InputBy   []modalityTokens `json:"input_tokens_by_modality"`
	OutputBy  []modalityTokens `json:"output_tokens_by_modality"`
	CachedBy  []modalityTokens `json:"cached_tokens_by_modality"`
	ToolUseBy []modalityTokens `json:"tool_use_tokens_by_modality"`
}

type modalityTokens struct {
	Modality string `json:"modality"`
	Tokens   int    `json:"tokens"`
}

// step is the union of the step shapes the translation accepts.
type step struct {
	Type      string          `json:"type"`
	Content   []stepContent   `json:"content"`
	Signature string          `json:"signature"`
	Summary   []stepContent   `json:"summary"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Error     json.RawMessage `json:"error"`
}

type stepContent struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Data     string `json:"data"`
	MimeType string `json:"mime_type"`
}

// Response shapes, in the field order Google uses (gemini-api.md §5.3).
type (
	response struct {
		Candidates    []candidate    `json:"candidates"`
		UsageMetadata *usageMetadata `json:"usageMetadata,omitempty"`
		ModelVersion  string         `json:"modelVersion,omitempty"`
		ResponseID    string         `json:"responseId,omitempty"`
	}
	candidate struct {
		Content      content `json:"content"`
		FinishReason string  `json:"finishReason,omitempty"`
		Index        int     `json:"index"`
	}
	content struct {
		Parts []part `json:"parts"`
		Role  string `json:"role"`
	}
	part struct {
		Text             *string       `json:"text,omitempty"`
		Thought          bool          `json:"thought,omitempty"`
		InlineData       *blob         `json:"inlineData,omitempty"`
		FunctionCall     *functionCall `json:"functionCall,omitempty"`
		ThoughtSignature string        `json:"thoughtSignature,omitempty"`
	}
	blob struct {
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
	}
	functionCall struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	usageMetadata struct {
		PromptTokenCount           int              `json:"promptTokenCount"`
		CachedContentTokenCount    int              `json:"cachedContentTokenCount,omitempty"`
		CandidatesTokenCount       int              `json:"candidatesTokenCount,omitempty"`
		ToolUsePromptTokenCount    int              `json:"toolUsePromptTokenCount,omitempty"`
		ThoughtsTokenCount         int              `json:"thoughtsTokenCount,omitempty"`
		TotalTokenCount            int              `json:"totalTokenCount"`
		PromptTokensDetails        []modalityDetail `json:"promptTokensDetails,omitempty"`
		CacheTokensDetails         []modalityDetail `json:"cacheTokensDetails,omitempty"`
		CandidatesTokensDetails    []modalityDetail `json:"candidatesTokensDetails,omitempty"`
		ToolUsePromptTokensDetails []modalityDetail `json:"toolUsePromptTokensDetails,omitempty"`
		ServiceTier                string           `json:"serviceTier,omitempty"`
	}
	modalityDetail struct {
		Modality   string `json:"modality"`
		TokenCount int    `json:"tokenCount"`
	}
)

// FromInteraction translates a completed Interaction resource (the unary
// answer of POST /{version}/interactions) into the GenerateContentResponse
// the same request would have got from generateContent on model. Only the
// model's output steps are used; echoed user_input and function_result
// steps are skipped. Errors wrap ErrUntranslatable when the interaction
// cannot be represented exactly.
func FromInteraction(body []byte, model string) ([]byte, error) {
	var it interaction
	if err := json.Unmarshal(body, &it); err != nil {
		return nil, fmt.Errorf("upstream: decoding interaction: %w", err)
	}
	finish, err := finishReason(it.Status)
	if err != nil {
		return nil, err
	}
	var b partBuilder
	for i, raw := range it.Steps {
		if err := b.add(raw); err != nil {
			return nil, fmt.Errorf("steps[%d]: %w", i, err)
		}
	}
	parts, err := b.done()
	if err != nil {
		return nil, err
	}
	r := response{
		Candidates:    []candidate{{Content: content{Parts: parts, Role: "model"}, FinishReason: finish}},
		UsageMetadata: it.Usage.metadata(it.ServiceTier),
		ModelVersion:  strings.TrimPrefix(model, "models/"),
		ResponseID:    it.ID,
	}
	return marshal(r)
}

// finishReason maps an interaction status to a Gemini finishReason.
// requires_action is a pending client function call, which generateContent
// reports as STOP. incomplete and budget_exceeded stop at an output limit:
// MAX_TOKENS. Other statuses (failed, cancelled, in_progress, queued,
// requires_continuation) have no finished GenerateContentResponse.
func finishReason(status string) (string, error) {
	switch status {
	case "completed", "requires_action":
		return "STOP", nil
	case "incomplete", "budget_exceeded":
		return "MAX_TOKENS", nil
	}
	return "", fmt.Errorf("status %q: %w", status, ErrUntranslatable)
}

// partBuilder turns output steps into parts. A thought step's summary
// becomes thought:true text parts; its signature goes on the next
// non-thought part, which is where generateContent puts it on a function
// call. A signature with no following part ends up on an empty text part,
// as streamed generateContent responses do (gemini-api.md §4.7).
type partBuilder struct {
	parts []part
	sig   string
}

func (b *partBuilder) add(raw json.RawMessage) error {
	var s step
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("decoding step: %w", err)
	}
	switch s.Type {
	case "user_input", "function_result":
		return nil // the input of this interaction, echoed
	case "thought":
		if b.sig != "" {
			return fmt.Errorf("two thought signatures in a row: %w", ErrUntranslatable)
		}
		for _, c := range s.Summary {
			if c.Type != "text" {
				return fmt.Errorf("thought summary of type %q: %w", c.Type, ErrUntranslatable)
			}
			t := c.Text
			b.parts = append(b.parts, part{Text: &t, Thought: true})
		}
		b.sig = s.Signature
	case "model_output":
		if len(s.Error) > 0 && !isNull(s.Error) {
			return fmt.Errorf("model_output with error: %w", ErrUntranslatable)
		}
		for _, c := range s.Content {
			p, err := outputPart(c)
			if err != nil {
				return err
			}
			b.put(p)
		}
	case "function_call":
		args := s.Arguments
		if len(args) == 0 || isNull(args) {
			args = json.RawMessage("{}")
		}
		args, err := compact(args)
		if err != nil {
			return err
		}
		b.put(part{FunctionCall: &functionCall{ID: s.ID, Name: s.Name, Args: args}})
	default:
		return fmt.Errorf("step type %q: %w", s.Type, ErrUntranslatable)
	}
	return nil
}

func (b *partBuilder) put(p part) {
	p.ThoughtSignature, b.sig = b.sig, ""
	b.parts = append(b.parts, p)
}

func (b *partBuilder) done() ([]part, error) {
	if b.sig != "" {
		empty := ""
		b.put(part{Text: &empty})
	}
	if len(b.parts) == 0 {
		return nil, fmt.Errorf("no output: %w", ErrUntranslatable)
	}
	return b.parts, nil
}

func outputPart(c stepContent) (part, error) {
	switch c.Type {
	case "text":
		t := c.Text
		return part{Text: &t}, nil
	case "image", "audio", "video", "document":
		if c.Data == "" || c.MimeType == "" {
			break
		}
		return part{InlineData: &blob{Data: c.Data, MimeType: c.MimeType}}, nil
	}
	return part{}, fmt.Errorf("output content of type %q: %w", c.Type, ErrUntranslatable)
}

// metadata maps Interactions usage onto usageMetadata: total_input_tokens
// is promptTokenCount (both include cached tokens), total_output_tokens is
// candidatesTokenCount, total_tokens is totalTokenCount; the interaction's
// service_tier is serviceTier.
func (u *usage) metadata(tier string) *usageMetadata {
	if u == nil {
		return nil
	}
	v := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	m := &usageMetadata{
		PromptTokenCount:           v(u.Input),
		CachedContentTokenCount:    v(u.Cached),
		CandidatesTokenCount:       v(u.Output),
		ToolUsePromptTokenCount:    v(u.ToolUse),
		ThoughtsTokenCount:         v(u.Thought),
		TotalTokenCount:            v(u.Total),
		PromptTokensDetails:        details(u.InputBy),
		CacheTokensDetails:         details(u.CachedBy),
		CandidatesTokensDetails:    details(u.OutputBy),
		ToolUsePromptTokensDetails: details(u.ToolUseBy),
		ServiceTier:                tier,
	}
	if u.Total == nil {
		m.TotalTokenCount = m.PromptTokenCount + m.CandidatesTokenCount + m.ToolUsePromptTokenCount + m.ThoughtsTokenCount
	}
	return m
}

// details maps {modality:"text",tokens} to {modality:"TEXT",tokenCount}.
func details(in []modalityTokens) []modalityDetail {
	var out []modalityDetail
	for _, t := range in {
		out = append(out, modalityDetail{Modality: strings.ToUpper(t.Modality), TokenCount: t.Tokens})
	}
	return out
}
