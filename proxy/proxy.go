package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gemini-proxy/gemini-proxy/contextcache"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// Request and response headers of the proxy itself.
const (
	// HeaderRewrite is the request header that selects the rewrite mode for
	// one request: "off" or "dry-run".
	HeaderRewrite = "X-Gemini-Proxy-Rewrite"
	// HeaderReport is the response header that says what the rewrite did.
	HeaderReport = "X-Gemini-Proxy-Report"
	// headerPrefix marks every header of the proxy; none is forwarded upstream.
	headerPrefix = "X-Gemini-Proxy-"
)

// Headers every request reads, in canonical form for headerValue.
const (
	hdrAPIClient       = "X-Goog-Api-Client"
	hdrAPIKey          = "X-Goog-Api-Key"
	hdrAuthorization   = "Authorization"
	hdrContentEncoding = "Content-Encoding"
	hdrContentLength   = "Content-Length"
	hdrContentType     = "Content-Type"
	hdrUploadURL       = "X-Goog-Upload-Url"
)

// headerValue returns h.Get(key) for a key in canonical form
// (textproto.CanonicalMIMEHeaderKey(key) == key). Get canonicalises its
// key again on every call, about 500 instructions for keys of this
// length, six times a request (issue 17 item 4). The result is Get's: a
// map key that is not canonical is found by neither.
// TestHeaderKeysCanonical holds the keys passed here to canonical form.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// rewriteFunc is the signature of rewrite.Request.
type rewriteFunc func([]byte, rewrite.Options, rewrite.Verifier) ([]byte, *rewrite.Report, error)

// Handler is the Gemini reverse proxy. Build it with New. Safe for
// concurrent use.
type Handler struct {
	opts     Options
	log      *slog.Logger
	m        *metrics.Metrics
	upstream *url.URL
	vertex   *url.URL
	basePath string
	maxBody  int64 // < 0: no limit
	rwMax    int64
	rwOpts   rewrite.Options
	// rwInflight is the sum of the reservations of the requests being
	// rewritten (RewriteOptions.MaxInflightBytes); rwTenants holds each
	// tenant's part of it, under rwMu.
	rwInflight atomic.Int64
	rwMu       sync.Mutex
	rwTenants  map[string]int64
	secret     []byte
	models     map[string]struct{}
	sav        *savings
	rp         *httputil.ReverseProxy // unary routes
	rpStream   *httputil.ReverseProxy // streaming routes: flush every write
	cc         *contextcache.Manager  // nil: context caching off
	tenants    *tenantHasher
	hot        hotMetrics

	// rewriteFn is rewrite.Request; tests replace it to inject failures.
	rewriteFn rewriteFunc
	// auditFn is rewrite.Audit; tests replace it (audit.go).
	auditFn auditFunc

	ix *interactions // nil: Interactions continuation off

	ledger *ledger

	budget *memBudget // nil: no process-wide memory budget
}

// New builds a Handler. logger receives the access log (one line per
// request at Info) and transport errors; m receives every metric.
func New(opts Options, logger *slog.Logger, m *metrics.Metrics) (*Handler, error) {
	if opts.Upstream == nil || opts.Upstream.Scheme == "" || opts.Upstream.Host == "" {
		return nil, errors.New("proxy: upstream URL must be absolute")
	}
	if u := opts.VertexUpstream; u != nil && *u == (url.URL{}) {
		opts.VertexUpstream = nil // url.Parse("") from an unset config key
	}
	if u := opts.VertexUpstream; u != nil && (u.Scheme == "" || u.Host == "") {
		return nil, errors.New("proxy: vertex upstream URL must be absolute")
	}
	if logger == nil || m == nil {
		return nil, errors.New("proxy: logger and metrics are required")
	}
	h := &Handler{
		opts:      opts,
		log:       logger,
		m:         m,
		upstream:  opts.Upstream,
		vertex:    opts.VertexUpstream,
		basePath:  strings.TrimSuffix(opts.BasePath, "/"),
		maxBody:   opts.MaxBodyBytes,
		rwMax:     opts.Rewrite.MaxBodyBytes,
		rwOpts:    opts.Rewrite.Options,
		secret:    opts.TenantSecret,
		rewriteFn: rewrite.Request,
		auditFn:   rewrite.Audit,
		hot:       hotMetrics{m: m},
	}
	traffic, memoBytes := splitMemoryBudget(opts.MemoryBudgetBytes)
	h.budget = newMemBudget(traffic, m)
	if h.basePath != "" && !strings.HasPrefix(h.basePath, "/") {
		h.basePath = "/" + h.basePath
	}
	if h.maxBody == 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.rwMax <= 0 {
		h.rwMax = DefaultRewriteMaxBodyBytes
	}
	if o := h.rwOpts; o.MinBlockBytes == 0 && o.Similarity == 0 && o.Unflatten == "" && o.DocumentTags == nil && !o.CompactSuperseded {
		h.rwOpts = rewrite.DefaultOptions()
	}
	if len(h.secret) == 0 {
		h.secret = make([]byte, 32)
		rand.Read(h.secret) //nolint:errcheck // crypto/rand.Read never fails
	}
	h.tenants = newTenantHasher(h.secret)
	allow := opts.ModelAllowlist
	if allow == nil {
		allow = DefaultModelAllowlist
	}
	h.models = make(map[string]struct{}, len(allow))
	for _, name := range allow {
		h.models[normalizeModel(name)] = struct{}{}
	}

	base := opts.Transport
	if base == nil {
		base = newTransport(opts)
	}
	sav, err := newSavings(m, opts, h.modelLabel)
	if err != nil {
		return nil, err
	}
	sav.countTokens = func(ctx context.Context, s *sample) (int64, error) { return callCountTokens(ctx, base, s) }
	h.sav = sav
	if h.ledger, err = newLedger(opts.Ledger, m, sav, h.secret, memoBytes); err != nil {
		return nil, err
	}
	h.ix = newInteractions(opts.Interactions, h.rwOpts, m)
	if h.cc, err = h.newContextCache(base); err != nil {
		return nil, err
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewriteRequest,
		Transport:      &transport{h: h, base: base},
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.errorHandler,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelError),
		BufferPool:     bufferPool{},
	}
	rs := *h.rp
	rs.FlushInterval = -1
	h.rpStream = &rs

	for _, r := range rewrite.Rules {
		m.RewriteSavedBytes.WithLabelValues(string(r))
		m.RewriteReplacements.WithLabelValues(string(r))
	}
	for _, r := range rewrite.AuditReasons {
		m.RewriteAuditFails.WithLabelValues(string(r))
	}
	for _, s := range rewrite.Sources {
		m.RewriteSourceSavedBytes.WithLabelValues(string(s))
		m.RewriteSourceReplacements.WithLabelValues(string(s))
	}
	return h, nil
}

