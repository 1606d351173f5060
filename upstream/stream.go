package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrIncomplete is returned by StreamTranslator.Close when the interaction
// stream ended before its interaction.completed event.
var ErrIncomplete = errors.New("upstream: interaction stream ended before interaction.completed")

// StreamError is an error event received in an interaction stream, in the
// Interactions error shape ({"code":"<string>","message":…}, gemini-api.md
// §5.4).
type StreamError struct {
	Code    string
	Message string
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("upstream: interaction stream error %s: %s", e.Code, e.Message)
}

// StreamTranslator turns the SSE stream of a streamed interaction (stream:
// true) into the SSE stream streamGenerateContent?alt=sse would have sent:
// one "data: <one-line JSON>\r\n\r\n" GenerateContentResponse per text,
// thought-summary or function-call piece, then a final chunk with an empty
// text part, finishReason and usageMetadata. Each chunk is written with one
// Write call and flushed when w has a Flush method.
//
// Intermediate chunks carry usageMetadata only when the interaction event
// reports total usage (step.delta metadata.total_usage); the Gemini API
// repeats running totals on every chunk, the Interactions API does not
// always send them.
//
// A StreamTranslator is not safe for concurrent use.
type StreamTranslator struct {
	w     io.Writer
	model string

	buf      []byte   // bytes of an incomplete line
	data     []string // data lines of the current event
	id       string   // interaction id (responseId)
	status   string
	usage    *usage
	sig      string // thought signature waiting for the next part
	calls    map[int]*pendingCall
	done     bool // interaction.completed seen
	sentinel bool // [DONE] seen
	err      error
}

type pendingCall struct {
	id, name string
	args     []byte // complete arguments from step.start
	delta    strings.Builder
}

// NewStreamTranslator returns a StreamTranslator writing Gemini SSE for
// model to w.
func NewStreamTranslator(model string, w io.Writer) *StreamTranslator {
	return &StreamTranslator{w: w, model: strings.TrimPrefix(model, "models/"), calls: map[int]*pendingCall{}}
}

// Write consumes interaction SSE bytes, split anywhere, with LF or CRLF line
// ends. It returns the first error met (an untranslatable event wrapping
// ErrUntranslatable, a *StreamError, or an error of the underlying writer);
// once it has failed every later Write returns the same error.
func (t *StreamTranslator) Write(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.buf = append(t.buf, p...)
			break
		}
		line := p[:i]
		if len(t.buf) > 0 {
			line = append(t.buf, line...)
			t.buf = t.buf[:0]
		}
		p = p[i+1:]
		if err := t.line(bytes.TrimSuffix(line, []byte("\r"))); err != nil {
			t.err = err
			return n, err
		}
	}
	return n, nil
}

// Close reports whether the stream was complete: it dispatches a final
// event not followed by a blank line and returns ErrIncomplete when no
// interaction.completed event arrived. The [DONE] sentinel is not required
// (the Python and JS SDKs do not require it either, gemini-api.md §7.3).
func (t *StreamTranslator) Close() error {
	if t.err != nil {
		return t.err
	}
	if len(t.buf) > 0 {
		if err := t.line(bytes.TrimSuffix(t.buf, []byte("\r"))); err != nil {
			t.err = err
			return err
		}
		t.buf = nil
	}
	if err := t.dispatch(); err != nil {
		t.err = err
		return err
	}
	if !t.done {
		return ErrIncomplete
	}
	return nil
}

func (t *StreamTranslator) line(l []byte) error {
	if len(l) == 0 {
		return t.dispatch()
	}
	name, value, _ := bytes.Cut(l, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	if string(name) == "data" {
		t.data = append(t.data, string(value))
	}
	// event:, id:, retry: and comments carry nothing the JSON lacks.
	return nil
}

// event is the union of the interaction SSE event shapes.
type event struct {
	EventType   string          `json:"event_type"`
	Interaction *interaction    `json:"interaction"`
	Status      string          `json:"status"`
	Usage       *usage          `json:"usage"`
	Index       int             `json:"index"`
	Step        json.RawMessage `json:"step"`
	Delta       json.RawMessage `json:"delta"`
	Metadata    *struct {
		TotalUsage *usage `json:"total_usage"`
	} `json:"metadata"`
	Error *struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	} `json:"error"`
}

func (t *StreamTranslator) dispatch() error {
	if len(t.data) == 0 {
		return nil
	}
	data := strings.Join(t.data, "\n")
	t.data = t.data[:0]
	if data == "[DONE]" {
		t.sentinel = true
		return nil
	}
	if t.done {
		return fmt.Errorf("event after interaction.completed: %w", ErrUntranslatable)
	}
	var ev event
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return fmt.Errorf("upstream: decoding interaction event: %w", err)
	}
	if ev.Error != nil {
		code := strings.Trim(string(ev.Error.Code), `"`)
		return &StreamError{Code: code, Message: ev.Error.Message}
	}
	switch ev.EventType {
	case "interaction.created":
		if ev.Interaction != nil {
			t.id = ev.Interaction.ID
		}
	case "interaction.status_update":
		t.status = ev.Status
		if ev.Usage != nil {
			t.usage = ev.Usage
		}
	case "step.start":
		return t.start(ev)
	case "step.delta":
		return t.delta(ev)
	case "step.stop":
		if ev.Usage != nil {
			t.usage = ev.Usage
		}
		return t.stop(ev.Index)
	case "interaction.completed":
		return t.complete(ev.Interaction)
	default:
		return fmt.Errorf("event type %q: %w", ev.EventType, ErrUntranslatable)
	}
	return nil
}

