package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// seen is one request as the backend received it.
type seen struct {
	Method, Path, RawPath, RawQuery string
	Header                          http.Header
	Body                            []byte
	ContentLength                   int64
}

// backend is an httptest upstream that records every request.
type backend struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newBackend(t *testing.T, serve http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, seen{r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Header.Clone(), body, r.ContentLength})
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		serve(w, r)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) requests() []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]seen(nil), b.reqs...)
}

func (b *backend) last(t *testing.T) seen {
	t.Helper()
	return tu.Last(t, "request at the backend", b.requests())
}

type fixture struct {
	front *httptest.Server
	h     *Handler
	m     *metrics.Metrics
	logs  *tu.Buffer
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// newFixture starts the proxy in front of upstream (a URL string) with opts.
func newFixture(t *testing.T, upstream string, opts Options) *fixture {
	t.Helper()
	if opts.Upstream == nil {
		opts.Upstream = mustURL(t, upstream)
	}
	logs := &tu.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New(prometheus.NewRegistry())
	h, err := New(opts, logger, m)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return &fixture{front: front, h: h, m: m, logs: logs}
}

// rawClient does not decompress and does not add headers of its own.
func rawClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true}}
}

func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	return tu.Do(t, c, req)
}

// waitFor polls cond for up to 5 s; finish() runs after the response ended.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPassThrough(t *testing.T) {
	unary := readTestdata(t, "unary.json")
	sse := readTestdata(t, "stream.sse")
	array := readTestdata(t, "stream_array.json")
	errBody := readTestdata(t, "error_404.json")
	reqBody := readTestdata(t, "request.json")
	tests := []struct {
		name, method, target string
		body                 []byte
		status               int
		ct                   string
		resp                 []byte
	}{
		{"generate", "POST", "/v1beta/models/gemini-2.5-flash:generateContent", reqBody, 200, "application/json; charset=UTF-8", unary},
		{"generate v1", "POST", "/v1/models/gemini-2.5-flash:generateContent", reqBody, 200, "application/json; charset=UTF-8", unary},
		{"stream sse", "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", reqBody, 200, "text/event-stream", sse},
		{"stream array", "POST", "/v1alpha/models/gemini-2.5-flash:streamGenerateContent?%24alt=json%3Benum-encoding%3Dint", reqBody, 200, "application/json; charset=UTF-8", array},
		{"generate 404", "POST", "/v1beta/models/custom:generateContent", reqBody, 404, "text/event-stream", errBody},
		{"count tokens", "POST", "/v1beta/models/gemini-2.5-flash:countTokens", []byte(`{"contents":[]}`), 200, "application/json", []byte(`{"totalTokens": 31}`)},
		{"embed", "POST", "/v1beta/models/text-embedding-004:batchEmbedContents", []byte(`{"requests":[]}`), 200, "application/json", []byte(`{"embeddings":[]}`)},
		{"list models", "GET", "/v1beta/models?pageSize=5&pageToken=a%2Fb%20c", nil, 200, "application/json", []byte(`{"models":[]}`)},
		{"patch cache", "PATCH", "/v1beta/cachedContents/abc", []byte(`{"ttl":"600s"}`), 200, "application/json", []byte(`{"name":"cachedContents/abc"}`)},
		{"delete cache with body", "DELETE", "/v1/cachedContents/abc", []byte(`{}`), 200, "application/json", []byte(`{}`)},
		{"upload start", "POST", "/upload/v1beta/files", []byte(`{"file":{"displayName":"h.txt"}}`), 200, "application/json", []byte(`{}`)},
		{"download", "GET", "/v1beta/files/abc:download?alt=media", nil, 200, "video/mp4", bytes.Repeat([]byte{0, 1, 2, 255}, 5000)},
		{"interactions", "POST", "/v1beta/interactions", []byte(`{"model":"gemini-2.5-flash","input":"hi"}`), 200, "application/json", []byte(`{"id":"i1"}`)},
		{"other put", "PUT", "/something/else?x=1&x=2&y", []byte("raw\x00bytes"), 201, "text/plain", []byte("made")},
		{"options", "OPTIONS", "/v1beta/models", nil, 204, "", nil},
		{"escaped path", "GET", "/v1beta/files/a%2Fb", nil, 200, "application/json", []byte(`{}`)},
	}
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		for _, tt := range tests {
			if r.Method == tt.method && r.URL.RequestURI() == tt.target {
				if tt.ct != "" {
					w.Header().Set("Content-Type", tt.ct)
				}
				w.Header().Set("X-Upstream", "yes")
				w.Header().Add("Vary", "Origin")
				w.Header().Add("Vary", "X-Origin")
				w.WriteHeader(tt.status)
				w.Write(tt.resp)
				return
			}
		}
		http.Error(w, "unexpected "+r.Method+" "+r.URL.RequestURI(), 500)
	})
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
	c := rawClient()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != nil {
				body = bytes.NewReader(tt.body)
			}
			req, _ := http.NewRequest(tt.method, f.front.URL+tt.target, body)
			req.Header.Set("X-Goog-Api-Client", "google-genai-sdk/1.77.0 gl-go/go1.26.8")
			req.Header.Set("X-Custom", "a, b")
			req.Header.Add("X-Multi", "1")
			req.Header.Add("X-Multi", "2")
			res, got := do(t, c, req)
			if res.StatusCode != tt.status {
				t.Errorf("status %d, want %d", res.StatusCode, tt.status)
			}
			if !bytes.Equal(got, tt.resp) {
				t.Errorf("response body differs:\n got %q\nwant %q", got, tt.resp)
			}
			if res.Header.Get("X-Upstream") != "yes" || res.Header.Get("Content-Type") != tt.ct {
				t.Errorf("response headers %v lost upstream headers", res.Header)
			}
			if diff := cmp.Diff([]string{"Origin", "X-Origin"}, res.Header.Values("Vary")); diff != "" {
				t.Errorf("Vary (-want +got):\n%s", diff)
			}
			in := be.last(t)
			u := mustURL(t, tt.target)
			if in.Method != tt.method || in.Path != u.Path || in.RawPath != u.RawPath || in.RawQuery != u.RawQuery {
				t.Errorf("backend saw %s %s (raw %q) ?%s, want %s %s (raw %q) ?%s", in.Method, in.Path, in.RawPath, in.RawQuery, tt.method, u.Path, u.RawPath, u.RawQuery)
			}
			if !bytes.Equal(in.Body, tt.body) && !(len(in.Body) == 0 && len(tt.body) == 0) {
				t.Errorf("backend body %q, want %q", in.Body, tt.body)
			}
			if in.Header.Get("X-Custom") != "a, b" || strings.Join(in.Header.Values("X-Multi"), ",") != "1,2" {
				t.Errorf("backend headers %v lost client headers", in.Header)
			}
			if in.Header.Get("X-Goog-Api-Client") == "" {
				t.Errorf("x-goog-api-client not forwarded")
			}
		})
	}
}

