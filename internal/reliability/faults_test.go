package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

var responseIDRE = regexp.MustCompile(`"responseId": ?"[A-Za-z0-9_-]+"`)

// sameBody removes what differs between two identical upstream answers
// (the random responseId).
func sameBody(b []byte) string { return responseIDRE.ReplaceAllString(string(b), `"responseId":"X"`) }

// endToEndHeaders drops the headers that legitimately differ between a
// direct and a proxied answer: Date, and the proxy's own report.
func endToEndHeaders(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Date")
	h.Del("X-Gemini-Proxy-Report")
	// Server-Timing carries the upstream's own duration, which differs
	// between two calls; only its presence is compared.
	if _, ok := h["Server-Timing"]; ok {
		h["Server-Timing"] = []string{"present"}
	}
	return h
}

// TestUpstreamErrorsUnchanged sends requests the upstream answers with
// 429 (Retry-After), 500, 503 and 400, on each framing, straight to the
// emulator and through the proxy: status, headers and body must be the
// same, with rewriting on (which makes the proxy retry a rejected rewritten
// body once) and off, and each answer is counted by status.
func TestUpstreamErrorsUnchanged(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL)
	faults := []struct {
		header string
		code   string
	}{
		{"status=429, retry-after=3", "429"},
		{"status=500", "500"},
		{"status=503", "503"},
		{"status=400", "400"},
	}
	var sent int
	for _, f := range faults {
		for _, path := range []string{generatePath, streamPath, arrayPath} {
			for _, rw := range []string{"on", "off"} {
				t.Run(f.code+path[strings.LastIndexByte(path, ':'):]+"/rewrite-"+rw, func(t *testing.T) {
					h := jsonHeader("X-Emulator-Fault", f.header)
					if rw == "off" {
						h.Set("X-Gemini-Proxy-Rewrite", "off")
					}
					body := prompt("a lighthouse keeper " + f.code)
					direct := send(t.Context(), "POST", up.URL+path, h, body)
					got := send(t.Context(), "POST", s.proxyURL+path, h, body)
					sent++
					if direct.Err != nil || got.Err != nil {
						t.Fatalf("direct err %v, proxied err %v", direct.Err, got.Err)
					}
					if got.Status != direct.Status || got.Status == 200 {
						t.Errorf("status through proxy %d, direct %d", got.Status, direct.Status)
					}
					if diff := cmp.Diff(string(direct.Body), string(got.Body)); diff != "" {
						t.Errorf("error body changed by the proxy (-direct +proxy):\n%s", diff)
					}
					if diff := cmp.Diff(endToEndHeaders(direct.Header), endToEndHeaders(got.Header)); diff != "" {
						t.Errorf("headers changed by the proxy (-direct +proxy):\n%s", diff)
					}
				})
			}
		}
	}
	for _, f := range faults {
		if n := s.waitMetric(t, is(6), "gemini_proxy_requests_total", "code", f.code); n != 6 {
			t.Errorf("gemini_proxy_requests_total{code=%q} = %v, want 6 (3 framings × rewrite on/off)", f.code, n)
		}
		if n := s.waitMetric(t, atLeast(6), "gemini_proxy_upstream_responses_total", "code", f.code); n < 6 {
			t.Errorf("gemini_proxy_upstream_responses_total{code=%q} = %v, want at least 6", f.code, n)
		}
	}
}

