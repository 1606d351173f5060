package proxy

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		path string
		want routeInfo
	}{
		{"/v1beta/models/gemini-2.5-flash:generateContent", routeInfo{RouteGenerate, "gemini-2.5-flash", false}},
		{"/v1/models/gemini-2.5-flash-001:streamGenerateContent", routeInfo{RouteStreamGenerate, "gemini-2.5-flash", false}},
		{"/v1alpha/models/gemini-2.5-flash:countTokens", routeInfo{RouteCountTokens, "gemini-2.5-flash", false}},
		{"/v1beta/models/gemini-embedding-001:embedContent", routeInfo{RouteEmbedContent, "gemini-embedding", false}},
		{"/v1beta/models/text-embedding-004:batchEmbedContents", routeInfo{RouteBatchEmbedContents, "text-embedding-004", false}},
		{"/v1beta/models/gemini-2.5-flash:batchGenerateContent", routeInfo{RouteBatches, "gemini-2.5-flash", false}},
		{"/v1beta/tunedModels/my-tune:generateContent", routeInfo{RouteGenerate, "tunedmodels/my-tune", false}},
		{"/v1beta/models", routeInfo{route: RouteModels}},
		{"/v1beta/models/gemini-2.5-pro", routeInfo{RouteModels, "gemini-2.5-pro", false}},
		{"/v1beta/cachedContents", routeInfo{route: RouteCachedContents}},
		{"/v1beta/cachedContents/abc", routeInfo{route: RouteCachedContents}},
		{"/v1beta/files/abc", routeInfo{route: RouteFiles}},
		{"/v1beta/files/abc:download", routeInfo{route: RouteFiles}},
		{"/upload/v1beta/files", routeInfo{route: RouteUpload}},
		{"/pfx/upload/v1/files", routeInfo{route: RouteUpload}},
		{"/v1beta/interactions/abc/cancel", routeInfo{route: RouteInteractions}},
		{"/v1beta/batches/123", routeInfo{route: RouteBatches}},
		{"/v1beta/openai/chat/completions", routeInfo{route: RouteOther}},
		{"/", routeInfo{route: RouteOther}},
		{"/healthz", routeInfo{route: RouteOther}},
		{"/v1beta", routeInfo{route: RouteOther}},
		{"/v1beta1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent", routeInfo{RouteStreamGenerate, "gemini-2.5-flash", true}},
		{"/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:generateContent", routeInfo{RouteGenerate, "gemini-2.5-pro", true}},
		{"/v1beta1/publishers/google/models/gemini-2.5-flash:generateContent", routeInfo{RouteGenerate, "gemini-2.5-flash", true}},
		{"/v1beta1/projects/p/locations/l/cachedContents/x", routeInfo{RouteCachedContents, "", true}},
		{"/v1beta1/projects/p/locations/l/interactions", routeInfo{RouteInteractions, "", true}},
		{"/v1beta1/projects/p/locations/l", routeInfo{RouteOther, "", true}},
	}
	for _, tt := range tests {
		if got := classify(tt.path); got != tt.want {
			t.Errorf("classify(%q) = %+v, want %+v", tt.path, got, tt.want)
		}
	}
}

