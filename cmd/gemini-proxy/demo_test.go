package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// TestDemoHashesAgree checks that the hash the demo's model names for a
// version of list.go is the hash the proxy's references name for it: each
// user message re-sends the current file, the model's answer right after it
// names that file's hash, and in the last request through the proxy the
// message's copy is a reference that must name the same hash.
func TestDemoHashesAgree(t *testing.T) {
	clearEnv(t)
	out, errOut, err := runCmd(t, t.Context(), "demo", "--show-request")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	_, received, ok := strings.Cut(out, "What the emulator received for the last turn")
	if !ok {
		t.Fatalf("demo --show-request printed no request:\n%s", out)
	}
	turns := regexp.MustCompile(`(?m)^--- turn \d+ \((user|model)\) ---$`).Split(received, -1)[1:]
	ref := regexp.MustCompile(`^Here is my current file:\n\n\[superseded: list\.go sha256:([0-9a-f]{12}),`)
	named := regexp.MustCompile(`I am looking at list\.go, \d+ lines, sha256 ([0-9a-f]{12})\.`)
	checked := 0
	for i := 0; i+1 < len(turns); i += 2 {
		n := named.FindStringSubmatch(turns[i+1])
		if n == nil {
			t.Fatalf("turn %d names no hash:\n%s", i+2, turns[i+1])
		}
		var got string
		if r := ref.FindStringSubmatch(strings.TrimSpace(turns[i])); r != nil {
			got = r[1]
		} else if file := fencedFile(turns[i]); file != "" {
			// A full copy: the hash references give it (rewrite/doc.go).
			sum := sha256.Sum256([]byte("```go list.go\n" + file + "```"))
			got = hex.EncodeToString(sum[:6])
		} else {
			t.Fatalf("turn %d has neither a reference nor list.go:\n%s", i+1, turns[i])
		}
		if got != n[1] {
			t.Errorf("turn %d's copy of list.go has sha256:%s, the model's answer to it names %s", i+1, got, n[1])
		}
		checked++
	}
	if checked < 3 {
		t.Errorf("checked %d message/answer pairs, want at least 3:\n%s", checked, received)
	}
}

// startDemoServe runs demo --serve until the next steps are printed and
// returns the proxy's and the admin listener's addresses, and stop, which
// cancels the command (as Ctrl-C does) and returns its error.
func startDemoServe(t *testing.T) (proxyAddr, adminAddr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"demo", "--serve"}, &out, &errOut) }()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%w\n%s", err, errOut.String())
			}
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("demo --serve did not stop within 30s of cancel")
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "Press Ctrl-C to stop.") {
		select {
		case err := <-done:
			t.Fatalf("demo --serve returned before serving: %v\n%s\n%s", err, out.String(), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("demo --serve printed no next steps in time:\n%s", out.String())
		}
	}
	text := out.String()
	env := regexp.MustCompile(`export GOOGLE_GEMINI_BASE_URL=http://(\S+) GEMINI_API_KEY=demo-key`).FindStringSubmatch(text)
	page := regexp.MustCompile(`Open the savings page: http://(\S+)/ `).FindStringSubmatch(text)
	if env == nil || page == nil {
		stop()
		t.Fatalf("demo --serve output lacks the SDK line or the savings page:\n%s", text)
	}
	return env[1], page[1], stop
}

// TestDemoServe runs demo --serve: after the conversation the proxy and the
// admin listener stay up, the output says how to use them, and cancelling
// (Ctrl-C) stops both and returns nil.
func TestDemoServe(t *testing.T) {
	clearEnv(t)
	proxyAddr, adminAddr, stop := startDemoServe(t)

	// The proxy still answers, with the emulator behind it.
	res, body := testutil.Get(t, "http://"+proxyAddr+"/v1beta/models?key=demo-key")
	if res.StatusCode != 200 || !strings.Contains(string(body), "gemini-2.5-flash") {
		t.Errorf("GET /v1beta/models through the proxy = %d %.200s", res.StatusCode, body)
	}
	// The savings page shows the demo conversation.
	res, body = testutil.Get(t, "http://"+adminAddr+"/")
	if res.StatusCode != 200 || !strings.Contains(string(body), "The demo conversation") {
		t.Errorf("GET / on the admin listener = %d, want the page with the demo conversation:\n%.500s", res.StatusCode, body)
	}

	if err := stop(); err != nil {
		t.Fatalf("demo --serve after cancel: %v", err)
	}
	for _, addr := range []string{proxyAddr, adminAddr} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after demo --serve stopped", addr)
		}
	}
}
