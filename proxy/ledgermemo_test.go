package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/gemini-proxy/gemini-proxy/bench"
)

// diffMemo returns how the layout of body with memo differs from the
// reference implementation's, or "". It lays out a copy of body, so that
// a layout reading another request's bytes shows, and checks that every
// text it keeps lies in that copy.
func diffMemo(memo *layoutMemo, body []byte, model string) string {
	body = bytes.Clone(body)
	l := &ledger{memo: memo}
	got, gerr := l.layoutOf("t", body, model)
	want, werr := refLayoutOf(body, model)
	if (werr != nil) != (gerr != nil) || werr != nil && strings.ReplaceAll(werr.Error(), "refLedgerRequest", "ledgerRequest") != gerr.Error() {
		return fmt.Sprintf("error %v, reference %v", gerr, werr)
	}
	if werr != nil {
		return ""
	}
	_, scanned := layoutScan(body, model, nil, "")
	for i, t := range got.texts {
		if t == "" || !scanned {
			// layoutDecoded's texts are its own.
			continue
		}
		off := offsetIn(body, unsafe.Slice(unsafe.StringData(t), len(t)))
		if off < 0 || off+len(t) > len(body) {
			return fmt.Sprintf("text %d does not lie in the body", i)
		}
	}
	if len(got.esc) > 0 && &got.body[0] != &body[0] {
		return "escaped chunks read another body"
	}
	g := layoutView(got)
	for i := range g.leads {
		if len(g.leads[i]) == 0 && len(want.leads[i]) == 0 {
			g.leads[i] = want.leads[i]
		}
	}
	if d := fmt.Sprintf("%+v", g); d != fmt.Sprintf("%+v", want) {
		return fmt.Sprintf("layout\n%s\nreference\n%+v", d, want)
	}
	return ""
}

// convGen generates the requests of one conversation: contents that
// mostly stay as they were sent, and requests that grow, edit, truncate,
// reorder and re-send them, change the head or the model.
type convGen struct {
	rng      *rand.Rand
	contents []string
	system   string
	model    string
}

