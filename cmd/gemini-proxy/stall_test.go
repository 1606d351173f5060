package main

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// The interfaces http.Server looks for on a connection (net/http
// server.go: closeWriteAndWait, response.ReadFrom) still hold.
var (
	_ interface{ CloseWrite() error } = (*stallConn)(nil)
	_ io.ReaderFrom                   = (*stallConn)(nil)
)

func TestStallClockExtend(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// ticks returns the tick times of a process that ran every 100 ms
	// from 0 to 1000 ms, then the times in after.
	ticks := func(after ...int) []int {
		ts := []int{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}
		return append(ts, after...)
	}
	tests := []struct {
		name       string
		ticks      []int
		deadline   time.Time
		set        time.Time // when the deadline was set (zero: unknown)
		now        int
		want       int // the new deadline, in ms
		wantLength time.Duration
	}{
		{name: "resuming", ticks: ticks(), deadline: at(2000), now: 3500, want: 4500, wantLength: 2500 * time.Millisecond},
		{name: "resuming, least grace", ticks: ticks(), deadline: at(1050), now: 3500, want: 4500, wantLength: 2500 * time.Millisecond},
		{name: "after stall", ticks: ticks(3500, 3600), deadline: at(2000), now: 3650, want: 4650, wantLength: 2500 * time.Millisecond},
		{name: "after stall, long deadline", ticks: ticks(3500), deadline: at(3400), now: 3500, want: 5900, wantLength: 2500 * time.Millisecond},
		{name: "just after stall", ticks: ticks(3500, 3600, 3700, 3800, 3900, 4000, 4100, 4200, 4300, 4400), deadline: at(4400), now: 4400, want: 6900, wantLength: 2500 * time.Millisecond},
		// A 1.5 s time-out with 100 ms left when an hour's stall began:
		// the client gets those 100 ms, or slack, after the resume.
		{name: "long stall", ticks: ticks(), deadline: at(1100), set: at(-400), now: 3_601_000, want: 3_602_000, wantLength: 3_600_000 * time.Millisecond},
		{name: "set in the last tick before the stall", ticks: ticks(), deadline: at(1500), set: at(1050), now: 3500, want: 4500, wantLength: 2500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newStallClock(100*time.Millisecond, 500*time.Millisecond, time.Second)
			for _, ms := range tt.ticks {
				c.tick(at(ms))
			}
			got, length, ok := c.extend(tt.deadline, tt.set, at(tt.now))
			if !ok || !got.Equal(at(tt.want)) || length != tt.wantLength {
				t.Errorf("extend(%v, %v) = %v, %v, %v; want %v, %v, true",
					tt.deadline.Sub(base), tt.now, got.Sub(base), length, ok, time.Duration(tt.want)*time.Millisecond, tt.wantLength)
			}
		})
	}
}

func TestStallClockNoExtend(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	ticks := []int{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}
	tests := []struct {
		name     string
		ticks    []int
		deadline time.Time
		set      time.Time
		now      int
	}{
		{name: "stopped", ticks: nil, deadline: at(900), now: 3500},
		{name: "running", ticks: ticks, deadline: at(950), now: 1000},
		// http.Server's abortPendingRead sets a deadline in 1970 to
		// interrupt a read; whatever the clock says, it must work.
		{name: "long ago", ticks: ticks, deadline: time.Unix(1, 0), now: 3500},
		{name: "before stall", ticks: ticks, deadline: at(999), now: 3500},
		{name: "gap below minimum", ticks: append(ticks, 1400), deadline: at(1200), now: 1400},
		{name: "after stall", ticks: append(ticks, 3500, 3600, 3700, 3800, 3900, 4000, 4100, 4200, 4300, 4400, 4500, 4600), deadline: at(4600), now: 4600},
		// Resuming from an hour's stall the clock has not ticked after: a
		// deadline the server set after the resume (with a short
		// time-out) was not cut short by the stall.
		{name: "set after the stall", ticks: ticks, deadline: at(3_601_500), set: at(3_601_000), now: 3_601_600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newStallClock(100*time.Millisecond, 500*time.Millisecond, time.Second)
			for _, ms := range tt.ticks {
				c.tick(at(ms))
			}
			if got, length, ok := c.extend(tt.deadline, tt.set, at(tt.now)); ok {
				t.Errorf("extend(%v, %v) = %v, %v, true; want false", tt.deadline.Sub(base), tt.now, got.Sub(base), length)
			}
		})
	}
}

