package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// servedPieces is a ServedWriter that keeps what it is given.
type servedPieces struct {
	mu     *sync.Mutex
	got    *[]string
	b      strings.Builder
	writes int
}

func (p *servedPieces) Grow(int) {}
func (p *servedPieces) Write(b []byte) (int, error) {
	p.writes++
	return p.b.Write(b)
}
func (p *servedPieces) WriteString(s string) (int, error) {
	p.writes++
	return p.b.WriteString(s)
}
func (p *servedPieces) Served(truncated bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.got = append(*p.got, fmt.Sprintf("%q truncated=%v", p.b.String(), truncated))
}

// TestServedTextAsOnServed checks that Options.ServedText receives exactly
// the text, and the truncation, that OnServed receives, for unary answers,
// streams of many events, thought parts, other candidates, a gzip body, an
// answer past MaxTextBytes, an error status and an empty answer; that a
// stream is written event by event; and that ExchangeWithoutText leaves
// Exchange.Text empty while OnExchange still sees the usage.
func TestServedTextAsOnServed(t *testing.T) {
	events := func(texts ...string) string {
		var b strings.Builder
		for i, x := range texts {
			b.WriteString(`data: {"candidates":[{"content":{"parts":[{"text":` + strconv.Quote(x) + `}]},"index":0}]`)
			if i == len(texts)-1 {
				b.WriteString(`,"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":4,"totalTokenCount":7}`)
			}
			b.WriteString("}\r\n\r\n")
		}
		return b.String()
	}
	unary := func(parts string) string {
		return `{"candidates":[{"content":{"parts":[` + parts + `]},"index":0},{"content":{"parts":[{"text":"other candidate"}]},"index":1}],"usageMetadata":{"promptTokenCount":3,"totalTokenCount":7}}`
	}
	big := strings.Repeat("long answer, ", MaxTextBytes/13+100)
	for _, tc := range []struct {
		name, ctype, body string
		gzip              bool
		status            int
		minWrites         int
	}{
		{name: "unary", ctype: "application/json", body: unary(`{"text":"a\nb "},{"text":"thinking","thought":true},{"text":" c\u00e9"}`), minWrites: 1},
		{name: "sse", ctype: "text/event-stream", body: events("one ", "two\n", "", "thr\u00e9e  "), minWrites: 3},
		{name: "gzip", ctype: "application/json", body: unary(`{"text":"compressed answer"}`), gzip: true, minWrites: 1},
		{name: "over MaxTextBytes", ctype: "text/event-stream", body: events(big[:len(big)/2], big[len(big)/2:]), minWrites: 2},
		{name: "error status", ctype: "application/json", body: unary(`{"text":"an error's text"}`), status: 500},
		{name: "no text", ctype: "application/json", body: `{"candidates":[],"usageMetadata":{"promptTokenCount":3}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				body := []byte(tc.body)
				if tc.gzip {
					body = gzipBytes(t, body)
					w.Header().Set("Content-Encoding", "gzip")
				}
				w.WriteHeader(max(tc.status, 200))
				w.Write(body) //nolint:errcheck // the client checks
			})
			var mu sync.Mutex
			var viaOnServed, viaText []string
			var pieces []*servedPieces
			var exchanges []Exchange
			a := newFixture(t, be.URL, Options{OnServed: func(_, text string, truncated bool) {
				mu.Lock()
				defer mu.Unlock()
				viaOnServed = append(viaOnServed, fmt.Sprintf("%q truncated=%v", text, truncated))
			}})
			b := newFixture(t, be.URL, Options{ServedText: func(string) ServedWriter {
				p := &servedPieces{mu: &mu, got: &viaText}
				pieces = append(pieces, p)
				return p
			}, ExchangeWithoutText: true, OnExchange: func(ex Exchange) {
				mu.Lock()
				defer mu.Unlock()
				exchanges = append(exchanges, ex)
			}})
			report := ""
			for _, f := range []*fixture{a, b} {
				req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`))
				res, _ := do(t, rawClient(), req)
				if res.StatusCode != max(tc.status, 200) {
					t.Fatalf("status %d", res.StatusCode)
				}
				report = res.Header.Get(HeaderReport)
			}
			// OnExchange runs after the client has its answer.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				mu.Lock()
				n := len(exchanges)
				mu.Unlock()
				if n > 0 {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(viaText, "\n") != strings.Join(viaOnServed, "\n") {
				t.Errorf("ServedText recorded\n%.300s\nOnServed\n%.300s", viaText, viaOnServed)
			}
			if len(viaOnServed) != 0 && tc.status != 0 {
				t.Errorf("a %d answer was recorded as served", tc.status)
			}
			if tc.minWrites > 0 && (len(pieces) != 1 || pieces[0].writes < tc.minWrites) {
				t.Errorf("ServedText got %d writers; want one, written at least %d times", len(pieces), tc.minWrites)
			}
			if len(exchanges) != 1 || exchanges[0].Text != "" || exchanges[0].Usage == nil || exchanges[0].Usage.PromptTokens != 3 {
				t.Errorf("exchanges %+v, want one without text, with usage", exchanges)
			} else if exchanges[0].ReportHeader != report || report == "" {
				t.Errorf("Exchange.ReportHeader %q, want the response's %s %q", exchanges[0].ReportHeader, HeaderReport, report)
			}
		})
	}
}

// gzipBytes compresses b.
func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