var convPieces = []string{"a", "word ", "func f() {}", "é", "中文", "😀", `\n`, `\t`, `\"`, `\\`, `\/`, `\u0000`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ude00x`, "\xff", "\xed\xa0\x80", "<&>", "\u2028"}

func (g *convGen) text(n int) string {
	var b strings.Builder
	for b.Len() < n {
		p := convPieces[g.rng.IntN(len(convPieces))]
		if g.rng.IntN(3) == 0 {
			p = strings.Repeat(p, 1+g.rng.IntN(60))
		}
		b.WriteString(p)
	}
	s := b.String()
	// Never end inside an escape.
	for strings.HasSuffix(s, `\`) && !strings.HasSuffix(s, `\\`) {
		s = strings.TrimSuffix(s, `\`)
	}
	return s
}

func (g *convGen) content(i int) string {
	ws := [...]string{"", " ", "\n  "}[g.rng.IntN(3)]
	var parts []string
	for range 1 + g.rng.IntN(3) {
		switch g.rng.IntN(10) {
		case 0:
			parts = append(parts, `{"inlineData":{"mimeType":"image/png","data":"`+strings.Repeat("QUJD", 1+g.rng.IntN(200))+`"}}`)
		case 1:
			parts = append(parts, `{"functionCall":{"name":"read_file","args":{"path":"`+g.text(10)+`"}}}`)
		case 2:
			parts = append(parts, `{"text":"short"}`)
		case 3:
			parts = append(parts, `{"text":null}`)
		case 4:
			parts = append(parts, `{"text":"`+g.text(20)+`","thought":true}`)
		default:
			n := []int{30, 300, 600, 2000, 5000}[g.rng.IntN(5)]
			parts = append(parts, `{`+ws+`"text":`+ws+`"`+g.text(n)+`"}`)
		}
	}
	role := [...]string{"user", "model"}[i%2]
	if g.rng.IntN(2) == 0 {
		return `{"role":"` + role + `",` + ws + `"parts":[` + strings.Join(parts, ","+ws) + `]}`
	}
	return `{"parts":[` + strings.Join(parts, ",") + `],` + ws + `"role":"` + role + `"}`
}

func (g *convGen) body() []byte {
	var top []string
	c := `"contents":[` + strings.Join(g.contents, ",") + `]`
	if g.system != "" {
		si := `"systemInstruction":{"parts":[{"text":"` + g.system + `"}]}`
		// The head before or after the contents.
		if len(g.system)%2 == 0 {
			top = append(top, si, c)
		} else {
			top = append(top, c, si)
		}
	} else {
		top = append(top, c)
	}
	return []byte("{" + strings.Join(top, ",") + "}")
}

// next changes the conversation as a client's next request might.
func (g *convGen) next() {
	n := len(g.contents)
	switch op := g.rng.IntN(20); {
	case op < 9 || n < 2: // grow
		for range 1 + g.rng.IntN(2) {
			g.contents = append(g.contents, g.content(len(g.contents)))
		}
	case op < 11: // edit one content
		i := g.rng.IntN(n)
		c := []byte(g.contents[i])
		k := strings.Index(g.contents[i], `"text":"`)
		if k >= 0 && k+9 < len(c) && c[k+8] != '\\' && c[k+8] != '"' {
			c[k+8] = 'Z'
			g.contents[i] = string(c)
		} else {
			g.contents[i] = g.content(i)
		}
	case op < 13: // truncate
		g.contents = g.contents[:1+g.rng.IntN(n-1)]
	case op < 15: // reorder
		i, j := g.rng.IntN(n), g.rng.IntN(n)
		g.contents[i], g.contents[j] = g.contents[j], g.contents[i]
	case op < 16: // another system instruction
		g.system = g.text(10 + g.rng.IntN(3000))
	case op < 17:
		g.model = [...]string{"m", "n"}[g.rng.IntN(2)]
	case op < 18: // a corrupted request
		g.contents[n-1] = strings.Replace(g.contents[n-1], `"parts":[`, `"parts":[}`, 1)
	default: // the same request again
	}
}

// TestLayoutMemoReference checks that layouts through the memo are the
// reference's: the hand-written and random bodies twice (the second time
// from the memo), and the requests of random conversations, with a memo
// large enough for all and one small enough to forget most.
func TestLayoutMemoReference(t *testing.T) {
	for _, max := range []int{ledgerMemoBytes, 20 << 10} {
		memo := newLayoutMemo(max)
		for _, body := range layoutCases {
			for range 2 {
				if d := diffMemo(memo, []byte(body), "gemini-2.5-flash"); d != "" {
					t.Fatalf("%q: %s", body, d)
				}
			}
		}
		rng := rand.New(rand.NewPCG(3, 17))
		for range 500 {
			body := genLayoutBody(rng)
			for range 2 {
				if d := diffMemo(memo, body, "m"); d != "" {
					t.Fatalf("%q: %s", body, d)
				}
			}
		}
		for _, size := range bench.Sizes() {
			for range 2 {
				if d := diffMemo(memo, size.Body, "gemini-2.5-flash"); d != "" {
					t.Fatalf("%s: %s", size.Name, d)
				}
			}
		}
		before := memo.replays.Load()
		for c := range 40 {
			g := &convGen{rng: rand.New(rand.NewPCG(uint64(c), 17)), model: "m"}
			if c%3 == 0 {
				g.system = g.text(400)
			}
			g.contents = []string{g.content(0)}
			for range 12 {
				body := g.body()
				if d := diffMemo(memo, body, g.model); d != "" {
					t.Fatalf("conversation %d: %q: %s", c, body, d)
				}
				g.next()
			}
		}
		t.Logf("memo of %d bytes: %d contents of the conversations laid out from it", max, memo.replays.Load()-before)
		if max == ledgerMemoBytes && memo.replays.Load() == before {
			t.Error("no content was laid out from the memo")
		}
	}
}