// newTransport clones http.DefaultTransport (HTTP/2 stays on) with the
// configured timeouts and a pool sized for one upstream host.
func newTransport(opts Options) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = opts.ResponseHeaderTimeout
	t.IdleConnTimeout = opts.IdleConnTimeout
	t.MaxIdleConnsPerHost = opts.MaxIdleConnsPerHost
	if t.MaxIdleConnsPerHost == 0 {
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	t.MaxIdleConns = max(t.MaxIdleConns, 2*t.MaxIdleConnsPerHost)
	// The client's Accept-Encoding is forwarded as is. Without this, a
	// client that sent none would get a gzip request upstream and a body
	// that net/http silently decompressed.
	t.DisableCompression = true
	return t
}

// bufferPool reuses the 32 KiB copy buffers of the ReverseProxy. The pool
// holds array pointers, which a slice converts to and from without an
// allocation: putting a *[]byte allocated its slice header every request.
type bufferPool struct{}

const copyBufferSize = 32 << 10

var copyBuffers = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

func (bufferPool) Get() []byte { return copyBuffers.Get().(*[copyBufferSize]byte)[:] }

func (bufferPool) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		copyBuffers.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}

// stateKey is the context key of *reqState.
type stateKey struct{}

// reqState is what the proxy learns about one request as it moves through
// ServeHTTP, the ReverseProxy hooks and the transport.
type reqState struct {
	start    time.Time
	info     routeInfo
	stream   bool
	tenant   string
	sdk      SDK
	inScheme string
	inHost   string

	body *countingBody // nil when the request has no body
	// bodyBuf holds orig when it was read into a pooled buffer
	// (bodypool.go); every upstream body reading it comes from
	// requestBody.
	bodyBuf *bodyBuf
	readers []*bodyReader // the bodies made by requestBody, closed by releaseBody
	reader0 [2]*bodyReader
	// readerv holds the first len(readerv) of them (requestBody), nreaders
	// how many it gave out; never reused, as a transport may still read one
	// after the request.
	readerv  [2]bodyReader
	nreaders int
	outBufs  []*bodyBuf // the pooled buffers of rewritten bodies (outBuffer), released by releaseBody

	// Rewrite.
	mode      string // metrics.Mode*
	outcome   string // metrics.Outcome*, "" when no rewrite was attempted
	orig      []byte // client body, when it was read
	readDur   time.Duration
	sentBody  []byte // the rewritten body, when it differs from orig
	rewritten bool   // the body sent differs from orig
	report    *rewrite.Report
	repHeader string
	rwErr     string // constant description of a rewrite failure
	rwSkip    string // why rewriting was skipped (outcome skipped, mode on)
	reserved  int64  // bytes of RewriteOptions.MaxInflightBytes held, released at the end
	budgeted  int64  // bytes of the memory budget held for the body or rewrite, released at the end

	// Upstream; written by the transport on the handler's goroutine.
	upstreamStart time.Time
	upstreamDur   time.Duration
	sent          int64 // request body bytes of buffered attempts
	fallback      bool
	upStatus      int
	tb            *tapBody
	cc            *ccState // context caching; nil when it does not apply

	pe  *proxyError
	err error // safe to log

	// What ServeHTTP would otherwise allocate one by one, held here so
	// that a request's state is one allocation (issue 17 item 4): the
	// context carrying st, the request URL's copy, the ResponseWriter
	// wrapper, the counting body and the response tap's body. None of
	// them is reused: the transport may still read bodyv after ServeHTTP
	// returned, and the collector keeps st alive for it.
	ctx   stateCtx
	url   url.URL
	rw    responseWriter
	bodyv countingBody
	tbv   tapBody
	// repVal is the value slice of the response's HeaderReport.
	repVal [1]string

	ix *ixState // Interactions continuation; nil when off

	// Ledger (ledger.go): the client body's layout and its conversation's
	// state when the holdout decision needed them before sending, and that
	// decision.
	naive   *layout
	prev    *ledgerState
	holdout bool
	led     Ledger // settle's account, Exchange.Ledger
}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

// stateCtx is the request context that carries a *reqState under
// stateKey, as context.WithValue would, without an allocation of its own
// (it is a field of the state). Every other key, and Done, Err and
// Deadline, are the parent's: context.WithCancel under it still finds the
// server's cancelCtx and starts no goroutine.
type stateCtx struct {
	context.Context
	st *reqState
}

func (c *stateCtx) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return c.st
	}
	return c.Context.Value(key)
}

// ServeHTTP forwards r upstream and streams the answer back.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := &reqState{start: time.Now()}
	h.m.InFlight.Inc()
	defer h.m.InFlight.Dec()
	defer st.releaseBody() // last: finish and the hooks read the body

	st.ctx = stateCtx{Context: r.Context(), st: st}
	out := r.WithContext(&st.ctx)
	st.url = *r.URL
	out.URL = &st.url
	h.stripBasePath(&st.url)
	st.info = classify(st.url.Path)
	st.stream = st.info.route == RouteStreamGenerate
	st.tenant = h.tenants.tenant(h.opts.TenantHeader, r)
	st.sdk = clientSDK(headerValue(r.Header, hdrAPIClient))
	st.inHost, st.inScheme = r.Host, "http"
	if r.TLS != nil {
		st.inScheme = "https"
	}

	st.rw.ResponseWriter = w
	rw := &st.rw
	defer h.releaseRewrite(st) // after finish: the bodies live until then
	defer h.finish(st, rw, out)
	h.forward(st, rw, w, r, out)
}

// forward is ServeHTTP after the request's state is set up. Its early
// returns are here so that ServeHTTP's four defers are open-coded: with
// five returns Go ran them through deferreturn, about 400 instructions a
// request (issue 17 item 4).
func (h *Handler) forward(st *reqState, rw *responseWriter, w http.ResponseWriter, r, out *http.Request) {
	if hasDotSegment(r.URL.Path) {
		st.pe = &errDotSegment
		writeError(rw, errDotSegment)
		return
	}
	if h.maxBody > 0 && r.ContentLength > h.maxBody {
		h.fail(rw, out, errBodyTooLarge)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		rc := r.Body
		// A known Content-Length is within the limit here, and countingBody
		// never reads past it (net/http's server limits the body to it
		// too): only a body of unknown length needs http.MaxBytesReader,
		// one allocation a request saved on the others (issue 17).
		if h.maxBody > 0 && r.ContentLength < 0 {
			rc = http.MaxBytesReader(w, rc, h.maxBody)
		}
		st.bodyv.rc, st.bodyv.size = rc, r.ContentLength
		st.body = &st.bodyv
		st.body.startIdle(h.opts.BodyIdleTimeout, w)
		out.Body = st.body
	}
	if st.info.route.isGenerate() {
		if err := h.prepareRewrite(st, out); err != nil {
			h.fail(rw, out, err)
			return
		}
	}
	if err := h.bufferUnknownLength(st, out); err != nil {
		h.fail(rw, out, err)
		return
	}
	if st.stream {
		h.rpStream.ServeHTTP(rw, out)
	} else {
		h.rp.ServeHTTP(rw, out)
	}
}

