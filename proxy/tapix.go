package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
)

// ixUsage is the usage of an Interactions API response (gemini-api.md
// §7.2): total_input_tokens includes total_cached_tokens, as
// promptTokenCount includes cachedContentTokenCount.
type ixUsage struct {
	Input   int64 `json:"total_input_tokens"`
	Cached  int64 `json:"total_cached_tokens"`
	Output  int64 `json:"total_output_tokens"`
	Thought int64 `json:"total_thought_tokens"`
	ToolUse int64 `json:"total_tool_use_tokens"`
	Total   int64 `json:"total_tokens"`
}

// ixPayload is the part of an interaction, or of one of its stream events,
// the tap reads: the unary Interaction has usage and model at the top;
// interaction.created and interaction.completed carry them under
// "interaction"; interaction.status_update and step.stop may carry usage.
type ixPayload struct {
	Usage       *ixUsage `json:"usage"`
	Model       string   `json:"model"`
	Interaction *struct {
		Usage *ixUsage `json:"usage"`
		Model string   `json:"model"`
	} `json:"interaction"`
}

// newInteractionTap returns a tap for the body of an Interactions API
// response (a client calling /{v}/interactions itself), or nil for an
// encoding the tap cannot decode. It reads usage and model only.
func newInteractionTap(contentEncoding string) *tap {
	t := newTap(contentEncoding, false)
	if t != nil {
		t.ix = true
	}
	return t
}

// decodeInteraction reads the usage and model of one interaction object
// or stream event. The last usage seen wins: the completed interaction
// repeats the totals.
func (t *tap) decodeInteraction(b []byte) {
	var p ixPayload
	if json.Unmarshal(b, &p) != nil {
		return
	}
	t.events++
	u, model := p.Usage, p.Model
	if p.Interaction != nil {
		if p.Interaction.Usage != nil {
			u = p.Interaction.Usage
		}
		if p.Interaction.Model != "" {
			model = p.Interaction.Model
		}
	}
	var out *Usage
	if u != nil {
		out = &Usage{
			PromptTokens:        u.Input,
			CachedTokens:        u.Cached,
			CandidatesTokens:    u.Output,
			ThoughtsTokens:      u.Thought,
			ToolUsePromptTokens: u.ToolUse,
			TotalTokens:         u.Total,
		}
	}
	t.record(out, model)
}

// isInteractionCreate reports whether r creates an interaction (POST
// /{v}/interactions), the only Interactions call that is billed.
func isInteractionCreate(route Route, r *http.Request) bool {
	return route == RouteInteractions && r != nil && r.Method == http.MethodPost &&
		strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/interactions")
}
