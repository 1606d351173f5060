package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/config"
)

// blockingWriter blocks every Write until release is closed, and keeps
// what it was given.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func (w *blockingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestAsyncWriterNeverBlocks: with the underlying writer stuck, Write
// still returns at once; lines that do not fit in the buffer are dropped
// whole and counted; Close writes every kept line, in order.
func TestAsyncWriterNeverBlocks(t *testing.T) {
	bw := &blockingWriter{release: make(chan struct{})}
	aw := newAsyncWriter(bw, 1000)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			fmt.Fprintf(aw, "line %03d %s\n", i, strings.Repeat("x", 40)) // 50 bytes
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Write blocked on a stuck writer")
	}
	aw.countDrops(c) // drops so far are counted once the counter is set
	close(bw.release)
	aw.Close()
	lines := strings.Split(strings.TrimSuffix(bw.String(), "\n"), "\n")
	dropped := testutil.ToFloat64(c)
	if len(lines)+int(dropped) != 200 || dropped == 0 {
		t.Fatalf("%d lines written, %v dropped; want 200 in all, some dropped", len(lines), dropped)
	}
	prev := -1
	for _, l := range lines {
		var n int
		if _, err := fmt.Sscanf(l, "line %d", &n); err != nil || n <= prev || len(l) != 49 {
			t.Fatalf("line %q after %d: lines cut or out of order", l, prev)
		}
		prev = n
	}
}

// TestAsyncWriterBatchesAndFlushes: lines written in a burst reach the
// writer in fewer writes than lines, and Close returns only once all were
// written; after Close, lines are written synchronously.
func TestAsyncWriterBatchesAndFlushes(t *testing.T) {
	bw := &blockingWriter{release: make(chan struct{})}
	close(bw.release)
	aw := newAsyncWriter(bw, 1<<20)
	for i := range 1000 {
		fmt.Fprintf(aw, "line %d\n", i)
	}
	aw.Close()
	if got := strings.Count(bw.String(), "\n"); got != 1000 {
		t.Fatalf("%d lines after Close, want 1000", got)
	}
	if bw.writes >= 1000 {
		t.Errorf("%d writes for 1000 lines: not batched", bw.writes)
	}
	fmt.Fprintf(aw, "after close\n")
	if !strings.HasSuffix(bw.String(), "after close\n") {
		t.Errorf("a line written after Close is not written at once")
	}
}

// TestNewLoggerIsSlogs: the configured logger is proxy.NewLogHandler's
// (whose access lines the proxy encodes itself), at the configured level,
// writing slog's own bytes for each format.
func TestNewLoggerIsSlogs(t *testing.T) {
	tm := time.Date(2026, 12, 3, 7, 0, 6, 123_456_789, time.UTC)
	for _, format := range []string{"text", "json"} {
		var got, want bytes.Buffer
		h := newLogger(config.Log{Level: "warn", Format: format}, &got).Handler()
		opts := &slog.HandlerOptions{Level: slog.LevelWarn}
		var ref slog.Handler = slog.NewTextHandler(&want, opts)
		if format == "json" {
			ref = slog.NewJSONHandler(&want, opts)
		}
		switch h.(type) {
		case *slog.TextHandler, *slog.JSONHandler:
			t.Errorf("%s: newLogger's handler is %T, want proxy.NewLogHandler's", format, h)
		}
		if h.Enabled(t.Context(), slog.LevelInfo) || !h.Enabled(t.Context(), slog.LevelWarn) {
			t.Errorf("%s: handler not at level warn", format)
		}
		for _, hd := range []slog.Handler{h, ref} {
			rec := slog.NewRecord(tm, slog.LevelWarn, "request", 0)
			rec.AddAttrs(slog.String("route", "a b"), slog.Duration("duration", time.Millisecond))
			if err := hd.Handle(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
		}
		if got.String() != want.String() {
			t.Errorf("%s: newLogger wrote %q, slog %q", format, got.String(), want.String())
		}
	}
}
