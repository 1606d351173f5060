package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

// slogLine is what slog's own handler (json or text, no options) writes
// for the record.
func slogLine(t testing.TB, json bool, tm time.Time, level slog.Level, msg string, attrs []slog.Attr) []byte {
	t.Helper()
	var buf bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&buf, nil)
	if json {
		h = slog.NewJSONHandler(&buf, nil)
	}
	rec := slog.NewRecord(tm, level, msg, 0)
	rec.AddAttrs(attrs...)
	if err := h.Handle(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkRecord requires the encoder to write slog's bytes for the record,
// or to refuse it; and logAccess on a NewLogHandler handler to write
// slog's bytes either way. It reports whether the encoder took it.
func checkRecord(t testing.TB, json bool, tm time.Time, level slog.Level, msg string, attrs []slog.Attr) bool {
	t.Helper()
	want := slogLine(t, json, tm, level, msg, attrs)
	got, ok := appendRecord(nil, json, tm, level, msg, attrs)
	if ok && !bytes.Equal(got, want) {
		t.Fatalf("json=%v appendRecord(%v, %v, %q, %v):\n got %q\nwant %q", json, tm, level, msg, attrs, got, want)
	}
	var buf bytes.Buffer
	logAccess(context.Background(), NewLogHandler(&buf, json, nil), tm, level, msg, attrs)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("json=%v logAccess(%v, %v, %q, %v) (encoder took it: %v):\n got %q\nwant %q", json, tm, level, msg, attrs, ok, buf.Bytes(), want)
	}
	return ok
}

// hardStrings are values that slog quotes, escapes or spells its own way.
var hardStrings = []string{
	"", " ", "a", "a=b", "=", `"`, `\`, `a\b`, `\"`, "\x00", "\x01", "\x1f", "\x7f", "\n", "\r", "\t",
	"\xff", "\xc3", "\xc3(", "\xe2\x80", "\u2028", "\u2029", "a\u2028b", "é", "日本語", "\u00a0", "\u200b",
	"\u3000", "\ufffd", "\U0001F600", "<a href='x'>&amp;</a>", "1.5µs", `{"json":[1,2]}`, "tab\tsep",
	"key=value other=thing", "-", "true", "null", "#", "%v", "\x80\x80", "\xed\xa0\x80", // a surrogate half
	"POST", "generateContent", "gemini-2.5-flash", "ok; saved=1234 B", "google-genai-go",
}

// Errors that slog writes otherwise than by Error, or whose Error panics:
// the encoder must refuse them.
type (
	textErr  string   // encoding.TextMarshaler: text writes MarshalText
	jsonErr  string   // json.Marshaler: JSON writes MarshalJSON
	bytesErr []byte   // a byte slice: text quotes the bytes
	fmtErr   struct{} // fmt.Formatter: text writes %+v
	nilErr   struct{ s string }
)

func (e textErr) Error() string                { return "text " + string(e) }
func (e textErr) MarshalText() ([]byte, error) { return []byte("marshalled " + e), nil }
func (e jsonErr) Error() string                { return "json " + string(e) }
func (e jsonErr) MarshalJSON() ([]byte, error) { return []byte(`"m"`), nil }
func (e bytesErr) Error() string               { return "bytes " + string(e) }
func (fmtErr) Error() string                   { return "plain" }
func (fmtErr) Format(f fmt.State, verb rune)   { fmt.Fprintf(f, "formatted %c", verb) }
func (e *nilErr) Error() string                { return e.s } // panics on a nil *nilErr

// randString draws a string of hard pieces and random bytes.
func randString(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(4) {
		switch r.IntN(4) {
		case 0:
			n := r.IntN(8)
			for range n {
				b.WriteByte(byte(r.IntN(256)))
			}
		case 1:
			b.WriteString("plain_text")
		default:
			b.WriteString(hardStrings[r.IntN(len(hardStrings))])
		}
	}
	return b.String()
}

