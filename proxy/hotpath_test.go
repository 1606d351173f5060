package proxy

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/metrics"
)

func TestReadBody(t *testing.T) {
	const body = "0123456789"
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		r     func() io.Reader
		size  int64
		limit int64
		want  string
		err   error
	}{
		{"known", func() io.Reader { return &countingBody{rc: io.NopCloser(strings.NewReader(body)), size: 10} }, 10, 100, body, nil},
		{"known one byte at a time", func() io.Reader {
			return &countingBody{rc: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), size: 10}
		}, 10, 100, body, nil},
		{"empty", func() io.Reader { return &countingBody{rc: io.NopCloser(strings.NewReader("")), size: 0} }, 0, 100, "", nil},
		{"unknown", func() io.Reader { return strings.NewReader(body) }, -1, 100, body, nil},
		{"unknown over limit", func() io.Reader { return strings.NewReader(body) }, -1, 4, "01234", nil},
		{"no EOF with the last byte", func() io.Reader { return strings.NewReader(body) }, 10, 100, body, nil},
		{"longer than announced", func() io.Reader { return strings.NewReader(body) }, 4, 6, "0123456", nil},
		{"shorter than announced", func() io.Reader { return strings.NewReader(body) }, 20, 100, body, nil},
		{"error", func() io.Reader { return io.MultiReader(strings.NewReader("01"), iotest.ErrReader(errBoom)) }, 10, 100, "01", errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bb, err := readBody(tc.r(), tc.size, tc.limit)
			if (bb != nil) != (tc.size >= 0 && tc.size <= tc.limit) {
				t.Errorf("readBody: pooled buffer %v for size %d, limit %d", bb != nil, tc.size, tc.limit)
			}
			if string(got) != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("readBody = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			// The reference: what prepareRewrite read before.
			ref, rerr := io.ReadAll(io.LimitReader(tc.r(), tc.limit+1))
			if string(got) != string(ref) || !errors.Is(err, rerr) && !errors.Is(rerr, err) {
				t.Errorf("readBody = %q, %v; io.ReadAll read %q, %v", got, err, ref, rerr)
			}
		})
	}
}