// hasDotSegment reports whether a request path (already percent-decoded
// once, as url.URL.Path is) has a "." or ".." segment, also when that
// segment is percent-encoded once more or separated by a backslash. The
// upstream path is the configured prefix joined with the client's path: a
// hop that resolves dot segments after the join would leave the prefix
// (issue 16 item 3). The Gemini API has no path with such a segment, so
// the proxy rejects them on every route rather than normalise them.
//
// It splits at bytes, not runes: both separators are ASCII, which no byte
// of a multi-byte or invalid UTF-8 sequence is; an empty segment is
// neither. Only a segment of at most six bytes ("%2e%2e") can be one, so
// longer ones are not looked at. TestHasDotSegment holds it to the
// rune-by-rune split it replaced, which cost about 1,500 instructions a
// request.
func hasDotSegment(p string) bool {
	if strings.IndexByte(p, '.') < 0 && strings.IndexByte(p, '%') < 0 {
		return false
	}
	backslash := strings.IndexByte(p, '\\') >= 0
	for len(p) > 0 {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			i = len(p)
		}
		if backslash {
			if j := strings.IndexByte(p[:i], '\\'); j >= 0 {
				i = j
			}
		}
		if seg := p[:i]; i <= len("%2e%2e") && isDotSegment(seg) {
			return true
		}
		if i == len(p) {
			break
		}
		p = p[i+1:]
	}
	return false
}

// isDotSegment reports whether seg is "." or "..", also percent-encoded.
func isDotSegment(seg string) bool {
	if seg == "." || seg == ".." {
		return true
	}
	if strings.IndexByte(seg, '%') >= 0 {
		if un, err := url.PathUnescape(seg); err == nil && (un == "." || un == "..") {
			return true
		}
	}
	return false
}

// stripBasePath removes Options.BasePath from u's path, keeping any
// escaped form consistent.
func (h *Handler) stripBasePath(u *url.URL) {
	if h.basePath == "" {
		return
	}
	rest, ok := strings.CutPrefix(u.Path, h.basePath)
	if !ok || (rest != "" && rest[0] != '/') {
		return
	}
	if rest == "" {
		rest = "/"
	}
	u.Path = rest
	if u.RawPath != "" {
		if raw, ok := strings.CutPrefix(u.RawPath, h.basePath); ok {
			u.RawPath = raw
		} else {
			u.RawPath = ""
		}
	}
}

// prepareRewrite reads and rewrites a generate request body when rewriting
// applies, replacing out.Body. A returned error is the client's fault (body
// too large, unreadable) and ends the request.
func (h *Handler) prepareRewrite(st *reqState, out *http.Request) error {
	st.mode = metrics.ModeDisabled
	if h.opts.Rewrite.Enabled {
		st.mode = metrics.ModeOn
		switch strings.ToLower(strings.TrimSpace(headerValue(out.Header, HeaderRewrite))) {
		case "off":
			st.mode = metrics.ModeOff
		case "dry-run":
			st.mode = metrics.ModeDryRun
		}
	}
	switch {
	case st.mode == metrics.ModeOff || st.mode == metrics.ModeDisabled:
		st.repHeader = "mode=disabled" // constants: a concatenation would allocate
		if st.mode == metrics.ModeOff {
			st.repHeader = "mode=off"
		}
		return nil
	case out.Method != http.MethodPost || st.body == nil:
		return nil
	case out.ContentLength > h.rwMax:
		st.outcome, st.repHeader, st.rwSkip = metrics.OutcomeSkipped, "skipped", "too_large"
		return nil
	}
	// A compressed request body is forwarded unchanged: decoding and
	// re-encoding it is not worth the risk for the rare client that sends one.
	if ce := headerValue(out.Header, hdrContentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
		st.outcome, st.repHeader, st.rwSkip = metrics.OutcomeSkipped, "skipped", "compressed"
		return nil
	}
	readStart := time.Now()
	buf, bb, err := readBody(st.body, out.ContentLength, h.rwMax)
	st.bodyBuf, st.readers = bb, st.reader0[:0]
	st.readDur = time.Since(readStart)
	if err != nil {
		return fmt.Errorf("%w: %w", errReadBody, err)
	}
	if int64(len(buf)) > h.rwMax {
		// Unknown length and too large: stream what was read plus the rest.
		out.Body = readCloser{io.MultiReader(bytes.NewReader(buf), st.body), st.body}
		st.outcome, st.repHeader, st.rwSkip = metrics.OutcomeSkipped, "skipped", "too_large"
		return nil
	}
	// Reserved only now that the body is read: a client that trickles its
	// upload holds nothing meanwhile (issue 16 item 2).
	if !h.reserveRewrite(st, int64(len(buf))) {
		// Too much is being rewritten already: forward this one as it came.
		out.Body = st.requestBody(buf)
		st.outcome, st.repHeader, st.rwSkip = metrics.OutcomeSkipped, "skipped", "busy"
		return nil
	}
	// What the request holds because it is rewritten, from the
	// process-wide budget: when it is spent, the body goes out as it came.
	if n := rewriteBudgetFactor * int64(len(buf)); h.budget.take(n, budgetRewrite) {
		st.budgeted = n
	} else {
		h.releaseRewrite(st)
		out.Body = st.requestBody(buf)
		st.outcome, st.repHeader, st.rwSkip = metrics.OutcomeSkipped, "skipped", "memory"
		return nil
	}
	st.orig = buf
	send := buf
	res, rep, rerr := h.rewriteWeighed(st, buf)
	switch {
	case errors.Is(rerr, rewrite.ErrTooComplex):
		// Over rewrite.max_parts, max_lines or max_blocks: a limit, not
		// a failure. The original body goes out as it came.
		st.outcome, st.repHeader, st.rwSkip = metrics.OutcomeSkipped, "skipped", "too_complex"
	case rerr != nil && (errors.Is(rerr, rewrite.ErrInvalidJSON) || !json.Valid(buf)):
		// The client's malformed JSON: forwarded as it came for the
		// upstream to answer, and kept out of the rewrite errors, whose
		// alert is for faults of the rewriter (issue 16 item 7). The
		// rewriter may stop at another error before it sees the syntax
		// error (a truncated body), hence json.Valid, on this path only.
		st.outcome = metrics.OutcomeInvalidRequest
		st.repHeader = fmt.Sprintf("bytes=%d->%d; invalid_request", len(buf), len(buf))
	case rerr != nil:
		h.m.RewriteErrors.Inc()
		st.outcome = metrics.OutcomeError
		st.repHeader = fmt.Sprintf("bytes=%d->%d; error", len(buf), len(buf))
		st.rwErr = rewriteErrorText(rerr)
	case !h.audit(st, buf, res, rep):
		// The rewritten body failed its audit: the original goes out.
	default:
		st.report = rep
		st.repHeader = reportHeader(rep)
		st.outcome = metrics.OutcomeUnchanged
		if rep.Changed() || !bytes.Equal(res, buf) {
			st.outcome = metrics.OutcomeChanged
		}
		if st.mode == metrics.ModeDryRun {
			st.repHeader += "; mode=dry-run"
			break
		}
		if h.ledger.holdoutFor(st, buf) {
			st.repHeader += "; holdout"
			break
		}
		send = res
		st.rewritten = !bytes.Equal(res, buf)
		if st.rewritten {
			st.sentBody = res
		}
	}
	out.Body = st.requestBody(send)
	if n := int64(len(send)); n != out.ContentLength {
		// The transport writes ContentLength; the header, which it
		// ignores, says the same for the hooks. A body sent as it came
		// keeps both (two allocations).
		out.ContentLength = n
		if headerValue(out.Header, hdrContentLength) != "" {
			out.Header.Set("Content-Length", strconv.Itoa(len(send)))
		}
	}
	out.TransferEncoding = nil
	return nil
}