var zones = []*time.Location{time.UTC, time.Local, time.FixedZone("IST", 5*3600+1800), time.FixedZone("", -7*3600),
	time.FixedZone("odd", 61), time.FixedZone("far", -(14*3600 + 59*60))}

// randTime draws a time, mostly near now, sometimes of another century or
// outside the years JSON allows, sometimes zero.
func randTime(r *rand.Rand) time.Time {
	var t time.Time
	switch r.IntN(6) {
	case 0:
		return time.Time{}
	case 1:
		t = time.Unix(r.Int64N(1<<40)-1<<39, r.Int64N(1e9)) // years around -15000..19000
	case 2:
		t = time.Now() // with a monotonic reading
	default:
		t = time.Unix(1_700_000_000+r.Int64N(1e9), r.Int64N(1e9))
		if r.IntN(3) == 0 {
			t = t.Truncate(time.Duration(r.IntN(4)) * time.Millisecond) // trailing zeros
		}
	}
	return t.In(zones[r.IntN(len(zones))])
}

// randAttr draws an attribute of any kind: the encoder takes most, and
// refuses groups, LogValuers, empty keys and some errors.
func randAttr(r *rand.Rand, supported bool) slog.Attr {
	key := []string{"method", "route", "status", "error", "a b", "a=b", `"`, "k\n", "é"}[r.IntN(9)]
	if r.IntN(4) == 0 {
		key = randString(r)
		if key == "" && supported {
			key = "k"
		}
	}
	n := 10
	if !supported {
		n = 16
	}
	switch r.IntN(n) {
	case 0, 1, 2:
		return slog.String(key, randString(r))
	case 3:
		pos, neg := r.Int64()>>r.IntN(64), r.Int64()>>r.IntN(64)
		return slog.Int64(key, pos-neg)
	case 4:
		return slog.Uint64(key, r.Uint64()>>r.IntN(64))
	case 5:
		if supported { // the encoder leaves floats to slog
			return slog.Int64(key, int64(r.IntN(1000)))
		}
		f := []float64{0, math.Copysign(0, -1), 1, -1.5, 1e-6, 1e-7, 9.99e20, 1e21, 123456789.125, math.MaxFloat64,
			math.SmallestNonzeroFloat64, 0.1, 1.0 / 3}[r.IntN(13)]
		if r.IntN(2) == 0 {
			f = math.Float64frombits(r.Uint64())
			if math.IsNaN(f) || math.IsInf(f, 0) {
				f = 2.5
			}
		}
		return slog.Float64(key, f)
	case 6:
		return slog.Bool(key, r.IntN(2) == 0)
	case 7:
		d := []time.Duration{0, 1, 999, time.Microsecond, 1500 * time.Nanosecond, time.Millisecond, 2*time.Hour + 3*time.Second,
			-time.Minute, math.MinInt64, math.MaxInt64}[r.IntN(10)]
		if r.IntN(2) == 0 {
			d = time.Duration(r.Int64() >> r.IntN(64))
		}
		return slog.Duration(key, d)
	case 8:
		t := randTime(r)
		if supported {
			t = time.Unix(r.Int64N(1e10), r.Int64N(1e9)).In(zones[r.IntN(len(zones))]) // years 1970-2286
		}
		return slog.Time(key, t)
	case 9:
		return slog.Any(key, []error{errors.New(randString(r)), fmt.Errorf("wrapped: %w", errors.New(randString(r))),
			&nilErr{randString(r)}, errors.Join(errors.New("a"), errors.New(randString(r)))}[r.IntN(4)])
	case 10:
		return slog.Any(key, []error{textErr(randString(r)), jsonErr("j"), bytesErr("b\n"), fmtErr{}, (*nilErr)(nil)}[r.IntN(5)])
	case 11:
		return slog.Float64(key, []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[r.IntN(3)])
	case 12:
		return slog.Group(key, slog.String("in", randString(r)))
	case 13:
		return slog.Any(key, redacted{})
	case 14:
		return slog.Attr{Key: "", Value: slog.StringValue(randString(r))}
	default:
		return slog.Any(key, []any{42, "s", struct{ A int }{1}, []byte("b")}[r.IntN(4)])
	}
}

