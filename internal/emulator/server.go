package emulator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxBodyBytes is the largest request body accepted; larger bodies get 413.
const MaxBodyBytes = 100 << 20

// Server is the emulator. It is an http.Handler and safe for concurrent use.
type Server struct {
	opts   Options
	logger *slog.Logger
	now    func() time.Time
	models map[string]bool
	order  []string

	mu           sync.Mutex
	seq          uint64
	received     []Received
	fault        Fault
	faultLeft    int
	implicit     map[string][]prefixEntry // by key id
	implicitKeys []string                 // LRU order of implicit
	caches       map[string]*cachedContent
	// expiredCaches maps ids of expired caches to the key that made them.
	expiredCaches map[string]string
	files         map[string]*storedFile
	uploads       map[string]*uploadSession
	interactions  map[string]*interaction
}

// New returns a Server configured by opts.
func New(opts Options) *Server {
	s := &Server{opts: opts, logger: opts.Logger, now: opts.Now}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.CacheMinTokens == 0 {
		s.opts.CacheMinTokens = 1024
	}
	if s.opts.StreamChunkBytes <= 0 {
		s.opts.StreamChunkBytes = 64
	}
	ids := opts.Models
	if ids == nil {
		ids = DefaultModels
	}
	s.models = map[string]bool{}
	for _, m := range ids {
		m = strings.TrimPrefix(m, "models/")
		if !s.models[m] {
			s.models[m] = true
			s.order = append(s.order, m)
		}
	}
	s.Reset()
	return s
}

// Received returns a copy of every generation request received (generate,
// stream, countTokens, interactions create), in order.
func (s *Server) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.received)
}

// Reset forgets received requests, implicit-cache history, caches, files,
// uploads, interactions and any fault.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received = nil
	s.fault, s.faultLeft = Fault{}, 0
	s.implicit = map[string][]prefixEntry{}
	s.implicitKeys = nil
	s.caches = map[string]*cachedContent{}
	s.expiredCaches = map[string]string{}
	s.files = map[string]*storedFile{}
	s.uploads = map[string]*uploadSession{}
	s.interactions = map[string]*interaction{}
}

// SetFault installs f for subsequent requests; the zero Fault clears it.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault, s.faultLeft = f, f.Times
}

func (s *Server) record(rec Received) {
	rec.Time = s.now()
	s.mu.Lock()
	s.received = append(s.received, rec)
	s.mu.Unlock()
}

// nextID returns a deterministic, unique id for this server.
func (s *Server) nextID(prefix string, n int) string {
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", prefix, seq)))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[int(sum[i%len(sum)]+byte(i/len(sum)))%len(alphabet)]
	}
	return string(b)
}

// call is one request being served.
type call struct {
	w       http.ResponseWriter
	r       *http.Request
	version string // v1beta, v1, v1alpha, v1beta1
	rest    []string
	vertex  bool
	keyID   string
	fault   Fault
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	sw := &statusWriter{ResponseWriter: w, start: start, now: s.now}
	googleHeaders(w.Header())
	defer func() {
		s.logger.Debug("emulator request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", s.now().Sub(start))
	}()
	c := &call{w: sw, r: r}
	f, ok := s.takeFault(r)
	if !ok {
		writeError(sw, r, &apiError{Code: 400, Status: "INVALID_ARGUMENT", Message: "invalid X-Emulator-Fault header"}, modeUnary)
		return
	}
	c.fault = f
	if f.HeaderDelay > 0 {
		if !sleepCtx(r.Context(), f.HeaderDelay) {
			return
		}
	}
	if f.Status != 0 {
		writeError(sw, r, faultError(f), modeFor(r))
		return
	}
	if f.DisconnectAfterChunks > 0 && modeFor(r) == modeUnary {
		c.w = &cutWriter{statusWriter: sw}
	}
	s.route(c)
}

// modeFor guesses the framing of a request from its URL (used for faults).
func modeFor(r *http.Request) streamMode {
	if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		return modeUnary
	}
	if r.URL.Query().Get("alt") == "sse" {
		return modeSSE
	}
	return modeArray
}

