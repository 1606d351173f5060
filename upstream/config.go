package upstream

import (
	"encoding/json"
	"fmt"
	"strings"
)

// genField translates one generationConfig member into gen (the
// Interactions generation_config) or into *format (response_format), and
// sets *thoughts when thinkingConfig.includeThoughts is true.
func genField(gen *obj, f field, format *json.RawMessage, thoughts *bool) error {
	if isNull(f.raw) {
		return nil
	}
	switch f.name {
	case "temperature", "topP", "seed", "maxOutputTokens":
		n, err := number(f.raw)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		gen.set(snake(f.name), n)
	case "stopSequences":
		var ss []string
		if err := json.Unmarshal(f.raw, &ss); err != nil {
			return untranslatable("stopSequences: %v", err)
		}
		if len(ss) > 0 {
			b, _ := marshal(ss)
			gen.set("stop_sequences", json.RawMessage(b))
		}
	case "candidateCount":
		// One candidate is the default and all Interactions can return.
		if n, err := number(f.raw); err != nil || string(n) != "1" {
			return untranslatable("candidateCount %s", short(f.raw))
		}
	case "thinkingConfig":
		return thinking(gen, f.raw, thoughts)
	case "responseMimeType", "responseJsonSchema":
		// handled together in responseFormat; collected by the caller
		return responseFormatField(f, format)
	case "responseModalities":
		var ms []string
		if err := json.Unmarshal(f.raw, &ms); err != nil || len(ms) != 1 || ms[0] != "TEXT" {
			return untranslatable("responseModalities %s", short(f.raw))
		}
	default:
		// topK (no Interactions field), responseSchema (OpenAPI dialect),
		// penalties, logprobs, mediaResolution, speech/image configs, …
		return untranslatable("field %q", f.name)
	}
	return nil
}

// responseFormatField merges responseMimeType and responseJsonSchema into
// one text response_format {"type":"text","mime_type","schema"}.
func responseFormatField(f field, format *json.RawMessage) error {
	var cur struct {
		Type     string          `json:"type"`
		MimeType string          `json:"mime_type,omitempty"`
		Schema   json.RawMessage `json:"schema,omitempty"`
	}
	cur.Type = "text"
	if *format != nil {
		_ = json.Unmarshal(*format, &cur)
	}
	switch f.name {
	case "responseMimeType":
		m, err := str(f.raw)
		if err != nil {
			return err
		}
		if m != "text/plain" && m != "application/json" {
			return untranslatable("responseMimeType %q", m)
		}
		cur.MimeType = m
	case "responseJsonSchema":
		s, err := compact(f.raw)
		if err != nil {
			return err
		}
		cur.Schema = s
	}
	if cur.Schema != nil && cur.MimeType != "" && cur.MimeType != "application/json" {
		return untranslatable("responseJsonSchema with %q", cur.MimeType)
	}
	b, err := marshal(cur)
	if err != nil {
		return err
	}
	*format = b
	return nil
}

// thinking translates thinkingConfig: thinkingLevel → thinking_level,
// includeThoughts → *thoughts (the caller writes thinking_summaries).
// thinkingBudget has no equivalent.
func thinking(gen *obj, raw json.RawMessage, thoughts *bool) error {
	fs, err := object(raw)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if isNull(f.raw) {
			continue
		}
		switch f.name {
		case "thinkingLevel":
			l, err := str(f.raw)
			if err != nil {
				return err
			}
			switch l {
			case "MINIMAL", "LOW", "MEDIUM", "HIGH":
				gen.set("thinking_level", strings.ToLower(l))
			default:
				return untranslatable("thinkingLevel %q", l)
			}
		case "includeThoughts":
			b, err := boolean(f.raw)
			if err != nil {
				return err
			}
			*thoughts = b
		default:
			// thinkingBudget (even 0: it switches thinking off, which no
			// thinking_level expresses exactly).
			return untranslatable("thinkingConfig.%s", f.name)
		}
	}
	return nil
}

