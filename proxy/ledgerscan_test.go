package proxy

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/bench"
)

// layoutView is a layout with its store names in hex, comparable with
// refLayout.
func layoutView(p *layout) *refLayout {
	v := &refLayout{sums: p.sums, bytes: p.bytes, fixed: p.fixed, key: hex.EncodeToString(p.key[:]),
		leads: p.leads, explicit: p.explicit, media: p.media}
	for i := range p.texts {
		v.texts = append(v.texts, p.text(i))
	}
	for _, e := range p.ends {
		v.ends = append(v.ends, hex.EncodeToString(e[:]))
	}
	return v
}

// diffLayout returns how layoutOf and the reference implementation differ
// on body, or "".
func diffLayout(body []byte, model string) string {
	want, werr := refLayoutOf(body, model)
	got, gerr := layoutOf(body, model)
	// The reference's errors name its own copy of ledgerRequest.
	if (werr != nil) != (gerr != nil) || werr != nil && strings.ReplaceAll(werr.Error(), "refLedgerRequest", "ledgerRequest") != gerr.Error() {
		return fmt.Sprintf("error %v, reference %v", gerr, werr)
	}
	if werr != nil {
		return ""
	}
	g := layoutView(got)
	// nil and empty leads and texts compare as the reference has them.
	for i := range g.leads {
		if len(g.leads[i]) == 0 && len(want.leads[i]) == 0 {
			g.leads[i] = want.leads[i]
		}
	}
	if !reflect.DeepEqual(g, want) {
		return fmt.Sprintf("layout\n%+v\nreference\n%+v", g, want)
	}
	return ""
}

// layoutCases are bodies that take each path of layoutScan and its
// fallback.
var layoutCases = []string{
	`{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}`,
	`{ "contents" : [ { "role" : "user" , "parts" : [ { "text" : "hello" } , {"text":"again"} ] } ] }`,
	"{\n\t\"contents\": [\r\n{\"parts\": [{\"text\": \"no role\"}]}]}",
	`{"contents":[{"role":"model","parts":[{"text":"a\nb\t\"c\"\\d\/e\u00e9\u4e2d\ud83d\ude00 \ud83d \ude00x \u0000 \b\f\r"}]}]}`,
	`{"contents":[{"parts":[{"text":"caf` + "\xc3\xa9 \xff\xfe bad \xed\xa0\x80 surrogate \xef\xbf\xbd" + `"}]}]}`,
	`{"contents":[{"parts":[{"text":"a","thought":true},{"thoughtSignature":"c2ln","text":"b"}]}]}`,
	`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},{"inline_data":{"mime_type":"image/png","data":"AAAA"}}]}]}`,
	`{"contents":[{"parts":[{"fileData":{"fileUri":"gs://b/x","mimeType":"application/pdf"}},{"file_data":{"file_uri":"x"}}]}]}`,
	`{"contents":[{"role":"model","parts":[{"functionCall":{"name":"read_file","args":{"path":"a.go", "n" : [1, 2.5e3, -0, true, false, null]}}}]},{"role":"user","parts":[{"functionResponse":{"name":"read_file","response":{"content":"package a\n"}}}]}]}`,
	`{"system_instruction":{"parts":[{"text":"be brief"}]},"tool_config":{"function_calling_config":{"mode":"AUTO"}},"contents":[{"parts":[{"text":"x"}]}]}`,
	`{"systemInstruction": {"parts": [ {"text": "be brief"} ]}, "system_instruction": {"parts":[]}, "tools": [ {"functionDeclarations": [ {"name": "f"} ]} ], "toolConfig": null, "tool_config": {"a": 1}, "contents": []}`,
	`{"systemInstruction":null,"system_instruction":null,"tools":null,"contents":null}`,
	`{"cachedContent":"cachedContents/abc","contents":[{"parts":[{"text":"x"}]}]}`,
	`{"cached_content":"","contents":[{"parts":[{"text":"x"}]}]}`,
	`{"generationConfig":{"temperature":0.5,"stopSequences":["\u0041"]},"safetySettings":[],"contents":[{"parts":[{"text":""},{"text":""},{}]}]}`,
	`{"contents":[{"parts":[{"text":null},{"text":5},{"text":"a","text":"b"},{"text":"a","other":1},{"te\u0078t":"escaped name"},{"text":["x"]},"str",null,7,[{"text":"x"}]]}]}`,
	`{"contents":[{"parts":[{"text":"a","text":null},{"text":null,"text":"b"},{"text":"a","text":5}]}]}`,
	`{"Contents":[{"parts":[{"text":"case-folded"}]}]}`,
	`{"contents":[{"Role":"model","PARTS":[{"text":"case-folded"}]}]}`,
	`{"contents":[{"parts":[{"Text":"case is a different key in a map"}]}]}`,
	`{"contents":[{"parts":[{"text":"a"}]}],"contents":[{"role":"model"}]}`,
	`{"contents":[{"role":"user","role":"model","parts":[{"text":"a"}]}]}`,
	`{"contents":[null,{"parts":null},{"role":null,"parts":[{"text":"a"}]}]}`,
	`{"contents":[{"role":5}]}`,
	`{"contents":{}}`,
	`{"contents":"x"}`,
	`{"cachedContent":5}`,
	`{"cachedContent":null,"contents":[]}`,
	`{"contents":[{"parts":[{"text":"unterminated}]}]}`,
	`{"contents":[{"parts":[{"text":"x"}]}]`,
	`{"contents":[{"parts":[{"text":"x"}]}]} trailing`,
	`{"contents":[{"parts":[{"text":"bad escape \q"}]}]}`,
	`{"contents":[{"parts":[{"text":"bad \u12"}]}]}`,
	`{"contents":[{"parts":[{"text":"bad \q","text":null}]}]}`,
	`{"contents":[{"parts":[{"text":"bad \q","text":"good"}]}]}`,
	`{"contents":[{"parts":[{"text":"bad \q","thought":true}]}]}`,
	`{"contents":[{"parts":[{"text":"bad \q","text":5}]}]}`,
	`{"contents":[{"parts":[{"text":"bad \u00zz \ud83d\udezz"}]}]}`,
	`{"contents":[{"parts":[{"text":"pair \ud83d\ude0"}]}]}`,
	"{\"contents\":[{\"parts\":[{\"text\":\"esc \\n then control \x1f\"}]}]}",
	"{\"contents\":[{\"parts\":[{\"text\":\"\\\\\\\\\\\"\\\\\"}]}]}",
	"{\"contents\":[{\"parts\":[{\"text\":\"control \x01 byte\"}]}]}",
	`{"contents":[{"parts":[{"text":"x"}],}]}`,
	`{"contents":[{"parts":[{"text":"x"},]}]}`,
	`{"n":01}`, `{"n":1.}`, `{"n":-}`, `{"n":1e}`, `{"n":tru}`, `{"n":nul}`,
	`[]`, `null`, `""`, ``, `{}`, ` {} `, `{"contents":[]}`,
	`{"kelvin\u212a":1,"contents":[]}`,
	"{\"contents\u212a\":[],\"contents\":[]}",
	"{\"ſystemInstruction\":{},\"contents\":[]}",
	`{"contents":[{"parts":[{"text":"` + strings.Repeat("long text ", 300) + `"}]}]}`,
	`{"contents":[{"parts":[{"text":"` + strings.Repeat("é\\n", 700) + `"},{"text":"` + strings.Repeat("x", 1024) + `"}]}]}`,
	`{"contents":[` + strings.Repeat(`{"parts":[{"a":`, 70) + `1` + strings.Repeat(`}]}`, 70) + `]}`,
	`{"tools":` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100) + `,"contents":[]}`,
}

