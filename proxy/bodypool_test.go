package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// poolBody is request i of TestPooledBodiesNeverShared: a generate body of
// a size that varies over two of the pool's classes (so that buffers are
// reused often), whose text is a function of i, so that the upstream can
// rebuild it and compare.
func poolBody(i int) []byte {
	size := 40<<10 + (i*7919)%(80<<10)
	text := bytes.Repeat([]byte(fmt.Sprintf("req %05d ", i)), size/10+1)[:size]
	return []byte(`{"id":` + strconv.Itoa(i) + `,"contents":[{"role":"user","parts":[{"text":"` + string(text) + `"}]}]}`)
}

// poolID reads the id of a poolBody.
func poolID(b []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"id":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false
	}
	id, err := strconv.Atoi(string(rest[:end]))
	return id, err == nil
}

// TestPooledBodiesNeverShared sends many different bodies at once through
// the proxy, whose request buffers are pooled (issue 17 item 2), and checks
// that the upstream got each byte for byte: on every other request the
// rewrite changes the body, writing it into a pooled buffer of its own
// (rewrite.Options.Buffer); on half of those the upstream answers 400
// INVALID_ARGUMENT after reading only the start of it (while the
// transport may still be writing the rest), so that the original goes out
// again from the pooled buffer in the fallback retry, and on the other
// half it reads the rewritten body slowly and checks it. A buffer returned to the pool too early is
// overwritten by another request's body: the upstream sees bytes of the
// wrong request (and the race detector a write racing the transport's
// read).
func TestPooledBodiesNeverShared(t *testing.T) {
	var bad atomic.Int64
	var badMsg atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head := make([]byte, 32)
		n, _ := io.ReadFull(r.Body, head)
		head = head[:n]
		rwID, rejected, rewritten := poolRewrittenID(head)
		if rejected {
			// Rejected before the body was read in full.
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"code":400,"message":"rejected","status":"INVALID_ARGUMENT"}}`))
			return
		}
		// Read the rest slowly, so that a buffer returned to the pool too
		// early is taken and overwritten by another request meanwhile.
		time.Sleep(2 * time.Millisecond)
		rest, err := io.ReadAll(r.Body)
		body := append(head, rest...)
		id, ok := poolID(body)
		if rewritten {
			// A rewritten body, from a pooled buffer of its own: the
			// answer names the client's body, as for the others.
			id, ok = rwID, bytes.Equal(body, poolRewritten(rwID))
			body = poolBody(rwID)
		}
		if err != nil || !ok || !bytes.Equal(body, poolBody(id)) {
			bad.Add(1)
			badMsg.Store(fmt.Sprintf("request %d: %d bytes, read error %v", id, len(body), err))
			w.WriteHeader(http.StatusTeapot)
			return
		}
		sum := sha256.Sum256(body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[{"content":{"parts":[{"text":"` + hex.EncodeToString(sum[:]) + `"}],"role":"model"},"index":0}]}`))
	}))
	t.Cleanup(up.Close)
	f := newFixture(t, up.URL, Options{Rewrite: RewriteOptions{Enabled: true}})
	f.h.auditFn = noAudit
	f.h.rewriteFn = poolRewrite
	const workers, perWorker = 12, 20
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}}
	t.Cleanup(c.CloseIdleConnections)
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for k := range perWorker {
				i := w*perWorker + k
				body := poolBody(i)
				res, err := c.Post(f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					continue
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				sum := sha256.Sum256(body)
				if err != nil || res.StatusCode != 200 || !bytes.Contains(got, []byte(hex.EncodeToString(sum[:]))) {
					errs <- fmt.Errorf("request %d: status %d, %q, %v", i, res.StatusCode, got[:min(len(got), 100)], err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := bad.Load(); n > 0 {
		t.Errorf("upstream got %d corrupt bodies; last: %v", n, badMsg.Load())
	}
	if got, want := testutil.ToFloat64(f.m.RewriteFallbacks), float64(workers*perWorker/4); got != want {
		t.Errorf("rewrite_fallbacks_total = %v, want %v", got, want)
	}
}

// TestBodyReaderReleasesOnce: a pooled body goes back to its pool only when
// the request and every reader are done, whichever is last, and a read
// after Close gets an error, never the buffer's bytes.
func TestBodyReaderReleasesOnce(t *testing.T) {
	bb := getBodyBuf(100)
	copy(bb.b, bytes.Repeat([]byte("a"), 100))
	r1, r2 := newBodyReader(bb, bb.b), newBodyReader(bb, bb.b[:10])
	if got := bb.refs.Load(); got != 3 {
		t.Fatalf("refs %d, want 3", got)
	}
	p := make([]byte, 4)
	if n, err := r1.Read(p); n != 4 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	r1.Close()
	r1.Close() // twice: released once
	if n, err := r1.Read(p); n != 0 || err != errBodyClosed {
		t.Errorf("Read after Close = %d, %v; want 0, errBodyClosed", n, err)
	}
	if got := bb.refs.Load(); got != 2 {
		t.Fatalf("refs %d after one Close, want 2", got)
	}
	all, err := io.ReadAll(r2)
	if len(all) != 10 || err != nil {
		t.Fatalf("ReadAll = %d bytes, %v", len(all), err)
	}
	r2.Close()
	if n, err := r2.Read(p); n != 0 || err != io.EOF {
		t.Errorf("Read at the end after Close = %d, %v; want io.EOF", n, err)
	}
	bb.release()
	if got := bb.refs.Load(); got != 0 {
		t.Errorf("refs %d after every release, want 0", got)
	}
}

func TestBodyClass(t *testing.T) {
	for _, tc := range []struct{ n, class int }{
		{0, 0}, {1, 0}, {4 << 10, 0}, {4<<10 + 1, 1}, {8 << 10, 1}, {70 << 10, 5}, {1 << 20, 8}, {7 << 20, 11}, {8 << 20, 11}, {8<<20 + 1, -1},
	} {
		if got := bodyClass(tc.n); got != tc.class {
			t.Errorf("bodyClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
		if tc.class >= 0 && minPooledBody<<tc.class < tc.n {
			t.Errorf("class %d too small for %d", tc.class, tc.n)
		}
	}
}

// lateReader is a RoundTripper that answers at once and reads the request
// body only afterwards, on a goroutine of its own, then closes it: what
// net/http's RoundTripper contract allows ("may do so in a separate
// goroutine even after RoundTrip returns"). Rewritten bodies of ids 1
// mod 4 get 400 INVALID_ARGUMENT (so the proxy retries with the
// original), the others 200. It checks that every byte it reads belongs to its request; a read
// may fail once the body was closed, never return another body's bytes.
type lateReader struct {
	wg      sync.WaitGroup
	bad     atomic.Int64
	badMsg  atomic.Value
	retried atomic.Int64
}

func (l *lateReader) RoundTrip(req *http.Request) (*http.Response, error) {
	head := make([]byte, 32)
	n, _ := io.ReadFull(req.Body, head)
	head = head[:n]
	rwID, rejected, isRW := poolRewrittenID(head)
	if rejected {
		// Done with it at once: the retry's body is read late, while
		// other requests take buffers from the pool.
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	l.wg.Go(func() {
		if rejected {
			return
		}
		defer req.Body.Close()
		time.Sleep(3 * time.Millisecond) // the handler is done by now
		rest, err := io.ReadAll(req.Body)
		body := append(head, rest...)
		id, ok := poolID(body)
		want := poolBody(id)
		if isRW {
			// A rewritten body the upstream takes, read late from its
			// own pooled buffer.
			id, ok, want = rwID, true, poolRewritten(rwID)
		}
		switch {
		case !ok:
			l.bad.Add(1)
			l.badMsg.Store(fmt.Sprintf("body without id: %q", body[:min(len(body), 40)]))
		case err == nil && !bytes.Equal(body, want), err != nil && !bytes.HasPrefix(want, body):
			l.bad.Add(1)
			l.badMsg.Store(fmt.Sprintf("request %d: %d bytes read (error %v), not its body", id, len(body), err))
		}
	})
	res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Request: req,
		Body: io.NopCloser(bytes.NewReader([]byte(`{"candidates":[]}`)))}
	if rejected {
		l.retried.Add(1)
		res.StatusCode = http.StatusBadRequest
		res.Body = io.NopCloser(bytes.NewReader([]byte(`{"error":{"code":400,"message":"rejected","status":"INVALID_ARGUMENT"}}`)))
	}
	return res, nil
}

// TestPooledBodyOutlivesRoundTrip: a transport that reads the request body
// after RoundTrip returned (and after the fallback retry, and after the
// handler ended) never reads bytes of another request from a reused
// buffer.
func TestPooledBodyOutlivesRoundTrip(t *testing.T) {
	up := mustURL(t, "http://upstream.invalid")
	lr := &lateReader{}
	f := newFixture(t, "", Options{Upstream: up, Transport: lr, Rewrite: RewriteOptions{Enabled: true}})
	f.h.auditFn = noAudit
	f.h.rewriteFn = poolRewrite
	const workers, perWorker = 8, 25
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	t.Cleanup(c.CloseIdleConnections)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range perWorker {
				i := w*perWorker + k
				res, err := c.Post(f.front.URL+"/v1beta/models/gemini-2.5-flash:generateContent", "application/json", bytes.NewReader(poolBody(i)))
				if err != nil {
					t.Error(err)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					t.Errorf("request %d: status %d", i, res.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	lr.wg.Wait()
	if n := lr.bad.Load(); n > 0 {
		t.Errorf("the transport read %d bodies with bytes of another request; last: %v", n, lr.badMsg.Load())
	}
	if got := lr.retried.Load(); got != workers*perWorker/4 {
		t.Errorf("%d rewritten attempts rejected, want %d", got, workers*perWorker/4)
	}
}

// poolRewrite leaves the bodies of even ids unchanged (the pooled buffer
// itself goes upstream) and replaces the others by poolRewritten, written
// into the memory of Options.Buffer as the rewriter does (a pooled buffer
// of the proxy's): the upstream rejects those of ids 1 mod 4, so that the
// original goes out again in the fallback retry, and takes those of ids
// 3 mod 4.
func poolRewrite(body []byte, opts rewrite.Options, _ rewrite.Verifier) ([]byte, *rewrite.Report, error) {
	id, ok := poolID(body)
	if !ok {
		return nil, nil, fmt.Errorf("no id")
	}
	if id%2 == 0 {
		return body, &rewrite.Report{BytesBefore: len(body), BytesAfter: len(body)}, nil
	}
	want := poolRewritten(id)
	var out []byte
	if opts.Buffer != nil {
		out = opts.Buffer(len(want))[:0]
	}
	out = append(out, want...)
	return out, &rewrite.Report{BytesBefore: len(body), BytesAfter: len(out),
		Replacements: []rewrite.Replacement{{Rule: rewrite.RuleUnchanged, Bytes: 30, RefBytes: 10}}}, nil
}

// poolRewritten is poolRewrite's body for id: its size varies over two
// of the pool's classes, its bytes are a function of id.
func poolRewritten(id int) []byte {
	size := 20<<10 + (id*4099)%(40<<10)
	pad := bytes.Repeat([]byte(fmt.Sprintf("rw %05d ", id)), size/9+1)[:size]
	return []byte(`{"rewritten":` + strconv.Itoa(id) + `,"pad":"` + string(pad) + `"}`)
}

// poolRewrittenID reads the id of a poolRewritten body, and whether the
// upstream rejects it.
func poolRewrittenID(head []byte) (id int, rejected, ok bool) {
	rest, ok := bytes.CutPrefix(head, []byte(`{"rewritten":`))
	if !ok {
		return 0, false, false
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0, false, false
	}
	id, err := strconv.Atoi(string(rest[:end]))
	return id, id%4 == 1, err == nil
}

// TestOutBufferReleased: a rewritten body in a buffer of outBuffer is read
// through a bodyReader holding that buffer (not the client body's), and
// the buffer goes back to its pool only when releaseBody ran and no read
// of it is in flight; a request whose body the context cache or the
// Interactions continuation saw leaves it to the collector.
func TestOutBufferReleased(t *testing.T) {
	for _, keep := range []bool{false, true} {
		st := &reqState{bodyBuf: getBodyBuf(200)}
		if keep {
			st.cc = &ccState{}
		}
		orig := st.bodyBuf
		out := append(st.outBuffer(150), bytes.Repeat([]byte("o"), 150)...)
		second := append(st.outBuffer(90), bytes.Repeat([]byte("s"), 90)...)
		if len(st.outBufs) != 2 || &out[0] != &st.outBufs[0].b[:1][0] || &second[0] != &st.outBufs[1].b[:1][0] {
			t.Fatal("outBuffer did not hand out its buffers' memory")
		}
		ob := st.outBufs[0]
		r := st.requestBody(out[10:]) // inside the buffer, not at its start
		if r.(*bodyReader).bb != ob || ob.refs.Load() != 2 || orig.refs.Load() != 1 {
			t.Fatalf("the reader of a rewritten body holds the wrong buffer (refs out %d, orig %d)", ob.refs.Load(), orig.refs.Load())
		}
		if r2 := st.requestBody(orig.b); r2.(*bodyReader).bb != orig {
			t.Fatal("the reader of the client body does not hold its buffer")
		}
		if !r.(*bodyReader).enter() { // a read in flight
			t.Fatal("enter")
		}
		st.releaseBody()
		if got := ob.refs.Load(); got != 1 {
			t.Fatalf("refs %d with a read in flight after releaseBody, want 1", got)
		}
		if st.outBufs[:cap(st.outBufs)][0] != nil || len(st.outBufs) != 0 {
			t.Error("releaseBody kept its buffers")
		}
		r.(*bodyReader).leave()
		if got := ob.refs.Load(); got != 0 {
			t.Fatalf("refs %d after the last read, want 0", got)
		}
		if ob.keep != keep {
			t.Errorf("keep %v, want %v", ob.keep, keep)
		}
	}
}
