package proxy

// The access log's own encoder (issue 17 item 5). slog's text and JSON
// handlers spend most of a request's logging time on machinery the access
// line does not need (a handle state with two pooled buffers, a recover per
// value, a Record whose attributes past the fifth go to the heap). When the
// handler is one NewLogHandler built, the line is appended here straight
// into a pooled buffer, byte for byte as the wrapped slog handler would
// write it: the same keys and order, quoting and escaping, time format and
// level, one Write per line. Anything this encoder does not reproduce
// exactly (a LogValuer, a group, an empty key, a value of another type, an
// out-of-range year in JSON) makes it give up and hand the record to slog,
// so what a log pipeline receives never depends on which path wrote it
// (TestAccessLogMatchesSlog, FuzzAccessLogMatchesSlog).

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// NewLogHandler returns slog's JSON handler (json true) or text handler
// writing to w with opts, so that a Handler logging through it (directly,
// not through WithAttrs or WithGroup) formats its access-log lines itself,
// identical to the handler's and about ten times cheaper. Options the
// encoder does not reproduce (ReplaceAttr, AddSource) give the plain slog
// handler. Writes to w are serialized. Safe for concurrent use.
func NewLogHandler(w io.Writer, json bool, opts *slog.HandlerOptions) slog.Handler {
	lw := &lockedWriter{w: w}
	var inner slog.Handler
	if json {
		inner = slog.NewJSONHandler(lw, opts)
	} else {
		inner = slog.NewTextHandler(lw, opts)
	}
	if opts != nil && (opts.ReplaceAttr != nil || opts.AddSource) {
		return inner
	}
	return &logHandler{Handler: inner, w: lw, json: json}
}

// logHandler is a slog handler of NewLogHandler whose lines the access log
// may write itself. Its handlers derived by WithAttrs and WithGroup are
// slog's own, so that the encoder never has to reproduce them.
type logHandler struct {
	slog.Handler // *slog.JSONHandler or *slog.TextHandler on w
	w            *lockedWriter
	json         bool
}

// WithAttrs returns the wrapped handler's WithAttrs: slog formats the
// records of a derived handler.
func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler { return h.Handler.WithAttrs(as) }

// WithGroup returns the wrapped handler's WithGroup.
func (h *logHandler) WithGroup(name string) slog.Handler { return h.Handler.WithGroup(name) }

// lockedWriter serializes the Writes of the slog handler and of the
// encoder, as slog's handler does for its own: a line is one Write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// logBufs holds the encoder's line buffers; a line is a few hundred bytes.
var logBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxLogBuf is the largest buffer returned to logBufs, as slog's own.
const maxLogBuf = 16 << 10

// logAccess writes the record (t, level, msg, attrs) to hd: through the
// encoder when hd came from NewLogHandler and the record is one it
// reproduces, else through hd.Handle as Logger.LogAttrs does (without
// runtime.Callers: no handler of ours adds the source). The caller has
// checked that the level is enabled.
func logAccess(ctx context.Context, hd slog.Handler, t time.Time, level slog.Level, msg string, attrs []slog.Attr) {
	if lh, ok := hd.(*logHandler); ok {
		bp := logBufs.Get().(*[]byte)
		b, ok := appendRecord((*bp)[:0], lh.json, t, level, msg, attrs)
		if ok {
			lh.w.Write(b) //nolint:errcheck // as Logger.LogAttrs: nowhere to report it
		}
		if cap(b) <= maxLogBuf {
			*bp = b[:0]
			logBufs.Put(bp)
		}
		if ok {
			return
		}
	}
	rec := slog.NewRecord(t, level, msg, 0)
	rec.AddAttrs(attrs...)
	hd.Handle(ctx, rec) //nolint:errcheck // as above
}

// appendRecord appends the line slog's JSON (json) or text handler, with
// no options but Level, writes for the record, newline included. It
// reports false, with b in any state, when the record holds something it
// does not reproduce exactly.
func appendRecord(b []byte, json bool, t time.Time, level slog.Level, msg string, attrs []slog.Attr) ([]byte, bool) {
	e := logEnc{b: b, json: json}
	if json {
		e.b = append(e.b, '{')
	}
	if !t.IsZero() {
		t = t.Round(0) // as slog: strip the monotonic reading
		e.key(slog.TimeKey)
		if !e.time(t) {
			return e.b, false
		}
	}
	e.key(slog.LevelKey)
	e.str(level.String())
	e.key(slog.MessageKey)
	e.str(msg)
	for _, a := range attrs {
		if !e.attr(a) {
			return e.b, false
		}
	}
	if json {
		e.b = append(e.b, '}')
	}
	return append(e.b, '\n'), true
}

// logEnc is one line being encoded.
type logEnc struct {
	b    []byte
	json bool
	more bool // a key was written: the next one needs a separator
}

func (e *logEnc) key(k string) {
	if e.more {
		if e.json {
			e.b = append(e.b, ',')
		} else {
			e.b = append(e.b, ' ')
		}
	}
	e.more = true
	e.str(k)
	if e.json {
		e.b = append(e.b, ':')
	} else {
		e.b = append(e.b, '=')
	}
}

// str appends s as slog's handleState.appendString.
func (e *logEnc) str(s string) {
	switch {
	case e.json:
		e.b = append(e.b, '"')
		e.b = appendEscapedJSON(e.b, s)
		e.b = append(e.b, '"')
	default:
		e.b = appendText(e.b, s)
	}
}

