package reliability

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// canaryKey is the API key every test uses, so that TestMain can search
// everything the suite produced for it. Other tenants' keys extend it.
const canaryKey = "AIzaSy-RELIABILITY-CANARY-KEY-0123456789"

// tenantKey returns the canary key of tenant i (0 is canaryKey itself).
func tenantKey(i int) string {
	if i == 0 {
		return canaryKey
	}
	return fmt.Sprintf("%s-tenant%d", canaryKey, i)
}

// proxyBin is the gemini-proxy binary built by TestMain.
var proxyBin string

// outputs counts every log, scrape and response body the suite saw, and
// keeps the ones holding the canary key, for the credential check in
// TestMain. Each is searched when collected, so that a long soak does not
// keep its traffic in memory.
var outputs struct {
	mu    sync.Mutex
	n     int
	size  int64
	leaks []output
}

type output struct {
	what string
	data []byte
}

// collect searches b, described by what, for the canary key.
func collect(what string, b []byte) {
	f := findCanary(b)
	outputs.mu.Lock()
	defer outputs.mu.Unlock()
	outputs.n++
	outputs.size += int64(len(b))
	if f != "" {
		outputs.leaks = append(outputs.leaks, output{what, bytes.Clone(excerpt(b, f))})
	}
}

// canaryForms returns the canary key as it could appear when encoded: raw,
// URL-escaped, hex, and standard and URL-safe base64 at each of the three
// alignments it could have inside a longer encoded string.
func canaryForms() []string {
	forms := []string{canaryKey, url.QueryEscape(canaryKey), hex.EncodeToString([]byte(canaryKey))}
	for off := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := enc.EncodeToString([]byte(canaryKey[off:]))
			// Drop the last group, which depends on what follows the key.
			forms = append(forms, s[:len(s)-4])
		}
	}
	// The part that makes the key recognisable, in case something truncates.
	return append(forms, "RELIABILITY-CANARY")
}

// findCanary returns the first canary form found in b, or "".
func findCanary(b []byte) string {
	for _, f := range canaryForms() {
		if bytes.Contains(b, []byte(f)) {
			return f
		}
	}
	return ""
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reliability")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	proxyBin = filepath.Join(dir, "gemini-proxy")
	if err := testutil.BuildProxy(context.Background(), proxyBin, raceEnabled); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	// The credential check over the whole suite: every log line of every
	// proxy process, every response and every scrape.
	outputs.mu.Lock()
	for _, o := range outputs.leaks {
		fmt.Fprintf(os.Stderr, "CREDENTIAL LEAK: the canary key found in %s:\n%s\n", o.what, o.data)
		code = 1
	}
	if testing.Verbose() || len(outputs.leaks) > 0 {
		fmt.Fprintf(os.Stderr, "credential search: %d outputs, %d bytes, %d with the canary key\n", outputs.n, outputs.size, len(outputs.leaks))
	}
	outputs.mu.Unlock()
	os.Exit(code)
}

// excerpt returns up to 200 bytes around the first occurrence of s in b.
func excerpt(b []byte, s string) []byte {
	i := bytes.Index(b, []byte(s))
	lo, hi := max(0, i-100), min(len(b), i+len(s)+100)
	return b[lo:hi]
}

// upstream is the emulator behind a recorder of what arrives, with the
// in-flight requests and how long each one's context lived.
type upstream struct {
	*httptest.Server
	emu *emulator.Server

	mu       sync.Mutex
	seen     []seenReq
	inFlight atomic.Int64
	noRecord atomic.Bool    // the soak keeps no request (nor does the emulator, reset per interval)
	canceled chan time.Time // one value per request whose context ended before the handler returned
}

type seenReq struct {
	Host, Path, RawPath, RawQuery string
	Header                        http.Header
	Body                          []byte
}

