package rewrite

import (
	"encoding/json"
)

// unflattenRequest applies N2 (DESIGN §3 "Un-flattening"): when the last
// content is a user turn with a single text part that holds a flattened
// transcript, that content is replaced by real alternating turns. It returns
// the new body and the number of turns created, or 0 to leave the request
// as is, the decoded bytes and the tokens (Options.CountTokens) it removed,
// and the audit's record of what it did.
func unflattenRequest(body []byte, req *request, opts *Options, v Verifier) ([]byte, int, int, int, *auditUnflat) {
	n := len(req.contents)
	if n == 0 {
		return nil, 0, 0, 0, nil
	}
	c := &req.contents[n-1]
	// The content is replaced as a whole, so it must hold nothing but its
	// role and one text part (an unknown member would be lost).
	if (c.role != "" && c.role != "user") || c.extra || len(c.parts) != 1 || c.parts[0].kind != partText {
		return nil, 0, 0, 0, nil
	}
	p := &c.parts[0]
	if v == nil || p.dec.size < 8 {
		return nil, 0, 0, 0, nil
	}
	lx := opts.Lexicon
	if lx == nil {
		lx = DefaultLexicon()
	}
	// The cheapest tests that can say no come first, and none allocates
	// (issue 17: this check runs on every request and almost always says
	// no): the text the scan decoded, flatMaybe and jsonHistMaybe, then
	// generationConfig.
	var buf [flatBufBytes]byte
	pre := flatText(body, p, buf[:])
	flat := flatMaybe(pre, lx)
	if !flat && !(p.dec.size >= 16 && jsonHistMaybe(pre)) || sideTaskHint(body, req) {
		return nil, 0, 0, 0, nil
	}
	text := decodedText(body, p)
	// A history serialised as JSON (jsonhist.go) comes first.
	turns, spans, quoted, ok := jsonHistory(text, lx, false, v)
	if !ok && flat {
		turns, spans, ok = unflattenScanned(text, lx, v)
	}
	if !ok || len(turns) < 3 || turns[len(turns)-1].Role != "user" {
		return nil, 0, 0, 0, nil
	}
	rec := &auditUnflat{obj: c.obj, str: p.str, esc: p.esc, turns: make([]auditTurn, len(turns))}
	for i, t := range turns {
		rec.turns[i] = auditTurn{model: t.Role == "model", pieces: spans[i]}
		if quoted != nil {
			rec.turns[i].quoted = quoted[i]
		}
	}
	out := make([]byte, 0, len(body)+64*len(turns))
	out = append(out, body[:c.obj.start]...)
	removed, tokens := len(text), 0
	if opts.CountTokens != nil {
		tokens = opts.CountTokens(text)
	}
	for i, t := range turns {
		removed -= len(t.Text)
		if opts.CountTokens != nil {
			tokens -= opts.CountTokens(t.Text)
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"role":"`...)
		out = append(out, t.Role...)
		out = append(out, `","parts":[{"text":"`...)
		out = appendEscaped(out, t.Text)
		out = append(out, `"}]}`...)
	}
	out = append(out, body[c.obj.end:]...)
	return out, len(turns) - 1, max(removed, 0), tokens, rec
}

// sideTaskHint reports whether generationConfig asks for structured or very
// short output, which marks a side task run on a transcript (a title, a
// classification) rather than a conversation.
func sideTaskHint(body []byte, req *request) bool {
	if req.genConfig.end == 0 {
		return false
	}
	if !mayHint(body[req.genConfig.start:req.genConfig.end]) {
		return false
	}
	var gc map[string]json.RawMessage
	if json.Unmarshal(body[req.genConfig.start:req.genConfig.end], &gc) != nil {
		return true // unreadable: be careful
	}
	for _, k := range []string{"responseMimeType", "response_mime_type", "responseSchema", "response_schema", "responseJsonSchema", "response_json_schema"} {
		if raw, ok := gc[k]; ok && string(raw) != "null" && string(raw) != `""` && string(raw) != `"text/plain"` {
			return true
		}
	}
	for _, k := range []string{"maxOutputTokens", "max_output_tokens"} {
		if raw, ok := gc[k]; ok {
			var n float64
			if json.Unmarshal(raw, &n) == nil && n > 0 && n <= 64 {
				return true
			}
		}
	}
	return false
}
