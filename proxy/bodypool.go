package proxy

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Request body buffers are pooled by size class (issue 17 item 2): reading
// a 1 MB body into a fresh buffer allocated and zeroed a megabyte per
// request. A class holds buffers of one power of two from minPooledBody up
// to maxPooledBody; a larger body gets a buffer of its own. sync.Pool drops
// what stays unused over two garbage collections, so a burst of 7 MB
// bodies does not pin its buffers once it is over, and a small body never
// holds a large buffer.
const (
	minPooledBody = 4 << 10
	maxPooledBody = 8 << 20
	bodyClasses   = 12 // 4 KiB << 0 … 4 KiB << 11 = 8 MiB
)

var bodyPools [bodyClasses]sync.Pool

// bodyClass returns the class whose buffers hold n bytes, or -1 when n is
// larger than maxPooledBody.
func bodyClass(n int) int {
	if n > maxPooledBody {
		return -1
	}
	if n <= minPooledBody {
		return 0
	}
	return bits.Len(uint(n-1)) - bits.Len(uint(minPooledBody-1))
}

// bodyBuf is one request body held in a pooled buffer. It goes back to its
// pool when the last reference is released: the request's own (released
// when ServeHTTP returns, after finish) and one per bodyReader handed to
// the transport (released when that body is closed and no read of it is
// in flight). net/http's RoundTripper may read a request body after
// RoundTrip returned, even after a fallback retry was sent; the
// ReverseProxy hands the transport its body behind a wrapper whose Close
// does nothing (and that refuses reads once the ReverseProxy returned),
// so the transport's Close never reaches the bodyReader: releaseBody
// closes every reader of the request itself once ServeHTTP is done with
// it, and a read still in flight then keeps the buffer until it returns.
// Until every holder is done, the buffer is not reused.
type bodyBuf struct {
	b     []byte // the body: buf[:n]
	class int    // -1: not pooled
	refs  atomic.Int32
	// keep, set by the request's goroutine before its release, says the
	// body escaped the request (a savings sample keeps it): the buffer is
	// left to the collector instead of the pool.
	keep bool
}

// getBodyBuf returns a buffer of length n, with one reference (the
// request's). Its bytes are not zeroed: the caller reads the body into it.
func getBodyBuf(n int) *bodyBuf {
	c := bodyClass(n)
	if c < 0 {
		bb := &bodyBuf{b: make([]byte, n), class: -1}
		bb.refs.Store(1)
		return bb
	}
	bb, _ := bodyPools[c].Get().(*bodyBuf)
	if bb == nil {
		bb = &bodyBuf{b: make([]byte, minPooledBody<<c), class: c}
	}
	bb.b, bb.keep = bb.b[:n], false
	bb.refs.Store(1)
	return bb
}

func (bb *bodyBuf) acquire() { bb.refs.Add(1) }

// release drops one reference; the last one returns the buffer.
func (bb *bodyBuf) release() {
	switch n := bb.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("proxy: body buffer released twice")
	}
	if bb.class < 0 || bb.keep {
		return
	}
	bb.b = bb.b[:cap(bb.b)]
	if f := releasedHook.Load(); f != nil {
		(*f)(bb.b)
	}
	bodyPools[bb.class].Put(bb)
}

// releasedHook, set by tests only, sees the memory of each buffer as it
// goes back to its pool: a test overwrites it, so that a read after the
// release sees that instead of the request's bytes.
var releasedHook atomic.Pointer[func([]byte)]

// errBodyClosed is what a bodyReader's Read returns after Close while
// bytes were left: the transport gave the body up.
var errBodyClosed = errors.New("proxy: request body read after close")

// bodyReader reads b, which lies in bb, for one upstream attempt. Its
// state packs a closed bit (1) and twice the number of reads in flight: a
// read enters only while the body is open, and the reference on bb is
// released exactly once, by Close when no read is in flight or by the last
// read to leave after Close.
type bodyReader struct {
	bb    *bodyBuf
	b     []byte
	off   int
	state atomic.Int32
}

// newBodyReader returns a request body reading b (a part of bb's buffer)
// that holds a reference on bb until it is closed.
func newBodyReader(bb *bodyBuf, b []byte) *bodyReader {
	bb.acquire()
	return &bodyReader{bb: bb, b: b}
}