func TestChunkedRequestBodyStreams(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{})
	payload := bytes.Repeat([]byte("0123456789"), 100_000)
	// io.MultiReader hides the length: the client sends it chunked.
	req, _ := http.NewRequest("POST", f.front.URL+"/upload/v1beta/files?upload_id=x", io.MultiReader(bytes.NewReader(payload)))
	res, _ := do(t, rawClient(), req)
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	in := be.last(t)
	if !bytes.Equal(in.Body, payload) || in.ContentLength != -1 {
		t.Errorf("backend got %d bytes (Content-Length %d), want %d bytes chunked", len(in.Body), in.ContentLength, len(payload))
	}
}

func TestBasePathAndUpstreamPrefix(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pfx/upload/v1beta/files" {
			w.Header().Set("X-Goog-Upload-Url", "http://"+r.Host+"/pfx/upload/v1beta/files?upload_id=AB%2Fc&upload_protocol=resumable")
			w.Header().Set("X-Goog-Upload-Status", "active")
		}
	})
	f := newFixture(t, be.URL+"/pfx/", Options{BasePath: "/gemini/"})
	c := rawClient()
	for target, want := range map[string]string{
		"/gemini/v1beta/models?pageSize=1": "/pfx/v1beta/models?pageSize=1",
		"/gemini":                          "/pfx/",
		"/gemini-not/v1beta/models":        "/pfx/gemini-not/v1beta/models",
		"/v1beta/models":                   "/pfx/v1beta/models",
	} {
		req, _ := http.NewRequest("GET", f.front.URL+target, nil)
		do(t, c, req)
		in := be.last(t)
		got := in.Path
		if in.RawQuery != "" {
			got += "?" + in.RawQuery
		}
		if got != want {
			t.Errorf("GET %s reached backend as %s, want %s", target, got, want)
		}
	}

	req, _ := http.NewRequest("POST", f.front.URL+"/gemini/upload/v1beta/files", strings.NewReader(`{}`))
	res, _ := do(t, c, req)
	want := f.front.URL + "/gemini/upload/v1beta/files?upload_id=AB%2Fc&upload_protocol=resumable"
	if got := res.Header.Get("X-Goog-Upload-Url"); got != want {
		t.Errorf("X-Goog-Upload-Url = %q, want %q", got, want)
	}
	if got := res.Header.Get("X-Goog-Upload-Status"); got != "active" {
		t.Errorf("X-Goog-Upload-Status = %q", got)
	}
}