func TestTenantHasher(t *testing.T) {
	secret := []byte("secret")
	reqs := []*http.Request{
		httptest.NewRequest("POST", "/v1beta/models/m:generateContent", nil),
		httptest.NewRequest("POST", "/v1beta/models/m:generateContent?key=AIzaA", nil),
		httptest.NewRequest("POST", "/v1beta/models/m:generateContent?access_token=tok", nil),
	}
	for _, h := range []struct{ k, v string }{{"X-Goog-Api-Key", "AIzaA"}, {"Authorization", "Bearer AIzaA"}, {"X-Tenant", "AIzaA"}} {
		r := httptest.NewRequest("POST", "/v1beta/models/m:generateContent", nil)
		r.Header.Set(h.k, h.v)
		reqs = append(reqs, r)
	}
	for i := range 50 {
		r := httptest.NewRequest("POST", "/v1beta/models/m:generateContent", nil)
		r.Header.Set("X-Goog-Api-Key", "key-"+strconv.Itoa(i))
		reqs = append(reqs, r)
	}
	th := newTenantHasher(secret)
	seen := map[string]bool{}
	for round := range 2 {
		for i, r := range reqs {
			for _, header := range []string{"", "X-Tenant"} {
				want := tenantOf(secret, header, r)
				if got := th.tenant(header, r); got != want {
					t.Fatalf("round %d, request %d, header %q: tenant = %s, want %s", round, i, header, got, want)
				}
				seen[want] = true
			}
		}
	}
	// Key, header and bearer of the same value are three tenants; the
	// anonymous one and the numbered keys make up the rest.
	if want := 3 + 2 + 50; len(seen) != want {
		t.Errorf("%d distinct tenants, want %d", len(seen), want)
	}
	// Concurrent use gives the same ids.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, r := range reqs {
				if got, want := th.tenant("", r), tenantOf(secret, "", r); got != want {
					t.Errorf("concurrent tenant = %s, want %s", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestIsEventStream(t *testing.T) {
	for _, v := range []string{
		"", "text/event-stream", "TEXT/Event-Stream", " text/event-stream ", "text/event-stream\u00a0",
		"text/event-stream; charset=utf-8", "text/event-stream;", "text/event-stream; a=1; a=2",
		"text/event-stream; a", "text/event-ſtream", "text/event-\u212Atream", "application/json; charset=UTF-8",
		"application/json", "text/event-streams", "text/event", "text/event-stream/x",
	} {
		ct, _, _ := mime.ParseMediaType(v)
		if got, want := isEventStream(v), ct == "text/event-stream"; got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", v, got, want)
		}
	}
}

func FuzzIsEventStream(f *testing.F) {
	f.Add("text/event-stream; charset=utf-8")
	f.Add("Text/Event-Stream;;")
	f.Fuzz(func(t *testing.T, v string) {
		ct, _, _ := mime.ParseMediaType(v)
		if got, want := isEventStream(v), ct == "text/event-stream"; got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", v, got, want)
		}
	})
}

func TestHotMetricsAreTheVectorsChildren(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	h := hotMetrics{m: m}
	if n := testutil.CollectAndCount(m.Requests); n != 0 {
		t.Fatalf("requests_total has %d series before any request, want 0", n)
	}
	for range 3 {
		h.request(RouteGenerate, "gemini-2.5-flash", 200, false).Inc()
		h.requestDuration(RouteStreamGenerate, true).Observe(0.5)
		h.upstreamResponse(RouteGenerate, 1000).Inc()
		h.requestBytes(RouteGenerate, metrics.StageSent).Add(10)
		h.requestBytes(RouteGenerate, metrics.StageReceived).Add(7)
	}
	for _, c := range []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"requests", m.Requests.WithLabelValues("generate_content", "gemini-2.5-flash", "200", "false"), 3},
		{"upstream responses", m.UpstreamResponses.WithLabelValues("generate_content", "other"), 3},
		{"sent", m.RequestBytes.WithLabelValues("generate_content", metrics.StageSent), 30},
		{"received", m.RequestBytes.WithLabelValues("generate_content", metrics.StageReceived), 21},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.Requests); n != 1 {
		t.Errorf("requests_total has %d series, want 1", n)
	}
	if n := testutil.CollectAndCount(m.RequestDuration); n != 1 {
		t.Errorf("request_duration_seconds has %d series, want 1", n)
	}
}

// BenchmarkTenant compares the pooled keyed HMAC with a fresh HMAC per
// request (what tenantOf does).
func BenchmarkTenant(b *testing.B) {
	r := httptest.NewRequest("POST", "/v1beta/models/m:generateContent", nil)
	r.Header.Set("X-Goog-Api-Key", "AIzaSy-benchmark-key-0123456789abcdefghij")
	secret := []byte("0123456789abcdef0123456789abcdef")
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tenantOf(secret, "", r)
		}
	})
	th := newTenantHasher(secret)
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			th.tenant("", r)
		}
	})
}

// deadlineLog is a readDeadliner that keeps the deadlines set.
type deadlineLog struct{ set []time.Time }