// TestUpstreamTimeouts checks the two kinds of slowness with a short
// upstream.response_header_timeout (300ms): headers later than that give a
// Gemini-shaped 504 at about that time and cancel the upstream call; a
// stream whose chunks are each further apart than every time-out of the
// proxy (response headers, read headers, idle) is never cut.
func TestUpstreamTimeouts(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL,
		"GEMINI_PROXY_UPSTREAM_RESPONSE_HEADER_TIMEOUT=300ms",
		"GEMINI_PROXY_SERVER_READ_HEADER_TIMEOUT=300ms",
		"GEMINI_PROXY_SERVER_IDLE_TIMEOUT=300ms",
	)

	t.Run("slow headers", func(t *testing.T) {
		for _, path := range []string{generatePath, streamPath} {
			start := time.Now()
			got := send(t.Context(), "POST", s.proxyURL+path, jsonHeader("X-Emulator-Fault", "header-delay=3s"), prompt("slow headers"))
			took := time.Since(start)
			if got.Err != nil {
				t.Fatal(got.Err)
			}
			if code, status, msg := geminiError(t, got.Body); got.Status != 504 || code != 504 || status != "DEADLINE_EXCEEDED" || msg == "" {
				t.Errorf("%s: got %d %s, want a Gemini-shaped 504 DEADLINE_EXCEEDED", path, got.Status, got.Body)
			}
			if ct := got.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("%s: 504 Content-Type %q", path, ct)
			}
			if took > 2*time.Second {
				t.Errorf("%s: 504 took %v, want about the 300ms time-out", path, took)
			}
			select {
			case <-up.canceled:
			case <-time.After(2 * time.Second):
				t.Errorf("%s: the upstream call was not cancelled after the time-out", path)
			}
		}
		if n := s.waitMetric(t, is(2), "gemini_proxy_upstream_errors_total", "kind", "timeout"); n != 2 {
			t.Errorf("gemini_proxy_upstream_errors_total{kind=timeout} = %v, want 2", n)
		}
	})

	t.Run("slow stream", func(t *testing.T) {
		for _, path := range []string{streamPath, arrayPath} {
			h := jsonHeader("X-Emulator-Fault", "chunk-delay=450ms")
			start := time.Now()
			got := send(t.Context(), "POST", s.proxyURL+path, h, prompt("a slow stream"))
			direct := send(t.Context(), "POST", up.URL+path, h, prompt("a slow stream"))
			if got.Err != nil || got.Status != 200 {
				t.Fatalf("%s: %d %v", path, got.Status, got.Err)
			}
			if took := time.Since(start); took < time.Second {
				t.Errorf("%s: stream took %v; the fault did not slow it", path, took)
			}
			if sameBody(got.Body) != sameBody(direct.Body) {
				t.Errorf("%s: slow stream through the proxy differs from the direct one:\n%s\nvs\n%s", path, got.Body, direct.Body)
			}
		}
	})
}

// TestUpstreamDisconnectMidStream cuts the upstream connection after two
// chunks: a streaming client must see what it would see without the
// proxy, the same bytes and then an error, never a clean end. A unary
// body cut in half is an error on both paths too; through the proxy the
// client gets no status at all (the half body was still in the server's
// write buffer when the handler aborted), directly a 200 with a short
// body. The proxy must not leak goroutines, and a cut response must not
// be recorded as served, while the next complete one is.
func TestUpstreamDisconnectMidStream(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL)
	// Warm up connections so that the baseline includes the pools.
	send(t.Context(), "POST", s.proxyURL+generatePath, jsonHeader(), prompt("warm up"))
	base := s.goroutines(t)
	served := metric(s.metrics(t), "gemini_proxy_cache_served_responses_total")
	for _, path := range []string{streamPath, arrayPath, generatePath} {
		h := jsonHeader("X-Emulator-Fault", "disconnect-after=2")
		direct := send(t.Context(), "POST", up.URL+path, h, prompt("a cut "+path))
		got := send(t.Context(), "POST", s.proxyURL+path, h, prompt("a cut "+path))
		if direct.Err == nil {
			t.Fatalf("%s: the emulator's cut did not reach the direct client", path)
		}
		if got.Err == nil {
			t.Errorf("%s: the client saw a clean end of a stream the upstream cut (%d bytes)", path, len(got.Body))
		}
		if path == generatePath {
			if got.Status != 0 && got.Status != direct.Status {
				t.Errorf("%s: status %d through the proxy, %d direct", path, got.Status, direct.Status)
			}
			if !bytes.HasPrefix(direct.Body, got.Body) {
				t.Errorf("%s: the proxy's partial body is not a prefix of the upstream's", path)
			}
			continue
		}
		if got.Status != direct.Status {
			t.Errorf("%s: status %d through the proxy, %d direct", path, got.Status, direct.Status)
		}
		if sameBody(got.Body) != sameBody(direct.Body) {
			t.Errorf("%s: bytes before the cut differ:\nproxy  %q\ndirect %q", path, got.Body, direct.Body)
		}
	}
	if n := s.waitMetric(t, atLeast(2), "gemini_proxy_upstream_errors_total", "kind", "aborted"); n < 2 {
		t.Errorf("gemini_proxy_upstream_errors_total{kind=aborted} = %v, want the cut streams counted", n)
	}
	text := s.metrics(t)
	if n := metric(text, "gemini_proxy_cache_served_responses_total"); n != served {
		t.Errorf("served responses recorded went from %v to %v after cut responses; a cut answer must not be served", served, n)
	}
	s.waitGoroutines(t, base, 2)
	ok := send(t.Context(), "POST", s.proxyURL+streamPath, jsonHeader(), prompt("a whole one"))
	if ok.Err != nil || ok.Status != 200 {
		t.Fatalf("stream after the cuts: %d %v", ok.Status, ok.Err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n := metric(s.metrics(t), "gemini_proxy_cache_served_responses_total"); n == served+1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("served responses = %v after one complete stream, want %v", n, served+1)
		}
	}
}