// redacted is a LogValuer.
type redacted struct{}

func (redacted) LogValue() slog.Value { return slog.StringValue("REDACTED") }

func randLevel(r *rand.Rand) slog.Level {
	if r.IntN(2) == 0 {
		return []slog.Level{slog.LevelInfo, slog.LevelWarn}[r.IntN(2)]
	}
	return slog.Level(r.IntN(30) - 10)
}

// TestAccessLogMatchesSlog holds the encoder to slog's bytes on random
// records: every record of supported kinds must be encoded, equal to
// slog's line, and every other one must reach slog.
func TestAccessLogMatchesSlog(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 5))
	for _, json := range []bool{false, true} {
		taken, refused := 0, 0
		for i := range 20000 {
			supported := i%2 == 0
			tm := randTime(r)
			if supported && (tm.Year() < 0 || tm.Year() >= 10000) {
				tm = tm.AddDate(-tm.Year()+2026, 0, 0)
			}
			attrs := make([]slog.Attr, r.IntN(20))
			for j := range attrs {
				attrs[j] = randAttr(r, supported)
			}
			msg := "request"
			if r.IntN(2) == 0 {
				msg = randString(r)
			}
			if checkRecord(t, json, tm, randLevel(r), msg, attrs) {
				taken++
			} else if supported {
				t.Fatalf("json=%v: the encoder refused a record of supported kinds: %v %v", json, tm, attrs)
			} else {
				refused++
			}
		}
		if refused == 0 {
			t.Errorf("json=%v: no record went to slog; the unsupported kinds are not drawn", json)
		}
		t.Logf("json=%v: %d records encoded, %d handed to slog", json, taken, refused)
	}
}

// TestAccessLogFixed holds the encoder to slog on each hard string as
// message, key and value, and on each refused kind.
func TestAccessLogFixed(t *testing.T) {
	tm := time.Date(2026, 12, 3, 7, 0, 6, 120_000_000, time.UTC)
	for _, json := range []bool{false, true} {
		for _, s := range hardStrings {
			if !checkRecord(t, json, tm, slog.LevelInfo, s, []slog.Attr{slog.String("k", s), slog.String(s+"k", "v")}) {
				t.Errorf("json=%v: the encoder refused the string %q", json, s)
			}
		}
		refused := []slog.Attr{
			slog.Group("g", slog.Int("a", 1)), slog.Group("empty"), slog.Any("lv", redacted{}), slog.String("", "v"),
			slog.Any("e", textErr("t")), slog.Any("e", fmtErr{}), slog.Any("e", bytesErr("b")), slog.Any("e", (*nilErr)(nil)),
			slog.Float64("f", math.NaN()), slog.Int("", 0), slog.Any("x", 3),
		}
		for _, a := range refused {
			checkRecord(t, json, tm, slog.LevelInfo, "request", []slog.Attr{a})
		}
		checkRecord(t, json, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelWarn, "far", nil)
		checkRecord(t, json, time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelWarn, "far", nil)
		if !checkRecord(t, json, time.Time{}, slog.LevelError+3, "no time", []slog.Attr{slog.Any("e", jsonErr("j"))}) && !json {
			t.Errorf("json=%v: the encoder refused an error that is a json.Marshaler in text", json)
		}
	}
}

