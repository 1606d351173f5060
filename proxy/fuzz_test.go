package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/metrics"

	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// tapOnce feeds body to a fresh tap in pieces cut at the offsets in cuts
// (each taken modulo the remaining length) and returns what it learned.
func tapOnce(body []byte, encoding string, cuts []byte) tapResult {
	tp := newTap(encoding, true)
	rest := body
	for _, c := range cuts {
		if len(rest) == 0 {
			break
		}
		n := int(c) % (len(rest) + 1)
		tp.Write(rest[:n])
		rest = rest[n:]
	}
	tp.Write(rest)
	tp.finish()
	return tapResult{Usage: tp.usage, ModelVersion: tp.modelVersion, Text: tp.text.String(), Events: tp.events}
}

// FuzzTap feeds arbitrary response bodies to the usage tap, cut at
// arbitrary places: the tap never panics, never captures more text than
// MaxTextBytes, and learns the same usage, model version and text however
// the body was split into writes (the split is the network's choice, not
// the upstream's).
func FuzzTap(f *testing.F) {
	for _, name := range []string{"stream.sse", "stream_array.json", "unary.json", "vertex_stream.sse", "error_404.json"} {
		if b, err := os.ReadFile("testdata/" + name); err == nil {
			f.Add(b, []byte{1, 7, 30, 200}, false)
		}
	}
	f.Add([]byte("data: {\"usageMetadata\":{\"promptTokenCount\":3}}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hi\"}]}}],\"usageMetadata\":{\"promptTokenCount\":4}}"), []byte{5, 5, 5}, false)
	f.Add([]byte("[{\"modelVersion\":\"m\"},\r\n{\"usageMetadata\":{\"totalTokenCount\":9}}]"), []byte{1, 1, 1, 1}, false)
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"text":"a\"}{b","thought":true},{"text":"\u00e9"}]}}]}`), []byte{2, 3}, false)
	f.Add([]byte("data: {\"a\":\n\ndata: [DONE]\n\n"), []byte{0, 1}, false)
	f.Add(tu.Gzip([]byte(`{"usageMetadata":{"promptTokenCount":1}}`)), []byte{3}, true)
	f.Fuzz(func(t *testing.T, body, cuts []byte, gz bool) {
		enc := ""
		if gz {
			enc = "gzip"
		}
		whole := tapOnce(body, enc, nil)
		split := tapOnce(body, enc, cuts)
		if diff := cmp.Diff(whole, split); diff != "" {
			t.Errorf("tap result depends on how the body was split (-whole +split):\n%s", diff)
		}
		if len(split.Text) > MaxTextBytes {
			t.Errorf("tap captured %d bytes of text, limit %d", len(split.Text), MaxTextBytes)
		}
	})
}

// FuzzClassify checks the route classifier on arbitrary paths: it never
// panics, answers a route from the closed set, a normalised model, and
// ignores leading and trailing slashes.
func FuzzClassify(f *testing.F) {
	for _, p := range []string{
		"/v1beta/models/gemini-2.5-flash:generateContent",
		"/v1beta/models/gemini-2.5-flash:streamGenerateContent",
		"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
		"/v1beta1/publishers/google/models/x:countTokens",
		"/upload/v1beta/files",
		"/v1beta/files/abc:download",
		"/v1beta/tunedModels/t:generateContent",
		"/v1beta/../v1beta/models/m:generateContent",
		"//v1beta//models//m:generateContent",
		"/v1beta/models/a%2Fb:generateContent",
		"/v1beta/projects",
		"v1",
		"",
		":",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		info := classify(p)
		if !slices.Contains(Routes, info.route) {
			t.Fatalf("classify(%q).route = %q, not in Routes", p, info.route)
		}
		// Tuned models keep their lower-cased "tunedmodels/" prefix, which
		// a second normalisation would strip; only base models are checked.
		if got := normalizeModel(info.model); info.model != "" && !strings.HasPrefix(info.model, "tunedmodels/") && got != info.model {
			t.Errorf("classify(%q).model = %q, not normalised (%q)", p, info.model, got)
		}
		if again := classify("/" + p + "/"); again != info {
			t.Errorf("classify(%q) = %+v, but with slashes around it %+v", p, info, again)
		}
	})
}

// recordingTransport answers every request with 200 and records the URL it
// would have been sent to.
type recordingTransport struct {
	mu   sync.Mutex
	urls []*url.URL
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	rt.mu.Lock()
	u := *r.URL
	rt.urls = append(rt.urls, &u)
	rt.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{}`)),
		Request:    r,
	}, nil
}

