package emulator

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// apiError is a Google-shaped error: {"error":{"code","message","status","details"}}.
type apiError struct {
	Code    int
	Status  string
	Message string
	Details []any
	header  http.Header
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Status, e.Message) }

// statusEnums maps HTTP codes to google.rpc.Code names as the API reports them.
var statusEnums = map[int]string{
	400: "INVALID_ARGUMENT",
	401: "UNAUTHENTICATED",
	403: "PERMISSION_DENIED",
	404: "NOT_FOUND",
	409: "ABORTED",
	413: "INVALID_ARGUMENT",
	429: "RESOURCE_EXHAUSTED",
	499: "CANCELLED",
	500: "INTERNAL",
	501: "NOT_IMPLEMENTED",
	502: "UNAVAILABLE",
	503: "UNAVAILABLE",
	504: "DEADLINE_EXCEEDED",
}

// defaultMessages are the messages the API uses for statuses a fault injects.
var defaultMessages = map[int]string{
	400: "Request contains an invalid argument.",
	401: "Request had invalid authentication credentials.",
	403: "The caller does not have permission",
	404: "Requested entity was not found.",
	409: "The operation was aborted.",
	429: "Resource has been exhausted (e.g. check quota).",
	500: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
	502: "Bad Gateway",
	503: "The model is overloaded. Please try again later.",
	504: "Deadline expired before operation could complete.",
}

func statusEnum(code int) string {
	if s, ok := statusEnums[code]; ok {
		return s
	}
	switch {
	case code >= 500:
		return "INTERNAL"
	case code >= 400:
		return "FAILED_PRECONDITION"
	}
	return "UNKNOWN"
}

func newError(code int, msg string, details ...any) *apiError {
	return &apiError{Code: code, Status: statusEnum(code), Message: msg, Details: details}
}

func errInvalid(msg string, details ...any) *apiError { return newError(400, msg, details...) }

// errBadRequest is a 400 with a google.rpc.BadRequest field violation, the
// form used for JSON payload problems.
func errBadRequest(field, msg string) *apiError {
	v := map[string]any{"description": msg}
	if field != "" {
		v = map[string]any{"field": field, "description": msg}
	}
	return errInvalid(msg, map[string]any{
		"@type":           "type.googleapis.com/google.rpc.BadRequest",
		"fieldViolations": []any{v},
	})
}

// errModelNotFound is the 404 for an unknown model. The recorded texts
// differ by method: generateContent names "ModelService.ListModels",
// countTokens "ListModels".
func errModelNotFound(model, version, method string) *apiError {
	list := "ListModels"
	if method == "generateContent" || method == "streamGenerateContent" {
		list = "ModelService.ListModels"
	}
	return newError(404, fmt.Sprintf("models/%s is not found for API version %s, or is not supported for %s. Call %s to see the list of available models and their supported methods.", model, version, method, list))
}

func errMethodNotFound() *apiError { return newError(404, "Method not found.") }

func errMissingKey() *apiError {
	return newError(403, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
}

func errInvalidKey() *apiError {
	const msg = "API key not valid. Please pass a valid API key."
	return errInvalid(msg,
		map[string]any{
			"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
			"reason":   "API_KEY_INVALID",
			"domain":   "googleapis.com",
			"metadata": map[string]any{"service": "generativelanguage.googleapis.com"},
		},
		map[string]any{
			"@type":   "type.googleapis.com/google.rpc.LocalizedMessage",
			"locale":  "en-US",
			"message": msg,
		})
}

func errUnauthenticatedVertex() *apiError {
	return newError(401, "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
}

// errorBody renders the pretty-printed (2-space) error document Google sends.
func (e *apiError) body() []byte {
	type inner struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []any  `json:"details,omitempty"`
	}
	b, _ := marshalIndent(map[string]inner{"error": {e.Code, e.Message, e.Status, e.Details}})
	return append(b, '\n')
}

// marshalIndent is json.MarshalIndent without HTML escaping.
func marshalIndent(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// marshalLine renders one-line JSON in Google's SSE style: `"key": value`,
// no space after commas.
func marshalLine(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b := bytes.TrimRight(buf.Bytes(), "\n")
	out := make([]byte, 0, len(b)+len(b)/8)
	inStr, esc := false, false
	for _, c := range b {
		out = append(out, c)
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && c == ':':
			out = append(out, ' ')
		}
	}
	return out
}

// writeJSON writes a unary JSON response, gzip-compressed when the client
// accepts it (as Google does), with chunked transfer encoding, as
// recorded for answers and errors.
func writeJSON(w http.ResponseWriter, r *http.Request, code int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=UTF-8")
	if acceptsGzip(r) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = buf.Bytes()
		h.Set("Content-Encoding", "gzip")
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
	// Flushing before the handler returns keeps net/http from computing
	// a Content-Length.
	_ = http.NewResponseController(w).Flush()
}

func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			name, params, _ := strings.Cut(p, ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(params), "q="))
			return q == "" || strings.Trim(q, "0.") != ""
		}
	}
	return false
}

// writeError writes e. Stream requests get the same status; SSE requests
// keep Content-Type text/event-stream with a plain JSON body, JSON-array
// streams get the error wrapped in an array, as the real API does.
func writeError(w http.ResponseWriter, r *http.Request, e *apiError, mode streamMode) {
	for k, vs := range e.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	switch mode {
	case modeSSE:
		body := e.body()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(e.Code)
		_, _ = w.Write(body)
	case modeArray:
		body := append(append([]byte("["), bytes.TrimRight(e.body(), "\n")...), "]\n"...)
		writeJSON(w, r, e.Code, body)
	default:
		writeJSON(w, r, e.Code, e.body())
	}
}

// streamMode says how a response is framed.
type streamMode int

const (
	modeUnary streamMode = iota
	modeSSE
	modeArray
)

// interactionError is the Interactions API error shape with a string code.
func writeInteractionError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	b, _ := marshalIndent(map[string]any{"error": map[string]any{"code": code, "message": msg}})
	writeJSON(w, r, status, append(b, '\n'))
}

// marshalCompact is json.Marshal without HTML escaping.
func marshalCompact(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}
