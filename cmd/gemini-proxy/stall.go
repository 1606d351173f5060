package main

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// A process stall (the VM or the process not scheduled for a while:
// SIGSTOP, a paused VM, a host under heavy load) makes read deadlines that
// fell inside it expire all at once when the process runs again. Go's
// poller may then report the time-out before it looks at the socket, so
// http.Server gives up on a request whose bytes already sit in the kernel's
// buffer and closes the connection with them unread, and the kernel answers
// the client with a reset (RELIABILITY.md, "Resets under a 30-second
// stall"). A client stalled along with the proxy (one VM) sends right after
// the resume and finds the connection closed. server.read_header_timeout of
// a new connection is the usual victim (a kept-alive connection arms it
// only when the next request's first bytes arrive); server.idle_timeout and
// server.body_idle_timeout are read deadlines too.
//
// stallClock notices such stalls and stallConn grants a read deadline that
// expired during one a single extension by the stall's length, so the
// client gets the time it was promised while the proxy was running. A slow
// client (slowloris) gains nothing: without a stall nothing is extended,
// and each deadline the server sets is extended at most once.

const (
	// stallTick is how often the stall clock ticks.
	stallTick = 100 * time.Millisecond
	// minStall is the shortest gap between ticks taken as a stall: five
	// ticks, well above the scheduling delay of a busy but running process.
	minStall = 5 * stallTick
	// stallSlack is how long after a stall a deadline's expiry is still
	// blamed on it, and the least time an extension grants from the moment
	// it is granted. After a stall, due timers may fire before the poller
	// is asked which sockets became readable, and the goroutines woken at
	// once take a while to run, so deadlines that expire just after the
	// resume can miss bytes that arrived during the stall as well; and a
	// client stalled with the proxy needs a moment to send.
	stallSlack = time.Second
)

// stalls is the process's stall clock, running while any listener serves.
var stalls = newStallClock(stallTick, minStall, stallSlack)

// stallClock records when the process was last scheduled: a goroutine
// ticks every period, and a gap of at least minStall between two ticks is a
// stall that started at the first and ended at the second. Safe for
// concurrent use.
type stallClock struct {
	period, minStall, slack time.Duration

	mu    sync.Mutex
	users int           // run calls not yet stopped
	quit  chan struct{} // closed to stop the ticking goroutine
	done  chan struct{} // closed when it has returned
	last  time.Time     // the last tick; zero while stopped
	start time.Time     // the last stall's start (a tick); zero if none
	end   time.Time     // the tick that ended it
}

func newStallClock(period, minStall, slack time.Duration) *stallClock {
	return &stallClock{period: period, minStall: minStall, slack: slack}
}

// run starts ticking, or counts one more user of a clock already ticking.
// The returned function stops it once every user has stopped.
func (c *stallClock) run() (stop func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users++
	if c.users == 1 {
		c.quit, c.done = make(chan struct{}), make(chan struct{})
		c.last = time.Now()
		go c.loop(c.quit, c.done)
	}
	var once sync.Once
	return func() { once.Do(c.release) }
}

func (c *stallClock) release() {
	c.mu.Lock()
	c.users--
	if c.users > 0 {
		c.mu.Unlock()
		return
	}
	quit, done := c.quit, c.done
	c.mu.Unlock()
	close(quit)
	<-done
	c.mu.Lock()
	if c.users == 0 { // nobody restarted it meanwhile
		c.last, c.start, c.end = time.Time{}, time.Time{}, time.Time{}
	}
	c.mu.Unlock()
}

func (c *stallClock) loop(quit, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(c.period)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
			c.tick(time.Now())
		}
	}
}

// tick records that the process ran at now.
func (c *stallClock) tick(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.last.IsZero() && now.Sub(c.last) >= c.minStall {
		c.start, c.end = c.last, now
	}
	c.last = now
}

// extend returns the new deadline for a read whose deadline expired at now,
// and whether a stall explains the expiry: deadline fell inside the last
// stall (or up to slack after it), or inside the one the process is
// resuming from right now, which the clock has not ticked after yet. The
// new deadline adds the stall's length, and is at least slack from now.
//
// set is when the deadline was set (zero: unknown). A deadline set after
// the stall began (a tick period later: the process ran then) was not cut
// short by it and is not extended: without this, a deadline set right
// after resuming from a long stall the clock has not ticked after yet
// would get the whole stall added. So an extension gives back at most
// what was left of the time-out when the stall began, or slack.
func (c *stallClock) extend(deadline, set, now time.Time) (time.Time, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() {
		return time.Time{}, 0, false
	}
	start, end := c.start, c.end
	if now.Sub(c.last) >= c.minStall {
		start, end = c.last, now
	}
	if end.IsZero() || !deadline.After(start) || deadline.After(end.Add(c.slack)) {
		return time.Time{}, 0, false
	}
	if !set.IsZero() && set.After(start.Add(c.period)) {
		return time.Time{}, 0, false
	}
	length := end.Sub(start)
	d := deadline.Add(length)
	if least := now.Add(c.slack); least.After(d) {
		d = least
	}
	return d, length, true
}

// stallListener is a TCP listener whose connections survive a stall (see
// stallConn).
type stallListener struct {
	*net.TCPListener
	clock *stallClock
	// graced, when not nil, is called once per extension, with the
	// stall's length.
	graced func(stall time.Duration)
}

// Accept waits for the next connection.
func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	return &stallConn{TCPConn: c, l: l}, nil
}

// stallConn is a TCP connection that remembers the read deadline its user
// set, and extends it once when a Read fails because it expired during a
// stall. Embedding *net.TCPConn keeps every other method, including the
// CloseWrite and ReadFrom that http.Server looks for; only Read and the
// deadline setters are its own. Read costs one extra method call unless it
// fails.
type stallConn struct {
	*net.TCPConn
	l *stallListener

	mu       sync.Mutex
	deadline time.Time // the read deadline last set by the user
	set      time.Time // when it was set
	extended bool      // whether deadline was extended already
}

// Read reads from the connection; see stallConn.
func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	if n == 0 && err != nil && c.grace(err) {
		n, err = c.TCPConn.Read(p)
	}
	return n, err
}

// grace reports whether err is a read deadline that expired during a stall
// and, if so, moves the deadline so that a new Read can get what arrived.
func (c *stallConn) grace(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.mu.Lock()
	if c.extended || c.deadline.IsZero() {
		c.mu.Unlock()
		return false
	}
	// c.deadline, not the deadline that expired: if the user has set
	// another meanwhile (http.Server's abortPendingRead sets one in 1970
	// to interrupt this Read), that one decides, and a past one is never
	// extended.
	d, stall, ok := c.l.clock.extend(c.deadline, c.set, time.Now())
	if ok {
		ok = c.TCPConn.SetReadDeadline(d) == nil
		c.extended = ok
	}
	c.mu.Unlock()
	if ok && c.l.graced != nil {
		c.l.graced(stall)
	}
	return ok
}

// SetReadDeadline sets the read deadline, which may be extended once after
// a stall.
func (c *stallConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline, c.set, c.extended = t, time.Now(), false
	return c.TCPConn.SetReadDeadline(t)
}

// SetDeadline sets the read and write deadlines; only the read deadline
// may be extended after a stall.
func (c *stallConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline, c.set, c.extended = t, time.Now(), false
	return c.TCPConn.SetDeadline(t)
}
