package rewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

// The newest-turn walk's passes over clear spans (auditnewest.go,
// walker.known) only save work: a walk that passes over them must find
// what a walk of every byte finds, whatever the records say and whatever
// the spans hold. These tests run both side by side.

// passGen builds, from fuzz bytes, a body that re-sends versions of one
// document (so that cuts and full copies share prefixes and suffixes) and
// records that point at them, exactly or not.
type passGen struct {
	in []byte
	k  int
}

func (g *passGen) next() int {
	if g.k >= len(g.in) {
		g.k++
		return g.k * 7 % 251
	}
	g.k++
	return int(g.in[g.k-1])
}

// doc is a document of quotes, backslashes and braces, the bytes that
// decide where a string ends.
func (g *passGen) doc() string {
	const alphabet = "ab\"\\\n{}[], :"
	n := 8 + g.next()%48
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.next()%len(alphabet)]
	}
	return string(b)
}

// body returns the body and the raw spans where each text's document
// lies in it.
func (g *passGen) body() ([]byte, []span) {
	d := g.doc()
	raw := g.next()%4 == 0 // write the documents unescaped: not JSON
	var b []byte
	var docs []span
	b = append(b, `{"contents":[`...)
	turns := 2 + g.next()%5
	for t := range turns {
		if t > 0 {
			b = append(b, ',')
		}
		role := "user"
		if t%2 == 1 {
			role = "model"
		}
		if g.next()%5 == 0 {
			role = "model"
		}
		v := d
		if g.next()%2 == 0 { // a new version: one byte edited
			e := []byte(v)
			e[g.next()%len(e)] = "x\"\\}"[g.next()%4]
			v = string(e)
		}
		var enc []byte
		if raw {
			enc = []byte(v)
		} else {
			q, _ := json.Marshal(v)
			enc = q[1 : len(q)-1]
		}
		b = append(b, `{"role":"`+role+`","parts":[{"text":"Here:\n`...)
		docs = append(docs, span{len(b), len(b) + len(enc)})
		b = append(b, enc...)
		b = append(b, `\nend"}]}`...)
	}
	return append(b, `]}`...), docs
}

// cuts returns records over docs: each cut names a document and another
// as its full copy, some moved by a few bytes or of other lengths.
func (g *passGen) cuts(b []byte, docs []span) []auditCut {
	var cuts []auditCut
	for range 1 + g.next()%4 {
		x, y := docs[g.next()%len(docs)], docs[g.next()%len(docs)]
		jig := func(s span) span {
			if g.next()%3 == 0 {
				s.start += g.next()%7 - 3
				s.end += g.next()%7 - 3
			}
			return s
		}
		x, y = jig(x), jig(y)
		cuts = append(cuts, auditCut{start: x.start, end: x.end, cs: x.start, ce: x.end, ts: y.start, te: y.end, super: true})
	}
	if g.next()%4 == 0 { // anything at all
		n := len(b) + 8
		cuts = append(cuts, auditCut{cs: g.next()*n/251 - 4, ce: g.next()*n/251 - 4, ts: g.next()*n/251 - 4, te: g.next()*n/251 - 4})
	}
	return cuts
}

// checkPass fails t when a walk with the spans of cuts finds anything a
// walk of every byte does not, for every entry point of the walk.
func checkPass(t *testing.T, b []byte, cuts []auditCut) {
	t.Helper()
	plain := &walker{b: b}
	shared := &walker{b: b}
	shared.known(cuts)
	fresh := func() *walker {
		w := &walker{b: b}
		w.known(cuts)
		return w
	}
	ws, wok := plain.newestTurn()
	for _, w := range []*walker{fresh(), shared} {
		if s, ok := w.newestTurn(); s != ws || ok != wok {
			t.Fatalf("newestTurn with passes = %v %v, without %v %v: %q %+v", s, ok, ws, wok, b, cuts)
		}
	}
	for i := range b {
		if b[i] != '"' {
			continue
		}
		wz, wok := plain.skipString(i)
		for _, w := range []*walker{fresh(), shared} {
			if z, ok := w.skipString(i); z != wz || ok != wok {
				t.Fatalf("skipString(%d) with passes = %d %v, without %d %v: %q %+v", i, z, ok, wz, wok, b, cuts)
			}
		}
		// Every string, as the cut's string of laterUserTurn.
		if wok {
			str := span{i + 1, wz - 1}
			want := plain.laterUserTurn(str)
			for _, w := range []*walker{fresh(), shared} {
				if got := w.laterUserTurn(str); got != want {
					t.Fatalf("laterUserTurn(%v) with passes = %v, without %v: %q %+v", str, got, want, b, cuts)
				}
			}
		}
	}
	for after := -1; after < len(b); after += 1 + len(b)/13 {
		ws, wl, wok := plain.walkContents(after)
		for _, w := range []*walker{fresh(), shared} {
			if s, l, ok := w.walkContents(after); s != ws || l != wl || ok != wok {
				t.Fatalf("walkContents(%d) with passes = %v %v %v, without %v %v %v: %q %+v", after, s, l, ok, ws, wl, wok, b, cuts)
			}
		}
	}
}

