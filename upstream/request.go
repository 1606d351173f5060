package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrTurns is returned by ToInteraction when newTurns does not select a
// non-empty suffix of the request's contents, or when it leaves earlier
// contents out although there is no previous interaction to hold them.
var ErrTurns = errors.New("upstream: newTurns out of range")

// ToInteraction translates a GenerateContentRequest body (camelCase or
// snake_case field names) into the body of an Interactions create request
// (POST /{version}/interactions) for model, continuing the stored
// interaction prevID with the last newTurns contents of req. An empty prevID
// starts a new stored interaction; then newTurns must equal the number of
// contents. stream is whether the client called streamGenerateContent.
//
// ok is false when any part of req has no exact Interactions equivalent (the
// rules are in the package documentation); the caller then sends the
// original request unchanged. err is non-nil only when req is not valid
// JSON or newTurns is out of range.
func ToInteraction(req []byte, model, prevID string, newTurns int, stream bool) (body []byte, ok bool, err error) {
	body, err = toInteraction(req, model, prevID, newTurns, stream)
	if errors.Is(err, errUnknown) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return body, true, nil
}

// toInteraction is ToInteraction returning the reason for ok=false as an
// error wrapping errUnknown; tests use it to check the reason.
func toInteraction(req []byte, model, prevID string, newTurns int, stream bool) ([]byte, error) {
	if !json.Valid(req) {
		return nil, errors.New("upstream: request is not valid JSON")
	}
	fields, err := object(req)
	if err != nil {
		return nil, err
	}
	model = strings.TrimPrefix(model, "models/")
	if model == "" {
		return nil, errors.New("upstream: empty model")
	}
	out := newObj()
	out.set("model", model)

	var (
		contents []json.RawMessage
		haveCont bool
		gen      = newObj()
		tools    json.RawMessage
		system   json.RawMessage
		safety   json.RawMessage
		format   json.RawMessage
		choice   json.RawMessage
		labels   json.RawMessage
	)
	var genFields []field
	for _, f := range fields {
		switch f.name {
		case "contents":
			haveCont = true
			if contents, err = array(f.raw); err != nil {
				return nil, fmt.Errorf("contents: %w", err)
			}
		case "systemInstruction":
			if isNull(f.raw) {
				continue
			}
			s, err := systemText(f.raw)
			if err != nil {
				return nil, fmt.Errorf("systemInstruction: %w", err)
			}
			system, _ = marshal(s)
		case "generationConfig":
			if isNull(f.raw) {
				continue
			}
			if genFields, err = object(f.raw); err != nil {
				return nil, fmt.Errorf("generationConfig: %w", err)
			}
		case "tools":
			if tools, err = toolList(f.raw); err != nil {
				return nil, fmt.Errorf("tools: %w", err)
			}
		case "toolConfig":
			if isNull(f.raw) {
				continue
			}
			if choice, err = toolChoice(f.raw); err != nil {
				return nil, fmt.Errorf("toolConfig: %w", err)
			}
		case "safetySettings":
			if safety, err = safetyList(f.raw); err != nil {
				return nil, fmt.Errorf("safetySettings: %w", err)
			}
		case "labels":
			if isNull(f.raw) {
				continue
			}
			var m map[string]string
			if err := json.Unmarshal(f.raw, &m); err != nil {
				return nil, untranslatable("labels: %v", err)
			}
			if len(m) > 0 {
				labels, _ = marshal(m)
			}
		default:
			// cachedContent, serviceTier, store, continuationToken, model and
			// anything unknown: no exact equivalent, or it would be dropped.
			return nil, untranslatable("field %q", f.name)
		}
	}
	if !haveCont || len(contents) == 0 {
		return nil, untranslatable("no contents")
	}
	if newTurns < 1 || newTurns > len(contents) || (prevID == "" && newTurns != len(contents)) {
		return nil, fmt.Errorf("%d of %d contents, previous interaction %q: %w", newTurns, len(contents), prevID, ErrTurns)
	}
	var steps []json.RawMessage
	for i, c := range contents[len(contents)-newTurns:] {
		s, err := contentSteps(c)
		if err != nil {
			return nil, fmt.Errorf("contents[%d]: %w", len(contents)-newTurns+i, err)
		}
		steps = append(steps, s...)
	}
	out.set("input", list(steps))
	if prevID != "" {
		out.set("previous_interaction_id", prevID)
	}
	if system != nil {
		out.set("system_instruction", system)
	}
	thoughts := false
	for _, f := range genFields {
		if err := genField(gen, f, &format, &thoughts); err != nil {
			return nil, fmt.Errorf("generationConfig: %w", err)
		}
	}
	// generateContent returns thought parts only to a client that set
	// includeThoughts; the Interactions default may be "auto", so the
	// others ask for none explicitly.
	if thoughts {
		gen.set("thinking_summaries", "auto")
	} else {
		gen.set("thinking_summaries", "none")
	}
	if choice != nil {
		gen.set("tool_choice", choice)
	}
	if !gen.empty {
		out.set("generation_config", gen.raw())
	}
	if tools != nil {
		out.set("tools", tools)
	}
	if format != nil {
		out.set("response_format", format)
	}
	if safety != nil {
		out.set("safety_settings", safety)
	}
	if labels != nil {
		out.set("labels", labels)
	}
	out.set("store", true)
	out.set("stream", stream)
	return out.raw(), nil
}

