//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// stallHelperEnv marks the test binary re-executed as the proxy process.
// (Not GEMINI_PROXY_*: the configuration rejects unknown keys there.)
const stallHelperEnv = "STALL_TEST_HELPER_PROCESS"

// TestStallHelperProcess is not a test: it is the proxy process of
// TestStallEndToEnd, the test binary re-executed to run the serve command
// (the os/exec helper-process pattern), so that the test can stop and
// resume it with signals as a VM stall would.
func TestStallHelperProcess(t *testing.T) {
	if os.Getenv(stallHelperEnv) != "1" {
		t.Skip("helper process of TestStallEndToEnd")
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := run(ctx, args, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gemini-proxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stallProxy is a proxy process TestStallEndToEnd can stop.
type stallProxy struct {
	cmd         *exec.Cmd
	addr, admin string
	log         *testutil.Buffer // written by exec's copying goroutine
}

// startStallProxy runs the serve command in a child process in front of
// upstream, with server.read_header_timeout 1s, and waits until it is
// ready.
func startStallProxy(t *testing.T, upstream string) *stallProxy {
	t.Helper()
	p := &stallProxy{addr: testutil.FreeAddr(t), admin: testutil.FreeAddr(t), log: new(testutil.Buffer)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestStallHelperProcess$", "--",
		"serve", "--listen", p.addr, "--admin-listen", p.admin, "--upstream", upstream)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix+"_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, stallHelperEnv+"=1",
		config.EnvPrefix+"_SERVER_READ_HEADER_TIMEOUT=1s",
		config.EnvPrefix+"_SERVER_SHUTDOWN_GRACE=1s")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", p.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := http.Get("http://" + p.admin + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-done:
			t.Fatalf("proxy exited: %v", p.cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy never became ready")
		}
	}
}

// dialAndStop opens a connection, lets the proxy accept it and arm its 1s
// header deadline, and stops the proxy (SIGSTOP) before that deadline. On
// a machine so busy that the test did not run for most of that second, it
// tries again: the proxy may have closed the connection already.
func (p *stallProxy) dialAndStop(t *testing.T) net.Conn {
	t.Helper()
	for range 5 {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		dialed := time.Now()
		time.Sleep(300 * time.Millisecond)
		if time.Since(dialed) > 700*time.Millisecond {
			c.Close()
			continue
		}
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			c.Close()
			t.Fatal(err)
		}
		return c
	}
	t.Fatal("the test was never scheduled within 700 ms of a dial")
	return nil
}

// scrape returns the proxy's /metrics page.
func (p *stallProxy) scrape(t *testing.T) string {
	t.Helper()
	r, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stallMetric returns the value of the sample name on a /metrics page, or
// -1 if it is not there.
func stallMetric(page, name string) float64 {
	for line := range strings.SplitSeq(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// stallRequest is a generateContent request, raw, as a client writes it.
func stallRequest(addr string) string {
	body := `{"contents":[{"role":"user","parts":[{"text":"Is the proxy still there?"}]}]}`
	return "POST /v1beta/models/gemini-2.5-flash:generateContent HTTP/1.1\r\n" +
		"Host: " + addr + "\r\n" +
		"x-goog-api-key: test-key\r\n" +
		"Content-Type: application/json\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
}

// TestStallEndToEnd stops the real proxy process (SIGSTOP) while a client
// sends a request on a connection it had already accepted, for longer than
// server.read_header_timeout, as the VM stall of RELIABILITY.md run C did.
// Before stall.go the client got "connection reset by peer"; now the
// request is answered. A slow client that trickles its headers on a
// process that runs is still cut off at the time-out.
func TestStallEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a process for seconds")
	}
	emu := httptest.NewServer(emulator.New(emulator.Options{}))
	defer emu.Close()
	p := startStallProxy(t, emu.URL)

	// The request is sent during the stall (its bytes wait in the kernel's
	// buffer while the deadline expires; whether net/http then reads them
	// or times out depends on which the runtime notices first after the
	// resume), or right after it, as a client stalled with the proxy (the
	// whole VM) does (the deadline has expired when they arrive: without
	// stall.go, always a reset).
	for _, tt := range []struct {
		name   string
		during bool
	}{
		{name: "request during stall", during: true},
		{name: "request after stall", during: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := p.dialAndStop(t)
			defer c.Close()
			stopped := true
			defer func() {
				if stopped {
					p.cmd.Process.Signal(syscall.SIGCONT)
				}
			}()
			if tt.during {
				if _, err := io.WriteString(c, stallRequest(p.addr)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(2500 * time.Millisecond)
			if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			stopped = false
			if !tt.during {
				time.Sleep(100 * time.Millisecond)
				if _, err := io.WriteString(c, stallRequest(p.addr)); err != nil {
					t.Fatal(err)
				}
			}
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("request on a connection accepted before a stall: %v", err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"candidates"`)) {
				t.Fatalf("request on a connection accepted before a stall: %s, %v\n%s", res.Status, err, body)
			}
		})
	}
	if log := p.log.String(); !strings.Contains(log, "read deadline extended after a process stall") {
		t.Errorf("proxy log lacks the grace line:\n%s", log)
	}
	if n := stallMetric(p.scrape(t), "gemini_proxy_stall_grace_total"); n < 1 {
		t.Errorf("gemini_proxy_stall_grace_total = %v, want at least 1", n)
	}

	t.Run("slow client", func(t *testing.T) {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		// The proxy closes the connection, after a 400 when it got part
		// of the request line (net/http's choice).
		closed := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(c)
			closed <- b
		}()
		// One header byte every 100 ms, for up to 5 s: the 1s time-out
		// must cut it.
		req := stallRequest(p.addr)
		for i := 0; ; i++ {
			select {
			case b := <-closed:
				if bytes.HasPrefix(b, []byte("HTTP/1.1 200")) {
					t.Fatalf("the proxy answered a request it never fully got:\n%s", b)
				}
				if d := time.Since(start); d > 4*time.Second {
					t.Errorf("slow client cut after %v, want about 1s", d)
				}
				return
			case <-time.After(100 * time.Millisecond):
			}
			if i >= 50 || i >= len(req) {
				t.Fatal("a client trickling its headers for 5s was not cut off")
			}
			if _, err := io.WriteString(c, req[i:i+1]); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatal(err)
			}
		}
	})
}