// reportHeader returns rep.Header(). The report of a request the rewrite
// left as it came (nothing replaced, un-flattened or reordered, no
// compaction weighed), which is every request that cannot change, is
// "bytes=N->N" alone: formatted here with strconv, without the two fmt
// calls and the per-rule maps of Header, which cost about a microsecond
// and three allocations a request (issue 17 item 4).
// TestReportHeaderAsHeader holds the two to the same text.
func reportHeader(rep *rewrite.Report) string {
	if rep.Changed() || rep.Compaction != nil {
		return rep.Header()
	}
	var b [48]byte
	out := append(b[:0], "bytes="...)
	out = strconv.AppendInt(out, int64(rep.BytesBefore), 10)
	out = append(out, "->"...)
	out = strconv.AppendInt(out, int64(rep.BytesAfter), 10)
	return string(out)
}

// tenantInflightShare is the divisor of RewriteOptions.MaxInflightBytes
// that one tenant may hold: a quarter, so that one tenant's bodies cannot
// switch rewriting off for the others.
const tenantInflightShare = 4

// bufferUnknownLength reads a body of unknown length (chunked) that is
// still to be streamed, up to Options.MaxBodyBytes, before anything is
// sent upstream: streamed, an oversize body would reach the upstream in
// part before the client got its 413 (issue 16 item 8). A body with a
// Content-Length over the limit was refused before; a body prepareRewrite
// read whole has a length by now. The buffered body still goes upstream
// chunked.
func (h *Handler) bufferUnknownLength(st *reqState, out *http.Request) error {
	if h.maxBody <= 0 || st.body == nil || out.ContentLength >= 0 || out.Body == nil || out.Body == http.NoBody {
		return nil
	}
	readStart := time.Now()
	buf, err := h.readBudgeted(st, out.Body)
	st.readDur += time.Since(readStart)
	if err != nil {
		return err
	}
	out.Body = io.NopCloser(bytes.NewReader(buf))
	return nil
}

// chunkedBudgetStep is the unit in which a buffered chunked body takes
// from the memory budget.
const chunkedBudgetStep = 256 << 10

// readBudgeted reads a chunked body whole, taking its bytes from the memory
// budget as they arrive (held in st.budgeted until the request ends): a
// body the budget cannot hold fails with errBudgetSpent, and nothing of it
// has reached the upstream.
func (h *Handler) readBudgeted(st *reqState, body io.Reader) ([]byte, error) {
	if h.budget == nil {
		buf, err := io.ReadAll(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errReadBody, err)
		}
		return buf, nil
	}
	buf := make([]byte, 0, 32<<10)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		if need := int64(cap(buf)); need > st.budgeted {
			step := (need - st.budgeted + chunkedBudgetStep - 1) / chunkedBudgetStep * chunkedBudgetStep
			if !h.budget.take(step, budgetChunkedBody) {
				return nil, errBudgetSpent
			}
			st.budgeted += step
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errReadBody, err)
		}
	}
}

// reserveRewrite takes size bytes (the body read) of
// RewriteOptions.MaxInflightBytes for st, and reports whether it could:
// not when the reservations held already and this one would pass the
// limit, nor when st's tenant holds some already and would pass its share
// (limit/tenantInflightShare), unless none is held (so that one request
// larger than the limit is still rewritten on an idle proxy, and one
// request of each tenant always may be).
func (h *Handler) reserveRewrite(st *reqState, size int64) bool {
	limit := h.opts.Rewrite.MaxInflightBytes
	if limit <= 0 {
		return true
	}
	h.rwMu.Lock()
	defer h.rwMu.Unlock()
	cur, mine := h.rwInflight.Load(), h.rwTenants[st.tenant]
	if (cur > 0 && cur+size > limit) || (mine > 0 && mine+size > limit/tenantInflightShare) {
		return false
	}
	if h.rwTenants == nil {
		h.rwTenants = make(map[string]int64)
	}
	h.rwTenants[st.tenant] = mine + size
	h.rwInflight.Add(size)
	st.reserved = size
	return true
}

// releaseRewrite returns what reserveRewrite and the memory budget took
// for st.
func (h *Handler) releaseRewrite(st *reqState) {
	h.budget.give(st.budgeted)
	st.budgeted = 0
	if st.reserved <= 0 {
		return
	}
	h.rwMu.Lock()
	defer h.rwMu.Unlock()
	if left := h.rwTenants[st.tenant] - st.reserved; left > 0 {
		h.rwTenants[st.tenant] = left
	} else {
		delete(h.rwTenants, st.tenant)
	}
	h.rwInflight.Add(-st.reserved)
	st.reserved = 0
}

