package testutil

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

// RecordingsEnv names the environment variable that points at the
// directory of recorded Gemini API exchanges when it is not found next to
// the repository (see Recordings).
const RecordingsEnv = "GEMINI_PROXY_RECORDINGS"

// Recording is one real HTTP exchange with the Gemini Developer API, as
// stored in shared/gemini-recordings (its README gives each file's
// source, licence and exactness).
type Recording struct {
	// Name is the file name without ".json".
	Name           string              `json:"-"`
	Method         string              `json:"method"`
	Path           string              `json:"path"`
	RequestHeaders map[string][]string `json:"request_headers"`
	// RequestBody is the request JSON; nil when the source did not record
	// the request.
	RequestBody      *string `json:"request_body"`
	RequestBodyExact bool    `json:"request_body_exact"`
	Note             string  `json:"note"`
	Status           int     `json:"status"`
	// ResponseHeaders are as recorded; their names' case varies by source.
	ResponseHeaders map[string][]string `json:"response_headers"`
	// ResponseHeadersKnown is false when only the content type is implied.
	ResponseHeadersKnown *bool  `json:"response_headers_known"`
	ResponseBody         string `json:"response_body"`
	// ResponseBodyExact reports whether ResponseBody is the (gunzipped)
	// wire bytes.
	ResponseBodyExact bool `json:"response_body_exact"`
	// ResponseBodyGzipBase64 is the gzip body exactly as recorded, when the
	// source kept it.
	ResponseBodyGzipBase64 string `json:"response_body_gzip_base64"`
	// ResponseEventPayloads are the per-event JSON payloads of an
	// Interactions stream.
	ResponseEventPayloads []string `json:"response_event_payloads"`
	Derived               struct {
		Events            int             `json:"events"`
		LastUsageMetadata json.RawMessage `json:"last_usage_metadata"`
		ModelVersions     []string        `json:"model_versions"`
	} `json:"derived"`
}

// Header returns the first recorded response header named name, matched
// without regard to case.
func (r *Recording) Header(name string) string {
	for k, vs := range r.ResponseHeaders {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// Stream reports whether the recorded request is a streamGenerateContent
// call or a streamed interaction.
func (r *Recording) Stream() bool {
	return strings.Contains(r.Path, ":streamGenerateContent") || strings.Contains(r.ResponseBody, "event: interaction.")
}

// SSE reports whether the recorded response is a server-sent event stream.
func (r *Recording) SSE() bool { return strings.Contains(r.Path, "alt=sse") }

// Events returns the JSON documents of the recorded response body: the
// body itself for a unary answer, the elements of a JSON-array stream,
// the data payloads of an SSE stream.
func (r *Recording) Events() ([]json.RawMessage, error) {
	return SplitEvents([]byte(r.ResponseBody), r.SSE() || strings.HasPrefix(r.ResponseBody, "event: "))
}

// SplitEvents returns the JSON documents of a response body: the data
// payloads of an SSE stream (sse true; "[DONE]" is skipped), the elements
// of a JSON array, or the body itself.
func SplitEvents(body []byte, sse bool) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if sse {
		for _, line := range strings.Split(string(body), "\n") {
			line = strings.TrimRight(line, "\r")
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			data = strings.TrimSpace(data)
			if data == "[DONE]" {
				continue
			}
			out = append(out, json.RawMessage(data))
		}
		return out, nil
	}
	t := bytes.TrimSpace(body)
	if len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &out); err != nil {
			return nil, err
		}
		return out, nil
	}
	return []json.RawMessage{t}, nil
}

// RecordingsDir returns the directory of recorded exchanges: $RecordingsEnv
// when set, else the first shared/gemini-recordings found walking up from
// this package's directory (the repository sits next to shared/ in the
// work area, or inside it). ok is false when there is none.
func RecordingsDir() (string, bool) {
	if d := os.Getenv(RecordingsEnv); d != "" {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d, true
		}
		return "", false
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", false
	}
	for dir := filepath.Dir(file); ; {
		cand := filepath.Join(dir, "shared", "gemini-recordings")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Recordings loads every recorded exchange, sorted by name. It skips the
// test when the directory is absent (a fresh clone has no shared/), so
// tests built on it pass there and check real traffic where it exists.
func Recordings(t testing.TB) []*Recording {
	t.Helper()
	dir, ok := RecordingsDir()
	if !ok {
		t.Skipf("no recorded Gemini traffic: neither $%s nor a shared/gemini-recordings directory above the repository", RecordingsEnv)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Skipf("no recordings in %s", dir)
	}
	sort.Strings(names)
	var out []*Recording
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		r := &Recording{}
		if err := json.Unmarshal(b, r); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		r.Name = strings.TrimSuffix(filepath.Base(n), ".json")
		out = append(out, r)
	}
	return out
}

// Shape returns the field paths of JSON document v with their JSON types,
// e.g. "candidates[].content.parts[].text:string". Array elements share
// the path "[]"; members of objects under a path in free (such as
// "candidates[].content.parts[].functionCall.args") are not descended
// into, as their names are the caller's data.
func Shape(v any, free ...string) []string {
	set := map[string]bool{}
	shapeInto(set, "", v, free)
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func shapeInto(set map[string]bool, path string, v any, free []string) {
	typ := "null"
	switch x := v.(type) {
	case map[string]any:
		typ = "object"
		if !slices.Contains(free, path) {
			for k, e := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				shapeInto(set, p, e, free)
			}
		}
	case []any:
		typ = "array"
		for _, e := range x {
			shapeInto(set, path+"[]", e, free)
		}
	case string:
		typ = "string"
	case float64, json.Number:
		typ = "number"
	case bool:
		typ = "bool"
	}
	if path != "" {
		set[path+":"+typ] = true
	}
}
