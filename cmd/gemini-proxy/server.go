package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

// newLogger builds the process's only slog handler, as configured: slog's
// JSON or text handler, through which the proxy writes its access log with
// its own encoder, to the same bytes (proxy.NewLogHandler).
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	return slog.New(proxy.NewLogHandler(w, c.Format == "json", &slog.HandlerOptions{Level: level}))
}

// listener is one HTTP server bound to an address.
type listener struct {
	name string
	srv  *http.Server
	ln   net.Listener
	// countGrace, when not nil, counts read deadlines extended after a
	// process stall (stall.go). Set it before serveUntil.
	countGrace func()
	// abort cancels the context of every request of srv, so that their
	// handlers end and reset what they still stream (serveUntil).
	abort context.CancelCauseFunc
}

// errGraceOver is the cause of the requests' cancellation when
// server.shutdown_grace ended before they did.
var errGraceOver = errors.New("shutdown grace period over")

// abortWait bounds the wait for handlers to end once their requests were
// cancelled at the end of the grace period, before the rest is closed.
const abortWait = 2 * time.Second

// listen binds addr and prepares a server for h whose time-outs cannot cut
// a long stream: only header reads and idle connections are bounded. Its
// connections extend a read deadline that expired while the process was
// stalled (stall.go), so that a request that arrived meanwhile is served
// instead of reset; the stall clock runs during serveUntil.
func listen(name, addr string, h http.Handler, c config.Server, logger *slog.Logger) (*listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	sl := &stallListener{TCPListener: ln.(*net.TCPListener), clock: stalls}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		// No ReadTimeout or WriteTimeout: they would cut uploads and streams.
	}
	base, abort := context.WithCancelCause(context.Background())
	srv.BaseContext = func(net.Listener) context.Context { return base }
	l := &listener{name: name, srv: srv, ln: sl, abort: abort}
	sl.graced = func(stall time.Duration) {
		logger.Warn("read deadline extended after a process stall", "listener", name, "stall", stall)
		if l.countGrace != nil {
			l.countGrace()
		}
	}
	return l, nil
}

// serveUntil serves every listener until ctx is done, then shuts them down
// gracefully: ready turns false at once; for delay the listeners keep
// accepting and serving (so a load balancer that polls /readyz stops
// sending traffic before the port closes); then the listeners close (new
// connections are refused) and in-flight requests and streams have grace to
// finish before their connections are closed. A serve error skips the
// delay. It returns the first serve error, or nil after a clean shutdown.
func serveUntil(ctx context.Context, lns []*listener, delay, grace time.Duration, ready *atomic.Bool, logger *slog.Logger) error {
	defer stalls.run()() // the stall clock ticks while any listener serves
	errc := make(chan error, len(lns))
	for _, l := range lns {
		logger.Info("listening", "listener", l.name, "addr", l.ln.Addr().String())
		go func() {
			if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", l.name, err)
				return
			}
			errc <- nil
		}()
	}
	ready.Store(true)

	var first error
	select {
	case <-ctx.Done():
	case first = <-errc:
	}
	ready.Store(false)
	if first == nil && delay > 0 {
		logger.Info("not ready, draining before shutdown", "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case first = <-errc:
			t.Stop()
		}
	}
	logger.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, l := range lns {
		if err := l.srv.Shutdown(sctx); err != nil {
			// http.Server.Close would close the connections of running
			// streams cleanly, which an HTTP/1.0 client takes for a
			// complete answer. Cancel the requests instead: the proxy
			// then resets each connection it was still writing to (issue
			// 16 item 1). Close what is left after abortWait.
			logger.Warn("grace period over, cutting the requests still running", "listener", l.name)
			l.abort(errGraceOver)
			actx, acancel := context.WithTimeout(context.Background(), abortWait)
			if l.srv.Shutdown(actx) != nil {
				l.srv.Close()
			}
			acancel()
		}
	}
	return first
}
