package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"github.com/gemini-proxy/gemini-proxy/bench"
)

// refMemoCheck is one checkpoint of a content as memoHash held it before
// its columns (issue 17, branch ledgerlarge): the oracle's input.
type refMemoCheck struct {
	sum          uint64
	nbytes       int
	fixed        float64
	lead         uint8
	text0, text1 int
}

// refChecks returns h's checkpoints one by one, as record built them
// before the columns.
func refChecks(h *memoHash) []refMemoCheck {
	out := make([]refMemoCheck, len(h.sums))
	for j := range out {
		c := refMemoCheck{sum: h.sums[j], nbytes: h.nbytes[j], fixed: h.fixed[j]}
		switch l := h.leads[j]; {
		case l == nil:
		case len(l) == 1:
			c.lead = 1
		default:
			c.lead = 2
		}
		out[j] = c
	}
	for _, t := range h.texts {
		out[t.i].text0, out[t.i].text1 = t.text0, t.text1
	}
	return out
}

// replayRef is replay as it was, one checkpoint at a time: the oracle of
// TestReplayReference and FuzzReplayReference.
func (b *layoutBuilder) replayRef(h *memoHash, checks []refMemoCheck, body []byte, pos int) bool {
	if err := b.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.state); err != nil {
		return false
	}
	p := b.p
	base := len(p.sums)
	for _, c := range checks {
		b.bytesSoFar += c.nbytes
		b.fixedSoFar += c.fixed
		p.sums = append(p.sums, c.sum)
		p.bytes = append(p.bytes, b.bytesSoFar)
		p.fixed = append(p.fixed, b.fixedSoFar)
		var lead []byte
		switch c.lead {
		case 1:
			lead = textLeads[1:]
		case 2:
			lead = textLeads[:]
		}
		p.leads = append(p.leads, lead)
		text := ""
		if c.text1 > c.text0 {
			text = unsafe.String(&body[pos+c.text0], c.text1-c.text0)
		}
		p.texts = append(p.texts, text)
	}
	for _, e := range h.esc {
		e.i += base
		e.off += pos
		e.end += pos
		p.esc = append(p.esc, e)
	}
	b.replayed(h, body)
	return true
}

// replayWords and replayEscaped are replayPrefix's texts, the same bytes
// for both builders (sameTextAddrs).
var (
	replayWords   = bytes.Repeat([]byte("word "), 300)
	replayEscaped = []byte(`"a\nb\"c"`)
)

// replayPrefix lays out a head and one content into a fresh builder, so
// that a replay appends to checkpoints, running sums and escaped chunks
// already there (or, for prefix 0, to none).
func replayPrefix(prefix int) *layoutBuilder {
	// Not from the pools: a pooled layout's empty slices are not nil.
	b := &layoutBuilder{h: sha256.New(), p: &layout{}}
	if prefix == 0 {
		return b
	}
	b.head("m", nil, nil, nil)
	b.contentBody("user")
	b.text(replayWords[:5*prefix])
	if !b.textEsc(replayEscaped, 1, 7) {
		panic("textEsc")
	}
	return b
}

// diffReplay replays every hash memo holds, each after each prefix, with
// replay and replayRef, and reports the first difference: the layouts
// (every field, the texts' addresses too), the builders' figures and
// their SHA-256 states.
func diffReplay(memo *layoutMemo) (string, int) {
	var hashes []*memoHash
	var raws [][]byte
	memo.mu.Lock()
	for _, list := range memo.m {
		for _, n := range list {
			if n.hash != nil {
				hashes, raws = append(hashes, n.hash), append(raws, n.raw)
			}
		}
	}
	memo.mu.Unlock()
	for i, h := range hashes {
		for _, prefix := range []int{0, 1, 300} {
			body := append(bytes.Repeat([]byte{' '}, prefix), raws[i]...)
			got, want := replayPrefix(prefix), replayPrefix(prefix)
			gok := got.replay(h, body, prefix)
			wok := want.replayRef(h, refChecks(h), body, prefix)
			if gok != wok {
				return fmt.Sprintf("hash %d after %d: replay %v, reference %v", i, prefix, gok, wok), len(hashes)
			}
			gs, _ := got.h.(encoding.BinaryAppender).AppendBinary(nil)
			ws, _ := want.h.(encoding.BinaryAppender).AppendBinary(nil)
			gp, wp := *got.p, *want.p
			got.p, want.p, got.h, want.h = nil, nil, nil, nil
			if !reflect.DeepEqual(gp, wp) || !sameTextAddrs(gp.texts, wp.texts) {
				gp.body, wp.body = nil, nil
				return fmt.Sprintf("hash %d after %d: layout\n%+v\nreference\n%+v", i, prefix, gp, wp), len(hashes)
			}
			if !reflect.DeepEqual(*got, *want) || !bytes.Equal(gs, ws) {
				return fmt.Sprintf("hash %d after %d: builder\n%+v\nreference\n%+v", i, prefix, *got, *want), len(hashes)
			}
		}
	}
	return "", len(hashes)
}

// sameTextAddrs reports whether a and b's texts lie at the same
// addresses (DeepEqual compares only their bytes).
func sameTextAddrs(a, b []string) bool {
	for i := range a {
		if unsafe.StringData(a[i]) != unsafe.StringData(b[i]) {
			return false
		}
	}
	return true
}

// TestReplayReference checks replay against replayRef on the hashes of
// the hand-written and random bodies, the bench's and those of random
// conversations.
func TestReplayReference(t *testing.T) {
	memo := newLayoutMemo(ledgerMemoBytes)
	l := &ledger{memo: memo}
	lay := func(body []byte, model string) {
		if p, err := l.layoutOf("t", bytes.Clone(body), model); err == nil {
			releaseLayout(p)
		}
	}
	for _, body := range layoutCases {
		lay([]byte(body), "gemini-2.5-flash")
	}
	rng := rand.New(rand.NewPCG(5, 17))
	for range 300 {
		lay(genLayoutBody(rng), "m")
	}
	for _, size := range bench.Sizes() {
		lay(size.Body, "gemini-2.5-flash")
	}
	for c := range 20 {
		g := &convGen{rng: rand.New(rand.NewPCG(uint64(c), 5)), model: "m"}
		g.contents = []string{g.content(0)}
		for range 8 {
			lay(g.body(), g.model)
			g.next()
		}
	}
	d, n := diffReplay(memo)
	if d != "" {
		t.Fatal(d)
	}
	if n < 50 {
		t.Fatalf("only %d hashes checked", n)
	}
	t.Logf("%d hashes checked", n)
}

// FuzzReplayReference checks replay against replayRef on the hashes of
// any two bodies, laid out through one memo.
func FuzzReplayReference(f *testing.F) {
	addConvSeeds(f, 6)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		memo := newLayoutMemo(ledgerMemoBytes)
		l := &ledger{memo: memo}
		for _, body := range [][]byte{a, b} {
			if p, err := l.layoutOf("t", bytes.Clone(body), "m"); err == nil {
				releaseLayout(p)
			}
		}
		if d, _ := diffReplay(memo); d != "" {
			t.Fatal(d)
		}
	})
}
