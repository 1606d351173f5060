package testutil

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent use, for the logs of a
// server that a test reads while the server still writes. The zero value
// is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// FreeAddr returns a loopback host:port that nobody listened on a moment
// ago. Another process may take it before the caller does; tests that can
// let the kernel pick (":0") should.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ClearEnv hides the environment variables whose names start with prefix
// (for example "GEMINI_PROXY_") for the rest of the test, so that it sees
// only what it sets; they are restored when the test ends.
func ClearEnv(t testing.TB, prefix string) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, val, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, prefix) {
			t.Setenv(name, val) // restores it after the test
			os.Unsetenv(name)
		}
	}
}

// WaitStatus polls url with GET every 10 ms until it answers status, and
// fails the test once deadline has passed.
func WaitStatus(t testing.TB, url string, status int, deadline time.Time) {
	t.Helper()
	for {
		r, err := http.Get(url)
		if err == nil {
			r.Body.Close()
			if r.StatusCode == status {
				return
			}
			err = fmt.Errorf("status %d", r.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %d (last: %v)", url, status, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Do sends req with c (http.DefaultClient when nil) and returns the
// response with its whole body; a transport or read error fails the test.
func Do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading response: %v", req.Method, req.URL, err)
	}
	return res, body
}

// Last returns the last element of s, and fails the test, naming what s
// holds, when s is empty.
func Last[T any](t testing.TB, what string, s []T) T {
	t.Helper()
	if len(s) == 0 {
		t.Fatalf("no %s", what)
	}
	return s[len(s)-1]
}

// Get fetches url with http.DefaultClient and returns the response with
// its whole body; a transport or read error fails the test. It does not
// use the test's context, so that cleanups may call it.
func Get(t testing.TB, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Do(t, nil, req)
}

// Clock is a settable clock safe for concurrent use, for the Now options
// of the emulator and the proxy. The zero value reads the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads now until advanced.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Gzip returns b gzip-compressed at the default level.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b) // a bytes.Buffer does not fail
	zw.Close()
	return buf.Bytes()
}