// TestLayoutMemoShared checks that conversations whose contents start
// alike, more than memoPerKey of them, each lay out as the reference.
func TestLayoutMemoShared(t *testing.T) {
	memo := newLayoutMemo(ledgerMemoBytes)
	start := strings.Repeat("You are a helpful assistant. ", 20)
	for round := range 3 {
		for c := range 2 * memoPerKey {
			body := fmt.Sprintf(`{"contents":[{"role":"user","parts":[{"text":"%s conversation %d"}]},{"role":"model","parts":[{"text":"%s"}]}]}`, start, c, strings.Repeat("answer ", 40+round))
			if d := diffMemo(memo, []byte(body), "m"); d != "" {
				t.Fatalf("conversation %d: %s", c, d)
			}
		}
	}
}

// addConvSeeds adds to f twenty pairs of successive requests of a
// conversation generated from seed.
func addConvSeeds(f *testing.F, seed uint64) {
	g := &convGen{rng: rand.New(rand.NewPCG(seed, 17)), model: "m"}
	g.contents = []string{g.content(0)}
	for range 20 {
		a := g.body()
		g.next()
		f.Add(a, g.body())
	}
}

// FuzzLayoutMemo lays out two bodies, and the first again, through one
// memo, each checked against the reference.
func FuzzLayoutMemo(f *testing.F) {
	addConvSeeds(f, 4)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		memo := newLayoutMemo(ledgerMemoBytes)
		for _, body := range [][]byte{a, b, a, b} {
			if d := diffMemo(memo, body, "m"); d != "" {
				t.Fatalf("%q: %s", body, d)
			}
		}
	})
}

// BenchmarkLayoutMemo lays out the bench's bodies through a memo that
// holds them (the conversation's previous request was the same), the
// layouts going back to their pool as settle's do, next to
// BenchmarkLayoutOf's layout from scratch.
//
//	go test ./proxy -run '^$' -bench 'LayoutOf|LayoutMemo' -benchmem
func BenchmarkLayoutMemo(b *testing.B) {
	for _, size := range bench.Sizes() {
		b.Run(size.Name, func(b *testing.B) {
			l := &ledger{memo: newLayoutMemo(ledgerMemoBytes)}
			if _, err := l.layoutOf("t", size.Body, "gemini-2.5-flash"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(size.Body)))
			for b.Loop() {
				p, err := l.layoutOf("t", size.Body, "gemini-2.5-flash")
				if err != nil {
					b.Fatal(err)
				}
				releaseLayout(p) // as settle does
			}
		})
		// The conversation's next request: the same contents and a new
		// turn of 4 KB, numbered, the only content the memo does not
		// know.
		b.Run(size.Name+"+turn", func(b *testing.B) {
			l := &ledger{memo: newLayoutMemo(ledgerMemoBytes)}
			body := append(bytes.Clone(size.Body[:len(size.Body)-2]), `,{"parts":[{"text":"Question 00000000: `...) // without "]}"
			num := len(body) - 10
			body = append(body, strings.Repeat(`func f() {\n\treturn \"x\"\n}\n`, 128)+`"}],"role":"user"}]}`...)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			i := 0
			for b.Loop() {
				copy(body[num:], fmt.Sprintf("%08d", i))
				p, err := l.layoutOf("t", body, "gemini-2.5-flash")
				if err != nil {
					b.Fatal(err)
				}
				releaseLayout(p)
				i++
			}
		})
	}
}