// FuzzAccessLogMatchesSlog is TestAccessLogMatchesSlog on fuzzed values.
func FuzzAccessLogMatchesSlog(f *testing.F) {
	for i, s := range hardStrings {
		f.Add(s, hardStrings[(i+7)%len(hardStrings)], int64(i)*1e9+int64(i), int64(i)<<40, 1.0/float64(i+1), i%2 == 0, uint8(i))
	}
	f.Fuzz(func(t *testing.T, s1, s2 string, n1, n2 int64, fl float64, b bool, sel uint8) {
		tm := time.Unix(n1%(1<<38), n2%1e9).In(zones[int(sel)%len(zones)])
		if sel&0x80 != 0 {
			tm = time.Time{}
		}
		attrs := []slog.Attr{
			slog.String("method", s1),
			slog.String(s2+"k", s2),
			slog.Int64("status", n1),
			slog.Uint64("u", uint64(n2)),
			slog.Duration("duration", time.Duration(n2)),
			slog.Bool("stream", b),
			slog.Any("error", errors.New(s1+s2)),
			slog.Time("t", tm),
		}
		float := sel&0x40 != 0
		if float {
			attrs = append(attrs, slog.Float64("f", fl))
		}
		for _, json := range []bool{false, true} {
			ok := checkRecord(t, json, tm, slog.Level(int8(sel)), s2, attrs)
			year := tm.Year()
			if !ok && !float && (tm.IsZero() || year >= 0 && year < 10000) {
				t.Fatalf("json=%v: the encoder refused a record of supported kinds: %v", json, attrs)
			}
		}
	})
}

// TestNewLogHandler checks which handlers take the encoder: only
// NewLogHandler's own, without ReplaceAttr or AddSource, and none derived
// from it; and that those that do not still write slog's lines.
func TestNewLogHandler(t *testing.T) {
	tm := time.Date(2026, 12, 3, 7, 0, 6, 0, time.UTC)
	attrs := []slog.Attr{slog.String("method", "POST"), slog.Int("status", 200)}
	rep := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == "status" {
			a.Value = slog.StringValue("replaced")
		}
		return a
	}
	for _, json := range []bool{false, true} {
		cases := []struct {
			name string
			opts *slog.HandlerOptions
			wrap func(slog.Handler) slog.Handler
			fast bool
		}{
			{"plain", nil, nil, true},
			{"level", &slog.HandlerOptions{Level: slog.LevelWarn}, nil, true},
			{"replace", &slog.HandlerOptions{ReplaceAttr: rep}, nil, false},
			{"source", &slog.HandlerOptions{AddSource: true}, nil, false},
			{"with", nil, func(h slog.Handler) slog.Handler { return h.WithAttrs([]slog.Attr{slog.String("component", "proxy")}) }, false},
			{"group", nil, func(h slog.Handler) slog.Handler { return h.WithGroup("g") }, false},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("json=%v/%s", json, c.name), func(t *testing.T) {
				var got, want bytes.Buffer
				h := NewLogHandler(&got, json, c.opts)
				var ref slog.Handler = slog.NewTextHandler(&want, c.opts)
				if json {
					ref = slog.NewJSONHandler(&want, c.opts)
				}
				if c.wrap != nil {
					h, ref = c.wrap(h), c.wrap(ref)
				}
				if _, fast := h.(*logHandler); fast != c.fast {
					t.Errorf("handler %T takes the encoder: %v, want %v", h, fast, c.fast)
				}
				if h.Enabled(t.Context(), slog.LevelInfo) != ref.Enabled(t.Context(), slog.LevelInfo) {
					t.Errorf("Enabled(info) differs from slog's")
				}
				logAccess(t.Context(), h, tm, slog.LevelWarn, "request", attrs)
				rec := slog.NewRecord(tm, slog.LevelWarn, "request", 0)
				rec.AddAttrs(attrs...)
				if err := ref.Handle(t.Context(), rec); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want.String(), got.String()); diff != "" {
					t.Errorf("line (-slog +logAccess):\n%s", diff)
				}
			})
		}
	}
}

// TestLogAccessAllocatesNothing shows the encoder on the request path: a
// line of the access log's shape allocates nothing (slog's Record puts the
// attributes past the fifth on the heap).
func TestLogAccessAllocatesNothing(t *testing.T) {
	h := NewLogHandler(discard{}, false, nil)
	attrs := accessAttrs()
	ctx := t.Context()
	if n := testing.AllocsPerRun(100, func() { logAccess(ctx, h, time.Now(), slog.LevelInfo, "request", attrs[:]) }); n != 0 {
		t.Errorf("logAccess allocates %v objects a line, want 0", n)
	}
}