func TestUploadURLOnOtherHostKept(t *testing.T) {
	const other = "https://uploads.example.com/upload/v1beta/files?upload_id=1"
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Goog-Upload-Url", other)
	})
	f := newFixture(t, be.URL, Options{})
	req, _ := http.NewRequest("POST", f.front.URL+"/upload/v1beta/files", strings.NewReader(`{}`))
	res, _ := do(t, rawClient(), req)
	if got := res.Header.Get("X-Goog-Upload-Url"); got != other {
		t.Errorf("X-Goog-Upload-Url = %q, want it unchanged", got)
	}
}

func TestVertexRouting(t *testing.T) {
	gemini := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Backend", "gemini") })
	vertex := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Backend", "vertex") })
	f := newFixture(t, gemini.URL, Options{VertexUpstream: mustURL(t, vertex.URL+"/vx"), APIKey: "server-key"})
	c := rawClient()
	for target, want := range map[string]string{
		"/v1beta1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse": "vertex",
		"/v1/projects/p1/locations/global/cachedContents/x":                                                                  "vertex",
		"/v1beta1/publishers/google/models/gemini-2.5-flash:generateContent":                                                 "vertex",
		"/v1beta/models/gemini-2.5-flash:generateContent":                                                                    "gemini",
	} {
		req, _ := http.NewRequest("POST", f.front.URL+target, strings.NewReader(`{"contents":[]}`))
		req.Header.Set("Authorization", "Bearer ya29.token")
		res, _ := do(t, c, req)
		if got := res.Header.Get("X-Backend"); got != want {
			t.Errorf("%s went to %s, want %s", target, got, want)
			continue
		}
		if want != "vertex" {
			continue
		}
		in := vertex.last(t)
		if !strings.HasPrefix(in.Path, "/vx/v1") {
			t.Errorf("vertex path %q lacks the upstream prefix", in.Path)
		}
		if in.Header.Get("Authorization") != "Bearer ya29.token" {
			t.Errorf("vertex lost Authorization: %v", in.Header)
		}
		if in.Header.Get("X-Goog-Api-Key") != "" {
			t.Errorf("vertex got the Gemini API key")
		}
	}
}