// systemText returns the text of a systemInstruction made of exactly one
// text part. Several parts are refused: the Interactions field is one
// string, and how the API joins parts is not documented.
func systemText(raw json.RawMessage) (string, error) {
	fs, err := object(raw)
	if err != nil {
		return "", err
	}
	var text *string
	for _, f := range fs {
		switch f.name {
		case "role":
			// ignored by the API (gemini-api.md §4.1)
			if _, err := str(f.raw); err != nil {
				return "", err
			}
		case "parts":
			parts, err := array(f.raw)
			if err != nil {
				return "", err
			}
			if len(parts) != 1 {
				return "", untranslatable("%d parts", len(parts))
			}
			pf, err := object(parts[0])
			if err != nil {
				return "", err
			}
			if len(pf) != 1 || pf[0].name != "text" {
				return "", untranslatable("non-text part")
			}
			t, err := str(pf[0].raw)
			if err != nil {
				return "", err
			}
			text = &t
		default:
			return "", untranslatable("field %q", f.name)
		}
	}
	if text == nil {
		return "", untranslatable("no parts")
	}
	return *text, nil
}

// contentSteps translates one Content into Interactions steps: a user
// content becomes one user_input step, or one function_result step per
// functionResponse part; a model content becomes model_output and
// function_call steps in part order.
func contentSteps(raw json.RawMessage) ([]json.RawMessage, error) {
	fs, err := object(raw)
	if err != nil {
		return nil, err
	}
	role := "user"
	var parts []json.RawMessage
	for _, f := range fs {
		switch f.name {
		case "role":
			if role, err = str(f.raw); err != nil {
				return nil, err
			}
		case "parts":
			if parts, err = array(f.raw); err != nil {
				return nil, err
			}
		default:
			return nil, untranslatable("field %q", f.name)
		}
	}
	if len(parts) == 0 {
		return nil, untranslatable("no parts")
	}
	switch role {
	case "", "user":
		return userSteps(parts)
	case "model":
		return modelSteps(parts)
	}
	return nil, untranslatable("role %q", role)
}

func userSteps(parts []json.RawMessage) ([]json.RawMessage, error) {
	var content, results []json.RawMessage
	for i, p := range parts {
		fs, err := object(p)
		if err != nil {
			return nil, err
		}
		if len(fs) == 1 && fs[0].name == "functionResponse" {
			r, err := functionResult(fs[0].raw)
			if err != nil {
				return nil, fmt.Errorf("parts[%d].functionResponse: %w", i, err)
			}
			results = append(results, r)
			continue
		}
		c, err := inputContent(fs)
		if err != nil {
			return nil, fmt.Errorf("parts[%d]: %w", i, err)
		}
		content = append(content, c)
	}
	if len(content) > 0 && len(results) > 0 {
		// One content mixing function responses and other parts has no
		// documented step equivalent.
		return nil, untranslatable("function responses mixed with other parts")
	}
	if len(results) > 0 {
		return results, nil
	}
	o := newObj()
	o.set("type", "user_input")
	o.set("content", list(content))
	return []json.RawMessage{o.raw()}, nil
}

// inputContent translates a user part (text, inlineData or fileData with a
// MIME type the Interactions content types list) into a Content.
func inputContent(fs []field) (json.RawMessage, error) {
	if len(fs) != 1 {
		names := make([]string, len(fs))
		for i, f := range fs {
			names[i] = f.name
		}
		return nil, untranslatable("part fields %v", names)
	}
	f := fs[0]
	o := newObj()
	switch f.name {
	case "text":
		t, err := str(f.raw)
		if err != nil {
			return nil, err
		}
		if t == "" {
			return nil, untranslatable("empty text")
		}
		o.set("type", "text")
		o.set("text", t)
	case "inlineData", "fileData":
		bf, err := object(f.raw)
		if err != nil {
			return nil, err
		}
		var mime, data, uri string
		for _, b := range bf {
			v, err := str(b.raw)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", f.name, b.name, err)
			}
			switch {
			case b.name == "mimeType":
				mime = v
			case b.name == "data" && f.name == "inlineData":
				data = v
			case b.name == "fileUri" && f.name == "fileData":
				uri = v
			default:
				return nil, untranslatable("%s.%s", f.name, b.name)
			}
		}
		typ := mediaType(mime)
		if typ == "" {
			return nil, untranslatable("MIME type %q", mime)
		}
		o.set("type", typ)
		if f.name == "inlineData" {
			if data == "" {
				return nil, untranslatable("inlineData without data")
			}
			o.set("data", data)
		} else {
			if uri == "" {
				return nil, untranslatable("fileData without fileUri")
			}
			o.set("uri", uri)
		}
		o.set("mime_type", mime)
	default:
		return nil, untranslatable("part field %q", f.name)
	}
	return o.raw(), nil
}

