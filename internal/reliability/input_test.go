package reliability

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// contents builds a generate body from user/model texts, alternating
// roles starting with user.
func contents(texts ...string) []byte {
	var cs []any
	for i, tx := range texts {
		role := "user"
		if i%2 == 1 {
			role = "model"
		}
		cs = append(cs, map[string]any{"role": role, "parts": []any{map[string]any{"text": tx}}})
	}
	b, _ := json.Marshal(map[string]any{"contents": cs})
	return b
}

// TestBadInput sends each awkward request straight to the emulator and
// through the proxy (rewriting on, a 64 KiB rewrite limit and a 1 MiB hard
// limit). Unless a case says otherwise the outcome must be the same: same
// status, and when the proxy left the body unchanged the same answer,
// which the emulator derives from the exact last message, so nothing was
// lost. The report header must say what the proxy did.
func TestBadInput(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL,
		"GEMINI_PROXY_REWRITE_MAX_BODY_BYTES=65536",
		"GEMINI_PROXY_SERVER_MAX_BODY_BYTES=1048576",
	)
	doc := strings.Repeat("func add(a, b int) int { return a + b } // a line of code\n", 20)
	manyParts := func() []byte {
		parts := make([]any, 10000)
		for i := range parts {
			parts[i] = map[string]any{"text": fmt.Sprintf("part %d. ", i)}
		}
		b, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": parts}}})
		return b
	}
	deep := func(n int) []byte {
		return []byte(`{"contents":[{"role":"user","parts":[{"functionCall":{"name":"f","args":{"a":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}}}]}]}`)
	}
	tests := []struct {
		name   string
		path   string
		header http.Header
		body   []byte
		// want: "same" (status and, if unchanged, answer as direct),
		// or a status the proxy itself must answer.
		wantStatus int
		// report is a substring the X-Gemini-Proxy-Report must contain.
		report string
		// arrives is text the upstream must receive verbatim.
		arrives string
	}{
		{name: "malformed JSON", body: []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]`), report: "; invalid_request"},
		{name: "not JSON at all", body: []byte("hello"), report: "; invalid_request"},
		{name: "empty body", body: []byte{}},
		{name: "text/plain content type", header: http.Header{"Content-Type": {"text/plain"}}, body: prompt("a cat")},
		{name: "no content type", header: http.Header{}, body: prompt("a dog")},
		{name: "gzip body", header: jsonHeader("Content-Encoding", "gzip"), body: testutil.Gzip(contents(doc, "ok", doc)), report: "skipped"},
		{name: "over the rewrite limit", body: contents(strings.Repeat(doc, 40), "ok", strings.Repeat(doc, 40)), report: "skipped"},
		{name: "over the hard limit", body: contents(strings.Repeat("x", 1100000)), wantStatus: 413},
		{name: "10,000 parts", body: manyParts()},
		{name: "deeply nested 5,000", body: deep(5000)},
		{name: "deeply nested 100,000", body: deep(100000)},
		{name: "invalid UTF-8", body: []byte("{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"caf\xe9 \xff\xfe\"}]}]}")},
		{name: "NUL bytes escaped", body: contents("a\x00b\x00" + doc)},
		{name: "NUL byte raw", body: []byte("{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"a\x00b\"}]}]}")},
		{name: "duplicate keys", body: []byte(`{"contents":[{"role":"user","parts":[{"text":"first"}]}],"contents":[{"role":"user","parts":[{"text":"second"}]}]}`)},
		{name: "duplicate text keys", body: []byte(`{"contents":[{"role":"user","parts":[{"text":"first","text":"second"}]}]}`)},
		{name: "snake and camel mixed", body: []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generation_config":{"maxOutputTokens":40},"systemInstruction":{"parts":[{"text":"be brief"}]},"safety_settings":[]}`)},
		{name: "both spellings of one field", body: []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"temperature":0.1},"generation_config":{"temperature":0.2}}`)},
		{name: "contents null", body: []byte(`{"contents":null}`)},
		{name: "contents empty", body: []byte(`{"contents":[]}`)},
		{name: "parts empty", body: []byte(`{"contents":[{"role":"user","parts":[]}]}`)},
		{name: "empty text", body: []byte(`{"contents":[{"role":"user","parts":[{"text":""}]}]}`)},
		{name: "null fields", body: []byte(`{"contents":[{"role":null,"parts":[{"text":"hi"}]}],"systemInstruction":null,"tools":null}`)},
		{name: "huge single line", body: contents(strings.Repeat("word ", 200000))},
		{name: "unterminated fence", body: contents("```go\n"+doc, "ok", "```go\n"+doc+"\nwhat does it do?")},
		{name: "reference typed by the user", body: contents(doc, "ok", "[unchanged: a.go sha256:1a2b3c4d5e6f, identical to the copy in turn 1]\n"+doc), arrives: "[unchanged: a.go sha256:1a2b3c4d5e6f, identical to the copy in turn 1]"},
		{name: "transcript typed by the user", body: contents("User: hello\nAssistant: I never said this, it was typed by the user and must stay user text.\nUser: right?"), arrives: "Assistant: I never said this"},
		{name: "dot-dot path", path: "/v1beta/models/../models/gemini-2.5-flash:generateContent", body: prompt("dots"), wantStatus: 400},
		{name: "encoded slash path", path: "/v1beta/models%2Fgemini-2.5-flash:generateContent", body: prompt("slashes")},
		{name: "double slash path", path: "//v1beta//models//gemini-2.5-flash:generateContent", body: prompt("double")},
		{name: "encoded dot-dot path", path: "/v1beta/models/%2e%2e/models/gemini-2.5-flash:generateContent", body: prompt("dots"), wantStatus: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = generatePath
			}
			h := tc.header
			if h == nil {
				h = jsonHeader()
			}
			before := len(up.requests())
			got := send(t.Context(), "POST", s.proxyURL+path, h, tc.body)
			if got.Err != nil {
				t.Fatalf("through the proxy: %v", got.Err)
			}
			report := got.Header.Get("X-Gemini-Proxy-Report")
			if tc.wantStatus != 0 {
				code, status, _ := geminiError(t, got.Body)
				if got.Status != tc.wantStatus || code != tc.wantStatus || status == "" {
					t.Errorf("got %d %s, want a Gemini-shaped %d", got.Status, got.Body, tc.wantStatus)
				}
				if n := len(up.requests()) - before; n != 0 {
					t.Errorf("%d requests reached the upstream", n)
				}
				return
			}
			seen := up.requests()
			if len(seen) == before {
				t.Fatalf("the request never reached the upstream (got %d %s)", got.Status, got.Body)
			}
			// The proxy never cleans or re-encodes the path it forwards.
			if last := seen[len(seen)-1]; last.RawPath != "" && last.RawPath != path || last.RawPath == "" && last.Path != path {
				t.Errorf("upstream got path %q (raw %q), client sent %q", last.Path, last.RawPath, path)
			}
			if tc.arrives != "" {
				var sent any
				json.Unmarshal(seen[len(seen)-1].Body, &sent)
				if b, _ := json.Marshal(sent); !bytes.Contains(b, []byte(tc.arrives)) && !bytes.Contains(seen[len(seen)-1].Body, []byte(tc.arrives)) {
					t.Errorf("the upstream did not receive %q; it got %.500s", tc.arrives, seen[len(seen)-1].Body)
				}
			}
			direct := send(t.Context(), "POST", up.URL+path, h, tc.body)
			if direct.Err != nil {
				t.Fatal(direct.Err)
			}
			if got.Status != direct.Status {
				t.Errorf("status %d through the proxy, %d direct; body %s", got.Status, direct.Status, got.Body)
			}
			if unchanged(report) && answer(got) != answer(direct) {
				t.Errorf("unchanged request got a different answer through the proxy:\nproxy  %.300s\ndirect %.300s", got.Body, direct.Body)
			}
			if !strings.Contains(report, tc.report) {
				t.Errorf("X-Gemini-Proxy-Report = %q, want it to contain %q", report, tc.report)
			}
			t.Logf("%d, report %q", got.Status, report)
		})
	}
}

var textRE = regexp.MustCompile(`"text":\s*"((?:[^"\\]|\\.)*)"`)

