package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// replayEncodings are the ways a recording is replayed: the upstream
// answers identity to a client that accepts nothing, gzip (the recorded
// gzip bytes when the source kept them) to a client that accepts gzip,
// and identity to a client that accepts gzip (an upstream that did not
// compress).
var replayEncodings = []struct {
	name             string
	acceptGzip, gzip bool
}{
	{"identity", false, false},
	{"gzip", true, true},
	{"gzip-accepting", true, false},
}

// upstreamBody is what the fake upstream sends for r: the recorded body,
// or its gzip bytes.
func upstreamBody(t *testing.T, r *tu.Recording, gz bool) []byte {
	t.Helper()
	if !gz {
		return []byte(r.ResponseBody)
	}
	if r.ResponseBodyGzipBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(r.ResponseBodyGzipBase64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(r.ResponseBody))
	_ = zw.Close()
	return buf.Bytes()
}

// recordedUsage is the last usageMetadata of a recorded generate answer.
func recordedUsage(t *testing.T, r *tu.Recording) *Usage {
	t.Helper()
	if len(r.Derived.LastUsageMetadata) == 0 || string(r.Derived.LastUsageMetadata) == "null" {
		return nil
	}
	var u Usage
	if err := json.Unmarshal(r.Derived.LastUsageMetadata, &u); err != nil {
		t.Fatalf("derived usage: %v", err)
	}
	return &u
}

func isGenerate(path string) bool {
	return strings.Contains(path, ":generateContent") || strings.Contains(path, ":streamGenerateContent")
}

// TestRecordingsReplay sends every recorded exchange of
// shared/gemini-recordings through the proxy, the fake upstream
// answering the recorded status, content headers and body: the client
// receives the upstream's bytes unchanged (identity and gzip), and the
// usage the proxy counts for a generate answer is the recording's last
// usageMetadata, exactly, under the model label of the path.
func TestRecordingsReplay(t *testing.T) {
	recs := tu.Recordings(t)
	for _, r := range recs {
		for _, enc := range replayEncodings {
			t.Run(r.Name+"/"+enc.name, func(t *testing.T) {
				body := upstreamBody(t, r, enc.gzip)
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					h := w.Header()
					h.Set("Content-Type", r.Header("Content-Type"))
					if cd := r.Header("Content-Disposition"); cd != "" {
						h.Set("Content-Disposition", cd)
					}
					if enc.gzip {
						h.Set("Content-Encoding", "gzip")
					}
					w.WriteHeader(r.Status)
					_, _ = w.Write(body)
				}))
				t.Cleanup(up.Close)
				var mu sync.Mutex
				var exchanges []Exchange
				f := newFixture(t, up.URL, Options{OnExchange: func(x Exchange) {
					mu.Lock()
					exchanges = append(exchanges, x)
					mu.Unlock()
				}})
				reqBody := `{"contents":[{"parts":[{"text":"hello"}],"role":"user"}]}`
				if r.RequestBody != nil {
					reqBody = *r.RequestBody
				}
				req, err := http.NewRequestWithContext(t.Context(), r.Method, f.front.URL+r.Path, strings.NewReader(reqBody))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("x-goog-api-key", "test-key")
				if enc.acceptGzip {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				resp, got := do(t, rawClient(), req)
				if resp.StatusCode != r.Status {
					t.Fatalf("status %d, recorded %d", resp.StatusCode, r.Status)
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("client got %d bytes, upstream sent %d; differ at %d", len(got), len(body), firstDiff(got, body))
				}
				if ce := resp.Header.Get("Content-Encoding"); (ce == "gzip") != enc.gzip {
					t.Errorf("Content-Encoding %q", ce)
				}
				if !isGenerate(r.Path) {
					return
				}
				want := recordedUsage(t, r)
				var x Exchange
				waitFor(t, "the exchange", func() bool {
					mu.Lock()
					defer mu.Unlock()
					if len(exchanges) > 0 {
						x = exchanges[len(exchanges)-1]
					}
					return len(exchanges) > 0
				})
				if r.Status != 200 {
					if x.Usage != nil {
						t.Errorf("usage %+v counted for an error answer", *x.Usage)
					}
					return
				}
				switch {
				case want == nil && x.Usage != nil:
					t.Errorf("usage %+v, recorded none", *x.Usage)
				case want != nil && (x.Usage == nil || *x.Usage != *want):
					t.Errorf("usage %+v, recorded %+v", x.Usage, *want)
				}
				if vs := r.Derived.ModelVersions; len(vs) > 0 && x.ModelVersion != vs[len(vs)-1] {
					t.Errorf("modelVersion %q, recorded %q", x.ModelVersion, vs[len(vs)-1])
				}
				if want != nil {
					label := f.h.modelLabel(normalizeModel(modelOfPath(r.Path)))
					if got := testutil.ToFloat64(f.m.UsageTokens.WithLabelValues(label, "prompt")); got != float64(want.PromptTokens) {
						t.Errorf("usage_tokens_total{model=%q,kind=prompt} = %v, want %d", label, got, want.PromptTokens)
					}
				}
			})
		}
	}
}

// TestRecordingsPricedByModelVersion replays the recordings whose path
// names an alias (gemini-flash-latest): the answer's modelVersion
// (gemini-3.6-flash) is priced, so the request must be priced by it, not
// counted as unpriced.
func TestRecordingsPricedByModelVersion(t *testing.T) {
	recs := tu.Recordings(t)
	for _, r := range recs {
		if !strings.Contains(r.Path, "-latest:") {
			continue
		}
		t.Run(r.Name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", r.Header("Content-Type"))
				_, _ = w.Write([]byte(r.ResponseBody))
			}))
			t.Cleanup(up.Close)
			version := r.Derived.ModelVersions[len(r.Derived.ModelVersions)-1]
			f := newFixture(t, up.URL, Options{Prices: map[string]Price{version: {Input: 1, CachedInput: 0.1, Output: 2}},
				ModelAllowlist: []string{version}})
			req, err := http.NewRequestWithContext(t.Context(), r.Method, f.front.URL+r.Path, strings.NewReader(*r.RequestBody))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("x-goog-api-key", "test-key")
			do(t, rawClient(), req)
			waitFor(t, "the spend", func() bool { return testutil.ToFloat64(f.m.SpentDollars.WithLabelValues(version)) > 0 })
			if n := testutil.ToFloat64(f.m.UnpricedRequests.WithLabelValues(modelOther)); n != 0 {
				t.Errorf("unpriced_requests_total{model=_other} = %v, want 0", n)
			}
		})
	}
}

func modelOfPath(path string) string {
	_, rest, _ := strings.Cut(path, "/models/")
	m, _, _ := strings.Cut(rest, ":")
	return m
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