// TestTailOfSums checks tailOf's running hash against tailSum of each
// prefix, for texts that end a layout in a short chunk.
func TestTailOfSums(t *testing.T) {
	g := &convGen{rng: rand.New(rand.NewPCG(5, 17))}
	checked := 0
	for range 200 {
		body := fmt.Sprintf(`{"contents":[{"parts":[{"text":"%s"}]}]}`, g.text(1+g.rng.IntN(3000)))
		p, err := layoutOf([]byte(body), "m")
		if err != nil {
			t.Fatal(err)
		}
		tl := p.tailOf()
		if len(tl.ns) == 0 {
			continue
		}
		last := len(p.sums) - 1
		text := p.text(last)
		for k, n := range tl.ns {
			if want := tailSum(p.leads[last], text[:n]); tl.sums[k] != want {
				t.Fatalf("%q: tail sum of %d bytes %x, want %x", body, n, tl.sums[k], want)
			}
		}
		checked++
	}
	if checked < 100 {
		t.Fatalf("only %d layouts ended in a short chunk", checked)
	}
}

// TestLayoutMemoConcurrent lays out the requests of several
// conversations at once through one memo (run with -race).
func TestLayoutMemoConcurrent(t *testing.T) {
	memo := newLayoutMemo(64 << 10)
	errs := make(chan string, 4)
	for w := range 4 {
		go func() {
			g := &convGen{rng: rand.New(rand.NewPCG(uint64(w%2), 18)), model: "m"}
			g.contents = []string{g.content(0)}
			for range 10 {
				if d := diffMemo(memo, g.body(), g.model); d != "" {
					errs <- d
					return
				}
				g.next()
			}
			errs <- ""
		}()
	}
	for range 4 {
		if d := <-errs; d != "" {
			t.Fatal(d)
		}
	}
}

// TestLayoutMemoTenants checks that a tenant's layouts never come from
// another tenant's contents.
func TestLayoutMemoTenants(t *testing.T) {
	l := &ledger{memo: newLayoutMemo(ledgerMemoBytes)}
	body := bench.Sizes()[1].Body
	for _, tc := range []struct {
		tenant string
		replay bool
	}{{"a", false}, {"b", false}, {"a", true}, {"b", true}} {
		before := l.memo.replays.Load()
		p, err := l.layoutOf(tc.tenant, body, "m")
		if err != nil {
			t.Fatal(err)
		}
		if got := l.memo.replays.Load() > before; got != tc.replay {
			t.Errorf("tenant %s: laid out from the memo %v, want %v", tc.tenant, got, tc.replay)
		}
		if d := diffMemo(l.memo, body, "m"); d != "" {
			t.Fatal(d)
		}
		releaseLayout(p)
	}
}