// appendText appends s as slog's text handler writes a string: as is, or
// quoted by strconv.Quote when needsQuoting. Printable ASCII, the access
// log's usual keys and values, takes a shorter way to the same bytes.
func appendText(b []byte, s string) []byte {
	i := 0
	for i < len(s) && textBare[s[i]] {
		i++
	}
	if i == len(s) && len(s) > 0 {
		return append(b, s...)
	}
	// Printable ASCII with a space, '=', '"' or '\\': Quote adds the
	// quotation marks and escapes '"' and '\\' only.
	quote, escape := len(s) == 0, false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c >= 0x7f: // Quote escapes or checks these
			if needsQuoting(s) {
				return strconv.AppendQuote(b, s)
			}
			return append(b, s...)
		case c == ' ' || c == '=':
			quote = true
		case c == '"':
			quote, escape = true, true
		case c == '\\':
			escape = true
		}
	}
	switch {
	case !quote:
		return append(b, s...)
	case escape:
		return strconv.AppendQuote(b, s)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// textBare reports, for a byte, whether it is printable ASCII that slog's
// text handler writes unquoted and strconv.Quote unescaped.
var textBare = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = c != '=' && c != '"' && c != '\\'
	}
	return t
}()

// time appends t as slog's handleState.appendTime; false for a JSON year
// slog reports as an error.
func (e *logEnc) time(t time.Time) bool {
	if !e.json {
		e.b = appendRFC3339Millis(e.b, t)
		return true
	}
	if y := t.Year(); y < 0 || y >= 10000 {
		return false
	}
	e.b = append(e.b, '"')
	e.b = t.AppendFormat(e.b, time.RFC3339Nano)
	e.b = append(e.b, '"')
	return true
}

// attr appends a as slog's handleState.appendAttr with no ReplaceAttr,
// or reports false.
func (e *logEnc) attr(a slog.Attr) bool {
	if a.Key == "" { // slog elides some, inlines groups
		return false
	}
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		e.key(a.Key)
		e.str(v.String())
	case slog.KindInt64:
		e.key(a.Key)
		e.b = strconv.AppendInt(e.b, v.Int64(), 10)
	case slog.KindUint64:
		e.key(a.Key)
		e.b = strconv.AppendUint(e.b, v.Uint64(), 10)
	case slog.KindBool:
		e.key(a.Key)
		e.b = strconv.AppendBool(e.b, v.Bool())
	case slog.KindDuration:
		e.key(a.Key)
		if e.json {
			e.b = strconv.AppendInt(e.b, int64(v.Duration()), 10) // as json.Marshal
		} else {
			e.b = append(e.b, v.Duration().String()...)
		}
	case slog.KindFloat64:
		f := v.Float64()
		if e.json && (math.IsInf(f, 0) || math.IsNaN(f)) {
			return false // json.Marshal's error
		}
		e.key(a.Key)
		if e.json {
			e.b = appendJSONFloat(e.b, f)
		} else {
			e.b = strconv.AppendFloat(e.b, f, 'g', -1, 64)
		}
	case slog.KindTime:
		e.key(a.Key)
		return e.time(v.Time().Round(0))
	case slog.KindAny:
		msg, ok := e.errorText(v.Any())
		if !ok {
			return false
		}
		e.key(a.Key)
		e.str(msg)
	default: // groups, LogValuers
		return false
	}
	return true
}

// errorText returns the text slog writes for an error value x: its Error,
// unless slog formats x otherwise (json.Marshaler in JSON; TextMarshaler,
// byte slice or fmt.Formatter in text) or Error panics.
func (e *logEnc) errorText(x any) (msg string, ok bool) {
	err, isErr := x.(error)
	if !isErr {
		return "", false
	}
	if e.json {
		if _, jm := x.(json.Marshaler); jm {
			return "", false
		}
	} else {
		if _, tm := x.(encoding.TextMarshaler); tm {
			return "", false
		}
		if _, f := x.(fmt.Formatter); f {
			return "", false
		}
		if t := reflect.TypeOf(x); t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return "", false
		}
	}
	defer func() {
		if recover() != nil {
			msg, ok = "", false // slog recovers its own way
		}
	}()
	return err.Error(), true
}

// The functions below are copies of log/slog's (go1.26 handler.go,
// json_handler.go, text_handler.go) and encoding/json's float encoding,
// which the tests hold the encoder to.

// appendRFC3339Millis is slog's text time: RFC 3339 with milliseconds.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	// Format according to time.RFC3339Nano since it is highly optimized,
	// but truncate it to use millisecond resolution.
	// Unfortunately, that format trims trailing 0s, so add 1/10 millisecond
	// to guarantee that there are exactly 4 digits after the period.
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b[:n+prefixLen], b[n+prefixLen+1:]...) // drop the 4th digit
	return b
}

// appendJSONFloat is encoding/json's float64 encoding (ES6 number to
// string), for a finite f.
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// needsQuoting reports whether slog's text handler quotes s.
func needsQuoting(s string) bool {
	if len(s) == 0 {
		return true
	}
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			// Quote anything except a backslash that would need quoting in a
			// JSON string, as well as space and '='
			if b != '\\' && (b == ' ' || b == '=' || !jsonSafe[b]) {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

// appendEscapedJSON is slog's appendEscapedJSONString: s escaped for JSON,
// HTML characters kept, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped, without the quotation marks.
func appendEscapedJSON(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\')
			switch b {
			case '\\', '"':
				buf = append(buf, b)
			case '\n':
				buf = append(buf, 'n')
			case '\r':
				buf = append(buf, 'r')
			case '\t':
				buf = append(buf, 't')
			default:
				// This encodes bytes < 0x20 except for \t, \n and \r.
				buf = append(buf, 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(buf, s[start:]...)
}

// jsonSafe reports, for an ASCII byte, whether a JSON string holds it
// unescaped: all but the control characters, '"' and '\\'
// (encoding/json's safeSet).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
