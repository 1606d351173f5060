package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

const (
	origBody      = `{"contents":[{"role":"user","parts":[{"text":"ORIGINAL ORIGINAL ORIGINAL"}]}]}`
	rewrittenBody = `{"contents":[{"role":"user","parts":[{"text":"NEW"}]}]}`
)

// noAudit passes every audit: the fake rewrites of these tests keep no
// records for rewrite.Audit.
func noAudit([]byte, []byte, *rewrite.Report) error { return nil }

// changed is a rewrite that shortens the body and reports one replacement.
func changed(body []byte, _ rewrite.Options, _ rewrite.Verifier) ([]byte, *rewrite.Report, error) {
	return []byte(rewrittenBody), &rewrite.Report{
		BytesBefore: len(body), BytesAfter: len(rewrittenBody),
		Replacements: []rewrite.Replacement{{Rule: rewrite.RuleUnchanged, Bytes: 30, RefBytes: 10}},
	}, nil
}

func TestRewrite(t *testing.T) {
	changedHeader := "bytes=" + strconv.Itoa(len(origBody)) + "->" + strconv.Itoa(len(rewrittenBody)) + "; unchanged=1"
	errHeader := "bytes=" + strconv.Itoa(len(origBody)) + "->" + strconv.Itoa(len(origBody)) + "; error"
	invalidHeader := "bytes=" + strconv.Itoa(len(origBody)) + "->" + strconv.Itoa(len(origBody)) + "; invalid_request"
	tests := []struct {
		name       string
		disabled   bool
		fn         rewriteFunc
		modeHeader string
		encoding   string
		wantBody   string
		wantReport string
		mode       string
		outcome    string
		errors     float64
	}{
		{"changed", false, changed, "", "", rewrittenBody, changedHeader, metrics.ModeOn, metrics.OutcomeChanged, 0},
		{"error fails open", false, func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error) {
			return nil, nil, rewrite.ErrNoContents
		}, "", "", origBody, errHeader, metrics.ModeOn, metrics.OutcomeError, 1},
		{"panic fails open", false, func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error) {
			panic("secret prompt text in a panic")
		}, "", "", origBody, errHeader, metrics.ModeOn, metrics.OutcomeError, 1},
		{"nil body fails open", false, func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error) {
			return nil, nil, nil
		}, "", "", origBody, errHeader, metrics.ModeOn, metrics.OutcomeError, 1},
		{"dry-run forwards original", false, changed, "dry-run", "", origBody, changedHeader + "; mode=dry-run", metrics.ModeDryRun, metrics.OutcomeChanged, 0},
		{"off", false, changed, "OFF", "", origBody, "mode=off", metrics.ModeOff, metrics.OutcomeSkipped, 0},
		{"disabled", true, changed, "", "", origBody, "mode=disabled", metrics.ModeDisabled, metrics.OutcomeSkipped, 0},
		{"gzip request body not rewritten", false, changed, "", "gzip", origBody, "skipped", metrics.ModeOn, metrics.OutcomeSkipped, 0},
		{"over the rewriter's limits", false, func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error) {
			return nil, nil, rewrite.ErrTooComplex
		}, "", "", origBody, "skipped", metrics.ModeOn, metrics.OutcomeSkipped, 0},
		// A client's malformed JSON is not a rewriter fault (issue 16 item 7).
		{"invalid request", false, func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error) {
			return nil, nil, fmt.Errorf("decoding: %w", rewrite.ErrInvalidJSON)
		}, "", "", origBody, invalidHeader, metrics.ModeOn, metrics.OutcomeInvalidRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
			f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: !tt.disabled}})
			f.h.rewriteFn = tt.fn
			f.h.auditFn = noAudit // a fake rewrite keeps no records
			req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
			if tt.modeHeader != "" {
				req.Header.Set(HeaderRewrite, tt.modeHeader)
			}
			if tt.encoding != "" {
				req.Header.Set("Content-Encoding", tt.encoding)
			}
			res, _ := do(t, rawClient(), req)
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			in := be.last(t)
			if string(in.Body) != tt.wantBody || in.ContentLength != int64(len(tt.wantBody)) {
				t.Errorf("backend got %q (Content-Length %d), want %q", in.Body, in.ContentLength, tt.wantBody)
			}
			if got := res.Header.Get(HeaderReport); got != tt.wantReport {
				t.Errorf("%s = %q, want %q", HeaderReport, got, tt.wantReport)
			}
			waitFor(t, "rewrite metric", func() bool {
				return testutil.ToFloat64(f.m.RewriteRequests.WithLabelValues(tt.mode, tt.outcome)) == 1
			})
			if got := testutil.ToFloat64(f.m.RewriteErrors); got != tt.errors {
				t.Errorf("rewrite_errors_total = %v, want %v", got, tt.errors)
			}
			// A skip with rewriting on says why in the access log.
			if tt.outcome == metrics.OutcomeSkipped && tt.mode == metrics.ModeOn {
				waitFor(t, "rewrite_skipped in the log", func() bool { return strings.Contains(f.logs.String(), "rewrite_skipped=") })
			}
			if strings.Contains(f.logs.String(), "secret prompt") || strings.Contains(f.logs.String(), "ORIGINAL") {
				t.Errorf("log leaks the prompt:\n%s", f.logs.String())
			}
		})
	}
}