// TestClientDisconnectCancelsUpstream reads the first event of a slow
// stream and hangs up: the upstream call must be cancelled within a second
// and the request counted as a client cancel (499).
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL)
	send(t.Context(), "POST", s.proxyURL+generatePath, jsonHeader(), prompt("warm up"))
	base := s.goroutines(t)
	const n = 5
	for i := range n {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "POST", s.proxyURL+streamPath, bytes.NewReader(prompt("a cancel")))
		req.Header = jsonHeader("X-Emulator-Fault", "chunk-delay=500ms", "X-Goog-Api-Key", canaryKey)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Body.Read(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		hungUp := time.Now()
		cancel()
		res.Body.Close()
		select {
		case at := <-up.canceled:
			if d := at.Sub(hungUp); d > time.Second {
				t.Errorf("request %d: upstream cancelled %v after the client left", i, d)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("request %d: upstream call still running 3s after the client left", i)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		text := s.metrics(t)
		c, r := metric(text, "gemini_proxy_client_cancels_total"), metric(text, "gemini_proxy_requests_total", "code", "499")
		if c == n && r == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client_cancels_total = %v, requests_total{code=499} = %v, want %d each", c, r, n)
		}
	}
	if up.inFlight.Load() != 0 {
		t.Errorf("%d upstream requests still in flight", up.inFlight.Load())
	}
	s.waitGoroutines(t, base, 2)
}

// geminiError decodes a Gemini-shaped error body.
func geminiError(t *testing.T, b []byte) (code int, status, message string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Errorf("error body is not Gemini-shaped JSON: %v: %s", err, b)
	}
	return e.Error.Code, e.Error.Status, e.Error.Message
}

// TestUpstreamUnreachableAndTLS points the proxy at a closed port and at
// a TLS server whose certificate it does not trust: every request gets a
// Gemini-shaped 502 quickly, and nothing the proxy writes (body, headers,
// log) names the key, whether it came in the header or in ?key=.
func TestUpstreamUnreachableAndTLS(t *testing.T) {
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the untrusted TLS upstream: %s", r.URL)
	}))
	// The TLS server logs the failed handshakes; keep that out of the output.
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	for _, tc := range []struct{ name, upstream, kind string }{
		{"unreachable", "http://" + testutil.FreeAddr(t), "unreachable"},
		{"tls", tlsSrv.URL, "tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, tc.upstream, "GEMINI_PROXY_UPSTREAM_DIAL_TIMEOUT=2s")
			for _, target := range []string{
				s.proxyURL + generatePath,
				s.proxyURL + streamPath + "&key=" + canaryKey,
				s.proxyURL + "/v1beta/models?key=" + canaryKey,
			} {
				start := time.Now()
				got := send(t.Context(), "POST", target, jsonHeader(), prompt("unreachable"))
				if got.Err != nil {
					t.Fatal(got.Err)
				}
				if time.Since(start) > 3*time.Second {
					t.Errorf("502 took %v", time.Since(start))
				}
				code, status, msg := geminiError(t, got.Body)
				if got.Status != 502 || code != 502 || status != "UNAVAILABLE" || msg == "" {
					t.Errorf("%s: got %d %s, want a Gemini-shaped 502 UNAVAILABLE", target, got.Status, got.Body)
				}
				if f := findCanary(got.Body); f != "" {
					t.Errorf("502 body names the key: %s", got.Body)
				}
			}
			if n := s.waitMetric(t, is(3), "gemini_proxy_upstream_errors_total", "kind", tc.kind); n != 3 {
				t.Errorf("gemini_proxy_upstream_errors_total{kind=%s} = %v, want 3", tc.kind, n)
			}
		})
	}
}