// TestLayoutOfReference pins layoutOf to the encoding/json implementation
// it replaced (ledger_ref_test.go): every checkpoint's sum, bytes, fixed
// tokens, lead and text, the key, the content ends, explicit and media,
// and the error, for hand-written bodies, generated ones and the bench's.
func TestLayoutOfReference(t *testing.T) {
	for _, body := range layoutCases {
		if d := diffLayout([]byte(body), "gemini-2.5-flash"); d != "" {
			t.Errorf("%q: %s", body, d)
		}
	}
	rng := rand.New(rand.NewPCG(1, 17))
	for range 2000 {
		body := genLayoutBody(rng)
		if d := diffLayout(body, "m"); d != "" {
			t.Fatalf("%q: %s", body, d)
		}
	}
	for _, size := range bench.Sizes() {
		if d := diffLayout(size.Body, "gemini-2.5-flash"); d != "" {
			t.Errorf("%s: %s", size.Name, d)
		}
		if _, ok := layoutScan(size.Body, "m", nil, ""); !ok {
			t.Errorf("%s: the scanner gave up on the bench's body", size.Name)
		}
	}
}

// TestLayoutScanCommon checks that the scanner, not the fallback, lays out
// the common requests.
func TestLayoutScanCommon(t *testing.T) {
	for _, body := range layoutCases[:15] {
		if _, ok := layoutScan([]byte(body), "m", nil, ""); !ok {
			t.Errorf("%q: the scanner gave up", body)
		}
	}
}