// TestInvalidRequestNotAnError: malformed JSON from the client, through the
// real rewriter, is forwarded unchanged with outcome invalid_request; it
// does not count as a rewrite error, which stays for rewriter faults.
func TestInvalidRequestNotAnError(t *testing.T) {
	for _, body := range []string{`{"contents": [`, `not json`, `{"contents":[{"parts":[{"text":"a` + "\x00" + `"}]}]`, `[1,2]`} {
		be := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(400) })
		f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(body))
		res, _ := do(t, rawClient(), req)
		if got := string(be.last(t).Body); got != body {
			t.Errorf("%q: backend got %q, want it unchanged", body, got)
		}
		if got, want := res.Header.Get(HeaderReport), "; invalid_request"; !strings.HasSuffix(got, want) {
			t.Errorf("%q: report %q, want a suffix %q", body, got, want)
		}
		waitFor(t, "rewrite metric", func() bool {
			return testutil.ToFloat64(f.m.RewriteRequests.WithLabelValues(metrics.ModeOn, metrics.OutcomeInvalidRequest)) == 1
		})
		if got := testutil.ToFloat64(f.m.RewriteErrors); got != 0 {
			t.Errorf("%q: rewrite_errors_total = %v, want 0", body, got)
		}
	}
}

func TestRewriteSavingsMetrics(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
	f.h.rewriteFn = changed
	f.h.auditFn = noAudit // a fake rewrite keeps no records
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse", strings.NewReader(origBody))
	do(t, rawClient(), req)
	waitFor(t, "bytes sent", func() bool {
		return testutil.ToFloat64(f.m.RequestBytes.WithLabelValues("stream_generate_content", metrics.StageSent)) == float64(len(rewrittenBody))
	})
	// The rewrite's own figures are recorded when the response ends, which
	// may be after the client has read it; replacements are counted last.
	waitFor(t, "rewrite recorded", func() bool {
		return testutil.ToFloat64(f.m.RewriteReplacements.WithLabelValues("unchanged")) > 0
	})
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"saved", testutil.ToFloat64(f.m.RewriteSavedBytes.WithLabelValues("unchanged")), 20},
		{"replacements", testutil.ToFloat64(f.m.RewriteReplacements.WithLabelValues("unchanged")), 1},
		{"before", testutil.ToFloat64(f.m.RewriteBytes.WithLabelValues(metrics.StageBefore)), float64(len(origBody))},
		{"after", testutil.ToFloat64(f.m.RewriteBytes.WithLabelValues(metrics.StageAfter)), float64(len(rewrittenBody))},
		{"received", testutil.ToFloat64(f.m.RequestBytes.WithLabelValues("stream_generate_content", metrics.StageReceived)), float64(len(origBody))},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestRewriteLargeBodyStreamsUnchanged(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true, MaxBodyBytes: 10}})
	called := false
	f.h.rewriteFn = func(b []byte, o rewrite.Options, v rewrite.Verifier) ([]byte, *rewrite.Report, error) {
		called = true
		return changed(b, o, v)
	}
	f.h.auditFn = noAudit
	for _, body := range []func() *http.Request{
		func() *http.Request { // known length
			r, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:generateContent", strings.NewReader(origBody))
			return r
		},
		func() *http.Request { // chunked: read up to the limit, then streamed
			r, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:generateContent", bytes.NewBufferString(origBody))
			r.ContentLength = -1
			return r
		},
	} {
		res, _ := do(t, rawClient(), body())
		if got := be.last(t).Body; string(got) != origBody {
			t.Errorf("backend got %q, want the original", got)
		}
		if res.Header.Get(HeaderReport) != "skipped" {
			t.Errorf("report %q, want skipped", res.Header.Get(HeaderReport))
		}
	}
	if called {
		t.Error("rewrite ran on a body above Rewrite.MaxBodyBytes")
	}
}

