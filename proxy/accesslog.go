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
		e.b = appendJSONText(e.b, s)
		e.b = append(e.b, '"')
	default:
		e.b = appendText(e.b, s)
	}
}

// appendText appends s as slog's text handler writes a string: as is, or
// quoted by strconv.Quote when textQuoted. Printable ASCII, the access
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
			if textQuoted(s) {
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

// time appends t as slog's handleState.appendTime; false for a year
// outside 0-9999.
func (e *logEnc) time(t time.Time) bool {
	if y := t.Year(); y < 0 || y >= 10000 {
		// JSON: slog's error; text: slog cuts RFC 3339 at a fixed offset,
		// which a year of another width moves.
		return false
	}
	if !e.json {
		e.b = appendMillis(e.b, t)
		return true
	}
	e.b = append(e.b, '"')
	e.b = t.AppendFormat(e.b, time.RFC3339Nano)
	e.b = append(e.b, '"')
	return true
}

// appendMillis appends t, of a year in 0-9999, as
// t.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00") does (RFC 3339 with
// exactly three digits of milliseconds, truncated; the offset in whole
// minutes toward zero, "Z" when it is zero) without parsing the layout:
// about 1,600 instructions a line less (issue 17 item 4).
func appendMillis(b []byte, t time.Time) []byte {
	_, offset := t.Zone()
	if offset <= -100*3600 || offset >= 100*3600 {
		return t.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00") // three digits of hours
	}
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1e6, 3)
	if offset == 0 {
		return append(b, 'Z')
	}
	zone := offset / 60
	if zone < 0 {
		b = append(b, '-')
		zone = -zone
	} else {
		b = append(b, '+')
	}
	b = appendDigits(b, zone/60, 2)
	b = append(b, ':')
	return appendDigits(b, zone%60, 2)
}

// appendDigits appends n, at most 9999 and not negative, in exactly width
// decimal digits (width at most 4).
func appendDigits(b []byte, n, width int) []byte {
	var d [4]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:width]...)
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
	default: // floats (the access log has none), groups, LogValuers
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

// textQuoted reports whether slog's text handler writes s quoted: when it
// is empty, or holds a space, '=', '"', an ASCII control byte, invalid
// UTF-8 (or U+FFFD), or a rune Unicode calls space or unprintable.
func textQuoted(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s { // invalid UTF-8 reads as utf8.RuneError
		if r < utf8.RuneSelf {
			if r < ' ' || r == ' ' || r == '=' || r == '"' {
				return true
			}
			continue
		}
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}

// jsonPlain reports, for a byte, whether slog's JSON handler writes it
// unchanged when it is not part of a rune it escapes: printable ASCII
// but '"' and '\\'. Bytes of multi-byte runes are checked rune by rune.
var jsonPlain = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const lowerHex = "0123456789abcdef"

// appendJSONText appends s escaped as slog's JSON handler escapes a string,
// without the quotation marks: '"' and '\\' behind a backslash, \n \r
// \t, other control bytes as \u00xx, each invalid byte as \ufffd, the
// line and paragraph separators U+2028 and U+2029 as \u2028 and \u2029,
// and everything else (HTML characters included) as is.
func appendJSONText(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && jsonPlain[s[j]] {
			j++
		}
		b = append(b, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', lowerHex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}
