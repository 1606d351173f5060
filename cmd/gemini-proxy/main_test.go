package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// clearEnv hides GEMINI_PROXY_* variables of the calling environment.
func clearEnv(t *testing.T) {
	t.Helper()
	testutil.ClearEnv(t, config.EnvPrefix+"_")
}

func runCmd(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = run(ctx, args, &o, &e)
	return o.String(), e.String(), err
}

func TestRunCommands(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		args       []string
		wantErr    bool
		wantStdout string
		wantStderr string
	}{
		{args: []string{"version"}, wantStdout: "gemini-proxy "},
		{args: []string{"--help"}, wantStdout: "Commands:"},
		{args: nil, wantErr: true, wantStdout: "Usage:"},
		{args: []string{"frobnicate"}, wantErr: true, wantStderr: `unknown command "frobnicate"`},
		{args: []string{"serv"}, wantErr: true, wantStderr: `unknown command "serv"; did you mean serve?`},
		{args: []string{"serve", "--no-such-flag"}, wantErr: true, wantStderr: "unknown flag: --no-such-flag\nRun 'gemini-proxy serve --help' for its flags."},
		{args: []string{"serve", "--lisen", ":0"}, wantErr: true, wantStderr: "unknown flag: --lisen; did you mean --listen?\nRun 'gemini-proxy serve --help' for its flags."},
		{args: []string{"config", "--upstrem=x"}, wantErr: true, wantStderr: "unknown flag: --upstrem; did you mean --upstream?"},
		{args: []string{"version", "extra"}, wantErr: true, wantStderr: "unexpected argument"},
		{args: []string{"config", "--upstream", "ftp://nope"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, err := runCmd(t, t.Context(), tt.args...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("run(%q) error = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if !strings.Contains(out, tt.wantStdout) {
				t.Errorf("run(%q) stdout = %q, want it to contain %q", tt.args, out, tt.wantStdout)
			}
			if !strings.Contains(errOut, tt.wantStderr) {
				t.Errorf("run(%q) stderr = %q, want it to contain %q", tt.args, errOut, tt.wantStderr)
			}
		})
	}
}

// TestHelpGoesToStdout checks every command's --help and -h: the usage goes
// to stdout (so that "| less" shows it), nothing to stderr, and the command
// does not run.
func TestHelpGoesToStdout(t *testing.T) {
	clearEnv(t)
	for _, c := range commands() {
		for _, flag := range []string{"--help", "-h"} {
			t.Run(c.name+" "+flag, func(t *testing.T) {
				out, errOut, err := runCmd(t, t.Context(), c.name, flag)
				if err != nil {
					t.Fatalf("run(%s %s) error = %v", c.name, flag, err)
				}
				if want := "Usage: gemini-proxy " + c.name + " [flags]"; !strings.HasPrefix(out, want) {
					t.Errorf("run(%s %s) stdout = %q, want it to start with %q", c.name, flag, out, want)
				}
				if errOut != "" {
					t.Errorf("run(%s %s) stderr = %q, want nothing", c.name, flag, errOut)
				}
			})
		}
	}
}

func TestConfigCommandRedacts(t *testing.T) {
	clearEnv(t)
	t.Setenv("GEMINI_PROXY_UPSTREAM_API_KEY", "AIza-secret-in-env")
	out, _, err := runCmd(t, t.Context(), "config", "--upstream", "http://127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "AIza-secret-in-env") {
		t.Errorf("config printed the API key:\n%s", out)
	}
	for _, want := range []string{`url: "http://127.0.0.1:9000"`, `api_key: "REDACTED"`} {
		if !strings.Contains(out, want) {
			t.Errorf("config output lacks %q:\n%s", want, out)
		}
	}
}

