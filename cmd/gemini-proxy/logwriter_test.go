package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