// TestStallClockRun checks that the ticking goroutine records a stall and
// that stopping it forgets everything, so that a stopped clock never
// extends a deadline.
func TestStallClockRun(t *testing.T) {
	// minStall is long, so that a busy machine cannot make a stall.
	c := newStallClock(5*time.Millisecond, time.Minute, 50*time.Millisecond)
	stop := c.run()
	stop2 := c.run()
	stop()
	stop() // a second call is a no-op
	c.mu.Lock()
	running := !c.last.IsZero()
	c.mu.Unlock()
	if !running {
		t.Fatal("clock stopped while a user remained")
	}
	start := time.Now()
	for time.Since(start) < time.Second {
		c.mu.Lock()
		ticked := c.last.After(start)
		c.mu.Unlock()
		if ticked {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, ok := c.extend(start.Add(time.Millisecond), time.Time{}, time.Now()); ok {
		t.Error("extend granted a deadline on a running clock")
	}
	stop2()
	c.mu.Lock()
	stopped := c.last.IsZero() && c.end.IsZero()
	c.mu.Unlock()
	if !stopped {
		t.Error("stopped clock kept its ticks")
	}
}

// stallPair returns both ends of a loopback TCP connection, the accepting
// end a stallConn on clock, and the number of extensions granted.
func stallPair(t *testing.T, clock *stallClock) (server *stallConn, client net.Conn, graced *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	graced = new(atomic.Int32)
	sl := &stallListener{TCPListener: ln.(*net.TCPListener), clock: clock, graced: func(time.Duration) { graced.Add(1) }}
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := sl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*stallConn), client, graced
}

// stalledClock returns a clock that ticked once and then stopped ticking,
// as a process that is not scheduled.
func stalledClock() *stallClock {
	c := newStallClock(10*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond)
	c.tick(time.Now())
	return c
}

// TestStallConnGrace reproduces the reset of RELIABILITY.md on a
// connection: the request arrives, the read deadline expires, and only
// then does the reader run (as after SIGCONT). A plain *net.TCPConn
// reports the time-out without reading what is buffered.
func TestStallConnGrace(t *testing.T) {
	conn, client, graced := stallPair(t, stalledClock())
	if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the stall: nobody reads
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("Read after a stall = %q, %v; want the request line", buf[:n], err)
	}
	if got := graced.Load(); got != 1 {
		t.Errorf("graced %d times, want 1", got)
	}
}

// TestStallConnOnce checks that a deadline is extended at most once: a
// client that sends nothing still times out, soon after the extension.
func TestStallConnOnce(t *testing.T) {
	conn, _, graced := stallPair(t, stalledClock())
	if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	buf := make([]byte, 64)
	for i := range 2 {
		start := time.Now()
		if _, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read %d = %v, want a time-out", i, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Read %d took %v", i, d)
		}
	}
	if got := graced.Load(); got != 1 {
		t.Errorf("graced %d times, want 1", got)
	}
	// A new deadline is a new promise: set, then the process runs (a
	// tick) and stalls again before it expires.
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	conn.l.clock.tick(time.Now())
	time.Sleep(150 * time.Millisecond)
	if _, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v, want a time-out", err)
	}
	if got := graced.Load(); got != 2 {
		t.Errorf("graced %d times after a new deadline, want 2", got)
	}
}

func TestStallConnNoGrace(t *testing.T) {
	running := func(t *testing.T) *stallClock {
		// minStall is long, so that a busy machine cannot make a stall.
		c := newStallClock(10*time.Millisecond, time.Minute, 200*time.Millisecond)
		t.Cleanup(c.run())
		return c
	}
	tests := []struct {
		name     string
		clock    func(t *testing.T) *stallClock
		deadline func() time.Time
		sleep    time.Duration
	}{
		// A slow client on a process that runs: the deadline holds.
		{name: "running", clock: running, deadline: func() time.Time { return time.Now().Add(50 * time.Millisecond) }},
		{name: "stopped clock", clock: func(*testing.T) *stallClock {
			return newStallClock(10*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond)
		},
			deadline: func() time.Time { return time.Now().Add(50 * time.Millisecond) }, sleep: 300 * time.Millisecond},
		// http.Server's abortPendingRead, right after a stall.
		{name: "abort", clock: func(*testing.T) *stallClock { return stalledClock() },
			deadline: func() time.Time { return time.Unix(1, 0) }, sleep: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, _, graced := stallPair(t, tt.clock(t))
			if err := conn.SetReadDeadline(tt.deadline()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tt.sleep)
			if _, err := conn.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read = %v, want a time-out", err)
			}
			if got := graced.Load(); got != 0 {
				t.Errorf("graced %d times, want 0", got)
			}
		})
	}
}

// BenchmarkStallConnRead compares reading through a stallConn with reading
// the *net.TCPConn it wraps: the wrapper is on every client connection.
func BenchmarkStallConnRead(b *testing.B) {
	for _, wrap := range []bool{false, true} {
		name := "tcp"
		if wrap {
			name = "stall"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			sl := &stallListener{TCPListener: ln.(*net.TCPListener), clock: stalledClock()}
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			var conn net.Conn
			if conn, err = sl.Accept(); err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			if !wrap {
				conn = conn.(*stallConn).TCPConn
			}
			msg := make([]byte, 512)
			buf := make([]byte, len(msg))
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				conn.SetReadDeadline(time.Now().Add(time.Minute))
				if _, err := client.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