func (t *StreamTranslator) start(ev event) error {
	var s step
	if err := json.Unmarshal(ev.Step, &s); err != nil {
		return fmt.Errorf("upstream: decoding step: %w", err)
	}
	switch s.Type {
	case "user_input", "function_result":
		return nil
	case "thought":
		if s.Signature != "" {
			t.sig = s.Signature
		}
		for _, c := range s.Summary {
			if c.Type != "text" {
				return fmt.Errorf("thought summary of type %q: %w", c.Type, ErrUntranslatable)
			}
			txt := c.Text
			if err := t.emit(part{Text: &txt, Thought: true}, nil); err != nil {
				return err
			}
		}
	case "model_output":
		for _, c := range s.Content {
			p, err := outputPart(c)
			if err != nil {
				return err
			}
			if err := t.emit(p, nil); err != nil {
				return err
			}
		}
	case "function_call":
		pc := &pendingCall{id: s.ID, name: s.Name}
		if len(s.Arguments) > 0 && !isNull(s.Arguments) {
			pc.args = s.Arguments
		}
		t.calls[ev.Index] = pc
	default:
		return fmt.Errorf("step type %q: %w", s.Type, ErrUntranslatable)
	}
	return nil
}

func (t *StreamTranslator) delta(ev event) error {
	var d struct {
		Type      string       `json:"type"`
		Text      string       `json:"text"`
		Data      string       `json:"data"`
		MimeType  string       `json:"mime_type"`
		Signature string       `json:"signature"`
		Arguments *string      `json:"arguments"`
		Content   *stepContent `json:"content"`
	}
	if err := json.Unmarshal(ev.Delta, &d); err != nil {
		return fmt.Errorf("upstream: decoding delta: %w", err)
	}
	var u *usage
	if ev.Metadata != nil {
		u = ev.Metadata.TotalUsage
	}
	switch d.Type {
	case "text", "image", "audio", "video", "document":
		p, err := outputPart(stepContent{Type: d.Type, Text: d.Text, Data: d.Data, MimeType: d.MimeType})
		if err != nil {
			return err
		}
		return t.emit(p, u)
	case "thought_summary":
		if d.Content == nil || d.Content.Type != "text" {
			return fmt.Errorf("thought summary delta: %w", ErrUntranslatable)
		}
		txt := d.Content.Text
		return t.emit(part{Text: &txt, Thought: true}, u)
	case "thought_signature":
		if t.sig != "" {
			return fmt.Errorf("two thought signatures in a row: %w", ErrUntranslatable)
		}
		t.sig = d.Signature
		return nil
	case "arguments_delta":
		pc := t.calls[ev.Index]
		if pc == nil || d.Arguments == nil {
			return fmt.Errorf("arguments delta without function call: %w", ErrUntranslatable)
		}
		pc.delta.WriteString(*d.Arguments)
		return nil
	}
	return fmt.Errorf("delta type %q: %w", d.Type, ErrUntranslatable)
}

// stop emits a function call once its arguments are complete.
func (t *StreamTranslator) stop(index int) error {
	pc := t.calls[index]
	if pc == nil {
		return nil
	}
	delete(t.calls, index)
	args := pc.args
	if pc.delta.Len() > 0 {
		if args != nil {
			return fmt.Errorf("function call with both arguments and deltas: %w", ErrUntranslatable)
		}
		args = []byte(pc.delta.String())
	}
	if args == nil {
		args = []byte("{}")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, args); err != nil || b.Len() == 0 || b.Bytes()[0] != '{' {
		return fmt.Errorf("function call arguments are not an object: %w", ErrUntranslatable)
	}
	return t.emit(part{FunctionCall: &functionCall{ID: pc.id, Name: pc.name, Args: b.Bytes()}}, nil)
}

func (t *StreamTranslator) complete(it *interaction) error {
	status := t.status
	u := t.usage
	tier := ""
	if it != nil {
		tier = it.ServiceTier
		if it.ID != "" {
			t.id = it.ID
		}
		if it.Status != "" {
			status = it.Status
		}
		if it.Usage != nil {
			u = it.Usage
		}
	}
	if len(t.calls) > 0 {
		return fmt.Errorf("function call without step.stop: %w", ErrUntranslatable)
	}
	finish, err := finishReason(status)
	if err != nil {
		return err
	}
	empty := ""
	p := part{Text: &empty}
	p.ThoughtSignature, t.sig = t.sig, ""
	if err := t.write(response{
		Candidates:    []candidate{{Content: content{Parts: []part{p}, Role: "model"}, FinishReason: finish}},
		UsageMetadata: u.metadata(tier),
		ModelVersion:  t.model,
		ResponseID:    t.id,
	}); err != nil {
		return err
	}
	t.done = true
	return nil
}

// emit writes one chunk holding p, with a waiting signature attached to
// any part except a thought summary.
func (t *StreamTranslator) emit(p part, u *usage) error {
	if !p.Thought {
		p.ThoughtSignature, t.sig = t.sig, ""
	}
	return t.write(response{
		Candidates:    []candidate{{Content: content{Parts: []part{p}, Role: "model"}}},
		UsageMetadata: u.metadata(""),
		ModelVersion:  t.model,
		ResponseID:    t.id,
	})
}

func (t *StreamTranslator) write(r response) error {
	b, err := marshal(r)
	if err != nil {
		return err
	}
	out := make([]byte, 0, len(b)+10)
	out = append(out, "data: "...)
	out = append(out, b...)
	out = append(out, "\r\n\r\n"...)
	if _, err := t.w.Write(out); err != nil {
		return err
	}
	switch f := t.w.(type) {
	case interface{ Flush() error }:
		return f.Flush()
	case interface{ Flush() }:
		f.Flush()
	}
	return nil
}
