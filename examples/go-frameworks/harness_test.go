// Package frameworks holds end-to-end examples of Go LLM frameworks talking
// to a gemini-proxy binary (GEMINI_PROXY_BIN) in front of its emulator. It
// is a separate module so that the frameworks' dependency trees stay out of
// the proxy's go.mod.
package frameworks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// apiKey is any non-empty key: the emulator checks only that one is present.
const apiKey = "e2e-test-key"

// model is the model every example asks.
const model = "gemini-2.5-flash"

// startTimeout bounds each child's start.
const startTimeout = 15 * time.Second

// upstreamRequest is one request the proxy sent upstream.
type upstreamRequest struct {
	Method, Path string
	Body         []byte
}

// stack is a running emulator, a recording forwarder and a proxy in front.
type stack struct {
	EmulatorURL, ProxyURL, AdminURL string

	mu       sync.Mutex
	upstream []upstreamRequest
}

// Upstream returns the requests the proxy sent upstream so far.
func (s *stack) Upstream() []upstreamRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]upstreamRequest(nil), s.upstream...)
}

var listening = regexp.MustCompile(`msg=listening listener=(\S+) addr=(\S+)`)

// child starts the binary with args and returns the addresses of its
// listeners, by name, once all of want have been logged.
func child(t *testing.T, bin string, want []string, args ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	// The proxy rejects unknown GEMINI_PROXY_* variables; flags are the
	// whole configuration.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GEMINI_PROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("stderr pipe: %v", err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s %v: %v", bin, args, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	found := make(chan map[string]string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		addrs := map[string]string{}
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addrs[m[1]] = m[2]
			}
			if !sent && hasAll(addrs, want) {
				found <- addrs
				sent = true
			}
		}
	}()
	select {
	case addrs := <-found:
		return addrs
	case <-time.After(startTimeout):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("%v did not log listeners %v within %v:\n%s", args, want, startTimeout, log.String())
		return nil
	}
}

func hasAll(m map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startStack runs the emulator, a forwarder that records every upstream
// request, and the proxy, all on loopback; t.Cleanup stops them. Without
// GEMINI_PROXY_BIN the test is skipped.
func startStack(t *testing.T) *stack {
	t.Helper()
	bin := os.Getenv("GEMINI_PROXY_BIN")
	if bin == "" {
		t.Skip("GEMINI_PROXY_BIN is not set: go build -o /tmp/gemini-proxy ./cmd/gemini-proxy (at the repository root) and set GEMINI_PROXY_BIN=/tmp/gemini-proxy")
	}
	s := &stack{}
	emu := child(t, bin, []string{"emulator"}, "emulator", "--listen", "127.0.0.1:0")
	s.EmulatorURL = "http://" + emu["emulator"]
	target, err := url.Parse(s.EmulatorURL)
	if err != nil {
		t.Fatalf("emulator URL: %v", err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	fwd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.upstream = append(s.upstream, upstreamRequest{Method: r.Method, Path: r.URL.RequestURI(), Body: body})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(fwd.Close)
	// The proxy listener binds port 0; the admin listener needs a distinct
	// address, so it gets a port that was just free.
	addrs := child(t, bin, []string{"proxy", "admin"}, "serve",
		"--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:"+strconv.Itoa(freePort(t)),
		"--upstream", fwd.URL)
	s.ProxyURL, s.AdminURL = "http://"+addrs["proxy"], "http://"+addrs["admin"]
	deadline := time.Now().Add(startTimeout)
	for {
		res, err := http.Get(s.AdminURL + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy /readyz not 200 within %v (last error %v)", startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// generateRequest is the part of a generateContent body the tests read.
type generateRequest struct {
	Contents []struct {
		Role  string `json:"role"`
		Parts []struct {
			Text string `json:"text"`
		} `json:"parts"`
	} `json:"contents"`
}

func parseRequest(t *testing.T, body []byte) generateRequest {
	t.Helper()
	var req generateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("decoding upstream request: %v\n%s", err, body)
	}
	return req
}

// replayText sends a recorded upstream request straight to the emulator and
// returns the text of its first candidate: the upstream's answer to exactly
// what the proxy sent.
func (s *stack) replayText(t *testing.T, r upstreamRequest) string {
	t.Helper()
	req, err := http.NewRequest(r.Method, s.EmulatorURL+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("replay request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("replay %s: %v", r.Path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("replay %s: status %d, read error %v\n%s", r.Path, res.StatusCode, err, body)
	}
	// streamGenerateContent without alt=sse answers one JSON array of chunks.
	type chunk struct {
		Candidates []struct {
			Content struct {
				Parts []struct {
					Text    string `json:"text"`
					Thought bool   `json:"thought"`
				} `json:"parts"`
			} `json:"content"`
		} `json:"candidates"`
	}
	var chunks []chunk
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
		err = json.Unmarshal(body, &chunks)
	} else {
		chunks = make([]chunk, 1)
		err = json.Unmarshal(body, &chunks[0])
	}
	if err != nil {
		t.Fatalf("replay %s: decoding answer: %v\n%s", r.Path, err, body)
	}
	var b strings.Builder
	for _, c := range chunks {
		if len(c.Candidates) == 0 {
			continue
		}
		for _, p := range c.Candidates[0].Content.Parts {
			if !p.Thought {
				b.WriteString(p.Text)
			}
		}
	}
	return b.String()
}

// metricSum returns the sum of the samples of metric name on the admin
// listener whose label set contains match (e.g. `rule="unflatten"`).
func (s *stack) metricSum(t *testing.T, name, match string) float64 {
	t.Helper()
	res, err := http.Get(s.AdminURL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if match != "" && !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += v
	}
	return total
}

// harbourLog is a document of our own, long enough to be worth a reference.
func harbourLog() string {
	var b strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "Day %d: the harbour log records %d arrivals and %d departures; high tide %d m.\n", i+1, i*7%13, i*5%11, i*3%9)
	}
	return b.String()
}

// harbourMarker is a line of harbourLog that occurs once per copy.
const harbourMarker = "Day 17: the harbour log records"

// runSession starts a stack and runs chat (one answer per turn of a
// session of n turns) through the proxy and straight against the emulator.
// It checks what every example shares: turn 1 equals the direct answer, the
// proxy sent one upstream request per turn, and each answer is the
// upstream's answer to exactly the request the proxy sent. It returns the
// stack, the answers through the proxy and the upstream requests.
func runSession(t *testing.T, n int, chat func(t *testing.T, endpoint string) []string) (*stack, []string, []upstreamRequest) {
	t.Helper()
	s := startStack(t)
	viaProxy := chat(t, s.ProxyURL)
	direct := chat(t, s.EmulatorURL)
	if viaProxy[0] == "" || viaProxy[0] != direct[0] {
		t.Errorf("turn 1 through the proxy = %q, want the direct answer %q", viaProxy[0], direct[0])
	}
	up := s.Upstream()
	if len(up) != n {
		t.Fatalf("%d upstream requests, want %d", len(up), n)
	}
	for i, r := range up {
		if got, want := viaProxy[i], s.replayText(t, r); got != want {
			t.Errorf("turn %d: answer %q, want the upstream's answer to the sent request %q", i+1, got, want)
		}
	}
	return s, viaProxy, up
}