func TestWalkPassSame(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	for range 3000 {
		in := make([]byte, 64)
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		g := &passGen{in: in}
		b, docs := g.body()
		checkPass(t, b, g.cuts(b, docs))
	}
}

// TestWalkPassSplit checks the split of a cut's content that shares only
// a prefix and a suffix with its full copy: a run of backslashes that
// reaches from the differing bytes into the suffix decides whether the
// quote after it is escaped, in the cut as in the copy.
func TestWalkPassSplit(t *testing.T) {
	for _, tt := range []struct{ cut, copy string }{
		{`a\\\"b\"c`, `a\\x"b\"c`},  // the cut's \\\" is escaped, the copy has no backslash run there
		{`a\x\"b`, `a\\\"b`},        // differing byte inside the run
		{`\"aaaa\"`, `x\"aaaa\"`},   // prefix empty
		{`aaaa\"x`, `aaaa\"`},       // suffix empty
		{`ab\\`, `ab\\`},            // the same, ending with an escaped backslash
		{`ab\\\\\\\"c`, `ab\\\\"c`}, // a long run split by the edit
		{`\\\\\\`, `\\\\\\\\`},      // only backslashes
		{`a"b`, `a"b`},              // a real quote in both: nothing is clear
		{`a\"b"c`, `a\"b\"c`},       // a real quote in the cut's differing part
		{`a\"b\\"c`, `a\"b\\\"c`},   // a real quote after an escaped backslash
	} {
		body := []byte(`{"contents":[{"role":"user","parts":[{"text":"` + tt.cut + `"}]},{"role":"user","parts":[{"text":"` + tt.copy + `"}]}]}`)
		x := bytes.Index(body, []byte(tt.cut))
		y := bytes.LastIndex(body, []byte(tt.copy))
		cuts := []auditCut{{cs: x, ce: x + len(tt.cut), ts: y, te: y + len(tt.copy)}}
		checkPass(t, body, cuts)
	}
}

// TestWalkPassOddRun checks that the walk does not pass over a clear span
// that an odd run of backslashes comes before: the run takes the span's
// first backslash, and the quote after it ends the string.
func TestWalkPassOddRun(t *testing.T) {
	// The text "a\\" ends at its quote, which follows two backslashes.
	// The cut's span is its second backslash and that quote: `\"` holds
	// the same bytes as the start of the later text "\"b", and is clear
	// on its own (its quote follows one backslash), but the run before it
	// is odd.
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"a\\"},{"text":"\"b"}]}]}`)
	i := bytes.Index(body, []byte(`"a`))
	x := i + 3
	y := bytes.LastIndex(body, []byte(`\"b`))
	cuts := []auditCut{{cs: x, ce: x + 2, ts: y, te: y + 2}}
	if string(body[x:x+2]) != `\"` || string(body[y:y+2]) != `\"` {
		t.Fatalf("spans %q %q", body[x:x+2], body[y:y+2])
	}
	checkPass(t, body, cuts)
	w := &walker{b: body}
	w.known(cuts)
	if z, ok := w.skipString(i); !ok || z != x+2 {
		t.Fatalf("skipString = %d %v, want %d", z, ok, x+2)
	}
}

func FuzzWalkPass(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07"))
	f.Add(bytes.Repeat([]byte{2, 3, 3, 1, 4, 1, 5, 9, 2, 6}, 9))
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &passGen{in: in}
		b, docs := g.body()
		checkPass(t, b, g.cuts(b, docs))
	})
}