func TestRewriteFallback(t *testing.T) {
	for _, status := range []int{400, 500} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				body := make([]byte, 1024)
				n, _ := r.Body.Read(body)
				if string(body[:n]) == rewrittenBody {
					w.WriteHeader(status)
					w.Write([]byte(`{"error":{"code":` + strconv.Itoa(status) + `,"message":"rejected","status":"INVALID_ARGUMENT"}}`))
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"candidates":[]}`))
			})
			f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
			f.h.rewriteFn = changed
			f.h.auditFn = noAudit // a fake rewrite keeps no records
			req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent?alt=json", strings.NewReader(origBody))
			res, body := do(t, rawClient(), req)
			if res.StatusCode != 200 || string(body) != `{"candidates":[]}` {
				t.Errorf("client got %d %q, want only the second answer", res.StatusCode, body)
			}
			reqs := be.requests()
			if len(reqs) != 2 {
				t.Fatalf("backend saw %d requests, want 2", len(reqs))
			}
			if string(reqs[0].Body) != rewrittenBody || string(reqs[1].Body) != origBody || reqs[1].ContentLength != int64(len(origBody)) || reqs[1].RawQuery != "alt=json" {
				t.Errorf("attempts %q then %q (CL %d, query %q)", reqs[0].Body, reqs[1].Body, reqs[1].ContentLength, reqs[1].RawQuery)
			}
			if !strings.HasSuffix(res.Header.Get(HeaderReport), "; fallback") {
				t.Errorf("report %q lacks fallback", res.Header.Get(HeaderReport))
			}
			waitFor(t, "sent bytes", func() bool {
				return testutil.ToFloat64(f.m.RequestBytes.WithLabelValues("generate_content", metrics.StageSent)) == float64(len(rewrittenBody)+len(origBody))
			})
			if got := testutil.ToFloat64(f.m.RewriteFallbacks); got != 1 {
				t.Errorf("rewrite_fallbacks_total = %v, want 1", got)
			}
			want := map[int]string{400: metrics.RejectionInvalidArgument, 500: metrics.RejectionInternal}[status]
			if got := testutil.ToFloat64(f.m.RewriteRejections.WithLabelValues(want)); got != 1 {
				t.Errorf("rewrite_rejections_total{case=%s} = %v, want 1", want, got)
			}
		})
	}
}

// TestNoFallbackOnOverload: a rewritten request answered 429, 503 or 504,
// or 400 for another reason than its arguments, is not retried (a retry
// with the larger original body would double an overload, and Retry-After
// is the client's to honour); the client gets the upstream's answer, body
// and Retry-After included, and each case is counted (issue 16 item 6).
func TestNoFallbackOnOverload(t *testing.T) {
	for _, tt := range []struct {
		status int
		body   string
		want   string
	}{
		{429, `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}`, metrics.RejectionRateLimited},
		{503, `{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}`, metrics.RejectionUnavailable},
		{504, `{"error":{"code":504,"message":"deadline","status":"DEADLINE_EXCEEDED"}}`, metrics.RejectionTimeout},
		{502, `bad gateway`, metrics.RejectionOther},
		{400, `{"error":{"code":400,"message":"location","status":"FAILED_PRECONDITION"}}`, metrics.RejectionBadRequest},
		{400, `{"error":{"code":400,"message":"` + strings.Repeat("x", 70<<10) + `","status":"INVALID_ARGUMENT"}}`, metrics.RejectionBadRequest},
	} {
		t.Run(strconv.Itoa(tt.status)+"_"+tt.want, func(t *testing.T) {
			be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			})
			f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
			f.h.rewriteFn = changed
			f.h.auditFn = noAudit // a fake rewrite keeps no records
			req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:generateContent", strings.NewReader(origBody))
			res, body := do(t, rawClient(), req)
			if n := len(be.requests()); n != 1 {
				t.Errorf("backend saw %d requests, want 1", n)
			}
			if res.StatusCode != tt.status || string(body) != tt.body || res.Header.Get("Retry-After") != "7" {
				t.Errorf("client got %d, Retry-After %q, body %.60q; want the upstream's %d answer", res.StatusCode, res.Header.Get("Retry-After"), body, tt.status)
			}
			if got := testutil.ToFloat64(f.m.RewriteFallbacks); got != 0 {
				t.Errorf("fallbacks = %v, want 0", got)
			}
			if got := testutil.ToFloat64(f.m.RewriteRejections.WithLabelValues(tt.want)); got != 1 {
				t.Errorf("rewrite_rejections_total{case=%s} = %v, want 1", tt.want, got)
			}
		})
	}
}

func TestNoFallbackWhenUnchangedOrOK(t *testing.T) {
	for _, tt := range []struct {
		name   string
		fn     rewriteFunc
		status int
	}{
		{"unchanged body rejected", rewrite.Request, 400},
		{"rewritten body rate-limited", changed, 429},
	} {
		be := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tt.status) })
		f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
		f.h.rewriteFn = tt.fn
		f.h.auditFn = noAudit // a fake rewrite keeps no records
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:generateContent", strings.NewReader(origBody))
		res, _ := do(t, rawClient(), req)
		if n := len(be.requests()); n != 1 || res.StatusCode != tt.status {
			t.Errorf("%s: backend saw %d requests, client %d; want 1 and %d", tt.name, n, res.StatusCode, tt.status)
		}
		if got := testutil.ToFloat64(f.m.RewriteFallbacks); got != 0 {
			t.Errorf("%s: fallbacks %v", tt.name, got)
		}
	}
}

func TestVerifierGetsTenant(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	var (
		mu      sync.Mutex
		tenants []string
	)
	f := newFixture(t, be.URL, Options{
		Rewrite:      RewriteOptions{Enabled: true},
		TenantSecret: []byte("fixed"),
		Verifier: func(tenant string) rewrite.Verifier {
			mu.Lock()
			tenants = append(tenants, tenant)
			mu.Unlock()
			return nil
		},
	})
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/m:generateContent", strings.NewReader(origBody))
	req.Header.Set("X-Goog-Api-Key", "abc")
	do(t, rawClient(), req)
	mu.Lock()
	defer mu.Unlock()
	if want := tenantOf([]byte("fixed"), "", req); len(tenants) != 1 || tenants[0] != want {
		t.Errorf("verifier tenants %q, want [%s]", tenants, want)
	}
}

// TestRewriteInflightLimit checks RewriteOptions.MaxInflightBytes: while
// one request holds the budget (its upstream call is pending), the next is
// forwarded unchanged and logged as busy; once the first ends, the budget
// is free again.
func TestRewriteInflightLimit(t *testing.T) {
	got1, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(got1)
			<-release
		}
	})
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true, MaxInflightBytes: int64(len(origBody)) + 10}})
	f.h.rewriteFn = changed
	f.h.auditFn = noAudit // a fake rewrite keeps no records
	send := func() *http.Response {
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
		res, _ := do(t, rawClient(), req)
		return res
	}
	first := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
		res, err := rawClient().Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		first <- res
	}()
	select {
	case <-got1:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the backend")
	}
	if in := be.last(t); string(in.Body) != rewrittenBody {
		t.Fatalf("first request: backend got %q, want the rewritten body", in.Body)
	}

	res := send()
	if got := res.Header.Get(HeaderReport); got != "skipped" {
		t.Errorf("second request while the first holds the budget: %s = %q, want skipped", HeaderReport, got)
	}
	if in := be.last(t); string(in.Body) != origBody {
		t.Errorf("second request: backend got %q, want the original", in.Body)
	}
	waitFor(t, "rewrite_skipped=busy in the log", func() bool { return strings.Contains(f.logs.String(), "rewrite_skipped=busy") })

	close(release)
	if r := <-first; r == nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v", r)
	}
	// The first request's reservation is released when its handler ends,
	// just after the client has the response.
	waitFor(t, "budget released", func() bool { return f.h.rwInflight.Load() == 0 })
	res = send()
	if in := be.last(t); string(in.Body) != rewrittenBody || !strings.HasPrefix(res.Header.Get(HeaderReport), "bytes=") {
		t.Errorf("after the first ended: backend got %q, report %q; want the rewritten body", in.Body, res.Header.Get(HeaderReport))
	}
	waitFor(t, "budget released at the end", func() bool { return f.h.rwInflight.Load() == 0 })
}

// TestSlowTenantCannotStarve: eight uploads of one tenant that declare a
// large body and then trickle it hold none of rewrite.max_inflight_bytes
// (it is reserved once a body is read), so another tenant is still
// rewritten; and one tenant can hold at most a quarter of the budget, so a
// tenant with many bodies being rewritten cannot take the rest either
// (issue 16 item 2).
func TestSlowTenantCannotStarve(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	const rwMax = 64 << 10
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true, MaxBodyBytes: rwMax, MaxInflightBytes: 2 * rwMax}})
	f.h.rewriteFn = changed
	f.h.auditFn = noAudit // a fake rewrite keeps no records
	addr := strings.TrimPrefix(f.front.URL, "http://")
	for i := range 8 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		te := "Content-Length: " + strconv.Itoa(rwMax) + "\r\n"
		if i%2 == 1 {
			te = "Transfer-Encoding: chunked\r\n"
		}
		io.WriteString(conn, "POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1\r\nHost: x\r\nX-Goog-Api-Key: slow-tenant\r\nContent-Type: application/json\r\n"+te+"\r\n")
		if i%2 == 1 {
			io.WriteString(conn, "1\r\n{\r\n")
		} else {
			io.WriteString(conn, "{")
		}
	}
	waitFor(t, "eight slow uploads in the handler", func() bool { return testutil.ToFloat64(f.m.InFlight) == 8 })
	req, _ := http.NewRequest("POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(origBody))
	req.Header.Set("X-Goog-Api-Key", "other-tenant")
	res, _ := do(t, rawClient(), req)
	if got := res.Header.Get(HeaderReport); !strings.HasPrefix(got, "bytes=") {
		t.Errorf("other tenant's request while eight slow uploads wait: %s = %q, want it rewritten", HeaderReport, got)
	}
	// Its reservation is released when its handler ends, just after the
	// client has the response.
	waitFor(t, "the reservation released", func() bool { return f.h.rwInflight.Load() == 0 })

	// The share cap, on the reservations themselves.
	a, b := &reqState{tenant: "a"}, &reqState{tenant: "b"}
	var held []*reqState
	for range 4 {
		st := &reqState{tenant: "a"}
		if !f.h.reserveRewrite(st, rwMax/8) {
			break
		}
		held = append(held, st)
	}
	if len(held) != 4 {
		t.Fatalf("tenant a got %d reservations of an eighth of its quarter, want 4", len(held))
	}
	if f.h.reserveRewrite(a, rwMax/8) {
		t.Error("tenant a reserved past a quarter of the budget")
	}
	if !f.h.reserveRewrite(b, rwMax) {
		t.Error("tenant b could not reserve while tenant a holds its quarter")
	}
	for _, st := range append(held, a, b) {
		f.h.releaseRewrite(st)
	}
	if n := f.h.rwInflight.Load(); n != 0 {
		t.Errorf("after every release %d bytes are still reserved", n)
	}
}