// redisGate is a TCP forwarder in front of a real redis-server that a
// test can switch between passing traffic, refusing it (down) and
// swallowing it (silent: connections accepted, nothing answered).
type redisGate struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	mode   string // "up", "down", "silent"
	conns  []net.Conn
}

func newRedisGate(t *testing.T, target string) *redisGate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &redisGate{ln: ln, target: target, mode: "up"}
	t.Cleanup(func() { ln.Close(); g.set("down") })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serve(c)
		}
	}()
	return g
}

// set switches the mode and closes every open connection, as a Redis
// restart or a network cut would.
func (g *redisGate) set(mode string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = mode
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

func (g *redisGate) serve(c net.Conn) {
	g.mu.Lock()
	mode := g.mode
	if mode == "down" {
		g.mu.Unlock()
		c.Close()
		return
	}
	g.conns = append(g.conns, c)
	g.mu.Unlock()
	if mode == "silent" {
		io.Copy(io.Discard, c)
		return
	}
	r, err := net.Dial("tcp", g.target)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	g.conns = append(g.conns, r)
	g.mu.Unlock()
	go func() { io.Copy(r, c); r.Close() }()
	io.Copy(c, r)
	c.Close()
}

// TestRedisDownSlowFlapping runs the shared (Redis) cache mode while Redis
// is up, down, silent and flapping every 50ms: every request, unary and
// streamed, succeeds, and none waits noticeably on Redis.
func TestRedisDownSlowFlapping(t *testing.T) {
	rds := cachetest.StartRedis(t)
	gate := newRedisGate(t, rds.Addr)
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL,
		"GEMINI_PROXY_CACHE_BACKEND=redis",
		"GEMINI_PROXY_CACHE_REDIS_URL=redis://"+gate.ln.Addr().String()+"/0",
		"GEMINI_PROXY_CACHE_TENANT_SECRET=reliability-tenant-secret-0123456789",
	)
	// A flattened transcript, so that the Verifier asks Redis on each request.
	first := send(t.Context(), "POST", s.proxyURL+generatePath, jsonHeader(), prompt("a redis phase"))
	if first.Status != 200 {
		t.Fatalf("first request: %d %s", first.Status, first.Body)
	}
	var answer struct {
		Candidates []struct {
			Content struct {
				Parts []struct{ Text string } `json:"parts"`
			} `json:"content"`
		} `json:"candidates"`
	}
	json.Unmarshal(first.Body, &answer)
	reply := answer.Candidates[0].Content.Parts[0].Text
	transcript, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{
		"text": "User: Please write a short story about a redis phase.\nAssistant: " + reply + "\nUser: And now a shorter one?"}}}}})

	phases := []struct {
		name string
		flap bool
		mode string
	}{{"up", false, "up"}, {"down", false, "down"}, {"silent", false, "silent"}, {"flapping", true, ""}, {"up again", false, "up"}}
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			stop := make(chan struct{})
			var flapper sync.WaitGroup
			if ph.flap {
				flapper.Go(func() {
					modes := []string{"up", "down", "up", "silent"}
					for i := 0; ; i++ {
						gate.set(modes[i%len(modes)])
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
						}
					}
				})
			} else {
				gate.set(ph.mode)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var slowest time.Duration
			// Each phase lasts at least 1.2s, longer than the cache's
			// one-second local-only back-off after a Redis error, so that
			// every phase also sees Redis tried again.
			var count atomic.Int64
			until := time.Now().Add(1200 * time.Millisecond)
			for w := range 4 {
				wg.Go(func() {
					for i := 0; i < 10 || time.Now().Before(until); i++ {
						count.Add(1)
						path, body := generatePath, transcript
						if (w+i)%2 == 1 {
							path, body = streamPath, prompt("redis "+ph.name)
						}
						start := time.Now()
						got := send(t.Context(), "POST", s.proxyURL+path, jsonHeader(), body)
						d := time.Since(start)
						if got.Err != nil || got.Status != 200 {
							t.Errorf("%s with Redis %s: %d %v %s", path, ph.name, got.Status, got.Err, got.Body)
						}
						mu.Lock()
						slowest = max(slowest, d)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(stop)
			flapper.Wait()
			// Each request spends at most the cache's Redis budget (100ms)
			// on Redis; allow for the race detector and a loaded machine.
			if slowest > 2*time.Second {
				t.Errorf("slowest request with Redis %s took %v", ph.name, slowest)
			}
			t.Logf("Redis %s: %d requests, slowest %v", ph.name, count.Load(), slowest)
		})
	}
	text := s.metrics(t)
	t.Logf("redis errors %v, dropped writes %v, writes %v, hits %v", metric(text, "gemini_proxy_cache_redis_errors_total"),
		metric(text, "gemini_proxy_cache_redis_dropped_writes_total"), metric(text, "gemini_proxy_cache_redis_writes_total"), metric(text, "gemini_proxy_cache_redis_hits_total"))
	if metric(text, "gemini_proxy_cache_redis_errors_total") == 0 {
		t.Errorf("no Redis error counted although Redis was down and silent")
	}
}

// TestGracefulShutdownUnderLoad sends SIGTERM while 16 streams and 16
// slow unary calls are in flight: every one of them completes in full
// within the grace period, new connections are refused at once, and the
// process exits 0.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	s := startStack(t, up.URL, "GEMINI_PROXY_SERVER_SHUTDOWN_GRACE=20s")
	s.allowExit = true
	const n = 16
	type result struct {
		path string
		r    reply
	}
	results := make(chan result, 2*n)
	for range n {
		go func() {
			h := jsonHeader("X-Emulator-Fault", "chunk-delay=300ms")
			results <- result{streamPath, send(context.Background(), "POST", s.proxyURL+streamPath, h, prompt("shutdown stream"))}
		}()
		go func() {
			h := jsonHeader("X-Emulator-Fault", "header-delay=1200ms")
			results <- result{generatePath, send(context.Background(), "POST", s.proxyURL+generatePath, h, prompt("shutdown unary"))}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); up.inFlight.Load() < 2*n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests reached the upstream", up.inFlight.Load(), 2*n)
		}
	}
	stopped := time.Now()
	s.stopOnce.Do(func() { s.cmd.Process.Signal(syscall.SIGTERM) })
	// New connections are refused while the in-flight ones drain.
	addr := strings.TrimPrefix(s.proxyURL, "http://")
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Errorf("the proxy still accepts connections 2s after SIGTERM")
			break
		}
	}
	for range 2 * n {
		res := <-results
		if res.r.Err != nil || res.r.Status != 200 {
			t.Errorf("%s cut by the shutdown: %d %v", res.path, res.r.Status, res.r.Err)
			continue
		}
		if !bytes.Contains(res.r.Body, []byte(`"finishReason": "STOP"`)) && !bytes.Contains(res.r.Body, []byte(`"finishReason":"STOP"`)) {
			t.Errorf("%s ended without its final event:\n%s", res.path, res.r.Body)
		}
	}
	err, ok := s.stop(20 * time.Second)
	if !ok {
		t.Fatalf("process still running 20s after SIGTERM")
	}
	if err != nil {
		t.Errorf("process exit: %v", err)
	}
	t.Logf("%d streams and %d unary calls drained in %v", n, n, time.Since(stopped))
}