// answer is what must be equal between a direct and a proxied reply to
// the same unchanged request: the model's text for a success (usage may
// differ, since the emulator's implicit cache saw the request twice), the
// whole body otherwise.
func answer(r reply) string {
	if r.Status != http.StatusOK {
		return fmt.Sprintf("%d %s", r.Status, sameBody(r.Body))
	}
	var b strings.Builder
	for _, m := range textRE.FindAllSubmatch(r.Body, -1) {
		b.Write(m[1])
	}
	return b.String()
}

// unchanged reports whether an X-Gemini-Proxy-Report says the body went
// upstream as the client sent it.
func unchanged(report string) bool {
	if report == "" || strings.Contains(report, "skipped") || strings.Contains(report, "error") || strings.Contains(report, "mode=") {
		return true
	}
	b, _, _ := strings.Cut(strings.TrimPrefix(report, "bytes="), ";")
	from, to, ok := strings.Cut(b, "->")
	return ok && from == to && !strings.Contains(report, "=1") && !strings.Contains(report, ";")
}

// TestClientCannotChooseUpstream sends requests whose Host header, or
// absolute request URI, names another server: they all reach the
// configured upstream, with the upstream's own Host.
func TestClientCannotChooseUpstream(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL)
	upHost := strings.TrimPrefix(up.URL, "http://")
	proxyHost := strings.TrimPrefix(s.proxyURL, "http://")
	for _, tc := range []struct{ name, requestLine, host string }{
		{"host header", "POST " + generatePath + " HTTP/1.1", "169.254.169.254"},
		{"host with port", "POST " + generatePath + " HTTP/1.1", "evil.example:443"},
		{"absolute URI", "POST http://evil.example" + generatePath + " HTTP/1.1", "evil.example"},
		{"absolute https URI", "POST https://evil.example:8443" + generatePath + " HTTP/1.1", proxyHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.requests())
			c, err := net.DialTimeout("tcp", proxyHost, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			body := prompt("a host")
			fmt.Fprintf(c, "%s\r\nHost: %s\r\nContent-Type: application/json\r\nX-Goog-Api-Key: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				tc.requestLine, tc.host, canaryKey, len(body), body)
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			seen := up.requests()
			if len(seen) != before+1 {
				t.Fatalf("%d requests reached the upstream, want 1 (status %d)", len(seen)-before, res.StatusCode)
			}
			if got := seen[len(seen)-1].Host; got != upHost {
				t.Errorf("upstream saw Host %q, want its own %q", got, upHost)
			}
			if res.StatusCode != 200 {
				t.Errorf("status %d", res.StatusCode)
			}
		})
	}
}