// readBody reads body, of Content-Length size (-1: unknown), up to
// limit+1 bytes. With a known length it reads into one pooled buffer of
// that size's class (bodypool.go), returned with the body: io.ReadAll would
// grow its buffer by doubling, allocating and copying about twice the body,
// and a fresh buffer per request is allocated and zeroed each time.
// countingBody reports io.EOF with the last byte of a known length, so no
// read past it is needed. bb is nil for an unknown length.
func readBody(body io.Reader, size, limit int64) (buf []byte, bb *bodyBuf, err error) {
	if size < 0 || size > limit {
		buf, err = io.ReadAll(io.LimitReader(body, limit+1))
		return buf, nil, err
	}
	bb = getBodyBuf(int(size))
	buf = bb.b
	n := 0
	for {
		m, err := body.Read(buf[n:])
		n += m
		switch {
		case err == io.EOF:
			return buf[:n], bb, nil
		case err != nil:
			return buf[:n], bb, err
		case n == len(buf):
			// A reader that did not say EOF with the last byte: read on,
			// as io.ReadAll would.
			rest, err := io.ReadAll(io.LimitReader(body, limit+1-size))
			if len(rest) > 0 {
				buf = append(buf[:n:n], rest...)
			}
			return buf, bb, err
		}
	}
}

// runRewrite calls the rewriter on st's body with sent as Options.Sent,
// turning a panic into an error. The rewritten body is written into
// pooled buffers of st (outBuffer).
func (h *Handler) runRewrite(st *reqState, body []byte, sent *rewrite.SentPrefix) (out []byte, rep *rewrite.Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, rep, err = nil, nil, errRewritePanic
		}
	}()
	var v rewrite.Verifier
	if h.opts.Verifier != nil {
		v = h.opts.Verifier(st.tenant)
	}
	opts := h.rwOpts
	opts.Sent = sent // what the conversation's previous request sent (ledger.go)
	opts.Buffer = st.outBuffer
	// The ledger prices what un-flattening removed by this count (savings.go).
	opts.CountTokens = textTokens
	out, rep, err = h.rewriteFn(body, opts, v)
	if err == nil && (out == nil || rep == nil) {
		err = errRewriteEmpty
	}
	return out, rep, err
}

var (
	errRewritePanic = errors.New("rewrite panicked")
	errRewriteEmpty = errors.New("rewrite returned no body or report")
)

// rewriteErrorText describes a rewrite failure for the log with constant
// text: a rewriter's own message might quote the prompt.
func rewriteErrorText(err error) string {
	for _, known := range []error{errRewritePanic, errRewriteEmpty, rewrite.ErrNoContents, rewrite.ErrInvalidJSON} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	return "rewrite error"
}

// rewriteRequest is the ReverseProxy Rewrite hook. It runs after the
// hop-by-hop headers were removed, so a client cannot drop what it sets.
func (h *Handler) rewriteRequest(pr *httputil.ProxyRequest) {
	st := stateFrom(pr.In.Context())
	target := h.upstream
	vertex := st != nil && st.info.vertex
	if vertex && h.vertex != nil {
		target = h.vertex
	}
	pr.SetURL(target)
	h.ix.capture(st, pr.In)
	hdr := pr.Out.Header
	for k := range hdr {
		if len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix) {
			delete(hdr, k)
		}
	}
	if h.opts.APIKey != "" && !vertex {
		hdr.Del("X-Goog-Api-Key")
		pr.Out.URL.RawQuery = removeQueryParam(pr.Out.URL.RawQuery, "key")
		hdr.Set("X-Goog-Api-Key", string(h.opts.APIKey))
	}
}

// removeQueryParam deletes every name= parameter from a raw query, keeping
// the other parameters byte-for-byte (url.Values would re-encode them).
func removeQueryParam(raw, name string) string {
	if raw == "" || !strings.Contains(raw, name) {
		return raw
	}
	var b strings.Builder
	for part := range strings.SplitSeq(raw, "&") {
		k, _, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(part)
	}
	return b.String()
}

// modifyResponse runs after the upstream's headers arrived and before any
// byte is written to the client.
func (h *Handler) modifyResponse(res *http.Response) error {
	st := stateFrom(res.Request.Context())
	if st == nil {
		return nil
	}
	st.upStatus = res.StatusCode
	if isEventStream(headerValue(res.Header, hdrContentType)) {
		st.stream = true
	}
	if v := headerValue(res.Header, hdrUploadURL); v != "" {
		res.Header.Set("X-Goog-Upload-Url", h.uploadURL(v, st))
	}
	if st.info.route.isGenerate() {
		if st.repHeader != "" {
			v := st.repHeader
			if st.fallback {
				v += "; fallback"
			}
			// As Header.Set (HeaderReport is in canonical form), without
			// allocating the value's slice.
			st.repVal[0] = v
			res.Header[HeaderReport] = st.repVal[:]
		}
		if t := h.newTap(res, st); t != nil {
			st.tbv = tapBody{rc: res.Body, t: t, left: res.ContentLength}
			st.tb = &st.tbv
			if st.upStatus == http.StatusOK && (h.opts.OnServed != nil || h.opts.ServedText != nil) {
				st.tb.h, st.tb.st = h, st
			}
			res.Body = st.tb
		}
	} else if isInteractionCreate(st.info.route, res.Request) {
		if t := newInteractionTap(headerValue(res.Header, hdrContentEncoding)); t != nil {
			t.budget = h.budget
			st.tbv = tapBody{rc: res.Body, t: t}
			st.tb = &st.tbv
			res.Body = st.tb
		}
	}
	return nil
}

// isEventStream reports whether mime.ParseMediaType(v) is
// text/event-stream. It calls ParseMediaType, which allocates a map of the
// parameters, only for a text/event-stream with parameters, where a
// malformed parameter list changes the answer.
func isEventStream(v string) bool {
	base, _, params := strings.Cut(v, ";")
	if !asciiEqualFold(strings.TrimSpace(base), "text/event-stream") {
		return false
	}
	if !params {
		return true
	}
	ct, _, _ := mime.ParseMediaType(v)
	return ct == "text/event-stream"
}

