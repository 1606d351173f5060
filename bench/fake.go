package bench

import (
	_ "embed"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// The fake upstream's answers, in the shape of the recorded Gemini API
// exchanges quoted in gemini-api.md §1.3.1 and §5.3 (see upstream/README.md).
var (
	//go:embed upstream/generate.json
	fakeUnary []byte
	//go:embed upstream/stream.sse
	fakeStream []byte
)

// FakeGemini returns the upstream the overhead runner measures the proxies
// in front of: a fixed-cost fake of the Gemini API. It reads and discards
// the request body without parsing it, then answers every generateContent
// with the same GenerateContentResponse (upstream/generate.json) and every
// streamGenerateContent?alt=sse with the same six-event stream
// (upstream/stream.sse: CRLF framing, cumulative usageMetadata, finishReason
// on the last event), flushing after each event as the real API does.
// Anything else gets a 404. Its cost per request depends only on the
// request's size (the drain), so differences between configurations are
// the configurations' own; the emulator, which parses, validates and
// tokenizes every body, would dominate medium and large requests.
func FakeGemini() http.Handler {
	return FakeGeminiWith(fakeUnary, fakeStream)
}

// FakeGeminiWith is FakeGemini answering with unary and with stream (SSE
// events, each ended by a blank line) instead: LongAnswers gives the
// long answers of issue 17's per-chunk and large-answer figures.
func FakeGeminiWith(unary, stream []byte) http.Handler {
	events := strings.SplitAfter(string(stream), "\r\n\r\n")
	events = events[:len(events)-1] // the empty tail after the last separator
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Vary", "Origin, X-Origin, Referer")
		h.Set("X-Content-Type-Options", "nosniff")
		switch {
		case r.Method != http.MethodPost:
			http.Error(w, `{"error":{"code":405,"message":"method not allowed","status":"INVALID_ARGUMENT"}}`, http.StatusMethodNotAllowed)
		case strings.HasSuffix(r.URL.Path, ":generateContent"):
			h.Set("Content-Type", "application/json; charset=UTF-8")
			_, _ = w.Write(unary)
		case strings.HasSuffix(r.URL.Path, ":streamGenerateContent") && r.URL.Query().Get("alt") == "sse":
			h.Set("Content-Type", "text/event-stream")
			h.Set("Content-Disposition", "attachment")
			rc := http.NewResponseController(w)
			for _, e := range events {
				if _, err := io.WriteString(w, e); err != nil {
					return
				}
				if err := rc.Flush(); err != nil {
					return
				}
			}
		default:
			h.Set("Content-Type", "application/json; charset=UTF-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":404,"message":"the bench's fake upstream serves only generateContent and streamGenerateContent?alt=sse","status":"NOT_FOUND"}}`)
		}
	})
}

// LongAnswers returns a unary answer of about unaryBytes, the fake's
// answer with its text repeated (escaped new lines, Markdown, code), and a
// stream of events SSE events cycling through the fake's own (the last
// one's finishReason and usage on the last), for measuring what the proxy
// costs per byte and per chunk of an answer.
func LongAnswers(unaryBytes, events int) (unary, stream []byte) {
	var doc map[string]any
	if err := json.Unmarshal(fakeUnary, &doc); err != nil {
		panic(err)
	}
	part := doc["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)
	text := part["text"].(string)
	var b strings.Builder
	for b.Len() < unaryBytes-len(fakeUnary) {
		b.WriteString(text)
		b.WriteString("\n\n")
	}
	part["text"] = b.String()
	unary, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	all := strings.SplitAfter(string(fakeStream), "\r\n\r\n")
	all = all[:len(all)-1]
	var s strings.Builder
	for i := range events - 1 {
		s.WriteString(all[i%(len(all)-1)])
	}
	s.WriteString(all[len(all)-1])
	return unary, []byte(s.String())
}

// Issue 17's answer figures: a unary answer of AnswerUnaryBytes and a
// stream of AnswerEvents events, against the fake's own six-event stream.
const (
	AnswerUnaryBytes = 256 << 10
	AnswerEvents     = 100
	// LongAnswersModel is the model whose requests FakeGeminiAll answers
	// with LongAnswers; every other model gets FakeGemini's answers.
	LongAnswersModel = "bench-long-answers"
)

// FakeGeminiAll is the upstream of `gemini-proxy bench`: FakeGemini, and
// FakeGeminiWith(LongAnswers(AnswerUnaryBytes, AnswerEvents)) for the
// requests to LongAnswersModel, so that the same proxies measure both.
func FakeGeminiAll() http.Handler {
	short := FakeGemini()
	long := FakeGeminiWith(LongAnswers(AnswerUnaryBytes, AnswerEvents))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/models/"+LongAnswersModel+":") {
			long.ServeHTTP(w, r)
			return
		}
		short.ServeHTTP(w, r)
	})
}

// AnswersSize is the overhead runner's request shape for the answer
// figures: the small request, to LongAnswersModel, so that its cells
// measure what the answer costs (unary: 256 KB; sse: 100 events).
func AnswersSize() Size {
	s := Sizes()[0]
	s.Name, s.Model = answersName, LongAnswersModel
	return s
}
