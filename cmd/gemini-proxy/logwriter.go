package main

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// logFlushInterval is the most a log line waits in an asyncWriter before it
// is written, and the least time between two writes: lines are written in
// batches, one write call for every line of the interval, so that the
// writer's goroutine wakes at most this often whatever the request rate.
const logFlushInterval = 20 * time.Millisecond

// asyncWriter is the log's writer (issue 17 item 5): Write copies the line
// into a bounded buffer and returns, and a goroutine writes the buffer in
// batches. A request never waits for a write system call, nor for a slow
// or blocked stderr: when the buffer is full the line is dropped and
// counted (gemini_proxy_access_log_dropped_total). Close writes what is
// left and makes later lines synchronous, so that nothing logged before
// the process ends is lost. slog's handlers make one Write per line, so a
// line is kept or dropped whole.
type asyncWriter struct {
	w   io.Writer
	max int

	mu      sync.Mutex
	buf     []byte // lines waiting
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	dropped atomic.Int64
	counter atomic.Pointer[prometheus.Counter]
}

// newAsyncWriter starts the writer of w with a buffer of max bytes.
func newAsyncWriter(w io.Writer, max int) *asyncWriter {
	a := &asyncWriter{w: w, max: max, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.loop()
	return a
}

// Write implements io.Writer. It never blocks on I/O: the lock is held
// only to append to the buffer.
func (a *asyncWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		<-a.done // after the last batch, in order
		return a.w.Write(p)
	}
	if len(a.buf)+len(p) > a.max {
		a.mu.Unlock()
		a.dropped.Add(1)
		if c := a.counter.Load(); c != nil {
			(*c).Inc()
		}
		return len(p), nil
	}
	first := len(a.buf) == 0
	a.buf = append(a.buf, p...)
	a.mu.Unlock()
	if first {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// countDrops makes c count the dropped lines, those dropped so far
// included.
func (a *asyncWriter) countDrops(c prometheus.Counter) {
	if a.counter.CompareAndSwap(nil, &c) {
		c.Add(float64(a.dropped.Load()))
	}
}

func (a *asyncWriter) loop() {
	defer close(a.done)
	var spare []byte
	for range a.wake {
		a.mu.Lock()
		batch := a.buf
		a.buf = spare[:0]
		closed := a.closed
		a.mu.Unlock()
		if len(batch) > 0 {
			a.w.Write(batch) //nolint:errcheck // a log write has nowhere to report its failure
		}
		spare = batch
		if cap(spare) > 4*a.max {
			spare = nil
		}
		if closed {
			return
		}
		time.Sleep(logFlushInterval)
	}
}

// Close writes the lines still buffered and returns once they are written;
// later lines are written synchronously.
func (a *asyncWriter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
	// Lines appended between the last batch and closed being seen.
	a.mu.Lock()
	rest := a.buf
	a.buf = nil
	a.mu.Unlock()
	if len(rest) > 0 {
		a.w.Write(rest) //nolint:errcheck // as above
	}
	return nil
}