// uploadURL points an X-Goog-Upload-Url at the proxy as the client reached
// it, so that clients following it stay on the proxy. URLs on other hosts
// are left alone. New SDKs rewrite the host themselves (gemini-api.md §1.4).
func (h *Handler) uploadURL(v string, st *reqState) string {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || st.inHost == "" {
		return v
	}
	base := h.upstream
	if h.vertex != nil && strings.EqualFold(u.Host, h.vertex.Host) {
		base = h.vertex
	} else if !strings.EqualFold(u.Host, h.upstream.Host) {
		return v
	}
	p := u.Path
	if prefix := strings.TrimSuffix(base.Path, "/"); prefix != "" {
		if rest, ok := strings.CutPrefix(p, prefix); ok && (rest == "" || rest[0] == '/') {
			p = rest
		}
	}
	if pub := h.opts.PublicURL; pub != nil && pub.Host != "" {
		u.Scheme, u.Host, u.Path, u.RawPath = pub.Scheme, pub.Host, strings.TrimSuffix(pub.Path, "/")+p, ""
		return u.String()
	}
	u.Scheme, u.Host, u.Path, u.RawPath = st.inScheme, st.inHost, h.basePath+p, ""
	return u.String()
}

// errorHandler is the ReverseProxy ErrorHandler: the upstream could not be
// reached or the request body could not be read.
func (h *Handler) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	st := stateFrom(r.Context())
	if st != nil && st.body != nil {
		if berr := st.body.error(); berr != nil {
			err = berr
		}
	}
	h.fail(w, r, err)
}

// fail answers a request the proxy could not forward.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	pe := statusError(r.Context(), err)
	st := stateFrom(r.Context())
	if st != nil && st.body != nil && bodyTimedOut(st.body.error()) {
		pe = errBodyIdle
	}
	if st != nil {
		st.pe, st.err = &pe, safeError(err)
	}
	if pe.code == StatusClientClosedRequest {
		// Writing nothing would let the server answer 200 with an empty
		// body to a client that half-closed but still listens: drop the
		// connection instead (finish records the 499).
		panic(http.ErrAbortHandler)
	}
	writeError(w, pe)
}

// finish records metrics, the access log and the exchange. It runs
// deferred, also when the ReverseProxy aborts with http.ErrAbortHandler
// after the headers were sent; the panic is re-raised so that the server
// drops the connection and the client sees a cut, never a second response.
func (h *Handler) finish(st *reqState, rw *responseWriter, r *http.Request) {
	p := recover()
	aborted := p != nil
	dur := time.Since(st.start)
	if !aborted {
		// The server sends a buffered response only when the handler
		// returns; flush first so the bookkeeping below adds no latency.
		http.NewResponseController(rw.ResponseWriter).Flush() //nolint:errcheck // client gone: nothing to do
	}
	route := string(st.info.route)

	code := rw.code
	if code == 0 {
		code = http.StatusOK
	}
	clientGone := r.Context().Err() != nil || rw.writeErr != nil
	upKind := ""
	switch {
	case st.pe != nil:
		code, upKind = st.pe.code, st.pe.kind
	case aborted && clientGone:
		code = StatusClientClosedRequest
	case aborted:
		upKind = metrics.UpstreamAborted
	}
	if code == StatusClientClosedRequest {
		h.m.ClientCancels.Inc()
	}
	if upKind != "" {
		h.m.UpstreamErrors.WithLabelValues(upKind).Inc()
	}
	model := h.modelLabel(st.info.model)
	h.hot.request(st.info.route, model, code, st.stream).Inc()
	rh := h.hot.forRoute(st.info.route)
	rh.requestDuration(st.stream).Observe(dur.Seconds())
	if !st.upstreamStart.IsZero() {
		// The client's upload is not the proxy's time: reading the body is
		// left out, as it is for bodies streamed through.
		overhead := st.upstreamStart.Sub(st.start) - st.readDur
		rh.proxyOverhead().Observe(max(overhead, 0).Seconds())
		if st.upstreamDur > 0 {
			rh.upstreamDuration().Observe(st.upstreamDur.Seconds())
		}
	}
	if st.stream && !rw.firstByte.IsZero() {
		rh.timeToFirstByte().Observe(rw.firstByte.Sub(st.start).Seconds())
	}
	var received, sent int64
	if st.body != nil {
		received = st.body.n.Load()
	}
	sent = st.sent
	if st.orig == nil {
		sent = received // streamed through
	}
	rh.requestBytes(metrics.StageReceived).Add(float64(received))
	rh.requestBytes(metrics.StageSent).Add(float64(sent))
	rh.responseBytesOf().Add(float64(rw.bytes))
	h.hot.client(st.sdk).Inc()
	if st.mode != "" && (st.outcome != "" || st.mode == metrics.ModeOff || st.mode == metrics.ModeDisabled) {
		outcome := st.outcome
		if outcome == "" {
			outcome = metrics.OutcomeSkipped
		}
		h.hot.rewrite(st.mode, outcome).Inc()
	}

	var t *tap
	var usage *Usage
	priceModel, ml := st.info.model, model
	if st.tb != nil {
		t = st.tb.t
		if st.tb.eof || !aborted {
			t.finish()
		} else {
			t.release() // the budget's share, also of a response cut short
		}
		if h.priceByVersion(st.info.model, t.modelVersion) {
			priceModel = normalizeModel(t.modelVersion)
			ml = h.modelLabel(priceModel)
		}
		if t.usage != nil {
			usage = t.usage
			u := t.usage
			for _, kv := range [...]struct {
				kind string
				n    int64
			}{
				{metrics.TokensPrompt, u.PromptTokens},
				{metrics.TokensCached, u.CachedTokens},
				{metrics.TokensCandidates, u.CandidatesTokens},
				{metrics.TokensThoughts, u.ThoughtsTokens},
				{metrics.TokensToolUse, u.ToolUsePromptTokens},
			} {
				if kv.n > 0 {
					h.hot.usageTokens(ml, kv.kind).Add(float64(kv.n))
				}
			}
			h.sav.spend(ml, priceModel, u)
		}
	}
	removed := h.recordRewrite(st, r, ml, priceModel, usage)
	led := h.ledger.settle(st, ml, priceModel, usage, removed)
	h.contextCacheSettle(st, usage)

	level := slog.LevelInfo
	if code >= 500 && (st.pe != nil || aborted) {
		level = slog.LevelWarn
	}
	if h.log.Enabled(r.Context(), level) {
		// Sized for every attribute below, so that appending never moves
		// the slice to the heap.
		var buf [17]slog.Attr
		attrs := append(buf[:0],
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.String("model", st.info.model),
			slog.Int("status", code),
			slog.Int("upstream_status", st.upStatus),
			slog.Duration("duration", dur),
			slog.Int64("bytes_in", received),
			slog.Int64("bytes_sent", sent),
			slog.Int64("bytes_out", rw.bytes),
			slog.Bool("stream", st.stream),
			slog.String("client_sdk", string(st.sdk)),
			slog.String("tenant", shortTenant(st.tenant)),
		)
		if st.repHeader != "" {
			attrs = append(attrs, slog.String("rewrite", st.repHeader))
		}
		if st.fallback {
			attrs = append(attrs, slog.Bool("rewrite_fallback", true))
		}
		if st.rwErr != "" {
			attrs = append(attrs, slog.String("rewrite_error", st.rwErr))
		}
		if st.rwSkip != "" {
			attrs = append(attrs, slog.String("rewrite_skipped", st.rwSkip))
		}
		if st.err != nil {
			attrs = append(attrs, slog.String("error", st.err.Error()))
		}
		attrs = st.ix.appendLog(attrs)
		if aborted && !clientGone {
			attrs = append(attrs, slog.String("error", "upstream response aborted"))
		}
		logAccess(r.Context(), h.log.Handler(), time.Now(), level, "request", attrs)
	}

	if h.opts.OnExchange != nil && st.info.route.isGenerate() && st.upStatus != 0 {
		ex := Exchange{
			Tenant:       st.tenant,
			Route:        st.info.route,
			Model:        st.info.model,
			Stream:       st.stream,
			Status:       code,
			Complete:     !aborted && st.tb != nil && st.tb.eof,
			Request:      st.orig,
			Report:       st.report,
			ReportHeader: st.repHeader,
			RewriteMode:  st.mode,
			Fallback:     st.fallback,
			Ledger:       led,
		}
		if t != nil {
			ex.Usage, ex.ModelVersion = t.usage, t.modelVersion
			ex.Text, ex.TextTruncated = t.text.String(), t.textTruncated
		}
		h.opts.OnExchange(ex)
	}
	if p != nil {
		if rw.code != 0 {
			resetConn(rw.ResponseWriter)
		}
		panic(p)
	}
}