func (r *bodyReader) enter() bool {
	for {
		s := r.state.Load()
		if s&1 != 0 {
			return false
		}
		if r.state.CompareAndSwap(s, s+2) {
			return true
		}
	}
}

func (r *bodyReader) leave() {
	if r.state.Add(-2) == 1 {
		r.bb.release() // closed, and this was the last read in flight
	}
}

// Read implements io.Reader. Reads come from one goroutine at a time (the
// transport's), as for any request body; only Close may race with them.
func (r *bodyReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		// Also after Close: the transport's last read to confirm EOF must
		// not fail (see countingBody).
		return 0, io.EOF
	}
	if !r.enter() {
		return 0, errBodyClosed
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	r.leave()
	return n, nil
}

// Close implements io.Closer; it may be called more than once, from any
// goroutine.
func (r *bodyReader) Close() error {
	for {
		s := r.state.Load()
		if s&1 != 0 {
			return nil
		}
		if r.state.CompareAndSwap(s, s|1) {
			if s == 0 {
				r.bb.release()
			}
			return nil
		}
	}
}

// holds reports whether b starts inside bb's buffer.
func (bb *bodyBuf) holds(b []byte) bool {
	if len(b) == 0 || cap(bb.b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := uintptr(unsafe.Pointer(unsafe.SliceData(bb.b)))
	return p >= start && p < start+uintptr(cap(bb.b))
}

// outBuffer is rewrite.Options.Buffer for st's rewrites (runRewrite): the
// rewritten body is written into a pooled buffer, which goes back to its
// pool as the client body's does (releaseBody), instead of a new one per
// request (issue 17: the rewriter's output was most of what a rewritten
// 1 MB request allocated). A buffer larger than maxPooledBody is the
// request's own, as for client bodies.
func (st *reqState) outBuffer(n int) []byte {
	bb := getBodyBuf(n)
	st.outBufs = append(st.outBufs, bb)
	return bb.b[:0]
}

// requestBody returns a body reading b (st.orig, or the body to send) for
// one upstream attempt: a bodyReader on the pooled buffer that holds b
// (a rewritten body's, else the client body's) when st has one.
func (st *reqState) requestBody(b []byte) io.ReadCloser {
	bb := st.bodyBuf
	for _, ob := range st.outBufs {
		if ob.holds(b) {
			bb = ob
			break
		}
	}
	if bb == nil {
		return io.NopCloser(bytes.NewReader(b))
	}
	var r *bodyReader
	if n := st.nreaders; n < len(st.readerv) {
		// The first bodies live in st: a request makes one, two with a
		// fallback retry.
		st.nreaders++
		bb.acquire()
		r = &st.readerv[n]
		r.bb, r.b = bb, b
	} else {
		r = newBodyReader(bb, b)
	}
	st.readers = append(st.readers, r)
	return r
}

// releaseBody closes the request's bodyReaders and drops its own reference
// on its pooled body. It runs last in ServeHTTP, when the ReverseProxy and
// the hooks are done. The context cache and the Interactions continuation
// build requests of their own from st.orig, so a body they saw is left to
// the collector rather than reused.
//
// The buffers of rewritten bodies (outBuffer) are released the same way,
// after the client body's.
func (st *reqState) releaseBody() {
	keep := st.cc != nil || st.ix != nil
	for i, r := range st.readers {
		r.Close()
		st.readers[i] = nil
	}
	st.readers = st.readers[:0]
	if bb := st.bodyBuf; bb != nil {
		st.bodyBuf = nil
		bb.keep = bb.keep || keep
		bb.release()
	}
	for i, ob := range st.outBufs {
		ob.keep = ob.keep || keep
		ob.release()
		st.outBufs[i] = nil
	}
	st.outBufs = st.outBufs[:0]
}

// keepBodies leaves st's pooled bodies, the client's and the rewritten
// ones, to the collector instead of their pools: something that may
// outlive the request holds them (the context cache's plan, see
// contextCacheRequest).
func (st *reqState) keepBodies() {
	if st.bodyBuf != nil {
		st.bodyBuf.keep = true
	}
	for _, ob := range st.outBufs {
		ob.keep = true
	}
}