// genLayoutBody returns a generate request body with random members,
// parts, strings and white space, sometimes corrupted.
func genLayoutBody(rng *rand.Rand) []byte {
	ws := func() string {
		return [...]string{"", "", "", " ", "\n  ", "\t", "\r\n"}[rng.IntN(7)]
	}
	pieces := []string{"a", "word ", "é", "中文", "😀", `\n`, `\t`, `\"`, `\\`, `\/`, `\u0000`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ude00`, `\ud83dx`, `\u2028`, `\b`, `\f`, "\xff", "\xc3", "\xed\xa0\x80", "\xef\xbf\xbd", "<&>"}
	str := func() string {
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(8) {
			p := pieces[rng.IntN(len(pieces))]
			if rng.IntN(4) == 0 {
				p = strings.Repeat(p, 1+rng.IntN(300))
			}
			b.WriteString(p)
		}
		b.WriteByte('"')
		return b.String()
	}
	var value func(depth int) string
	value = func(depth int) string {
		switch rng.IntN(8) {
		case 0:
			return str()
		case 1:
			return [...]string{"1", "-0.5e3", "0", "true", "false", "null"}[rng.IntN(6)]
		case 2, 3:
			if depth > 3 {
				return "1"
			}
			var m []string
			for range rng.IntN(4) {
				m = append(m, ws()+str()+ws()+":"+ws()+value(depth+1))
			}
			return "{" + strings.Join(m, ",") + ws() + "}"
		case 4:
			if depth > 3 {
				return "2"
			}
			var a []string
			for range rng.IntN(4) {
				a = append(a, ws()+value(depth+1)+ws())
			}
			return "[" + strings.Join(a, ",") + "]"
		default:
			return `{"text":` + ws() + str() + "}"
		}
	}
	part := func() string {
		switch rng.IntN(12) {
		case 0:
			return `{"text":` + str() + `,"thought":true}`
		case 1:
			return `{"thoughtSignature":"c2ln",` + ws() + `"text":` + str() + "}"
		case 2:
			return `{"inlineData":{"mimeType":"image/png","data":"` + strings.Repeat("QUJD", rng.IntN(50)) + `"}}`
		case 3:
			return `{"file_data":{"file_uri":"gs://x"}}`
		case 4:
			return `{"functionCall":{"name":"f","args":` + value(1) + `}}`
		case 5:
			return `{"function_response":{"name":"f","response":{"content":` + str() + `}}}`
		case 6:
			return value(1)
		case 7:
			return `{` + ws() + `"text"` + ws() + `:` + ws() + `null` + ws() + `}`
		default:
			return "{" + ws() + `"text"` + ws() + ":" + ws() + str() + ws() + "}"
		}
	}
	var top []string
	if rng.IntN(3) == 0 {
		top = append(top, `"systemInstruction":{"parts":[`+part()+`]}`)
	}
	if rng.IntN(4) == 0 {
		top = append(top, `"system_instruction":`+value(1))
	}
	if rng.IntN(3) == 0 {
		top = append(top, `"tools":`+ws()+`[{"functionDeclarations":[{"name":"read_file","parameters":`+value(1)+`}]}]`)
	}
	if rng.IntN(5) == 0 {
		top = append(top, `"toolConfig":`+value(1))
	}
	if rng.IntN(8) == 0 {
		top = append(top, `"cachedContent":`+str())
	}
	if rng.IntN(4) == 0 {
		top = append(top, `"generationConfig":`+value(0))
	}
	var contents []string
	for range rng.IntN(6) {
		var ps []string
		for range rng.IntN(4) {
			ps = append(ps, ws()+part()+ws())
		}
		c := `"parts":[` + strings.Join(ps, ",") + "]"
		switch rng.IntN(4) {
		case 0:
		case 1:
			c = `"role":"model",` + ws() + c
		default:
			c += `,"role":` + ws() + str()
		}
		contents = append(contents, "{"+c+"}")
	}
	top = append(top, `"contents":[`+strings.Join(contents, ","+ws())+"]")
	rng.Shuffle(len(top), func(i, j int) { top[i], top[j] = top[j], top[i] })
	body := []byte("{" + ws() + strings.Join(top, ","+ws()) + ws() + "}")
	if rng.IntN(10) == 0 && len(body) > 0 {
		// Corrupt one byte: mostly invalid JSON, sometimes another valid
		// body.
		body[rng.IntN(len(body))] = `{}[]",:\ 0an`[rng.IntN(12)]
	}
	return body
}

// FuzzLayoutOf checks layoutOf against the encoding/json implementation
// it replaced on any input.
func FuzzLayoutOf(f *testing.F) {
	for _, body := range layoutCases {
		f.Add([]byte(body))
	}
	rng := rand.New(rand.NewPCG(2, 17))
	for range 50 {
		f.Add(genLayoutBody(rng))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if d := diffLayout(body, "m"); d != "" {
			t.Errorf("%q: %s", body, d)
		}
	})
}

// BenchmarkLayoutOf lays out the bench's request bodies (1 KB, 70 KB,
// 1 MB) with layoutOf and with the encoding/json implementation it
// replaced (ref).
//
//	go test ./proxy -run '^$' -bench LayoutOf -benchmem -count 5
func BenchmarkLayoutOf(b *testing.B) {
	for _, size := range bench.Sizes() {
		if !json.Valid(size.Body) {
			b.Fatal("invalid bench body")
		}
		b.Run(size.Name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(size.Body)))
			for b.Loop() {
				if _, err := layoutOf(size.Body, "gemini-2.5-flash"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.Name+"/ref", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(size.Body)))
			for b.Loop() {
				if _, err := refLayoutOf(size.Body, "gemini-2.5-flash"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
