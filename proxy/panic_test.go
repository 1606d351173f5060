package proxy

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	tu "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// canaryKey is the recognisable key of the panic tests (the key
// internal/reliability searches every output for).
const canaryKey = "AIzaSy-RELIABILITY-CANARY-KEY-0123456789"

// canaryIn returns the first form of key found in b: raw, URL-escaped,
// hex, or standard or URL-safe base64 at each alignment; "" if none.
func canaryIn(b []byte, key string) string {
	forms := []string{key, url.QueryEscape(key), hex.EncodeToString([]byte(key))}
	for off := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := enc.EncodeToString([]byte(key[off:]))
			forms = append(forms, s[:len(s)-4]) // the tail depends on what follows
		}
	}
	for _, f := range forms {
		if strings.Contains(string(b), f) {
			return f
		}
	}
	return ""
}

func TestCanaryIn(t *testing.T) {
	for _, b := range []string{
		"x=" + canaryKey, url.QueryEscape("a/" + canaryKey), base64.StdEncoding.EncodeToString([]byte("ab" + canaryKey)),
		hex.EncodeToString([]byte(canaryKey)),
	} {
		if canaryIn([]byte(b), canaryKey) == "" {
			t.Errorf("canaryIn(%q) found nothing", b)
		}
	}
	if f := canaryIn([]byte("AIzaSy-other-key"), canaryKey); f != "" {
		t.Errorf("canaryIn found %q in another key", f)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// panicBody panics on the first read after the response headers went out.
type panicBody struct{}

func (panicBody) Read([]byte) (int, error) { panic("response body exploded") }
func (panicBody) Close() error             { return nil }

// TestCanaryKeyNotLeakedOnPanic makes the handler panic at each place a
// panic can come from (the upstream transport, the response body during
// the copy, the exchange hook after the response, the rewriter) with the
// canary key as the client's header key, query key and bearer token and as
// the configured upstream key, and searches everything the proxy and the
// server wrote (access log, error logs with the panic and its stack,
// response headers and bodies) for the key in any encoding.
func TestCanaryKeyNotLeakedOnPanic(t *testing.T) {
	unary, err := os.ReadFile("testdata/unary.json")
	if err != nil {
		t.Fatal(err)
	}
	answer := func(r *http.Request) (*http.Response, error) {
		io.Copy(io.Discard, r.Body)
		return &http.Response{
			StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/json; charset=UTF-8"}},
			Body:          io.NopCloser(strings.NewReader(string(unary))),
			ContentLength: int64(len(unary)), Request: r,
		}, nil
	}
	for _, tc := range []struct {
		name  string
		setup func(*Options)
		after func(*Handler)
		// logged is what the logs must show, proving the panic happened.
		logged string
	}{
		{"transport", func(o *Options) {
			o.Transport = roundTripperFunc(func(*http.Request) (*http.Response, error) { panic("upstream transport exploded") })
		}, nil, "upstream transport exploded"},
		{"response body", func(o *Options) {
			o.Transport = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				res, err := answer(r)
				res.Body, res.ContentLength = panicBody{}, -1
				return res, err
			})
		}, nil, "response body exploded"},
		{"exchange hook", func(o *Options) {
			o.Transport = roundTripperFunc(answer)
			o.OnExchange = func(Exchange) { panic("exchange hook exploded") }
		}, nil, "exchange hook exploded"},
		{"rewriter", func(o *Options) {
			o.Transport = roundTripperFunc(answer)
		}, func(h *Handler) {
			h.rewriteFn = func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error) {
				panic("rewriter exploded " + canaryKey) // recovered; the value is never logged
			}
		}, "rewrite panicked"},
	} {
		for _, serverKey := range []string{"", canaryKey + "-upstream"} {
			name := tc.name
			if serverKey != "" {
				name += "/upstream key"
			}
			t.Run(name, func(t *testing.T) {
				logs := &tu.Buffer{}
				opts := Options{
					Upstream: mustURL(t, "http://upstream.invalid"),
					APIKey:   APIKey(serverKey),
					Rewrite:  RewriteOptions{Enabled: true},
				}
				tc.setup(&opts)
				logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				h, err := New(opts, logger, metrics.New(prometheus.NewRegistry()))
				if err != nil {
					t.Fatal(err)
				}
				if tc.after != nil {
					tc.after(h)
				}
				front := httptest.NewUnstartedServer(h)
				front.Config.ErrorLog = log.New(logs, "server: ", 0) // net/http logs panics here
				front.Start()
				defer front.Close()

				var outputs []string
				path := front.URL + "/v1beta/models/gemini-2.5-flash:generateContent"
				body := `{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}`
				for _, cred := range []struct{ query, header, value string }{
					{"", "X-Goog-Api-Key", canaryKey},
					{"?key=" + url.QueryEscape(canaryKey), "", ""},
					{"", "Authorization", "Bearer " + canaryKey},
				} {
					req, _ := http.NewRequest(http.MethodPost, path+cred.query, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					if cred.header != "" {
						req.Header.Set(cred.header, cred.value)
					}
					res, err := rawClient().Do(req)
					if err != nil {
						// The server dropped the connection: nothing was
						// answered. (The error quotes our own URL.)
						var ue *url.Error
						if !errors.As(err, &ue) || !errors.Is(ue.Err, io.EOF) {
							t.Errorf("request failed with %v, want the connection dropped", ue.Err)
						}
						continue
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
						outputs = append(outputs, "client read error: "+err.Error())
					}
					var hdr strings.Builder
					res.Header.Write(&hdr)
					outputs = append(outputs, hdr.String(), string(b))
				}
				front.Close() // waits for the handlers, hence for every log line
				outputs = append(outputs, logs.String())
				if !strings.Contains(logs.String(), tc.logged) {
					t.Fatalf("logs do not show the panic (%q):\n%s", tc.logged, logs.String())
				}
				for _, out := range outputs {
					for _, key := range []string{canaryKey, serverKey} {
						if key == "" {
							continue
						}
						if f := canaryIn([]byte(out), key); f != "" {
							t.Errorf("the key (as %q) leaked into an output:\n%s", f, out)
						}
					}
				}
			})
		}
	}
}