func newUpstream(t testing.TB, opts emulator.Options) *upstream {
	t.Helper()
	u := &upstream{emu: emulator.New(opts), canceled: make(chan time.Time, 1024)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body first, as a real front end does: net/http notices a
		// client that hung up (and cancels r.Context) only once the body
		// was read, and the emulator sleeps before reading it.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !u.noRecord.Load() {
			u.mu.Lock()
			u.seen = append(u.seen, seenReq{r.Host, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Header.Clone(), body})
			u.mu.Unlock()
		}
		u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		u.emu.ServeHTTP(w, r)
		select {
		case <-r.Context().Done():
			select {
			case u.canceled <- time.Now():
			default:
			}
		default:
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []seenReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenReq(nil), u.seen...)
}

// stack is one running gemini-proxy process.
type stack struct {
	t         testing.TB
	cmd       *exec.Cmd
	proxyURL  string
	adminURL  string
	logs      *testutil.Buffer
	exited    chan struct{}
	waitErr   error
	stopOnce  sync.Once
	allowExit bool // the test stops the process itself and checks the result
}

// startStack runs `gemini-proxy serve` in front of upstreamURL on loopback
// ports the kernel picks, with env (GEMINI_PROXY_* settings) on top of a
// debug-level JSON log and a short grace period. The process is stopped
// with SIGTERM when the test ends; it must exit 0 without a panic or a
// data race in its log.
func startStack(t testing.TB, upstreamURL string, env ...string) *stack {
	t.Helper()
	cmd := exec.Command(proxyBin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GEMINI_PROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"GEMINI_PROXY_UPSTREAM_URL="+upstreamURL,
		"GEMINI_PROXY_SERVER_LISTEN=127.0.0.1:0",
		"GEMINI_PROXY_ADMIN_LISTEN=127.0.0.1:0",
		"GEMINI_PROXY_SERVER_SHUTDOWN_GRACE=5s",
		"GEMINI_PROXY_LOG_LEVEL=debug",
		"GEMINI_PROXY_LOG_FORMAT=json",
		"GOTRACEBACK=all",
	)
	cmd.Env = append(cmd.Env, env...)
	// Above info level the addresses are not logged: choose them here.
	quiet := slices.Contains(env, "GEMINI_PROXY_LOG_LEVEL=warn") || slices.Contains(env, "GEMINI_PROXY_LOG_LEVEL=error")
	var fixed [2]string
	if quiet {
		fixed = [2]string{testutil.FreeAddr(t), testutil.FreeAddr(t)}
		cmd.Env = append(cmd.Env, "GEMINI_PROXY_SERVER_LISTEN="+fixed[0], "GEMINI_PROXY_ADMIN_LISTEN="+fixed[1])
	}
	s := &stack{t: t, cmd: cmd, logs: &testutil.Buffer{}, exited: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(s.logs, pw)
	cmd.Stdout = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.waitErr = cmd.Wait()
		pw.Close()
		close(s.exited)
	}()
	addrs := testutil.Listening(pr)
	t.Cleanup(s.cleanup)
	ready := make(chan [2]string, 1)
	if quiet {
		go func() {
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if r, err := http.Get("http://" + fixed[1] + "/readyz"); err == nil {
					r.Body.Close()
					if r.StatusCode == http.StatusOK {
						ready <- fixed
						return
					}
				}
			}
		}()
	}
	var a [2]string
	select {
	case a = <-addrs:
	case a = <-ready:
	case <-s.exited:
		t.Fatalf("gemini-proxy exited at start: %v\n%s", s.waitErr, s.logs.Bytes())
	case <-time.After(20 * time.Second):
		t.Fatalf("gemini-proxy did not log its addresses:\n%s", s.logs.Bytes())
	}
	s.proxyURL, s.adminURL = "http://"+a[0], "http://"+a[1]
	return s
}

// stop sends SIGTERM and waits up to wait for the process to exit; it
// returns the exit error (nil for status 0) and whether it exited.
func (s *stack) stop(wait time.Duration) (error, bool) {
	s.stopOnce.Do(func() { s.cmd.Process.Signal(syscall.SIGTERM) })
	select {
	case <-s.exited:
		return s.waitErr, true
	case <-time.After(wait):
		return nil, false
	}
}

