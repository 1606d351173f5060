package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// Record is one line of a recording (`serve --record`): the request path
// with its query, the key parameter removed, and the JSON body.
type Record struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

// ModelSavings is what the proxy would have saved on the recorded requests
// of one model (or in total).
type ModelSavings struct {
	Model    string `json:"model"`
	Requests int    `json:"requests"`
	// Rewritten counts the requests the rewrite changed; Failed those it
	// refused (they would have been forwarded unchanged).
	Rewritten int `json:"rewritten"`
	Failed    int `json:"failed"`
	// BytesBefore and BytesAfter are request bytes without and with the
	// proxy.
	BytesBefore int `json:"bytes_before"`
	BytesAfter  int `json:"bytes_after"`
	// TokensBefore and TokensAfter are prompt tokens as the emulator's
	// tokenizer counts them (emulator.CountTokens documents its accuracy);
	// Uncounted is the number of requests the tokenizer refused.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	Uncounted    int `json:"uncounted"`
}

// Saved is the share of prompt tokens saved.
func (m ModelSavings) Saved() float64 { return share(m.TokensBefore-m.TokensAfter, m.TokensBefore) }

var modelRE = regexp.MustCompile(`models/([^/:]+):(generateContent|streamGenerateContent)`)

// Replay reads a recording from r and runs each request, in order, through
// rewrite.Request with opts and a fresh (empty) Verifier state: v may be
// nil. It returns per-model savings sorted by model, and the total.
func Replay(r io.Reader, opts rewrite.Options, v rewrite.Verifier) ([]ModelSavings, ModelSavings, error) {
	// One lenient emulator per model, so that model names the emulator
	// does not serve by default are still counted.
	emus := map[string]http.Handler{}
	by := map[string]*ModelSavings{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, ModelSavings{}, fmt.Errorf("recording line %d: %w", line, err)
		}
		m := modelRE.FindStringSubmatch(rec.Path)
		if m == nil {
			continue
		}
		ms := by[m[1]]
		if ms == nil {
			ms = &ModelSavings{Model: m[1]}
			by[m[1]] = ms
		}
		ms.Requests++
		before := []byte(rec.Body)
		after, rep, err := rewrite.Request(before, opts, v)
		if err != nil {
			ms.Failed++
			after = before
		} else if rep.Changed() {
			ms.Rewritten++
		}
		ms.BytesBefore += len(before)
		ms.BytesAfter += len(after)
		emu := emus[m[1]]
		if emu == nil {
			emu = emulator.New(emulator.Options{Lenient: true, Models: []string{m[1]}})
			emus[m[1]] = emu
		}
		tb, err1 := countTokens(emu, m[1], before)
		ta, err2 := countTokens(emu, m[1], after)
		if err1 != nil || err2 != nil {
			ms.Uncounted++
			continue
		}
		ms.TokensBefore += tb
		ms.TokensAfter += ta
	}
	if err := sc.Err(); err != nil {
		return nil, ModelSavings{}, fmt.Errorf("reading recording: %w", err)
	}
	var out []ModelSavings
	total := ModelSavings{Model: "total"}
	for _, ms := range by {
		out = append(out, *ms)
		total.Requests += ms.Requests
		total.Rewritten += ms.Rewritten
		total.Failed += ms.Failed
		total.BytesBefore += ms.BytesBefore
		total.BytesAfter += ms.BytesAfter
		total.TokensBefore += ms.TokensBefore
		total.TokensAfter += ms.TokensAfter
		total.Uncounted += ms.Uncounted
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out, total, nil
}

// countTokens asks the in-process emulator's countTokens for the prompt
// tokens of a generateContent body.
func countTokens(emu http.Handler, modelID string, body []byte) (int, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return 0, err
	}
	req["model"] = json.RawMessage(fmt.Sprintf("%q", "models/"+modelID))
	in, err := json.Marshal(map[string]any{"generateContentRequest": req})
	if err != nil {
		return 0, err
	}
	r := httptest.NewRequest(http.MethodPost, "/v1beta/models/"+modelID+":countTokens", bytes.NewReader(in))
	r.Header.Set("X-Goog-Api-Key", "bench-replay")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	emu.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		return 0, fmt.Errorf("countTokens: status %d: %s", w.Code, w.Body.Bytes())
	}
	var res struct {
		TotalTokens int `json:"totalTokens"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		return 0, err
	}
	return res.TotalTokens, nil
}