// toolList translates tools. Only function declarations with a JSON Schema
// (parametersJsonSchema) or no parameters are exact: server-side tools
// (googleSearch, codeExecution, urlContext, …) answer with steps and
// metadata FromInteraction cannot rebuild exactly (groundingMetadata,
// executableCode parts), so they are refused too.
func toolList(raw json.RawMessage) (json.RawMessage, error) {
	tools, err := array(raw)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for i, t := range tools {
		fs, err := object(t)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			if f.name != "functionDeclarations" {
				return nil, untranslatable("tools[%d].%s", i, f.name)
			}
			decls, err := array(f.raw)
			if err != nil {
				return nil, err
			}
			for j, d := range decls {
				fn, err := function(d)
				if err != nil {
					return nil, fmt.Errorf("tools[%d].functionDeclarations[%d]: %w", i, j, err)
				}
				out = append(out, fn)
			}
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return list(out), nil
}

func function(raw json.RawMessage) (json.RawMessage, error) {
	fs, err := object(raw)
	if err != nil {
		return nil, err
	}
	o := newObj()
	o.set("type", "function")
	var name string
	for _, f := range fs {
		switch f.name {
		case "name":
			if name, err = str(f.raw); err != nil {
				return nil, err
			}
			o.set("name", name)
		case "description":
			d, err := str(f.raw)
			if err != nil {
				return nil, err
			}
			o.set("description", d)
		case "parametersJsonSchema":
			p, err := compact(f.raw)
			if err != nil {
				return nil, err
			}
			o.set("parameters", p)
		default:
			// parameters (OpenAPI-subset Schema, a different dialect than the
			// JSON Schema Interactions takes), response, behavior, …
			return nil, untranslatable("field %q", f.name)
		}
	}
	if name == "" {
		return nil, untranslatable("function without name")
	}
	return o.raw(), nil
}

// toolChoice translates toolConfig.functionCallingConfig into
// generation_config.tool_choice: the mode alone as a string, with
// allowedFunctionNames as {"allowed_tools":{"mode","tools"}}.
func toolChoice(raw json.RawMessage) (json.RawMessage, error) {
	fs, err := object(raw)
	if err != nil {
		return nil, err
	}
	var out json.RawMessage
	for _, f := range fs {
		if f.name != "functionCallingConfig" {
			return nil, untranslatable("toolConfig.%s", f.name)
		}
		ffs, err := object(f.raw)
		if err != nil {
			return nil, err
		}
		var mode string
		var names []string
		haveNames := false
		for _, g := range ffs {
			switch g.name {
			case "mode":
				if mode, err = str(g.raw); err != nil {
					return nil, err
				}
			case "allowedFunctionNames":
				haveNames = true
				if err := json.Unmarshal(g.raw, &names); err != nil {
					return nil, untranslatable("allowedFunctionNames: %v", err)
				}
			default:
				return nil, untranslatable("functionCallingConfig.%s", g.name)
			}
		}
		switch mode {
		case "AUTO", "ANY", "NONE", "VALIDATED":
		default:
			return nil, untranslatable("mode %q", mode)
		}
		m := strings.ToLower(mode)
		if haveNames {
			b, _ := marshal(map[string]any{"allowed_tools": map[string]any{"mode": m, "tools": names}})
			out = b
		} else {
			out, _ = marshal(m)
		}
	}
	return out, nil
}

var harmCategories = map[string]string{
	"HARM_CATEGORY_HATE_SPEECH":       "hate_speech",
	"HARM_CATEGORY_DANGEROUS_CONTENT": "dangerous_content",
	"HARM_CATEGORY_HARASSMENT":        "harassment",
	"HARM_CATEGORY_SEXUALLY_EXPLICIT": "sexually_explicit",
	"HARM_CATEGORY_CIVIC_INTEGRITY":   "civic_integrity",
}

var thresholds = map[string]string{
	"BLOCK_LOW_AND_ABOVE":    "block_low_and_above",
	"BLOCK_MEDIUM_AND_ABOVE": "block_medium_and_above",
	"BLOCK_ONLY_HIGH":        "block_only_high",
	"BLOCK_NONE":             "block_none",
	"OFF":                    "off",
}

// safetyList translates safetySettings [{category, threshold}] into
// safety_settings [{type, threshold}].
func safetyList(raw json.RawMessage) (json.RawMessage, error) {
	items, err := array(raw)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	for i, it := range items {
		fs, err := object(it)
		if err != nil {
			return nil, err
		}
		var cat, th string
		for _, f := range fs {
			v, err := str(f.raw)
			if err != nil {
				return nil, fmt.Errorf("safetySettings[%d].%s: %w", i, f.name, err)
			}
			switch f.name {
			case "category":
				cat = harmCategories[v]
			case "threshold":
				th = thresholds[v]
			default:
				return nil, untranslatable("safetySettings[%d].%s", i, f.name)
			}
		}
		if cat == "" || th == "" {
			return nil, untranslatable("safetySettings[%d]", i)
		}
		o := newObj()
		o.set("type", cat)
		o.set("threshold", th)
		out = append(out, o.raw())
	}
	if len(out) == 0 {
		return nil, nil
	}
	return list(out), nil
}

// snake converts a lowerCamelCase name to snake_case.
func snake(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