func faultError(f Fault) *apiError {
	msg := f.Message
	if msg == "" {
		msg = defaultMessages[f.Status]
	}
	if msg == "" {
		msg = http.StatusText(f.Status)
	}
	e := newError(f.Status, msg)
	if f.Status == 429 {
		e.Details = append(e.Details, map[string]any{
			"@type":      "type.googleapis.com/google.rpc.QuotaFailure",
			"violations": []any{map[string]any{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}},
		})
	}
	if f.RetryAfter != "" {
		e.header = http.Header{"Retry-After": {f.RetryAfter}}
		secs := strings.TrimSuffix(f.RetryAfter, "s")
		e.Details = append(e.Details, map[string]any{
			"@type":      "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": secs + "s",
		})
	}
	return e
}

// takeFault returns the fault for r: the X-Emulator-Fault header wins over
// the installed fault. ok is false for a malformed header.
func (s *Server) takeFault(r *http.Request) (Fault, bool) {
	if h := r.Header.Get("X-Emulator-Fault"); h != "" {
		f, err := ParseFault(h)
		return f, err == nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fault
	if f.Status == 0 && f.HeaderDelay == 0 && f.ChunkDelay == 0 && f.DisconnectAfterChunks == 0 {
		return Fault{}, true
	}
	if f.Match != nil && !f.Match(r) {
		return Fault{}, true
	}
	if f.Times > 0 {
		if s.faultLeft <= 0 {
			return Fault{}, true
		}
		s.faultLeft--
	}
	return f, true
}

// ParseFault parses an X-Emulator-Fault header value: comma- or
// semicolon-separated key=value pairs among status, retry-after, message,
// header-delay, chunk-delay and disconnect-after.
func ParseFault(h string) (Fault, error) {
	var f Fault
	for _, kv := range strings.FieldsFunc(h, func(r rune) bool { return r == ',' || r == ';' }) {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Fault{}, fmt.Errorf("fault %q: missing '='", kv)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "status":
			f.Status, err = strconv.Atoi(v)
			if err == nil && (f.Status < 400 || f.Status > 599) {
				err = errors.New("status must be 4xx or 5xx")
			}
		case "retry-after":
			f.RetryAfter = v
		case "message":
			f.Message = v
		case "header-delay":
			f.HeaderDelay, err = time.ParseDuration(v)
		case "chunk-delay":
			f.ChunkDelay, err = time.ParseDuration(v)
		case "disconnect-after":
			f.DisconnectAfterChunks, err = strconv.Atoi(v)
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return Fault{}, fmt.Errorf("fault %q: %w", kv, err)
		}
	}
	return f, nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// googleHeaders sets the headers every recorded Gemini API answer carries
// (shared/gemini-recordings, llm-gemini cassettes): three Vary lines, the
// frontend's Server name and the security headers. Server-Timing is set
// when the status is written.
func googleHeaders(h http.Header) {
	h["Vary"] = []string{"Origin", "X-Origin", "Referer"}
	h.Set("Server", "scaffolding on HTTPServer2")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("X-XSS-Protection", "0")
}

// statusWriter remembers the status code for logging and sets
// Server-Timing ("gfet4t7; dur=<ms>", by the server's clock) when the
// status is written.
type statusWriter struct {
	http.ResponseWriter
	status int
	start  time.Time
	now    func() time.Time
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.now != nil && w.Header().Get("Server-Timing") == "" {
			w.Header().Set("Server-Timing", fmt.Sprintf("gfet4t7; dur=%d", w.now().Sub(w.start).Milliseconds()))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap supports http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// cutWriter writes half of the first body write and aborts the connection.
type cutWriter struct{ *statusWriter }

func (w *cutWriter) Write(b []byte) (int, error) {
	w.Header().Del("Content-Length")
	_, _ = w.statusWriter.Write(b[:len(b)/2])
	w.statusWriter.Flush()
	panic(http.ErrAbortHandler)
}

var versions = map[string]bool{"v1beta": true, "v1": true, "v1alpha": true}

// route dispatches on the URL path. An optional prefix before the version
// segment is ignored.
func (s *Server) route(c *call) {
	segs := strings.Split(strings.Trim(c.r.URL.Path, "/"), "/")
	i := slices.IndexFunc(segs, func(p string) bool { return versions[p] || p == "v1beta1" || p == "upload" })
	if i < 0 {
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
		return
	}
	segs = segs[i:]
	if segs[0] == "upload" {
		if len(segs) == 3 && versions[segs[1]] && segs[2] == "files" && c.r.Method == http.MethodPost {
			c.version = segs[1]
			s.upload(c)
			return
		}
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
		return
	}
	c.version, c.rest = segs[0], segs[1:]
	if len(c.rest) > 0 && (c.rest[0] == "projects" || c.rest[0] == "publishers") && (c.version == "v1beta1" || c.version == "v1") {
		c.vertex = true
		s.routeVertex(c)
		return
	}
	if c.version == "v1beta1" || len(c.rest) == 0 {
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
		return
	}
	if !s.auth(c) {
		return
	}
	rest, m := c.rest, c.r.Method
	switch {
	case rest[0] == "models" && len(rest) == 1 && m == http.MethodGet:
		s.listModels(c)
	case rest[0] == "models" && len(rest) == 2:
		name, method, hasMethod := strings.Cut(rest[1], ":")
		switch {
		case !hasMethod && m == http.MethodGet:
			s.getModel(c, name)
		case hasMethod && m == http.MethodPost:
			s.modelMethod(c, name, method)
		default:
			writeError(c.w, c.r, errMethodNotFound(), modeUnary)
		}
	case rest[0] == "tunedModels":
		writeError(c.w, c.r, newError(404, fmt.Sprintf("Tuned model %s not found.", strings.Join(rest, "/"))), modeUnary)
	case rest[0] == "cachedContents":
		s.routeCaches(c)
	case rest[0] == "files":
		s.routeFiles(c)
	case rest[0] == "interactions":
		s.routeInteractions(c, rest[1:])
	default:
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
	}
}

// routeVertex serves the Vertex AI shapes
// {v}/projects/{p}/locations/{l}/publishers/google/models/{m}:{method},
// {v}/publishers/google/models/{m}[:{method}] (express mode) and
// {v}/projects/{p}/locations/{l}/interactions[...].
func (s *Server) routeVertex(c *call) {
	rest := c.rest
	if rest[0] == "projects" {
		if len(rest) < 5 || rest[2] != "locations" {
			writeError(c.w, c.r, errMethodNotFound(), modeUnary)
			return
		}
		if rest[4] == "interactions" {
			if !s.auth(c) {
				return
			}
			s.routeInteractions(c, rest[5:])
			return
		}
		rest = rest[4:]
	}
	if len(rest) != 4 || rest[0] != "publishers" || rest[1] != "google" || rest[2] != "models" {
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
		return
	}
	if !s.auth(c) {
		return
	}
	name, method, hasMethod := strings.Cut(rest[3], ":")
	switch {
	case !hasMethod && c.r.Method == http.MethodGet:
		s.getModel(c, name)
	case hasMethod && c.r.Method == http.MethodPost:
		s.modelMethod(c, name, method)
	default:
		writeError(c.w, c.r, errMethodNotFound(), modeUnary)
	}
}

// auth checks the caller's credential and sets c.keyID.
func (s *Server) auth(c *call) bool {
	key := c.r.Header.Get("X-Goog-Api-Key")
	if key == "" {
		key = c.r.URL.Query().Get("key")
	}
	bearer := false
	if key == "" && c.vertex {
		if tok, ok := strings.CutPrefix(c.r.Header.Get("Authorization"), "Bearer "); ok {
			key, bearer = strings.TrimSpace(tok), true
		}
	}
	mode := modeFor(c.r)
	if key == "" {
		if c.vertex {
			writeError(c.w, c.r, errUnauthenticatedVertex(), mode)
		} else {
			writeError(c.w, c.r, errMissingKey(), mode)
		}
		return false
	}
	if len(s.opts.ValidKeys) > 0 && !slices.Contains(s.opts.ValidKeys, key) {
		if bearer {
			writeError(c.w, c.r, newError(401, "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."), mode)
		} else {
			writeError(c.w, c.r, errInvalidKey(), mode)
		}
		return false
	}
	c.keyID = KeyID(key)
	return true
}

// KeyID is the caller id the emulator derives from an API key: the first 12
// hex digits of its SHA-256.
func KeyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// readAll reads the request body, limited to MaxBodyBytes.
func readAll(c *call) ([]byte, *apiError) {
	raw, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newError(413, fmt.Sprintf("Request payload size exceeds the limit: %d bytes.", MaxBodyBytes))
		}
		return nil, errInvalid("Failed to read request body.")
	}
	return raw, nil
}

func decodeJSON(raw []byte) (any, *apiError) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errBadRequest("", "Invalid JSON payload received. Unexpected token.\n"+truncate(string(raw), 40)+"\n^")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errBadRequest("", "Invalid JSON payload received. Unexpected token after the JSON value.")
	}
	return v, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *Server) validator(c *call) validator {
	return validator{vertex: c.vertex, strict: !s.opts.Lenient}
}

func (s *Server) timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}
