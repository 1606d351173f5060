package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// servedSet is a Verifier fed by OnServed, as cmd/gemini-proxy wires
// cache.Store.RecordServed: texts served, matched without their
// surrounding white space.
type servedSet struct {
	mu    sync.Mutex
	texts map[string]bool
}

func (s *servedSet) record(_, text string, _ bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.texts[strings.TrimSpace(text)] = true
}

func (s *servedSet) Served(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.texts[strings.TrimSpace(text)]
}

// TestServedRecordedBeforeClientHasIt reproduces issue 13's defect 4: a
// client that sends its next turn, on a new connection, the instant the
// answer arrived must find that answer recorded as served, so that the
// flattened transcript quoting it is un-flattened. Answers of a few bytes
// to tens of kilobytes end in the server's buffer or bypass it; every turn
// must be verified, not most of them.
func TestServedRecordedBeforeClientHasIt(t *testing.T) {
	var mu sync.Mutex
	answers := map[string]string{} // question → answer
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Contents []struct {
				Parts []struct{ Text string } `json:"parts"`
			} `json:"contents"`
		}
		json.NewDecoder(r.Body).Decode(&req) //nolint:errcheck // checked by the client
		q := ""
		if n := len(req.Contents); n > 0 && len(req.Contents[n-1].Parts) > 0 {
			q = req.Contents[n-1].Parts[0].Text
		}
		mu.Lock()
		a := answers[q]
		mu.Unlock()
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
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	const url = "/v1beta/models/gemini-2.5-flash:generateContent"
	post := func(text string) (int, []byte) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}})
		req, _ := http.NewRequest("POST", f.front.URL+url, strings.NewReader(string(body)))
		res, got := do(t, client, req)
		return res.StatusCode, got
	}
	sizes := []int{40, 300, 1500, 3000, 9000, 40000}
	failed := 0
	const rounds = 30
	for i := range rounds {
		q1 := fmt.Sprintf("Question %d: explain the handler.", i)
		a1 := fmt.Sprintf("Answer %d. ", i) + strings.Repeat("The handler returns 405 for other methods. ", sizes[i%len(sizes)]/44+1)
		q2 := fmt.Sprintf("And the status code for round %d?", i)
		mu.Lock()
		answers[q1] = a1
		mu.Unlock()
		if code, _ := post(q1); code != 200 {
			t.Fatalf("round %d: status %d", i, code)
		}
		// At once, on a new connection: the transcript quoting the answer.
		transcript := "User: " + q1 + "\nAssistant: " + a1 + "\nUser: " + q2
		if code, _ := post(transcript); code != 200 {
			t.Fatalf("round %d: status %d", i, code)
		}
		var got struct {
			Contents []json.RawMessage `json:"contents"`
		}
		if err := json.Unmarshal(be.last(t).Body, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Contents) != 3 {
			failed++
			t.Errorf("round %d (answer of %d bytes): the transcript reached the upstream as %d contents, not un-flattened into 3", i, len(a1), len(got.Contents))
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d answers were not recorded as served before the client had them", failed, rounds)
	}
}
