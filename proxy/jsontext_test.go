package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// structuredBody is an editor assistant's request in the shape of
// ../shared/SEED-BUILDER.md, sent naively (the whole source in every user
// turn), followed by an agent's second read of the same file through a
// tool: the rewrite replaces string values of JSON texts (json_text) and
// of a functionResponse (tool_result).
func structuredBody(t *testing.T) (body, src string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("package main\n\n")
	for i := range 30 {
		fmt.Fprintf(&b, "// f%d returns the %dth value.\nfunc f%d(x int) int { return x*%d + 1 }\n\n", i, i, i, i)
	}
	src = b.String()
	text := func(v any) map[string]any {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]any{"text": string(j)}
	}
	turn := func(role string, parts ...any) map[string]any { return map[string]any{"role": role, "parts": parts} }
	req := map[string]any{"contents": []any{
		turn("user", text(map[string]any{"mode": "ask", "prompt": "What does f3 do?", "currentSource": src})),
		turn("model", text(map[string]any{"kind": "answer", "explanation": "It returns x*3+1."})),
		turn("user", text(map[string]any{"mode": "ask", "prompt": "Read main.go from disk and compare.", "currentSource": src})),
		turn("model", map[string]any{"functionCall": map[string]any{"name": "read_file", "id": "c1", "args": map[string]any{"path": "main.go"}}}),
		turn("user", map[string]any{"functionResponse": map[string]any{"name": "read_file", "id": "c1", "response": map[string]any{"content": src}}}),
	}}
	j, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(j), src
}

// TestStructuredRewriteReachesUpstream sends a naive JSON-text session with
// a tool result through the proxy: the upstream receives valid JSON texts
// and a functionResponse whose repeated source became references, with
// keys, name and id kept, and the rewrite metrics count both sources.
func TestStructuredRewriteReachesUpstream(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]}}],"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":1,"totalTokenCount":101}}`))
	})
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
	body, src := structuredBody(t)
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(body))
	req.Header.Set("x-goog-api-key", "k")
	res, _ := do(t, rawClient(), req)
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if h := res.Header.Get(HeaderReport); !strings.Contains(h, "json_text=1") || !strings.Contains(h, "tool_result=1") {
		t.Errorf("report %q does not name json_text=1 and tool_result=1", h)
	}
	sent := be.last(t).Body
	if len(sent) >= len(body) {
		t.Fatalf("upstream got %d bytes, the client sent %d: nothing rewritten", len(sent), len(body))
	}
	var got struct {
		Contents []struct {
			Parts []map[string]json.RawMessage `json:"parts"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(sent, &got); err != nil {
		t.Fatalf("upstream body: %v", err)
	}
	var user struct {
		Mode, Prompt, CurrentSource string
	}
	var text string
	if err := json.Unmarshal(got.Contents[2].Parts[0]["text"], &text); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(text), &user); err != nil {
		t.Fatalf("the JSON text is no longer JSON: %v", err)
	}
	if user.Mode != "ask" || user.Prompt != "Read main.go from disk and compare." || !strings.HasPrefix(user.CurrentSource, "[unchanged: ") {
		t.Errorf("JSON text after the rewrite: %+v", user)
	}
	var fr struct {
		Name, ID string
		Response struct{ Content string }
	}
	if err := json.Unmarshal(got.Contents[4].Parts[0]["functionResponse"], &fr); err != nil {
		t.Fatal(err)
	}
	if fr.Name != "read_file" || fr.ID != "c1" || !strings.HasPrefix(fr.Response.Content, "[unchanged: ") || len(got.Contents[4].Parts[0]) != 1 {
		t.Errorf("functionResponse after the rewrite: %+v", fr)
	}
	if call := got.Contents[3].Parts[0]["functionCall"]; !strings.Contains(body, `"functionCall":`+string(call)+`}`) {
		t.Errorf("functionCall changed: %s", call)
	}
	waitFor(t, "rewrite recorded", func() bool {
		return testutil.ToFloat64(f.m.RewriteSourceReplacements.WithLabelValues("tool_result")) > 0
	})
	saved := float64(2 * len(src))
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"json_text replacements", testutil.ToFloat64(f.m.RewriteSourceReplacements.WithLabelValues("json_text")), 1},
		{"tool_result replacements", testutil.ToFloat64(f.m.RewriteSourceReplacements.WithLabelValues("tool_result")), 1},
		{"text replacements", testutil.ToFloat64(f.m.RewriteSourceReplacements.WithLabelValues("text")), 0},
		{"unchanged replacements", testutil.ToFloat64(f.m.RewriteReplacements.WithLabelValues("unchanged")), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	js := testutil.ToFloat64(f.m.RewriteSourceSavedBytes.WithLabelValues("json_text"))
	tr := testutil.ToFloat64(f.m.RewriteSourceSavedBytes.WithLabelValues("tool_result"))
	if js < float64(len(src))/2 || tr < float64(len(src))/2 || js+tr > saved {
		t.Errorf("saved bytes json_text %v, tool_result %v; want each over half of the %d-byte source", js, tr, len(src))
	}
}
