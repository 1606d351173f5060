package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// TestJSONHistoryUnflattened plays a 3-turn session of a client that sends
// its history as a JSON array of {"role","content"} messages inside one
// user text (issue 15 item 3), against an httptest upstream whose answers
// need JSON escapes. From turn 2 the upstream receives real user/model
// turns, each model turn the served answer byte for byte; the report
// header and rewrite_replacements_total{rule="unflatten"} count them.
func TestJSONHistoryUnflattened(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Contents []json.RawMessage }
		json.NewDecoder(r.Body).Decode(&req) //nolint:errcheck // checked by the test
		a := fmt.Sprintf("Answer to %d contents: \"quoted\", C:\\dir\\file,\n\ttab — ünïcode ✓", len(req.Contents))
		body, _ := json.Marshal(map[string]any{
			"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": a}}}, "finishReason": "STOP"}},
			"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body) //nolint:errcheck // the client checks
	})
	served := &servedSet{texts: map[string]bool{}}
	f := newFixture(t, be.URL, Options{
		Rewrite:  RewriteOptions{Enabled: true},
		Verifier: func(string) rewrite.Verifier { return served },
		OnServed: served.record,
	})
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var history []msg
	var answers []string
	for i, q := range []string{"What does strings.Cut return?", "And without the separator?", "Is it faster than SplitN?"} {
		history = append(history, msg{"user", q})
		h, _ := json.Marshal(history)
		body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": string(h)}}}}})
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(string(body)))
		res, got := do(t, rawClient(), req)
		if res.StatusCode != 200 {
			t.Fatalf("turn %d: status %d: %s", i+1, res.StatusCode, got)
		}
		var out struct {
			Candidates []struct {
				Content struct{ Parts []struct{ Text string } }
			}
		}
		if err := json.Unmarshal(got, &out); err != nil || len(out.Candidates) == 0 {
			t.Fatalf("turn %d: response %s: %v", i+1, got, err)
		}
		a := out.Candidates[0].Content.Parts[0].Text
		answers = append(answers, a)
		history = append(history, msg{"assistant", a})

		var up struct {
			Contents []struct {
				Role  string
				Parts []struct{ Text string }
			}
		}
		if err := json.Unmarshal(be.last(t).Body, &up); err != nil {
			t.Fatal(err)
		}
		if len(up.Contents) != 2*i+1 {
			t.Fatalf("turn %d: %d contents upstream, want %d (report %q)", i+1, len(up.Contents), 2*i+1, res.Header.Get("X-Gemini-Proxy-Report"))
		}
		for k, c := range up.Contents {
			want := "user"
			if k%2 == 1 {
				want = "model"
				if c.Parts[0].Text != answers[k/2] {
					t.Errorf("turn %d: model turn %d = %q, want the served answer %q", i+1, k, c.Parts[0].Text, answers[k/2])
				}
			}
			if c.Role != want {
				t.Errorf("turn %d: content %d has role %q, want %q", i+1, k, c.Role, want)
			}
		}
		if rep := res.Header.Get("X-Gemini-Proxy-Report"); i > 0 && !strings.Contains(rep, fmt.Sprintf("unflatten=%d", 2*i)) {
			t.Errorf("turn %d: report %q, want unflatten=%d", i+1, rep, 2*i)
		}
	}
	waitFor(t, "the un-flattened turns counted", func() bool {
		return testutil.ToFloat64(f.m.RewriteReplacements.WithLabelValues(string(rewrite.RuleUnflatten))) == 2+4
	})
}