// TestServeGracefulShutdown runs the real serve command against an
// emulator, holds a slow stream open, cancels the command (as SIGTERM does)
// and checks that the stream still completes, new connections are refused
// and /readyz says not ready while draining.
func TestServeGracefulShutdown(t *testing.T) {
	clearEnv(t)
	t.Setenv("GEMINI_PROXY_SERVER_SHUTDOWN_GRACE", "20s")
	proxyAddr, adminAddr, cancel, done, errOut := serveEmulated(t, &emulator.Fault{ChunkDelay: 150 * time.Millisecond})

	body := `{"contents":[{"role":"user","parts":[{"text":"Tell me a long story about a lighthouse keeper and the sea."}]}]}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+proxyAddr+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", strings.NewReader(body))
	req.Header.Set("x-goog-api-key", "test-key")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("stream status = %s", res.Status)
	}
	// Read the first event, then shut down while the stream is still running.
	buf := make([]byte, 1)
	if _, err := res.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()

	// While draining: /readyz says 503, and the proxy refuses new connections.
	testutil.WaitStatus(t, "http://"+adminAddr+"/readyz", http.StatusServiceUnavailable, time.Now().Add(5*time.Second))
	// The listener closes right after readiness turns false; from then on
	// new connections are refused while the stream above keeps running.
	refused := false
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", proxyAddr, time.Second)
		if err != nil {
			refused = true
			break
		}
		c.Close()
	}
	if !refused {
		t.Errorf("proxy still accepted new connections 2s into the shutdown")
	}

	rest, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("stream cut during graceful shutdown: %v", err)
	}
	if !bytes.Contains(rest, []byte(`"finishReason":"STOP"`)) && !bytes.Contains(rest, []byte(`"finishReason": "STOP"`)) {
		t.Errorf("stream ended without its final event:\n%s", rest)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return after the stream finished")
	}
	if !strings.Contains(errOut.String(), "shutting down") {
		t.Errorf("log lacks the shutdown line:\n%s", errOut.String())
	}
}

// TestDemo runs the README's first command end to end: emulator, proxy and
// a naive SDK client, all in-process on loopback.
func TestDemo(t *testing.T) {
	clearEnv(t)
	out, errOut, err := runCmd(t, t.Context(), "demo", "--show-request")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{"through proxy", "total", "answers were identical", "superseded", "unchanged"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The last turn through the proxy must be much smaller than the naive one.
	var naive, proxied int
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 7 && f[0] == "total" {
			fmt.Sscan(f[1], &naive)
			fmt.Sscan(f[2], &proxied)
		}
	}
	if naive == 0 || proxied*2 > naive {
		t.Errorf("demo total prompt tokens naive=%d proxied=%d, want the proxy to save at least half:\n%s", naive, proxied, out)
	}
	// The proxy's ledger agrees with the bills within 10%.
	var ledger, bills float64
	if i := strings.Index(out, "The proxy's own ledger"); i >= 0 {
		fmt.Sscanf(strings.Join(strings.Fields(out[i:]), " "), "The proxy's own ledger (gemini_proxy_saved_dollars_total - cost_increase_dollars_total): $%f saved; the bills say $%f.", &ledger, &bills)
	}
	if bills <= 0 || math.Abs(ledger-bills) > 0.10*bills {
		t.Errorf("demo: ledger $%v, bills $%v saved: want both positive and within 10%%:\n%s", ledger, bills, out)
	}
}

func TestHealthCommand(t *testing.T) {
	clearEnv(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	if _, _, err := runCmd(t, t.Context(), "health", "--url", "http://"+ln.Addr().String()+"/healthz"); err != nil {
		t.Errorf("health on a healthy endpoint: %v", err)
	}
	if _, _, err := runCmd(t, t.Context(), "health", "--url", "http://"+ln.Addr().String()+"/missing"); err == nil {
		t.Errorf("health on a 404 endpoint succeeded")
	}
}

// TestServeShutdownDelay checks server.shutdown_delay: after the shutdown
// signal /readyz answers 503 at once, while new connections are still
// accepted and served; once the delay is over the port closes and serve
// returns.
func TestServeShutdownDelay(t *testing.T) {
	clearEnv(t)
	const delay = 2 * time.Second
	t.Setenv("GEMINI_PROXY_SERVER_SHUTDOWN_DELAY", delay.String())
	proxyAddr, adminAddr, cancel, done, errOut := serveEmulated(t, nil)
	cancel()
	signalled := time.Now()

	testutil.WaitStatus(t, "http://"+adminAddr+"/readyz", http.StatusServiceUnavailable, signalled.Add(delay/2))
	// A new connection during the delay is still served.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	body := `{"contents":[{"role":"user","parts":[{"text":"Still there?"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+proxyAddr+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(body))
	req.Header.Set("x-goog-api-key", "test-key")
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("request during the shutdown delay: %v", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if elapsed := time.Since(signalled); elapsed >= delay {
		t.Skipf("machine too slow to observe the delay window (%v)", elapsed)
	}
	if res.StatusCode != http.StatusOK {
		t.Errorf("request during the shutdown delay: %s", res.Status)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
		if waited := time.Since(signalled); waited < delay {
			t.Errorf("serve returned %v after the signal, before the %v delay", waited, delay)
		}
	case <-time.After(delay + 10*time.Second):
		t.Fatal("serve did not return after the delay")
	}
	if _, err := net.DialTimeout("tcp", proxyAddr, time.Second); err == nil {
		t.Errorf("proxy still accepts connections after shutdown")
	}
	if !strings.Contains(errOut.String(), "draining before shutdown") {
		t.Errorf("log lacks the drain line:\n%s", errOut.String())
	}
}

// serveEmulated starts an emulator (with fault, when not nil) and the real
// serve command in front of it, and waits until the proxy is ready. cancel
// stops serve as SIGTERM does; done receives what serve returned; errOut
// holds its log.
func serveEmulated(t *testing.T, fault *emulator.Fault) (proxyAddr, adminAddr string, cancel context.CancelFunc, done <-chan error, errOut *testutil.Buffer) {
	t.Helper()
	emu, emuSrv := testutil.StartEmulator(t, emulator.Options{})
	if fault != nil {
		emu.SetFault(*fault)
	}

	proxyAddr, adminAddr = testutil.FreeAddr(t), testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	errOut = new(testutil.Buffer)
	ch := make(chan error, 1)
	go func() {
		ch <- run(ctx, []string{"serve", "--listen", proxyAddr, "--admin-listen", adminAddr, "--upstream", emuSrv.URL}, io.Discard, errOut)
	}()
	// Ready, or the reason serve gave up (a port taken meanwhile by a
	// test of another package running in parallel, say), whichever comes
	// first; 30s because CI runs the packages in parallel under -race.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, err := http.Get("http://" + adminAddr + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return proxyAddr, adminAddr, cancel, ch, errOut
			}
		}
		select {
		case err := <-ch:
			t.Fatalf("serve returned before it was ready: %v\n%s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy never ready; log:\n%s", errOut.String())
		}
	}
}

// TestServeGraceEndCutsStream: a stream still running when
// server.shutdown_grace ends is cut with a connection reset, so that an
// HTTP/1.0 client (whose response ends with the connection) sees it cut,
// not complete (issue 16 item 1).
func TestServeGraceEndCutsStream(t *testing.T) {
	clearEnv(t)
	t.Setenv("GEMINI_PROXY_SERVER_SHUTDOWN_GRACE", "1s")
	proxyAddr, _, cancel, done, errOut := serveEmulated(t, &emulator.Fault{ChunkDelay: 2 * time.Second})

	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	body := `{"contents":[{"role":"user","parts":[{"text":"Tell me a long story about a lighthouse keeper and the sea."}]}]}`
	fmt.Fprintf(conn, "POST /v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse HTTP/1.0\r\nHost: x\r\nX-Goog-Api-Key: test-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	first := make([]byte, 1)
	if _, err := io.ReadFull(conn, first); err != nil {
		t.Fatal(err)
	}
	cancel()
	rest, err := io.ReadAll(conn)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("HTTP/1.0 client read %d bytes, then %v; want a connection reset when the grace period ended", len(rest), err)
	}
	if bytes.Contains(rest, []byte("STOP")) {
		t.Errorf("the stream completed; the test needs a slower one:\n%s", rest)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not return after the grace period; log:\n%s", errOut.String())
	}
}