// mediaTypes are the MIME types the Interactions content types enumerate
// (Go SDK interactions/models/interactions/{image,audio,video,document}content.go).
var mediaTypes = map[string]string{
	"image/png": "image", "image/jpeg": "image", "image/webp": "image", "image/heic": "image",
	"image/heif": "image", "image/gif": "image", "image/bmp": "image", "image/tiff": "image",
	"audio/wav": "audio", "audio/mp3": "audio", "audio/aiff": "audio", "audio/aac": "audio",
	"audio/ogg": "audio", "audio/flac": "audio", "audio/mpeg": "audio", "audio/m4a": "audio",
	"audio/l16": "audio", "audio/opus": "audio", "audio/alaw": "audio", "audio/mulaw": "audio",
	"audio/webm": "audio",
	"video/mp4":  "video", "video/mpeg": "video", "video/mpg": "video", "video/mov": "video",
	"video/avi": "video", "video/x-flv": "video", "video/webm": "video", "video/wmv": "video",
	"video/3gpp":      "video",
	"application/pdf": "document", "text/csv": "document",
}

func mediaType(mime string) string { return mediaTypes[mime] }

// functionResult translates {id, name, response} into a function_result
// step. The id is required: it is what ties the result to the stored
// function_call step.
func functionResult(raw json.RawMessage) (json.RawMessage, error) {
	id, name, resp, err := idNameObject(raw, "response")
	if err != nil {
		return nil, err
	}
	if id == "" || name == "" || resp == nil {
		return nil, untranslatable("functionResponse needs id, name and response")
	}
	o := newObj()
	o.set("type", "function_result")
	o.set("call_id", id)
	o.set("name", name)
	o.set("result", resp)
	return o.raw(), nil
}

// idNameObject reads a functionCall or functionResponse part value: its
// "id" and "name" strings and the object member named field, compacted
// (nil when absent). Any other member makes it untranslatable.
func idNameObject(raw json.RawMessage, field string) (id, name string, obj json.RawMessage, err error) {
	fs, err := object(raw)
	if err != nil {
		return "", "", nil, err
	}
	for _, f := range fs {
		switch f.name {
		case "id":
			id, err = str(f.raw)
		case "name":
			name, err = str(f.raw)
		case field:
			if t := strings.TrimSpace(string(f.raw)); !strings.HasPrefix(t, "{") {
				return "", "", nil, untranslatable("%s is not an object", field)
			}
			obj, err = compact(f.raw)
		default:
			return "", "", nil, untranslatable("field %q", f.name)
		}
		if err != nil {
			return "", "", nil, err
		}
	}
	return id, name, obj, nil
}

// modelSteps translates a model content: runs of text parts become one
// model_output step, each functionCall a function_call step. Parts with a
// thoughtSignature or thought:true are refused (see package doc).
func modelSteps(parts []json.RawMessage) ([]json.RawMessage, error) {
	var steps, texts []json.RawMessage
	flush := func() {
		if len(texts) > 0 {
			o := newObj()
			o.set("type", "model_output")
			o.set("content", list(texts))
			steps = append(steps, o.raw())
			texts = nil
		}
	}
	for i, p := range parts {
		fs, err := object(p)
		if err != nil {
			return nil, err
		}
		if len(fs) != 1 {
			return nil, untranslatable("parts[%d]: %d fields", i, len(fs))
		}
		switch fs[0].name {
		case "text":
			t, err := str(fs[0].raw)
			if err != nil {
				return nil, err
			}
			o := newObj()
			o.set("type", "text")
			o.set("text", t)
			texts = append(texts, o.raw())
		case "functionCall":
			flush()
			s, err := callStep(fs[0].raw)
			if err != nil {
				return nil, fmt.Errorf("parts[%d].functionCall: %w", i, err)
			}
			steps = append(steps, s)
		default:
			return nil, untranslatable("parts[%d]: model part field %q", i, fs[0].name)
		}
	}
	flush()
	return steps, nil
}

func callStep(raw json.RawMessage) (json.RawMessage, error) {
	id, name, args, err := idNameObject(raw, "args")
	if err != nil {
		return nil, err
	}
	if args == nil {
		args = json.RawMessage("{}")
	}
	if id == "" || name == "" {
		return nil, untranslatable("functionCall needs id and name")
	}
	o := newObj()
	o.set("type", "function_call")
	o.set("id", id)
	o.set("name", name)
	o.set("arguments", args)
	return o.raw(), nil
}