// resetConn aborts the client connection of a response already started
// with a TCP reset, after flushing what was written. net/http would close
// it cleanly, and to an HTTP/1.0 client (or any response without
// Content-Length or chunking) a clean close says the body is complete
// (issue 16 item 1). Where the connection cannot be taken over (HTTP/2),
// the re-raised http.ErrAbortHandler resets the stream instead.
func resetConn(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	rc.Flush() //nolint:errcheck // client gone: the reset below is all that is left
	conn, _, err := rc.Hijack()
	if err != nil {
		return
	}
	c := conn
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn() // TLS: reset the TCP connection under it
	}
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		l.SetLinger(0) //nolint:errcheck // then Close is a plain close
	}
	c.Close()
}

// recordRewrite counts what a rewrite saved, only when the body it
// produced is what the upstream accepted: a fallback sent the original
// body, and a rejected or failed request saved nobody anything.
func (h *Handler) recordRewrite(st *reqState, r *http.Request, label, model string, usage *Usage) float64 {
	if st.mode != metrics.ModeOn || st.report == nil || st.fallback || st.upStatus < 200 || st.upStatus > 299 {
		return 0
	}
	after := len(st.orig)
	if st.rewritten {
		after = len(st.sentBody)
	}
	h.hot.rewriteBytes(metrics.StageBefore).Add(float64(len(st.orig)))
	h.hot.rewriteBytes(metrics.StageAfter).Add(float64(after))
	if !st.rewritten {
		return 0
	}
	for rule, s := range st.report.ByRule() {
		if s.BytesRemoved > 0 {
			h.m.RewriteSavedBytes.WithLabelValues(string(rule)).Add(float64(s.BytesRemoved))
		}
		h.m.RewriteReplacements.WithLabelValues(string(rule)).Add(float64(s.Count))
	}
	for src, s := range st.report.BySource() {
		if s.BytesRemoved > 0 {
			h.m.RewriteSourceSavedBytes.WithLabelValues(string(src)).Add(float64(s.BytesRemoved))
		}
		h.m.RewriteSourceReplacements.WithLabelValues(string(src)).Add(float64(s.Count))
	}
	job := &savingsJob{label: label, model: model, report: st.report, usage: usage}
	if usage != nil && h.sav.sampled() {
		job.sample = h.newSample(st, r)
		if job.sample != nil && st.bodyBuf != nil {
			st.bodyBuf.keep = true // the sample keeps st.orig after the request
		}
	}
	return h.sav.record(job)
}

// transport wraps the upstream RoundTripper: it times the upstream call and
// retries a rewritten request once with the original body when the
// upstream rejects it in a way the rewrite may cause (DESIGN §3 fail-open;
// retryOriginal). It runs before any byte of the
// response reaches the client, so the client only sees the second answer.
type transport struct {
	h    *Handler
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateFrom(req.Context())
	if st == nil {
		return t.base.RoundTrip(req)
	}
	now := time.Now()
	if st.upstreamStart.IsZero() {
		st.upstreamStart = now
	}
	if res, ok, err := t.h.ix.roundTrip(t.base, req, st); ok {
		st.upstreamDur = time.Since(now)
		return res, err
	}
	req = t.h.contextCacheRequest(req, st)
	if req.ContentLength > 0 && st.orig != nil {
		st.sent += req.ContentLength
	}
	res, err := t.base.RoundTrip(req)
	if err == nil {
		t.h.hot.upstreamResponse(st.info.route, res.StatusCode).Inc()
	}
	if err == nil && st.cc != nil {
		res, err = t.h.contextCacheFallback(t.base, req, res, st)
	}
	// At most two upstream calls: after an interaction's fallback, or after
	// the context cache fallback sent st.orig, there is no third.
	if err == nil && st.rewritten && !st.fallback && (st.ix == nil || st.ix.fallback == "") && (res.StatusCode == http.StatusBadRequest || res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500) && t.h.retryOriginal(res) {
		io.CopyN(io.Discard, res.Body, 64<<10) //nolint:errcheck // only to reuse the connection
		res.Body.Close()
		st.fallback = true
		t.h.m.RewriteFallbacks.Inc()
		retry := req.Clone(req.Context())
		retry.Body = st.requestBody(st.orig)
		retry.ContentLength = int64(len(st.orig))
		retry.GetBody = nil
		st.sent += retry.ContentLength
		res, err = t.base.RoundTrip(retry)
		if err == nil {
			t.h.hot.upstreamResponse(st.info.route, res.StatusCode).Inc()
		}
	}
	st.upstreamDur = time.Since(now)
	return res, err
}

// maxRejectionBody is the most of a 400 answer read to learn its status.
const maxRejectionBody = 64 << 10