// TestLayoutMemoNearMiss lays out a long content, then bodies whose
// content starts with the same bytes (the memo's name for it) but
// differs at one byte: near its start, in the middle, at its last text
// byte and in its closing bytes. No such body may be laid out from the
// remembered content (a wrong hit would give it the other content's
// checkpoints), and each must match the reference layout.
func TestLayoutMemoNearMiss(t *testing.T) {
	text := strings.Repeat(`func f() {\n\treturn \"x\"\n}\n`, 4096) // ~120 KB
	mk := func(text, end string) []byte {
		return []byte(`{"contents":[{"parts":[{"text":"` + text + `"}],"role":"user"` + end + `,{"parts":[{"text":"` + strings.Repeat("q", 300) + `"}],"role":"user"}]}`)
	}
	base := mk(text, "}")
	flip := func(i int) string {
		b := []byte(text)
		if b[i] == 'x' {
			b[i] = 'y'
		} else {
			b[i] = 'x'
		}
		return string(b)
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"start", mk(flip(memoWindow), "}")},
		{"middle", mk(flip(len(text)/2), "}")},
		{"last text byte", mk(text[:len(text)-1]+"Z", "}")},
		{"closing bytes", mk(text, `,"x":1}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &ledger{memo: newLayoutMemo(ledgerMemoBytes)}
			if p, err := l.layoutOf("t", base, "m"); err != nil {
				t.Fatal(err)
			} else {
				releaseLayout(p)
			}
			// The base is remembered: laying it out again replays it.
			before := l.memo.replays.Load()
			if d := diffMemo(l.memo, base, "m"); d != "" {
				t.Fatal(d)
			}
			if l.memo.replays.Load() == before {
				t.Fatal("the base body was not laid out from the memo")
			}
			before = l.memo.replays.Load()
			if d := diffMemo(l.memo, tc.body, "m"); d != "" {
				t.Fatal(d)
			}
			if n := l.memo.replays.Load() - before; n != 0 {
				t.Errorf("%d contents laid out from the memo, want 0", n)
			}
		})
	}
}

// TestLayoutMemoHeads checks that a head is laid out from the memo only
// for the tenant, model and bytes it was laid out from: after the base
// body, bodies whose systemInstruction, tools or toolConfig differ at one
// byte, or that another tenant or model sends, lay out as the reference
// and are not replayed; the same head again is, also when its members
// move.
func TestLayoutMemoHeads(t *testing.T) {
	turn := `"contents":[{"role":"user","parts":[{"text":"` + strings.Repeat("q", 300) + `"}]}]`
	mk := func(si, tools, tc string) []byte {
		return []byte(`{"systemInstruction":{"parts":[{"text":"` + si + `"}]},"tools":[{"functionDeclarations":[{"name":"` + tools + `"}]}],"toolConfig":{"mode":"` + tc + `"},` + turn + `}`)
	}
	si, tools, tc := strings.Repeat("be brief ", 200), "read_file", "AUTO"
	base := mk(si, tools, tc)
	check := func(l *ledger, name, tenant, model string, body []byte, replay bool) {
		t.Helper()
		before := l.memo.headReplays.Load()
		p, err := l.layoutOf(tenant, body, model)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := refLayoutOf(body, model)
		if err != nil {
			t.Fatalf("%s: reference: %v", name, err)
		}
		g := layoutView(p)
		for i := range g.leads {
			if len(g.leads[i]) == 0 && len(want.leads[i]) == 0 {
				g.leads[i] = want.leads[i]
			}
		}
		if got, want := fmt.Sprintf("%+v", g), fmt.Sprintf("%+v", want); got != want {
			t.Errorf("%s: layout\n%s\nreference\n%s", name, got, want)
		}
		releaseLayout(p)
		if got := l.memo.headReplays.Load() > before; got != replay {
			t.Errorf("%s: head laid out from the memo %v, want %v", name, got, replay)
		}
	}
	for _, tc := range []struct {
		name, tenant, model string
		body                []byte
		replay              bool
	}{
		{"again", "a", "m", base, true},
		{"moved", "a", "m", []byte(`{` + turn + `,"toolConfig":{"mode":"AUTO"},"tools":[{"functionDeclarations":[{"name":"read_file"}]}],"systemInstruction":{"parts":[{"text":"` + si + `"}]}}`), true},
		{"system instruction", "a", "m", mk(si[:len(si)-1]+"!", tools, tc), false},
		{"tools", "a", "m", mk(si, "read_filf", tc), false},
		{"tool config", "a", "m", mk(si, tools, "AUTP"), false},
		{"white space", "a", "m", []byte(strings.Replace(string(base), `{"mode"`, `{ "mode"`, 1)), false},
		{"no head", "a", "m", []byte(`{` + turn + `}`), false},
		{"another tenant", "b", "m", base, false},
		{"another model", "a", "n", base, false},
	} {
		l := &ledger{memo: newLayoutMemo(ledgerMemoBytes)}
		check(l, "base", "a", "m", base, false)
		check(l, tc.name, tc.tenant, tc.model, tc.body, tc.replay)
	}
	// A memo too small for the head does not remember it.
	l := &ledger{memo: newLayoutMemo(20 << 10)}
	check(l, "base", "a", "m", base, false)
	check(l, "small memo", "a", "m", base, false)
}