func (s *stack) cleanup() {
	err, ok := s.stop(15 * time.Second)
	if !ok {
		s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("gemini-proxy did not exit within 15s of SIGTERM")
	}
	logs := s.logs.Bytes()
	collect("proxy log", logs)
	if err != nil && !s.allowExit {
		s.t.Errorf("gemini-proxy exited with %v", err)
	}
	for _, bad := range []string{"panic:", "panic serving", "DATA RACE", "fatal error:"} {
		if bytes.Contains(logs, []byte(bad)) {
			s.t.Errorf("gemini-proxy log contains %q:\n%s", bad, excerpt(logs, bad))
		}
	}
	if s.t.Failed() {
		s.t.Logf("gemini-proxy log (last 4 KiB):\n%s", logs[max(0, len(logs)-4096):])
	}
}

// metrics scrapes the admin listener and collects the text.
func (s *stack) metrics(t testing.TB) string {
	t.Helper()
	_, b := testutil.Get(t, s.adminURL+"/metrics")
	collect("/metrics", b)
	return string(b)
}

// metric sums the samples of name whose labels include every k="v" pair
// given in labels (alternating keys and values).
func metric(text, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, val := line[:sp], line[sp+1:]
		n, lset, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(lset, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
			}
		}
		if ok {
			f, _ := strconv.ParseFloat(val, 64)
			sum += f
		}
	}
	return sum
}

// waitMetric polls the proxy's metric (see metric) for up to 3 s until ok
// accepts it, and returns the last value: the proxy records a request's
// metrics just after its response ended, so a scrape right after the
// client read the body may not see them yet.
func (s *stack) waitMetric(t testing.TB, ok func(float64) bool, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if v = metric(s.metrics(t), name, labels...); ok(v) || time.Now().After(deadline) {
			return v
		}
	}
}

// is returns a predicate for waitMetric.
func is(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// atLeast returns a predicate for waitMetric.
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }

// goroutines returns the proxy's go_goroutines.
func (s *stack) goroutines(t testing.TB) float64 { return metric(s.metrics(t), "go_goroutines") }

// waitGoroutines waits up to 10 s for the proxy's goroutine count to come
// back to at most base+slack, and fails the test otherwise.
func (s *stack) waitGoroutines(t testing.TB, base float64, slack float64) {
	t.Helper()
	var g float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if g = s.goroutines(t); g <= base+slack {
			return
		}
	}
	t.Errorf("proxy goroutines = %v after the requests ended, baseline %v: leaked", g, base)
}

// reply is what a client got.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error // transport or body read error
}

// client does not decompress, keeps no connection between tests that
// matter, and has a generous overall bound so that a hang fails.
var client = &http.Client{
	Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64},
	Timeout:   60 * time.Second,
}

// send issues one request and reads the whole reply; the body is collected
// for the credential search.
func send(ctx context.Context, method, target string, header http.Header, body []byte) reply {
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return reply{Err: err}
	}
	if body == nil {
		req.Body, req.ContentLength = nil, 0
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if req.Header.Get("X-Goog-Api-Key") == "" && !strings.Contains(target, "key=") {
		req.Header.Set("X-Goog-Api-Key", canaryKey)
	}
	res, err := client.Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	collect(method+" "+target, b)
	var hb bytes.Buffer
	res.Header.Write(&hb)
	collect("headers of "+method+" "+target, hb.Bytes())
	return reply{Status: res.StatusCode, Header: res.Header, Body: b, Err: err}
}

// jsonHeader is the Content-Type most requests carry.
func jsonHeader(kv ...string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

const (
	generatePath = "/v1beta/models/gemini-2.5-flash:generateContent"
	streamPath   = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
	arrayPath    = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
)

// prompt returns a small valid generate body whose text includes s.
func prompt(s string) []byte {
	return []byte(`{"contents":[{"role":"user","parts":[{"text":"Please write a short story about ` + s + `."}]}]}`)
}