func (d *deadlineLog) SetReadDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestBodyIdleRearm checks when countingBody sets the connection's read
// deadline: once when armed, again before a read only when idle/idleRearm
// has passed since it was last set (then at least idle after the read),
// and cleared at the end of the body.
func TestBodyIdleRearm(t *testing.T) {
	for _, tc := range []struct {
		name  string
		idle  time.Duration
		pause time.Duration // between reads
		want  int           // deadlines set before the clear
	}{
		// Reads within idle/idleRearm (about a minute) of the arming: no
		// timer update per read.
		{"quick reads", time.Hour, 0, 1},
		// Reads 2 ms apart with idle/idleRearm = 1 ms: set before each.
		{"spaced reads", 64 * time.Millisecond, 2 * time.Millisecond, 1 + 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deadlineLog{}
			b := &countingBody{rc: io.NopCloser(iotest.OneByteReader(strings.NewReader("01234"))), size: 5}
			w := &struct {
				http.ResponseWriter
				*deadlineLog
			}{nil, d}
			if !b.startIdle(tc.idle, w) {
				t.Fatal("startIdle: no deadline")
			}
			var buf [8]byte
			for {
				time.Sleep(tc.pause)
				before := time.Now()
				n0 := len(d.set)
				_, err := b.Read(buf[:])
				if len(d.set) > n0 && err == nil {
					if got := d.set[n0]; got.Before(before.Add(tc.idle)) {
						t.Errorf("deadline %v after a read at %v, want at least idle %v later", got, before, tc.idle)
					}
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(d.set) != tc.want+1 || !d.set[len(d.set)-1].IsZero() {
				t.Errorf("deadlines set %v, want %d and then the zero time", d.set, tc.want)
			}
		})
	}
}

func TestHeaderKeysCanonical(t *testing.T) {
	for _, k := range []string{hdrAPIClient, hdrAPIKey, hdrAuthorization, hdrContentEncoding, hdrContentLength, hdrContentType, hdrUploadURL, HeaderRewrite} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("header key %q is not canonical (%q): headerValue would miss it", k, c)
		}
	}
}

func TestHeaderValueAsGet(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", "text/plain")
	h.Add("X-Goog-Api-Key", "a")
	h.Add("X-Goog-Api-Key", "b")
	h["Content-Encoding"] = []string{}
	h["x-goog-upload-url"] = []string{"raw"} // not canonical: Get misses it too
	for _, hd := range []http.Header{h, nil, {}} {
		for _, k := range []string{hdrContentType, hdrAPIKey, hdrContentEncoding, hdrUploadURL, hdrAPIClient} {
			if got, want := headerValue(hd, k), hd.Get(k); got != want {
				t.Errorf("headerValue(%v, %q) = %q, want %q (Get)", hd, k, got, want)
			}
		}
	}
}

// TestRouteHot: a route's children are the vectors' own, each made on its
// first use only (no series earlier than WithLabelValues would make it),
// and the same from concurrent first uses.
func TestRouteHot(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h := hotMetrics{m: m}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			rh := h.forRoute(RouteGenerate)
			rh.proxyOverhead().Observe(0.1)
			rh.requestBytes(metrics.StageSent).Add(1)
			rh.requestDuration(false).Observe(0.2)
		})
	}
	wg.Wait()
	for _, c := range []struct {
		name string
		vec  prometheus.Collector
		want int
	}{
		{"proxy overhead", m.ProxyOverhead, 1}, {"request bytes", m.RequestBytes, 1}, {"request duration", m.RequestDuration, 1},
		{"upstream duration", m.UpstreamDuration, 0}, {"time to first byte", m.TimeToFirstByte, 0}, {"response bytes", m.ResponseBytes, 0},
	} {
		if n := testutil.CollectAndCount(c.vec); n != c.want {
			t.Errorf("%s has %d series, want %d", c.name, n, c.want)
		}
	}
	if got := testutil.ToFloat64(m.RequestBytes.WithLabelValues(string(RouteGenerate), metrics.StageSent)); got != 8 {
		t.Errorf("sent bytes = %v, want 8", got)
	}
	rh := h.forRoute(RouteStreamGenerate)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"duration", rh.requestDuration(true), m.RequestDuration.WithLabelValues(string(RouteStreamGenerate), "true")},
		{"overhead", rh.proxyOverhead(), m.ProxyOverhead.WithLabelValues(string(RouteStreamGenerate))},
		{"upstream", rh.upstreamDuration(), m.UpstreamDuration.WithLabelValues(string(RouteStreamGenerate))},
		{"first byte", rh.timeToFirstByte(), m.TimeToFirstByte.WithLabelValues(string(RouteStreamGenerate))},
		{"received", rh.requestBytes(metrics.StageReceived), m.RequestBytes.WithLabelValues(string(RouteStreamGenerate), metrics.StageReceived)},
		{"response bytes", rh.responseBytesOf(), m.ResponseBytes.WithLabelValues(string(RouteStreamGenerate))},
	} {
		if c.got != c.want {
			t.Errorf("%s: the route's child is not the vector's", c.name)
		}
	}
}