func TestAPIKeyReplacedAndNeverLogged(t *testing.T) {
	const clientKey, serverKey = "AIzaClientKey123", "AIzaServerKey456"
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{APIKey: serverKey})
	c := rawClient()
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?key="+clientKey+"&alt=sse", strings.NewReader(`{}`))
	req.Header.Set("X-Goog-Api-Key", clientKey)
	do(t, c, req)
	in := be.last(t)
	if got := in.Header.Values("X-Goog-Api-Key"); len(got) != 1 || got[0] != serverKey {
		t.Errorf("backend x-goog-api-key = %q, want [%s]", got, serverKey)
	}
	if in.RawQuery != "alt=sse" {
		t.Errorf("backend query %q, want alt=sse", in.RawQuery)
	}

	// An unreachable upstream: the transport error names the URL with ?key=.
	dead := deadURL(t)
	f2 := newFixture(t, dead, Options{APIKey: serverKey})
	req, _ = http.NewRequest("GET", f2.front.URL+"/v1beta/models?key="+clientKey, nil)
	req.Header.Set("X-Goog-Api-Key", clientKey)
	res, body := do(t, c, req)
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", res.StatusCode)
	}
	waitFor(t, "access log lines", func() bool {
		return strings.Contains(f.logs.String(), "route=stream_generate_content") && strings.Contains(f2.logs.String(), "status=502")
	})
	for _, logs := range []string{f.logs.String(), f2.logs.String(), string(body)} {
		if strings.Contains(logs, clientKey) || strings.Contains(logs, serverKey) {
			t.Errorf("a key leaked into logs or an error body:\n%s", logs)
		}
	}
	if got := slogValue(APIKey("x")); got != "REDACTED" {
		t.Errorf("APIKey logs as %q", got)
	}
}

func slogValue(v slog.LogValuer) string { return v.LogValue().String() }

// deadURL returns the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	return "http://" + tu.FreeAddr(t)
}

func TestHeaderHygiene(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("X-Kept", "1")
	})
	f := newFixture(t, be.URL, Options{})
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:countTokens", strings.NewReader(`{}`))
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	req.Header.Set("X-Gemini-Proxy-Rewrite", "off")
	req.Header.Set("X-Gemini-Proxy-Anything", "1")
	req.Header.Set("Te", "trailers")
	res, _ := do(t, rawClient(), req)
	in := be.last(t)
	for _, h := range []string{"X-Hop", "X-Gemini-Proxy-Rewrite", "X-Gemini-Proxy-Anything"} {
		if in.Header.Get(h) != "" {
			t.Errorf("backend received %s", h)
		}
	}
	if in.Header.Get("Te") != "trailers" {
		t.Errorf("TE: trailers not forwarded")
	}
	if res.Header.Get("X-Resp-Hop") != "" || res.Header.Get("X-Kept") != "1" {
		t.Errorf("response headers %v: hop-by-hop kept or end-to-end lost", res.Header)
	}
	if res.Header.Get(HeaderReport) != "" {
		t.Errorf("report header on a non-generate route")
	}
}

func TestGzipPassThroughAndUsage(t *testing.T) {
	unary := readTestdata(t, "unary.json")
	gz := tu.Gzip(unary)
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(gz)))
			w.Write(gz)
			return
		}
		w.Write(unary)
	})
	f := newFixture(t, be.URL, Options{})
	c := rawClient()
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(`{}`))
	req.Header.Set("Accept-Encoding", "gzip")
	res, body := do(t, c, req)
	if !bytes.Equal(body, gz) || res.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("gzip body not passed through compressed (encoding %q, %d bytes)", res.Header.Get("Content-Encoding"), len(body))
	}
	waitFor(t, "usage from gzip", func() bool {
		return testutil.ToFloat64(f.m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensPrompt)) == 7
	})
	if got := testutil.ToFloat64(f.m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensThoughts)); got != 48 {
		t.Errorf("thoughts tokens %v, want 48", got)
	}

	// A client that asks for no compression gets none and the backend sees
	// no Accept-Encoding that the client did not send.
	req, _ = http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(`{}`))
	res, body = do(t, c, req)
	if !bytes.Equal(body, unary) || res.Header.Get("Content-Encoding") != "" {
		t.Errorf("identity body changed")
	}
	if ae := be.last(t).Header.Get("Accept-Encoding"); ae != "" {
		t.Errorf("backend saw Accept-Encoding %q the client never sent", ae)
	}
}