// TestAuditPassLossy runs the audit with and without the passes side by
// side on lossy rewrites: honest rewrites of sessions with superseded
// references whose original has one byte changed (a quote, a backslash,
// a brace, a letter; in the output too where it lies outside every cut),
// whose last user turns get another role (so that a superseded reference
// may lie in the newest user turn), and whose records point the cuts' and
// full copies' contents a few bytes off. Both must give the same verdict, and fail where the audit without
// any shortcut fails.
func TestAuditPassLossy(t *testing.T) {
	type body struct {
		name string
		b    []byte
	}
	var bodies []body
	for _, turns := range []int{10, 50} {
		bodies = append(bodies, body{fmt.Sprintf("session/%d", turns), sizedSession(30<<10, turns)})
	}
	in, _, _ := newestCaseAt(t, false)
	bodies = append(bodies, body{"newest", in})
	in, _, _ = newestCaseAt(t, true)
	bodies = append(bodies, body{"late", in})
	r := rand.New(rand.NewPCG(17, 2))
	newest := 0
	for _, bd := range bodies {
		out, rep, err := Request(bd.b, DefaultOptions(), nil)
		if err != nil {
			t.Fatal(err)
		}
		a := rep.aud
		if a == nil || a.uf != nil || len(a.splits) > 0 {
			t.Fatalf("%s: want cuts only", bd.name)
		}
		au := &auditor{rep: rep, a: a, b1: bd.b}
		reasons := map[AuditReason]int{}
		for range 300 {
			in, o := bytes.Clone(bd.b), bytes.Clone(out)
			p := r.IntN(len(in))
			if r.IntN(2) == 0 {
				in[p] = "\"\\}x"[r.IntN(4)]
			}
			// Mirror the change in the output when p is outside every cut.
			shift, inside := 0, false
			for i := range a.cuts {
				c := &a.cuts[i]
				if c.end <= p {
					shift += len(au.refBytes(i, nil)) - (c.end - c.start)
				} else if c.start <= p {
					inside = true
				}
			}
			if !inside && r.IntN(2) == 0 {
				o[p+shift] = in[p]
			}
			// Make the last few user turns turns of another role, so
			// that the newest user turn is an earlier one (same length:
			// every offset of the records still holds).
			for range r.IntN(3) {
				for _, b := range [][]byte{in, o} {
					if k := bytes.LastIndex(b, []byte(`"role":"user"`)); k >= 0 {
						copy(b[k:], `"role":"User"`)
					} else if k := bytes.LastIndex(b, []byte(`"role": "user"`)); k >= 0 {
						copy(b[k:], `"role": "User"`)
					}
				}
			}
			rp := copyReport(rep)
			for i := range rp.aud.cuts {
				c := &rp.aud.cuts[i]
				if r.IntN(3) == 0 {
					c.cs += r.IntN(5) - 2
					c.ce += r.IntN(5) - 2
				}
				if r.IntN(8) == 0 {
					c.ts += r.IntN(5) - 2
					c.te += r.IntN(5) - 2
				}
			}
			with := auditWith(in, o, rp, true, true)
			without := auditWith(in, o, rp, true, false)
			full := auditWith(in, o, rp, false, false)
			// Without the memo the same rewrite may fail for another
			// reason first (the memo orders the hash checks otherwise),
			// never pass or fail differently.
			if !sameVerdict(with, without) || (with == nil) != (full == nil) {
				t.Fatalf("%s, byte %d = %q: audit with passes %v, without %v, without any shortcut %v", bd.name, p, in[p], with, without, full)
			}
			reasons[reasonOf(with)]++
		}
		t.Logf("%s: verdicts %v", bd.name, reasons)
		newest += reasons[AuditSupersededNewestTurn]
		if len(reasons) < 2 {
			t.Errorf("%s: every lossy rewrite got one verdict %v: the test tampers too little", bd.name, reasons)
		}
	}
	if newest == 0 {
		t.Error("no lossy rewrite put a superseded reference in the newest user turn: the test tampers too little")
	}
}

// sameVerdict reports whether two audit errors have the same reason and
// replacement.
func sameVerdict(x, y error) bool {
	if reasonOf(x) != reasonOf(y) {
		return false
	}
	ex, okx := x.(*AuditError)
	ey, oky := y.(*AuditError)
	return okx == oky && (!okx || ex.Replacement == ey.Replacement)
}