func TestNormalizeModel(t *testing.T) {
	for in, want := range map[string]string{
		"models/gemini-2.5-flash-001":               "gemini-2.5-flash",
		"gemini-2.5-flash":                          "gemini-2.5-flash",
		"Gemini-2.5-Pro":                            "gemini-2.5-pro",
		"publishers/google/models/gemini-2.0-flash": "gemini-2.0-flash",
		"gemini-2.5-flash-preview-05-20":            "gemini-2.5-flash-preview-05-20",
		"tunedModels/x-001":                         "tunedmodels/x-001", "text-embedding-004": "text-embedding-004",
	} {
		if got := normalizeModel(in); got != want {
			t.Errorf("normalizeModel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClientSDK(t *testing.T) {
	tests := []struct {
		header string
		want   SDK
	}{
		{"google-genai-sdk/1.77.0 gl-go/go1.26.8", SDKGenAIGo},
		{"google-genai-sdk/2.19.0 gl-python/3.12.1", SDKGenAIPython},
		{"google-genai-sdk/3.1.0 gl-node/v20.20.2", SDKGenAIJS},
		{"google-genai-sdk/3.1.0 gl-node/web", SDKGenAIJS},
		{"genai-js/0.24.1", SDKGenerativeAIJS},
		{"myapp/1 genai-js/0.24.1", SDKGenerativeAIJS},
		{"genai-py/0.8.4 gl-python/3.11 grpc/1.6 gax/2 gapic/0.6", SDKGenerativeAIPython},
		{"gl-go/1.22 gccl/0.18.0 gapic/0.1 rest/UNKNOWN", SDKGenerativeAIGo},
		{"curl/8", SDKOther},
		{"", SDKNone},
	}
	for _, tt := range tests {
		if got := clientSDK(tt.header); got != tt.want {
			t.Errorf("clientSDK(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
	if !SDKGenerativeAIJS.Deprecated() || SDKGenAIGo.Deprecated() || SDKNone.Deprecated() {
		t.Error("Deprecated() wrong")
	}
}

func TestTenant(t *testing.T) {
	secret := []byte("s3cret")
	req := func(target string, hdr ...string) string {
		r := httptest.NewRequest("POST", target, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return tenantOf(secret, "X-Tenant", r)
	}
	byHeader := req("/v1beta/models", "X-Goog-Api-Key", "AIzaA")
	byQuery := req("/v1beta/models?alt=sse&key=AIzaA")
	if byHeader != byQuery {
		t.Errorf("same key via header and query gave different tenants")
	}
	if other := req("/v1beta/models", "X-Goog-Api-Key", "AIzaB"); other == byHeader {
		t.Errorf("different keys gave the same tenant")
	}
	if b := req("/", "Authorization", "Bearer AIzaA"); b == byHeader {
		t.Errorf("bearer and key share a tenant; want domain separation")
	}
	if h := req("/", "X-Goog-Api-Key", "AIzaA", "X-Tenant", "team-1"); h == byHeader || h != req("/", "X-Tenant", "team-1") {
		t.Errorf("tenant header not used")
	}
	if len(byHeader) != 64 {
		t.Errorf("tenant %q is not a hex SHA-256", byHeader)
	}
	if tenantOf([]byte("other"), "", httptest.NewRequest("GET", "/?key=AIzaA", nil)) == byHeader {
		t.Errorf("secret does not change the tenant")
	}
}

func TestRemoveQueryParam(t *testing.T) {
	for in, want := range map[string]string{
		"":              "",
		"alt=sse":       "alt=sse",
		"key=A":         "",
		"alt=sse&key=A": "alt=sse",
		"key=A&alt=sse&%24alt=json%3Benum-encoding%3Dint": "alt=sse&%24alt=json%3Benum-encoding%3Dint",
		"monkey=1&key=2&k%65y=3":                          "monkey=1",
	} {
		if got := removeQueryParam(in, "key"); got != want {
			t.Errorf("removeQueryParam(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTenantOfCredentials checks that each kind of credential gives its own
// tenant, that an OAuth token in the query is not the anonymous tenant, and
// that the same token in the header or the query is the same tenant.
func TestTenantOfCredentials(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	mk := func(target string, hdr map[string]string) string {
		r := httptest.NewRequest(http.MethodPost, target, nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		return tenantOf(secret, "", r)
	}
	anon := mk("/v1beta/models/m:generateContent", nil)
	tokQuery := mk("/v1beta/models/m:generateContent?access_token=ya29.a", nil)
	tokHeader := mk("/v1beta/models/m:generateContent", map[string]string{"Authorization": "Bearer ya29.a"})
	other := mk("/v1beta/models/m:generateContent?access_token=ya29.b", nil)
	key := mk("/v1beta/models/m:generateContent?key=ya29.a", nil)
	if tokQuery == anon {
		t.Errorf("?access_token= callers share the anonymous tenant")
	}
	if tokQuery != tokHeader {
		t.Errorf("the same OAuth token in the query and in Authorization gave different tenants")
	}
	if tokQuery == other {
		t.Errorf("two different tokens gave the same tenant")
	}
	if key == tokQuery {
		t.Errorf("an API key and an OAuth token with the same text gave the same tenant")
	}
}

// TestDotSegmentsRejected: with a path prefix in the upstream URL and a
// base path, no request whose path has a dot segment (plain, encoded,
// double-encoded, after an encoded slash or a backslash) reaches the
// upstream, on any route: each gets a Gemini-shaped 400 (issue 16 item 3).
// Paths with dots that are not segments still pass.
func TestDotSegmentsRejected(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL+"/allowed/gemini", Options{BasePath: "/base", Rewrite: RewriteOptions{Enabled: true}})
	for _, p := range []string{
		"/base/../../admin/secrets",
		"/base/v1beta/models/../../admin:generateContent",
		"/base/v1beta/%2e%2e/%2E%2E/admin",
		"/base/v1beta/models/.%2e/x:streamGenerateContent",
		"/base/v1beta/files/..%2f..%2fadmin",
		"/base/upload/v1beta/files/%252e%252e/x",
		"/base/v1beta/models/..\\admin",
		"/base/v1beta/./models",
		"/../admin",
		"/base/v1beta/cachedContents/%2e",
	} {
		req, _ := http.NewRequest("POST", f.front.URL+"/x", strings.NewReader(`{"contents":[]}`))
		req.URL.Opaque = p // sent as written, never cleaned by the client
		res, body := do(t, rawClient(), req)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"INVALID_ARGUMENT"`) {
			t.Errorf("%s: %d %s, want a Gemini-shaped 400", p, res.StatusCode, body)
		}
	}
	if n := len(be.requests()); n != 0 {
		t.Errorf("%d requests with dot segments reached the upstream: %+v", n, be.requests())
	}
	for _, p := range []string{"/base/v1beta/models/gemini-2.5-flash:generateContent", "/base/v1beta/files/a..b", "/base/v1beta/models/...:countTokens"} {
		req, _ := http.NewRequest("POST", f.front.URL+p, strings.NewReader(`{"contents":[]}`))
		if res, _ := do(t, rawClient(), req); res.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, want it forwarded", p, res.StatusCode)
		}
	}
	if n := len(be.requests()); n != 3 {
		t.Errorf("upstream got %d requests, want the 3 without dot segments", n)
	}
}

// hasDotSegmentRef is hasDotSegment as it was before it split at bytes:
// the oracle of TestHasDotSegment.
func hasDotSegmentRef(p string) bool {
	if !strings.Contains(p, ".") && !strings.Contains(p, "%") {
		return false
	}
	for seg := range strings.FieldsFuncSeq(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return true
		}
		if strings.Contains(seg, "%") {
			if un, err := url.PathUnescape(seg); err == nil && (un == "." || un == "..") {
				return true
			}
		}
	}
	return false
}

func TestHasDotSegment(t *testing.T) {
	paths := []string{
		"", ".", "..", "...", "/", "//", "/.", "/./", "\\..\\", "a/./b", "a/../b", "a/.../b",
		"/v1beta/models/gemini-2.5-flash:generateContent", "/v1beta/files/a..b",
		"%2e", "%2E%2e", "/%2e%2e/", "/.%2e/x", "/%2e%2e%2", "/%2e%2e%2e", "/%zz/..",
		"/%252e%252e/x", "/..%2f..%2fadmin", "/a\\%2e\\b", "/\xff./..\xfe", "/é/../", "/\u00a0./",
	}
	for _, p := range paths {
		if got, want := hasDotSegment(p), hasDotSegmentRef(p); got != want {
			t.Errorf("hasDotSegment(%q) = %v, want %v", p, got, want)
		}
	}
	alphabet := []string{".", "..", "/", "\\", "%", "%2e", "%2E", "%2", "e", "a", "%25", "\xff", "é", "%2f"}
	rng := rand.New(rand.NewPCG(17, 4))
	for range 200000 {
		var b strings.Builder
		for range rng.IntN(10) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		p := b.String()
		if got, want := hasDotSegment(p), hasDotSegmentRef(p); got != want {
			t.Fatalf("hasDotSegment(%q) = %v, want %v", p, got, want)
		}
	}
}

func FuzzHasDotSegment(f *testing.F) {
	f.Add("/v1beta/models/.%2e/x")
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := hasDotSegment(p), hasDotSegmentRef(p); got != want {
			t.Errorf("hasDotSegment(%q) = %v, want %v", p, got, want)
		}
	})
}