// discard is an io.Writer that keeps nothing, opaque to the compiler.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// accessAttrs are the attributes of a typical access-log line.
func accessAttrs() [14]slog.Attr {
	return [...]slog.Attr{
		slog.String("method", "POST"),
		slog.String("route", "generateContent"),
		slog.String("model", "gemini-2.5-flash"),
		slog.Int("status", 200),
		slog.Int("upstream_status", 200),
		slog.Duration("duration", 1234567*time.Nanosecond),
		slog.Int64("bytes_in", 70123),
		slog.Int64("bytes_sent", 31234),
		slog.Int64("bytes_out", 1712),
		slog.Bool("stream", false),
		slog.String("client_sdk", "google-genai-go"),
		slog.String("tenant", "3f9a2c1b"),
		slog.String("rewrite", "saved=38889 blocks=12 refs=3 v=1"),
		slog.String("rewrite_skipped", "small"),
	}
}

// TestAccessLogThroughProxy runs requests through a Handler logging to
// NewLogHandler and one logging to slog's handler: their access lines are
// the same but for the time and the duration.
func TestAccessLogThroughProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "fail") {
			http.Error(w, `{"error":{"code":500}}`, 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"}}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1}}`))
	}))
	defer up.Close()
	clock := regexp.MustCompile(`time=\S+|"time":"[^"]*"|duration=\S+|"duration":\d+`)
	for _, json := range []bool{false, true} {
		var fastOut, slogOut testutil.Buffer
		var ref slog.Handler = slog.NewTextHandler(&slogOut, nil)
		if json {
			ref = slog.NewJSONHandler(&slogOut, nil)
		}
		var fronts []*httptest.Server
		for _, hd := range []slog.Handler{NewLogHandler(&fastOut, json, nil), ref} {
			h, err := New(Options{Upstream: mustURL(t, up.URL), Rewrite: RewriteOptions{Enabled: true}, TenantSecret: []byte("k")}, slog.New(hd), metrics.New(prometheus.NewRegistry()))
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(h)
			defer front.Close()
			fronts = append(fronts, front)
		}
		body := `{"contents":[{"role":"user","parts":[{"text":"a \"quoted\" = text"}]}]}`
		paths := []string{"/v1beta/models/gemini-2.5-flash:generateContent", "/v1beta/models/fail:generateContent", "/v1beta/models"}
		for i, path := range paths {
			for _, front := range fronts {
				res, err := http.Post(front.URL+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
			}
			// The line is written once the handler returns, after the
			// client has the answer.
			for _, out := range []*testutil.Buffer{&fastOut, &slogOut} {
				for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "\n") <= i; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("json=%v: %d lines logged after %d requests: %q", json, strings.Count(out.String(), "\n"), i+1, out.String())
					}
				}
			}
		}
		got := clock.ReplaceAllString(fastOut.String(), "")
		want := clock.ReplaceAllString(slogOut.String(), "")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("json=%v: access log (-slog +NewLogHandler):\n%s", json, diff)
		}
	}
}

func TestAppendMillis(t *testing.T) {
	const layout = "2006-01-02T15:04:05.000Z07:00"
	zones := append([]*time.Location{time.FixedZone("m30", -30), time.FixedZone("p59", 59), time.FixedZone("m90", -90),
		time.FixedZone("h99", 99*3600+59*60), time.FixedZone("h100", 100*3600), time.FixedZone("mh100", -100*3600-1)}, zones...)
	r := rand.New(rand.NewPCG(4, 17))
	for i := range 100000 {
		tm := time.Unix(r.Int64N(253402300800+62135596800)-62135596800, r.Int64N(1e9)) // years 0-9999
		if i%7 == 0 {
			tm = tm.Truncate(time.Second)
		}
		tm = tm.In(zones[r.IntN(len(zones))])
		if y := tm.Year(); y < 0 || y > 9999 {
			continue
		}
		if got, want := string(appendMillis([]byte("x"), tm)), "x"+tm.Format(layout); got != want {
			t.Fatalf("appendMillis(%v) = %q, want %q", tm, got, want)
		}
	}
}
