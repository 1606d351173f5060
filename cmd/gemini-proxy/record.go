package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// recordQueue is the number of recorded lines waiting for the writer; when
// it is full, requests are not recorded rather than delayed.
const recordQueue = 256

// recorder writes generate requests as JSON lines ({"path", "body"}) for
// `gemini-proxy bench --replay`. It never records headers (credentials
// live there) and removes the key query parameter from the path. Safe for
// concurrent use.
type recorder struct {
	f       *os.File
	maxBody int64
	lines   chan []byte
	done    chan struct{}
	logger  *slog.Logger
	once    sync.Once
	dropped atomic.Int64
}

// newRecorder opens path for appending, creating it readable and writable
// by its owner only; an existing file with wider permissions is narrowed to
// 0600 before anything is written. Bodies larger than maxBody are skipped.
func newRecorder(path string, maxBody int64, logger *slog.Logger) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("record file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("record file: %w", err)
	}
	if st.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("record file: narrowing permissions to 0600: %w", err)
		}
	}
	r := &recorder{f: f, maxBody: maxBody, lines: make(chan []byte, recordQueue), done: make(chan struct{}), logger: logger}
	go r.write()
	return r, nil
}

func (r *recorder) write() {
	defer close(r.done)
	for line := range r.lines {
		if _, err := r.f.Write(line); err != nil {
			r.logger.Error("record write failed", "error", err)
		}
	}
}

// Close flushes the queued lines and closes the file.
func (r *recorder) Close() error {
	r.once.Do(func() { close(r.lines) })
	<-r.done
	if n := r.dropped.Load(); n > 0 {
		r.logger.Warn("record queue full, requests not recorded", "dropped", n)
	}
	return r.f.Close()
}

// wrap returns h with recording of generateContent and
// streamGenerateContent requests in front of it.
func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && isGeneratePath(req.URL.Path) && req.Body != nil && req.ContentLength <= r.maxBody {
			r.capture(req)
		}
		h.ServeHTTP(w, req)
	})
}

func isGeneratePath(p string) bool {
	return strings.HasSuffix(p, ":generateContent") || strings.HasSuffix(p, ":streamGenerateContent")
}

// capture reads the body (at most maxBody+1 bytes), gives the request an
// equivalent body back, and queues a line unless the body is too large or
// not JSON, or the queue is full.
func (r *recorder) capture(req *http.Request) {
	buf, err := io.ReadAll(io.LimitReader(req.Body, r.maxBody+1))
	req.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
	if err != nil || int64(len(buf)) > r.maxBody {
		return
	}
	line, ok := recordLine(req, buf)
	if !ok {
		return
	}
	select {
	case r.lines <- line:
	default:
		r.dropped.Add(1) // never block the request on the disk
	}
}

// recordedQuery lists the only query parameters a recorded line keeps: a
// query may carry credentials (key, access_token) and nothing else in it
// matters to a replay.
var recordedQuery = []string{"alt", "$alt"}

// recordLine formats one line: the path with only the recordedQuery
// parameters, and the body compacted onto one line.
func recordLine(req *http.Request, body []byte) ([]byte, bool) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		return nil, false
	}
	all := req.URL.Query()
	q := url.Values{}
	for _, name := range recordedQuery {
		if v, ok := all[name]; ok {
			q[name] = v
		}
	}
	path := req.URL.Path
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	p, _ := json.Marshal(path)
	line := make([]byte, 0, len(p)+compact.Len()+20)
	line = append(line, `{"path":`...)
	line = append(line, p...)
	line = append(line, `,"body":`...)
	line = append(line, compact.Bytes()...)
	line = append(line, "}\n"...)
	return line, true
}
