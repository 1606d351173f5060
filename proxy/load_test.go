package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoadNoStreamCutShort runs many concurrent SSE streams through the
// proxy on loopback and requires every one to arrive complete. DESIGN §4: a
// plain httputil.ReverseProxy ended 146 of 69,000 streams early with
// "unexpected EOF" under this kind of load; ours must show zero.
//
// 2,000 streams by default; 600 under -race (goroutine limit), 200 with
// -short; GEMINI_PROXY_LOAD_STREAMS overrides.
func TestLoadNoStreamCutShort(t *testing.T) {
	n := 2000
	switch {
	case testing.Short():
		n = 200
	case raceEnabled:
		n = 600
	}
	if v, err := strconv.Atoi(os.Getenv("GEMINI_PROXY_LOAD_STREAMS")); err == nil && v > 0 {
		n = v
	}
	const events = 6
	event := func(i int) string {
		return `data: {"candidates": [{"content": {"parts": [{"text": "chunk ` + strconv.Itoa(i) + ` ` + strings.Repeat("lorem ipsum ", 20) + `"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 7,"candidatesTokenCount": ` + strconv.Itoa(10*i) + `,"totalTokenCount": ` + strconv.Itoa(7+10*i) + `},"modelVersion": "gemini-2.5-flash"}` + "\r\n\r\n"
	}
	var want strings.Builder
	for i := range events {
		want.WriteString(event(i))
	}

	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			if i > 0 {
				time.Sleep(15 * time.Millisecond)
			}
			if _, err := io.WriteString(w, event(i)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer be.Close()
	f := newFixture(t, be.URL, Options{Rewrite: RewriteOptions{Enabled: true}, MaxIdleConnsPerHost: n})

	tr := &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var (
		complete, early, failed atomic.Int64
		mu                      sync.Mutex
		samples                 []string
	)
	note := func(s string) {
		mu.Lock()
		if len(samples) < 5 {
			samples = append(samples, s)
		}
		mu.Unlock()
	}
	body := readTestdata(t, "request.json")
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			// Stagger the dials a little so the kernel's accept queue is not
			// what the test measures.
			time.Sleep(time.Duration(i%100) * time.Millisecond)
			req, _ := http.NewRequestWithContext(ctx, "POST", f.front.URL+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", bytes.NewReader(body))
			res, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				note("request: " + err.Error())
				return
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			switch {
			case res.StatusCode != 200:
				failed.Add(1)
				note(fmt.Sprintf("status %d: %s", res.StatusCode, got))
			case err != nil || string(got) != want.String():
				early.Add(1)
				note(fmt.Sprintf("ended early after %d of %d bytes: %v", len(got), want.Len(), err))
			default:
				complete.Add(1)
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	t.Logf("%d streams in %v: %d complete, %d ended early, %d failed", n, elapsed.Round(time.Millisecond), complete.Load(), early.Load(), failed.Load())
	if early.Load() != 0 || failed.Load() != 0 {
		t.Errorf("%d streams ended early and %d failed, want 0; samples:\n%s", early.Load(), failed.Load(), strings.Join(samples, "\n"))
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("load run hit its deadline")
	}
	waitFor(t, "all requests recorded", func() bool {
		return testutilValue(f) == float64(n)
	})
}

// TestLargeBodiesNoCut sends large request and response bodies through the
// proxy back to back. A plain httputil.ReverseProxy cuts some of these
// responses: when it writes the response headers, net/http's server drains
// and closes the request body while the transport's write loop still does
// its final read of it; that read fails, the transport closes the upstream
// connection and the response copy ends with "use of closed network
// connection" (the client sees unexpected EOF). The proxy reports EOF once
// Content-Length bytes were read, so the transport never makes that read.
func TestLargeBodiesNoCut(t *testing.T) {
	n := 150
	if testing.Short() {
		n = 30
	}
	resp := bytes.Repeat([]byte("r"), 1<<20)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(resp)
	}))
	defer be.Close()
	// MaxBodyBytes < 0: no http.MaxBytesReader, whose sticky EOF would hide the bug.
	f := newFixture(t, be.URL, Options{MaxBodyBytes: -1})
	c := rawClient()
	req := bytes.Repeat([]byte("q"), 1<<20)
	for i := range n {
		res, err := c.Post(f.front.URL+"/upload/v1beta/files", "application/octet-stream", bytes.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || got != int64(len(resp)) {
			t.Fatalf("request %d: response cut after %d bytes: %v", i, got, err)
		}
	}
}
