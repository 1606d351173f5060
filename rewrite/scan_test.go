package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestScanParts(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		roles []string
		kinds [][]partKind
	}{
		{"text", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, []string{"user"}, [][]partKind{{partText}}},
		{"role omitted", `{"contents":[{"parts":[{"text":"hi"}]}]}`, []string{""}, [][]partKind{{partText}}},
		{"whitespace and order", " {\n \"contents\" : [ { \"parts\" : [ { \"text\" : \"a\" } ] , \"role\" : \"model\" } ] } ", []string{"model"}, [][]partKind{{partText}}},
		{"inline camel", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`, []string{""}, [][]partKind{{partInline}}},
		{"inline snake", `{"contents":[{"parts":[{"inline_data":{"mime_type":"image/png","data":"AAAA"}}]}]}`, []string{""}, [][]partKind{{partInline}}},
		{"inline with displayName", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA","displayName":"x"}}]}]}`, []string{""}, [][]partKind{{partOther}}},
		{"thought signature", `{"contents":[{"parts":[{"text":"a","thoughtSignature":"+//+"}]}]}`, []string{""}, [][]partKind{{partOther}}},
		{"thought", `{"contents":[{"parts":[{"text":"a","thought":true}]}]}`, []string{""}, [][]partKind{{partOther}}},
		{"function call", `{"contents":[{"parts":[{"functionCall":{"name":"f","args":{}}}]}]}`, []string{""}, [][]partKind{{partOther}}},
		{"unknown member", `{"contents":[{"parts":[{"text":"a","partMetadata":{}}]}]}`, []string{""}, [][]partKind{{partOther}}},
		{"text not a string", `{"contents":[{"parts":[{"text":1}]}]}`, []string{""}, [][]partKind{{partOther}}},
		{"escaped key", `{"contents":[{"parts":[{"t\u0065xt":"a"}]}]}`, []string{""}, [][]partKind{{partText}}},
		{"two turns", `{"contents":[{"role":"user","parts":[{"text":"a"},{"fileData":{}}]},{"role":"model","parts":[]}]}`, []string{"user", "model"}, [][]partKind{{partText, partOther}, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := scan([]byte(tt.body))
			if err != nil {
				t.Fatalf("scan: %v", err)
			}
			var roles []string
			var kinds [][]partKind
			for _, c := range req.contents {
				roles = append(roles, c.role)
				var k []partKind
				for _, p := range c.parts {
					k = append(k, p.kind)
				}
				kinds = append(kinds, k)
			}
			if diff := cmp.Diff(tt.roles, roles); diff != "" {
				t.Errorf("roles (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.kinds, kinds); diff != "" {
				t.Errorf("part kinds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScanErrors(t *testing.T) {
	tests := []struct {
		body string
		want error
	}{
		{``, ErrInvalidJSON},
		{`[]`, ErrInvalidJSON},
		{`{"contents":[]`, ErrInvalidJSON},
		{`{"contents":[]} x`, ErrInvalidJSON},
		{`{"contents":[],}`, ErrInvalidJSON},
		{`{"a":01,"contents":[]}`, ErrInvalidJSON},
		{`{"a":1.,"contents":[]}`, ErrInvalidJSON},
		{`{"a":"\x","contents":[]}`, ErrInvalidJSON},
		{`{"a":"\u12","contents":[]}`, ErrInvalidJSON},
		{"{\"a\":\"\x01\",\"contents\":[]}", ErrInvalidJSON},
		{`{"a":tru,"contents":[]}`, ErrInvalidJSON},
		{`{"generationConfig":{}}`, ErrNoContents},
		{`{"contents":[],"contents":[]}`, ErrUnsupported},
		{`{"contents":{}}`, ErrUnsupported},
		{`{"contents":[1]}`, ErrUnsupported},
		{`{"contents":[{"parts":{}}]}`, ErrUnsupported},
		{`{"contents":[{"role":"","parts":[]}]}`, ErrUnsupported},
	}
	for _, tt := range tests {
		_, err := scan([]byte(tt.body))
		if !errors.Is(err, tt.want) {
			t.Errorf("scan(%q) = %v, want %v", tt.body, err, tt.want)
		}
	}
}

func TestScanTextDecoding(t *testing.T) {
	tests := []string{
		"plain",
		"line one\nline two\r\n\ttab \"quoted\" back\\slash /slash",
		"unicode é 中 😀 and \u2028",
		"",
		"\n\n",
	}
	for _, want := range tests {
		raw, _ := json.Marshal(want)
		body := `{"contents":[{"parts":[{"text":` + string(raw) + `}]}]}`
		req, err := scan([]byte(body))
		if err != nil {
			t.Fatalf("scan(%q): %v", body, err)
		}
		p := req.contents[0].parts[0]
		if p.dec.text != want {
			t.Errorf("decoded %q, want %q", p.dec.text, want)
		}
		l := lines{text: p.dec.text, nl: p.dec.nl}
		if diff := cmp.Diff(splitLines(want).nl, l.nl); diff != "" {
			t.Errorf("line ends of %q (-want +got):\n%s", want, diff)
		}
		if got := unescape([]byte(body[p.str.start:p.str.end])); got != want {
			t.Errorf("unescape = %q, want %q", got, want)
		}
	}
	// Escapes that encoding/json also accepts.
	got := unescape([]byte(`a\u00e9\ud83d\ude00\/\b\f\ud800x`))
	if want := "aé😀/\b\f\uFFFDx"; got != want {
		t.Errorf("unescape = %q, want %q", got, want)
	}
}

func TestRawOffsets(t *testing.T) {
	raw := []byte(`ab\ncd\u00e9\tef\"g`)
	text := unescape(raw) // "ab\ncdé\tef\"g"
	offs := []int{0, 2, 3, 5, 7, 8, len(text)}
	want := []int{0, 2, 4, 6, 12, 14, len(raw)}
	if rawOffsets(raw, offs, nil); !cmp.Equal(want, offs) {
		t.Errorf("rawOffsets (-want +got):\n%s", cmp.Diff(want, offs))
	}
	// On a long text, marks give the same answer from a nearer start.
	long, _ := json.Marshal(strings.Repeat("line\t\"é\"\n", 3000))
	long = long[1 : len(long)-1]
	d, err := decodeString(long)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.marks) == 0 {
		t.Fatal("no marks on a long text")
	}
	var many []int
	for _, nl := range d.nl {
		many = append(many, int(nl))
	}
	without, with := slices.Clone(many), slices.Clone(many)
	rawOffsets(long, without, nil)
	rawOffsets(long, with, d.marks)
	if diff := cmp.Diff(without, with); diff != "" {
		t.Errorf("rawOffsets with marks (-without +with):\n%s", diff)
	}
}

func TestAppendEscaped(t *testing.T) {
	for _, s := range []string{"plain", "q\"b\\n\n\r\t\x01\x1f é 😀 </>"} {
		esc := appendEscaped(nil, s)
		var got string
		if err := json.Unmarshal([]byte(`"`+string(esc)+`"`), &got); err != nil || got != s {
			t.Errorf("appendEscaped(%q) = %q, decodes to %q (%v)", s, esc, got, err)
		}
	}
}

func TestSpecial(t *testing.T) {
	for i := 0; i < 8; i++ {
		for _, c := range []byte{'"', '\\', 0, 0x1f} {
			w := []byte("abcdefgh")
			w[i] = c
			m := special(uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 | uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56)
			if m == 0 {
				t.Errorf("special(%q) = 0", w)
			}
		}
	}
	if m := special(0x7f7e7d7c7b7a2120 | 0x8000000000000000); m != 0 {
		t.Errorf("special of ordinary bytes = %x", m)
	}
}

// FuzzScanText checks that the one-pass decoder agrees with encoding/json
// on every text string, wherever it sits in the body.
func FuzzScanText(f *testing.F) {
	f.Add("a")
	f.Add("line\n\"q\"\\ \u00e9 😀")
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(s)
		if err != nil {
			return
		}
		var want string
		if json.Unmarshal(raw, &want) != nil {
			return
		}
		body := []byte(`{"contents":[{"parts":[{"text":` + string(raw) + `}]}]}`)
		req, err := scan(body)
		if err != nil {
			t.Fatalf("scan(%q): %v", body, err)
		}
		p := req.contents[0].parts[0]
		if p.dec.text != want {
			t.Fatalf("decoded %q, want %q", p.dec.text, want)
		}
		if diff := cmp.Diff(splitLines(want).nl, p.dec.nl); diff != "" {
			t.Fatalf("line ends (-want +got):\n%s", diff)
		}
	})
}

// FuzzScanResume checks that a text whose raw bytes start like an earlier
// text's (so that the scanner copies the earlier decoded prefix) decodes
// exactly as it does on its own: same text, line ends and marks.
func FuzzScanResume(f *testing.F) {
	f.Add(`\tfmt.Println(\"a\\tb\")\n`, `x\ud83d`, `\ude00 tail\n`, `y`)
	f.Add(`line \u00e9 \\ \/ \b\f\r\n`, `\ud83d`, `\ude00`, `\u0041`)
	f.Add(`plain text without escapes `, `"`, `\"`, `\n`)
	f.Fuzz(func(t *testing.T, unit, common, x, y string) {
		for _, s := range []string{unit, common, x, y} {
			if !json.Valid([]byte(`"` + s + `"`)) {
				return
			}
		}
		if unit == "" {
			return
		}
		for pad := range 48 {
			// Shift the marks (every markEvery decoded bytes) across the
			// escapes of common, x and y.
			prefix := strings.Repeat("a", pad) + strings.Repeat(unit, 600/len(unit)+1) + common
			checkResume(t, []string{prefix + y, prefix + x, prefix, prefix + x + y, unit + x, prefix + x})
		}
	})
}

func checkResume(t *testing.T, texts []string) {
	t.Helper()
	{
		var body strings.Builder
		body.WriteString(`{"contents":[`)
		for i, r := range texts {
			if i > 0 {
				body.WriteString(",")
			}
			fmt.Fprintf(&body, `{"parts":[{"text":"%s"}]}`, r)
		}
		body.WriteString(`]}`)
		req, err := scan([]byte(body.String()))
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		for i, r := range texts {
			want, err := decodeString([]byte(r))
			if err != nil {
				t.Fatal(err)
			}
			got := req.contents[i].parts[0].dec
			if got.text != want.text {
				t.Errorf("text %d: decoded %q, want %q", i, got.text, want.text)
			}
			if diff := cmp.Diff(want.nl, got.nl); diff != "" {
				t.Errorf("text %d: line ends (-want +got):\n%s", i, diff)
			}
			if diff := cmp.Diff(want.marks, got.marks, cmp.AllowUnexported(mark{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("text %d: marks (-want +got):\n%s", i, diff)
			}
		}
	}
}

func TestEscapedLen(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\n\n\r\t\x01\x1f é 😀 </>", "[unchanged: a\\b.go sha256:0123456789ab, identical to the copy in turn 3]"} {
		if got, want := escapedLen(s), len(appendEscaped(nil, s)); got != want {
			t.Errorf("escapedLen(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestScanSmall checks that texts read before the first long one, which
// the scan only validates and measures, decode afterwards exactly as when
// every text is decoded at once, and that a request is small only when
// every text is short and no part is inlineData.
func TestScanSmall(t *testing.T) {
	long := strings.Repeat(`a\"b\\c\n\t\u00e9\ud83d\ude00 `, 40)
	texts := []string{`x`, `\u00e9\ud83d\ude00\ud800 \udc00\u0041\n`, long, `short \\ \/ \b\f\r`, long + `\n` + long, `é`}
	for _, tt := range []struct {
		name  string
		parts []string
		small bool
	}{
		{"all short", []string{`{"text":"` + texts[0] + `"}`, `{"text":"` + texts[1] + `"}`, `{"text":"` + texts[3] + `"}`}, true},
		{"long later", []string{`{"text":"` + texts[0] + `"}`, `{"text":"` + texts[1] + `"}`, `{"text":"` + texts[2] + `"}`, `{"text":"` + texts[3] + `"}`, `{"text":"` + texts[4] + `"}`, `{"text":"` + texts[5] + `"}`}, false},
		{"long first", []string{`{"text":"` + texts[4] + `"}`, `{"text":"` + texts[1] + `"}`}, false},
		{"inline", []string{`{"text":"` + texts[1] + `"}`, `{"inlineData":{"mimeType":"image/png","data":"AAAA"}}`, `{"text":"` + texts[3] + `"}`}, false},
		{"frozen", []string{`{"text":"` + texts[1] + `","thought":true}`, `{"text":"` + texts[0] + `"}`}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(`{"contents":[{"parts":[` + strings.Join(tt.parts, ",") + `]}]}`)
			want, err := scan(body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := scanWith(body, &state{}, 100, limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got.small != tt.small {
				t.Errorf("small = %v, want %v", got.small, tt.small)
			}
			for i, wp := range want.contents[0].parts {
				if wp.kind != partText {
					continue
				}
				gp := got.contents[0].parts[i]
				if gp.dec.size != len(wp.dec.text) || wp.dec.size != len(wp.dec.text) {
					t.Errorf("part %d: size %d (eager %d), want %d", i, gp.dec.size, wp.dec.size, len(wp.dec.text))
				}
				if got.small {
					continue
				}
				if gp.dec.text != wp.dec.text || !slices.Equal(gp.dec.nl, wp.dec.nl) || !slices.Equal(gp.dec.marks, wp.dec.marks) || gp.esc != wp.esc || gp.str != wp.str {
					t.Errorf("part %d: decoded %q %v %v, want %q %v %v", i, gp.dec.text, gp.dec.nl, gp.dec.marks, wp.dec.text, wp.dec.nl, wp.dec.marks)
				}
			}
		})
	}
	// The short path rejects what the decoder rejects.
	for _, bad := range []string{`\x`, `\u12`, `\u12G4`, `\ud800\u12G4`, "\x01", `abc`} {
		body := []byte(`{"contents":[{"parts":[{"text":"` + bad + `"}]}]}`)
		if bad == `abc` {
			body = []byte(`{"contents":[{"parts":[{"text":"abc`)
		}
		_, err1 := scan(body)
		_, err2 := scanWith(body, &state{}, 100, limits{})
		if err1 == nil || !errors.Is(err2, err1) {
			t.Errorf("%q: short scan %v, scan %v", bad, err2, err1)
		}
	}
}

// FuzzScanSmall checks on arbitrary raw strings that the short-text check
// accepts exactly what the decoder accepts and measures the decoded size,
// and that texts measured first decode afterwards as they would at once.
func FuzzScanSmall(f *testing.F) {
	f.Add(`plain`, 8)
	f.Add(`\u00e9\ud83d\ude00\ud800 \udc00\/\b\f\r\n\t\"\\`, 100)
	f.Add(`\ud83d\u12G4`, 100)
	f.Add(`abc\`, 3)
	f.Fuzz(func(t *testing.T, raw string, small int) {
		small = 1 + small&1023
		body := []byte(`{"contents":[{"parts":[{"text":"` + raw + `"}]},{"parts":[{"text":"` + strings.Repeat("x", small%7) + `"}]}]}`)
		want, wantErr := scan(body)
		got, err := scanWith(body, &state{}, small, limits{})
		if (err == nil) != (wantErr == nil) || !errors.Is(err, wantErr) {
			t.Fatalf("scan error %v, with small %d: %v", wantErr, small, err)
		}
		if err != nil {
			return
		}
		for i := range want.contents {
			w, g := want.contents[i].parts[0].dec, got.contents[i].parts[0].dec
			if g.size != len(w.text) || w.size != len(w.text) {
				t.Fatalf("text %d: size %d, want %d", i, g.size, len(w.text))
			}
			if !got.small && (g.text != w.text || !slices.Equal(g.nl, w.nl) || !slices.Equal(g.marks, w.marks)) {
				t.Fatalf("text %d: decoded %q, want %q", i, g.text, w.text)
			}
		}
		if wantSmall := len(raw) < small && small%7 < small; got.small != wantSmall {
			t.Fatalf("small = %v, want %v", got.small, wantSmall)
		}
	})
}

// uEscapeNewlines rewrites every "\n" escape of a JSON document as
// "\u000a", which decodes to the same text.
func uEscapeNewlines(raw []byte) []byte {
	var out []byte
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+1 < len(raw) {
			if raw[i+1] == 'n' {
				out = append(out, `\u000a`...)
			} else {
				out = append(out, raw[i], raw[i+1])
			}
			i++
			continue
		}
		out = append(out, raw[i])
	}
	return out
}

// TestUnicodeEscapedNewlines checks that a newline written as "\u000a"
// ends a line as "\n" does: the same session, escaped either way, gets the
// same replacements and decodes to the same rewritten request.
func TestUnicodeEscapedNewlines(t *testing.T) {
	plain := session(9, 120)
	u := uEscapeNewlines(plain)
	if bytes.Equal(u, plain) {
		t.Fatal("the test body has no \\n escape")
	}
	decode := func(b []byte) any {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	outP, repP, err := Request(plain, DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	outU, repU, err := Request(u, DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(repP.Replacements) == 0 {
		t.Fatal("nothing replaced in the plain session")
	}
	if len(repU.Replacements) != len(repP.Replacements) {
		t.Errorf("%d replacements with \\u000a, %d with \\n", len(repU.Replacements), len(repP.Replacements))
	}
	if diff := cmp.Diff(decode(outP), decode(outU)); diff != "" {
		t.Errorf("rewritten requests differ (-\\n +\\u000a):\n%s", diff)
	}
}

// TestCommonPrefix compares commonPrefix with a byte loop for a difference
// at every position around the chunk and word sizes it compares in.
func TestCommonPrefix(t *testing.T) {
	a := make([]byte, 200_000)
	for i := range a {
		a[i] = byte(i*7 + i/13)
	}
	naive := func(a, b []byte) int {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		return i
	}
	var at []int
	for _, base := range []int{0, 8, 512, 1024, 1536, 4096, 65536, 131072, 199_000} {
		for d := -9; d <= 9; d++ {
			if base+d >= 0 && base+d < len(a) {
				at = append(at, base+d)
			}
		}
	}
	for _, k := range at {
		b := bytes.Clone(a)
		b[k] ^= 1
		for _, n := range []int{len(a), k + 1, k + 7, k + 600} {
			n = min(n, len(a))
			if got, want := commonPrefix(a, b[:n]), naive(a, b[:n]); got != want {
				t.Fatalf("difference at %d, len %d: commonPrefix = %d, want %d", k, n, got, want)
			}
		}
	}
	if got := commonPrefix(a, a[:123_457]); got != 123_457 {
		t.Errorf("prefix of itself: %d", got)
	}
}

// BenchmarkCommonPrefix compares two 1 MB texts that differ near the end,
// as a re-sent text and the earlier one it resumes (scan.go resume).
func BenchmarkCommonPrefix(b *testing.B) {
	x := bytes.Repeat([]byte("func f() { return \"x\" }\n"), 1<<20/24)
	y := bytes.Clone(x)
	y[len(y)-100] ^= 1
	b.SetBytes(int64(len(x)))
	for b.Loop() {
		commonPrefix(x, y)
	}
}

// TestTextRunStops checks textStr's decoding loop (textRun.run) where it
// stops and resumes: line ends past the capacity the scanner starts with
// (the caller grows them), escapes on either side of a mark, anchor bytes
// after a line break, "\u" escapes inside runs of one-byte escapes, and
// Options.MaxLines exactly at and one past the text's line ends. The
// decoded text, line ends and escape flag must be encoding/json's.
func TestTextRunStops(t *testing.T) {
	texts := []string{
		strings.Repeat("\n", 5000),
		strings.Repeat("\n\t\t", 3000),
		strings.Repeat("a\n", 4000) + "end",
		strings.Repeat("x", markEvery-1) + "\n\t\"\\" + strings.Repeat("y", markEvery) + "\t",
		strings.Repeat("```go\n\tx := \"a\"\n```\n<doc>\n~~~\n", 200),
		strings.Repeat("\n\u00e9\n\u2028\t😀\\\"\x01", 300),
		strings.Repeat("\\", 2*markEvery+3),
		"no escapes at all, only ordinary bytes: " + strings.Repeat("abcdefgh", 100),
		"",
		"\n",
	}
	for _, s := range texts {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(`{"contents":[{"parts":[{"text":` + string(raw) + `}]}]}`)
		st := &state{}
		req, err := scanWith(body, st, 0, limits{})
		if err != nil {
			t.Fatalf("scan(%.40q…): %v", body, err)
		}
		p := req.contents[0].parts[0]
		if p.dec.text != s {
			t.Fatalf("decoded %.40q…, want %.40q…", p.dec.text, s)
		}
		if diff := cmp.Diff(splitLines(s).nl, p.dec.nl); diff != "" {
			t.Fatalf("text %.40q…: line ends (-want +got):\n%s", s, diff)
		}
		if want := bytes.IndexByte(raw, '\\') >= 0; p.esc != want {
			t.Errorf("text %.40q…: esc = %v, want %v", s, p.esc, want)
		}
		// Line ends counted by the scan: every "\n" and the text's end.
		n := strings.Count(s, "\n") + 1
		if _, err := scanWith(body, &state{}, 0, limits{lines: n}); err != nil {
			t.Errorf("text %.40q…, MaxLines %d: %v", s, n, err)
		}
		if n > 1 {
			if _, err := scanWith(body, &state{}, 0, limits{lines: n - 1}); !errors.Is(err, ErrTooComplex) {
				t.Errorf("text %.40q…, MaxLines %d: err = %v, want ErrTooComplex", s, n-1, err)
			}
		}
	}
}

// rawOffsetsOld is rawOffsets before one-byte escapes were stepped over
// in its loop: every escape went through decodeEscape.
func rawOffsetsOld(raw []byte, offs []int, marks []mark) {
	out := offs
	k := 0
	u := 0
	var buf [utf8.UTFMax]byte
	m := 0
	if len(offs) > 0 {
		m = sort.Search(len(marks), func(j int) bool { return int(marks[j].u) > offs[0] })
		if m > 0 {
			m--
		}
	}
	for i := 0; i <= len(raw) && k < len(offs); {
		for m < len(marks) && int(marks[m].u) <= offs[k] {
			if int(marks[m].u) > u {
				u, i = int(marks[m].u), int(marks[m].r)
			}
			m++
		}
		for k < len(offs) && offs[k] <= u {
			out[k] = i
			k++
		}
		if i == len(raw) || k == len(offs) {
			break
		}
		if raw[i] != '\\' {
			j := bytes.IndexByte(raw[i:], '\\')
			if j < 0 {
				j = len(raw) - i
			}
			j = min(j, offs[k]-u)
			i += j
			u += j
			continue
		}
		r, n := decodeEscape(raw[i:])
		i += n
		if r < utf8.RuneSelf {
			u++
		} else {
			u += utf8.EncodeRune(buf[:], r)
		}
	}
	for ; k < len(offs); k++ {
		out[k] = len(raw)
	}
}

// TestRawOffsetsOld compares rawOffsets with rawOffsetsOld on random
// escape-dense strings (every one-byte escape, \u escapes of control
// bytes, HTML bytes and surrogate pairs, runes of every length), at
// sorted random decoded offsets, with and without marks.
func TestRawOffsetsOld(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 5))
	pieces := []string{"a", "\n", "\t", "\"", "\\", "/", "\r", "\b", "\f", "\x01", "<", "é", "€", "😀", "\u2028", "code(x) ", "\n\t\t"}
	for n := range 4000 {
		var b strings.Builder
		for range r.IntN(200) + n%3*300 {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		raw, _ := json.Marshal(b.String())
		raw = raw[1 : len(raw)-1]
		d, err := decodeString(raw)
		if err != nil {
			t.Fatal(err)
		}
		offs := make([]int, r.IntN(12))
		for i := range offs {
			offs[i] = r.IntN(len(d.text) + 1)
		}
		slices.Sort(offs)
		for _, marks := range [][]mark{nil, d.marks} {
			got, want := slices.Clone(offs), slices.Clone(offs)
			rawOffsets(raw, got, marks)
			rawOffsetsOld(raw, want, marks)
			if !slices.Equal(got, want) {
				t.Fatalf("rawOffsets(%q, %v) = %v, want %v", raw, offs, got, want)
			}
		}
	}
}