// retryOriginal reports whether a rewritten request's error answer res
// (400 or 5xx) is one the rewrite may have caused, so that the original
// body is worth a retry: 400 INVALID_ARGUMENT and 500 (issue 16 item 6).
// 429, 503 and 504 say the upstream is overloaded or slow: a retry with the
// larger original body would only add to it, and the client is the one to
// honour Retry-After. Each case is counted. To read a 400's status it reads
// up to maxRejectionBody of the body; when no retry follows, res.Body still
// gives the client every byte.
func (h *Handler) retryOriginal(res *http.Response) bool {
	c := metrics.RejectionOther
	switch res.StatusCode {
	case http.StatusBadRequest:
		c = metrics.RejectionBadRequest
		head, err := io.ReadAll(io.LimitReader(res.Body, maxRejectionBody+1))
		res.Body = readCloser{io.MultiReader(bytes.NewReader(head), res.Body), res.Body}
		var e struct {
			Error struct {
				Status string `json:"status"`
			} `json:"error"`
		}
		if err == nil && len(head) <= maxRejectionBody && json.Unmarshal(head, &e) == nil && e.Error.Status == "INVALID_ARGUMENT" {
			c = metrics.RejectionInvalidArgument
		}
	case http.StatusInternalServerError:
		c = metrics.RejectionInternal
	case http.StatusTooManyRequests:
		c = metrics.RejectionRateLimited
	case http.StatusServiceUnavailable:
		c = metrics.RejectionUnavailable
	case http.StatusGatewayTimeout:
		c = metrics.RejectionTimeout
	}
	h.m.RewriteRejections.WithLabelValues(c).Inc()
	return c == metrics.RejectionInvalidArgument || c == metrics.RejectionInternal
}

// countingBody counts the request bytes read and remembers a read error
// (such as *http.MaxBytesError). The transport reads it on its own
// goroutine, hence the atomics.
//
// It also keeps the upstream connection safe from a race in net/http: when
// the ReverseProxy writes the response headers, the server drains and
// closes the request body, while the transport's write loop may still make
// one last read to confirm EOF. That read would fail with
// http.ErrBodyReadAfterClose, the transport would close the upstream
// connection, and the response being copied would be cut short
// (DESIGN §4, TestLargeBodiesNoCut). So countingBody reports EOF by itself
// once Content-Length bytes were read, and repeats the first EOF or error
// instead of reading again.
type countingBody struct {
	rc   io.ReadCloser
	size int64 // Content-Length; -1 when unknown
	n    atomic.Int64
	done error // sticky io.EOF or error; only the reading goroutine uses it
	err  atomic.Pointer[error]

	// idle, when positive, bounds the wait for each read of the client's
	// body through deadline (the connection's read deadline): a client that
	// sends headers and then stalls cannot hold the request forever. The
	// deadline is cleared once the body ends, so that it can never cut the
	// response that follows.
	idle     time.Duration
	deadline readDeadliner
	armed    time.Time // when the deadline was last set
}

// idleRearm is the share of the idle timeout that must have passed since
// the deadline was set before a read sets it again: setting a deadline
// updates a runtime timer, and a body read in a few reads right after its
// headers need not pay that once per read. A client still has at least
// 63/64 of the idle timeout after each read.
const idleRearm = 64

// readDeadliner is what sets a connection's read deadline: the server's
// ResponseWriter, or an http.ResponseController on a wrapped one.
type readDeadliner interface {
	SetReadDeadline(time.Time) error
}

// startIdle arms the body's idle deadline on w's connection; it reports
// whether the connection supports one. The server's own ResponseWriter
// sets deadlines itself: a ResponseController (and a method value of it)
// would be two allocations per request.
func (b *countingBody) startIdle(idle time.Duration, w http.ResponseWriter) bool {
	if idle <= 0 {
		return false
	}
	d, ok := w.(readDeadliner)
	if !ok {
		d = http.NewResponseController(w)
	}
	now := time.Now()
	if d.SetReadDeadline(now.Add(idle)) != nil {
		return false
	}
	b.idle, b.deadline, b.armed = idle, d, now
	return true
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.done != nil {
		return 0, b.done
	}
	if b.deadline != nil {
		// Measured from each read (within idle/idleRearm), so that time
		// the proxy spends writing to a slow upstream between reads never
		// counts against the client.
		if now := time.Now(); now.Sub(b.armed) >= b.idle/idleRearm {
			b.deadline.SetReadDeadline(now.Add(b.idle)) //nolint:errcheck // armed once already
			b.armed = now
		}
	}
	n, err := b.read(p)
	if b.deadline != nil {
		switch {
		case err == io.EOF:
			b.deadline.SetReadDeadline(time.Time{}) //nolint:errcheck // best effort: the body is over
			b.deadline = nil
		case err != nil:
			// Leave an expired deadline in place: the server drains the
			// rest of an unread body before it writes the response, and
			// without a deadline it would wait for the stalled client.
			b.deadline = nil
		}
	}
	return n, err
}

// bodyTimedOut reports whether err is the body's idle deadline expiring.
func bodyTimedOut(err error) bool {
	var ne net.Error
	return err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()))
}

func (b *countingBody) read(p []byte) (int, error) {
	if b.size >= 0 {
		left := b.size - b.n.Load()
		if left <= 0 {
			b.done = io.EOF
			return 0, io.EOF
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := b.rc.Read(p)
	total := b.n.Add(int64(n))
	if err == nil && b.size >= 0 && total == b.size {
		err = io.EOF
	}
	if err != nil {
		b.done = err
		if err != io.EOF {
			// A copy: taking err's address would move it to the heap on
			// every read, not only on this path.
			e := err
			b.err.CompareAndSwap(nil, &e)
		}
	}
	return n, err
}

func (b *countingBody) Close() error { return b.rc.Close() }

func (b *countingBody) error() error {
	if p := b.err.Load(); p != nil {
		return *p
	}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// responseWriter records what the proxy wrote to the client. It keeps
// Unwrap so that http.ResponseController (which the ReverseProxy uses to
// flush and hijack) reaches the server's writer.
type responseWriter struct {
	http.ResponseWriter
	code      int
	bytes     int64
	firstByte time.Time
	writeErr  error
}

func (w *responseWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code) // 1xx: more headers follow
		return
	}
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.firstByte.IsZero() && len(p) > 0 {
		w.firstByte = time.Now()
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	if err != nil && w.writeErr == nil {
		w.writeErr = err
	}
	return n, err
}

// Flush implements http.Flusher.
func (w *responseWriter) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // a failed flush shows up as a failed write
}

// Unwrap returns the underlying ResponseWriter for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