func TestStreamIsNotBuffered(t *testing.T) {
	release := make(chan struct{})
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"candidates\":[]}\r\n\r\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"usageMetadata\":{\"totalTokenCount\":1}}\r\n\r\n")
	})
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
	for _, target := range []string{
		"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		"/v1beta/models/gemini-2.5-flash:generateContent", // unknown length flushes too
	} {
		req, _ := http.NewRequest("POST", f.front.URL+target, strings.NewReader(`{"contents":[]}`))
		res, err := rawClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(res.Body).ReadString('\n')
			first <- line
		}()
		select {
		case line := <-first:
			if !strings.HasPrefix(line, "data: {\"candidates\":[]}") {
				t.Errorf("%s: first line %q", target, line)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: first event did not arrive while the backend held the stream open: the proxy buffers", target)
		}
		release <- struct{}{}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

func TestClientCancelCancelsUpstream(t *testing.T) {
	upstreamDone := make(chan error, 1)
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\r\n\r\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			upstreamDone <- r.Context().Err()
		case <-time.After(10 * time.Second):
			upstreamDone <- errors.New("upstream request was never cancelled")
		}
	})
	f := newFixture(t, be.URL, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", strings.NewReader(`{}`))
	res, err := rawClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cancel()
	res.Body.Close()
	select {
	case err := <-upstreamDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("upstream: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("upstream not cancelled within 5s")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("upstream cancelled after %v, want promptly", d)
	}
	waitFor(t, "499 recorded", func() bool {
		return testutil.ToFloat64(f.m.Requests.WithLabelValues("stream_generate_content", "gemini-2.5-flash", "499", "true")) == 1
	})
	if got := testutil.ToFloat64(f.m.ClientCancels); got != 1 {
		t.Errorf("client_cancels_total = %v, want 1", got)
	}
}

// geminiError is the body of a proxy-made error.
type geminiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

func checkGeminiError(t *testing.T, res *http.Response, body []byte, code int, status string) {
	t.Helper()
	if res.StatusCode != code {
		t.Errorf("status %d, want %d (body %s)", res.StatusCode, code, body)
	}
	var e geminiError
	if err := jsonUnmarshal(body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	if e.Error.Code != code || e.Error.Status != status || e.Error.Message == "" {
		t.Errorf("error body %+v, want code %d status %s", e, code, status)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q", ct)
	}
}

func TestBodyTooLarge(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{MaxBodyBytes: 100, Rewrite: RewriteOptions{Enabled: true}})
	big := strings.Repeat("x", 200)
	c := rawClient()
	for _, tt := range []struct {
		name, target string
		body         io.Reader
	}{
		{"known length", "/v1beta/models/m:countTokens", strings.NewReader(big)},
		{"chunked generate", "/v1beta/models/m:generateContent", io.MultiReader(strings.NewReader(big))},
		{"chunked pass-through", "/upload/v1beta/files", io.MultiReader(strings.NewReader(big))},
		{"chunked generate, rewrite off", "/v1beta/models/m:generateContent?off", io.MultiReader(strings.NewReader(big))},
	} {
		req, _ := http.NewRequest("POST", f.front.URL+tt.target, tt.body)
		if strings.HasSuffix(tt.target, "?off") {
			req.Header.Set(HeaderRewrite, "off")
		}
		res, body := do(t, c, req)
		t.Logf("%s: %d", tt.name, res.StatusCode)
		checkGeminiError(t, res, body, 413, "INVALID_ARGUMENT")
	}
	// Nothing of an oversize body reaches the upstream, chunked or not
	// (issue 16 item 8): a chunked body is read up to the limit first.
	if reqs := be.requests(); len(reqs) != 0 {
		t.Errorf("%d oversize requests reached the upstream (the first with %d bytes)", len(reqs), len(reqs[0].Body))
	}
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:countTokens", strings.NewReader(big[:100]))
	if res, _ := do(t, c, req); res.StatusCode != 200 {
		t.Errorf("body at the limit: status %d", res.StatusCode)
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	f := newFixture(t, deadURL(t), Options{})
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(`{}`))
	res, body := do(t, rawClient(), req)
	checkGeminiError(t, res, body, 502, "UNAVAILABLE")
	waitFor(t, "unreachable counted", func() bool {
		return testutil.ToFloat64(f.m.UpstreamErrors.WithLabelValues(metrics.UpstreamUnreachable)) == 1
	})
}

func TestResponseHeaderTimeout(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "slow") {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		// Headers at once, then a slow but alive stream longer than the timeout.
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		for i := range 5 {
			time.Sleep(80 * time.Millisecond)
			io.WriteString(w, "data: {\"n\":"+strconv.Itoa(i)+"}\r\n\r\n")
			w.(http.Flusher).Flush()
		}
	})
	f := newFixture(t, be.URL, Options{ResponseHeaderTimeout: 150 * time.Millisecond})
	c := rawClient()
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/slow:generateContent", strings.NewReader(`{}`))
	res, body := do(t, c, req)
	checkGeminiError(t, res, body, 504, "DEADLINE_EXCEEDED")

	req, _ = http.NewRequest("POST", f.front.URL+"/v1beta/models/alive:streamGenerateContent?alt=sse", strings.NewReader(`{}`))
	res, body = do(t, c, req)
	if res.StatusCode != 200 || bytes.Count(body, []byte("data: ")) != 5 {
		t.Errorf("slow stream: status %d, %d events, want 200 and 5 (body %q)", res.StatusCode, bytes.Count(body, []byte("data: ")), body)
	}
	waitFor(t, "timeout counted", func() bool {
		return testutil.ToFloat64(f.m.UpstreamErrors.WithLabelValues(metrics.UpstreamTimeout)) == 1
	})
}