// FuzzRouting sends arbitrary request paths and Host headers through the
// handler: whatever the client writes (.., encoded slashes, double
// slashes, absolute URIs, another host), the request goes to the
// configured upstream's scheme and host, under its path prefix, and the
// handler answers without panicking.
func FuzzRouting(f *testing.F) {
	for _, s := range [][2]string{
		{"/v1beta/models/gemini-2.5-flash:generateContent", ""},
		{"/v1beta/../../../etc/passwd", "evil.example"},
		{"/v1beta/models%2F..%2F..%2Fx:generateContent", "169.254.169.254"},
		{"//evil.example/v1beta/models", "evil.example:443"},
		{"http://evil.example/v1beta/models", ""},
		{"/gemini/v1/projects/p/locations/l/publishers/google/models/m:generateContent", "localhost"},
		{"/%2e%2e/%2e%2e/admin", ""},
		{"/gemini/v1beta/models/%252e%252e/x", ""},
		{"/v1beta/models/..\\admin", ""},
		{"*", ""},
	} {
		f.Add(s[0], s[1])
	}
	up, _ := url.Parse("https://upstream.test/prefix")
	vx, _ := url.Parse("https://vertex.test/vx")
	rt := &recordingTransport{}
	h, err := New(Options{
		Upstream:       up,
		VertexUpstream: vx,
		BasePath:       "/gemini",
		Transport:      rt,
		Rewrite:        RewriteOptions{Enabled: true},
	}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target, host string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Skip()
		}
		r := &http.Request{
			Method:     http.MethodPost,
			URL:        u,
			RequestURI: target,
			Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:     http.Header{"Content-Type": {"application/json"}, "X-Goog-Api-Key": {"k"}},
			Host:       host,
			Body:       io.NopCloser(bytes.NewReader([]byte(`{"contents":[{"parts":[{"text":"hi"}]}]}`))),
			RemoteAddr: "127.0.0.1:1234",
		}
		r = r.WithContext(t.Context())
		rt.mu.Lock()
		before := len(rt.urls)
		rt.mu.Unlock()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		rt.mu.Lock()
		sent := rt.urls[before:]
		rt.mu.Unlock()
		for _, s := range sent {
			ok := (s.Scheme == up.Scheme && s.Host == up.Host && strings.HasPrefix(s.Path, up.Path+"/")) ||
				(s.Scheme == vx.Scheme && s.Host == vx.Host && strings.HasPrefix(s.Path, vx.Path+"/"))
			if !ok {
				t.Fatalf("request %q (Host %q) was sent to %s, outside the configured upstreams", target, host, s)
			}
			// A hop that resolves dot segments would leave the prefix
			// (issue 16 item 3).
			for seg := range strings.FieldsFuncSeq(s.Path, func(r rune) bool { return r == '/' || r == '\\' }) {
				if un, _ := url.PathUnescape(seg); seg == "." || seg == ".." || un == "." || un == ".." {
					t.Fatalf("request %q was sent to %s, with a dot segment", target, s)
				}
			}
		}
		if len(sent) == 0 && w.Code < 400 {
			t.Errorf("request %q answered %d without reaching the upstream", target, w.Code)
		}
	})
}