func TestUpstreamAbortMidStream(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\r\n\r\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // cut the connection
	})
	f := newFixture(t, be.URL, Options{})
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", strings.NewReader(`{}`))
	res, err := rawClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil {
		t.Errorf("client read %q and a clean end; want the cut passed on as an error", body)
	}
	waitFor(t, "abort counted", func() bool {
		return testutil.ToFloat64(f.m.UpstreamErrors.WithLabelValues(metrics.UpstreamAborted)) == 1
	})
}

func TestMetricsAndExchange(t *testing.T) {
	sse := readTestdata(t, "stream.sse")
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(sse)
	})
	var (
		mu  sync.Mutex
		exs []Exchange
	)
	f := newFixture(t, be.URL, Options{
		Rewrite: RewriteOptions{Enabled: true},
		OnExchange: func(e Exchange) {
			mu.Lock()
			exs = append(exs, e)
			mu.Unlock()
		},
	})
	reqBody := readTestdata(t, "request.json")
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", bytes.NewReader(reqBody))
	req.Header.Set("X-Goog-Api-Client", "genai-js/0.24.1")
	req.Header.Set("X-Goog-Api-Key", "k1")
	res, body := do(t, rawClient(), req)
	if !bytes.Equal(body, sse) {
		t.Fatalf("stream changed")
	}
	if got, want := res.Header.Get(HeaderReport), "bytes=160->160"; got != want {
		t.Errorf("report header %q, want %q", got, want)
	}
	waitFor(t, "exchange", func() bool { mu.Lock(); defer mu.Unlock(); return len(exs) == 1 })
	m := f.m
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"requests", m.Requests.WithLabelValues("stream_generate_content", "gemini-2.5-flash", "200", "true"), 1},
		{"received", m.RequestBytes.WithLabelValues("stream_generate_content", metrics.StageReceived), float64(len(reqBody))},
		{"sent", m.RequestBytes.WithLabelValues("stream_generate_content", metrics.StageSent), float64(len(reqBody))},
		{"response", m.ResponseBytes.WithLabelValues("stream_generate_content"), float64(len(sse))},
		{"prompt", m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensPrompt), 7},
		{"cached", m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensCached), 3},
		{"candidates", m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensCandidates), 153},
		{"thoughts", m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensThoughts), 45},
		{"tool use", m.UsageTokens.WithLabelValues("gemini-2.5-flash", metrics.TokensToolUse), 5},
		{"sdk", m.ClientRequests.WithLabelValues("generative-ai-js", "true"), 1},
		{"rewrite", m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeUnchanged), 1},
		{"rewrite before", m.RewriteBytes.WithLabelValues(metrics.StageBefore), float64(len(reqBody))},
		{"in flight", m.InFlight, 0},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	for _, h := range []struct {
		name string
		c    prometheus.Collector
	}{
		{"duration", m.RequestDuration}, {"upstream", m.UpstreamDuration}, {"ttfb", m.TimeToFirstByte}, {"overhead", m.ProxyOverhead},
	} {
		if n := testutil.CollectAndCount(h.c); n != 1 {
			t.Errorf("%s histogram has %d series, want 1", h.name, n)
		}
	}
	mu.Lock()
	ex := exs[0]
	mu.Unlock()
	if ex.Tenant != tenantOf(f.h.secret, "", req) || !ex.Complete || !ex.Stream || ex.Status != 200 ||
		ex.Model != "gemini-2.5-flash" || ex.ModelVersion != "models/gemini-2.5-flash-001" ||
		!strings.HasPrefix(ex.Text, "Here you go!") || strings.Contains(ex.Text, "thinking") ||
		ex.Usage == nil || ex.Usage.TotalTokens != 210 || !bytes.Equal(ex.Request, reqBody) || ex.Report == nil {
		t.Errorf("exchange %+v", ex)
	}
	if logs := f.logs.String(); strings.Contains(logs, "Say hi") || strings.Contains(logs, "Here you go") || strings.Contains(logs, "k1") {
		t.Errorf("prompt, response or key in the log:\n%s", logs)
	}
}

func TestAdminHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg).SetBuildInfo("test")
	ready := false
	for _, pp := range []bool{false, true} {
		srv := httptest.NewServer(AdminHandler(reg, func() bool { return ready }, pp))
		get := func(p string) (int, string) {
			res, body := do(t, http.DefaultClient, mustReq(t, "GET", srv.URL+p))
			return res.StatusCode, string(body)
		}
		if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "gemini_proxy_build_info") {
			t.Errorf("/metrics: %d", code)
		}
		if code, _ := get("/healthz"); code != 200 {
			t.Errorf("/healthz: %d", code)
		}
		ready = false
		if code, _ := get("/readyz"); code != 503 {
			t.Errorf("/readyz not ready: %d", code)
		}
		ready = true
		if code, _ := get("/readyz"); code != 200 {
			t.Errorf("/readyz ready: %d", code)
		}
		code, _ := get("/debug/pprof/")
		if (code == 200) != pp {
			t.Errorf("pprof=%v: /debug/pprof/ status %d", pp, code)
		}
		srv.Close()
	}
}

func mustReq(t *testing.T, method, u string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewValidates(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	log := slog.New(slog.DiscardHandler)
	for _, o := range []Options{{}, {Upstream: &url.URL{Path: "/x"}}, {Upstream: mustURL(t, "http://a"), VertexUpstream: &url.URL{Path: "v"}}} {
		if _, err := New(o, log, m); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	if _, err := New(Options{Upstream: mustURL(t, "http://a")}, log, m); err != nil {
		t.Errorf("New: %v", err)
	}
	h, err := New(Options{Upstream: mustURL(t, "http://a"), VertexUpstream: mustURL(t, "")}, log, m)
	if err != nil || h.vertex != nil {
		t.Errorf("New with an empty vertex URL: %v, vertex %v; want it treated as unset", err, h.vertex)
	}
}

var _ = rewrite.Rules
