package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The ledger lays out the client's body, and the body sent when the
// rewrite changed it, on every generate request: hashing and unescaping a
// 1 MB body is about a millisecond even when every byte of it went by in
// the previous request of the conversation, which is the common case (a
// conversation's next request re-sends all of it and adds a turn). A
// layoutMemo remembers the contents it laid out: a content's bytes, its
// parts, and, for the chain state it started from, its checkpoints and
// the chain state after it. layoutScan looks each content of a body up
// before it scans it and, when the bytes there are the remembered
// content's (compared in full) and the chain before it is the one
// remembered (its whole SHA-256 digest), appends the remembered
// checkpoints instead of reading and hashing the content. The layout is
// the same either way (TestLayoutMemoReference, FuzzLayoutMemo); the
// memo is in-process only, so shared mode's state (hashes and counts) is
// untouched, and a miss costs the layout it would have cost anyway.

const (
	// ledgerMemoBytes bounds what a ledger's memo holds: the contents'
	// bytes and their checkpoints. The least recently used go first.
	ledgerMemoBytes = 32 << 20
	// memoWindow is how much of a content's start names it in the memo
	// (with the contents before it): shorter contents are not
	// remembered, as they cost little to lay out.
	memoWindow = 256
	// memoPerKey bounds the contents remembered under one name
	// (contents that start alike after the same contents).
	memoPerKey = 4
	// memoHeads is the number of heads (model, systemInstruction, tools,
	// toolConfig) a memo remembers, one per slot chosen by tenant and
	// model; memoHeadBytes bounds the raw JSON of one, and a sixty-fourth
	// of the memo's bytes does too, so that the heads keep at most a
	// quarter of them besides the memo's own bound.
	memoHeads     = 16
	memoHeadBytes = 64 << 10
)

// splitMemoryBudget takes the ledger's memo out of the process-wide
// memory budget b (Options.MemoryBudgetBytes): the memo may hold
// ledgerMemoBytes, at most a quarter of b, and the traffic buffers get
// the rest, so that what the memo keeps is inside memory.limit_bytes.
// Without a budget (b ≤ 0) the memo holds ledgerMemoBytes.
func splitMemoryBudget(b int64) (traffic int64, memo int) {
	if b <= 0 {
		return b, ledgerMemoBytes
	}
	m := min(int64(ledgerMemoBytes), b/4)
	return b - m, int(m)
}

// layoutMemo is the memo of recently laid out contents. Safe for
// concurrent use; its nodes are immutable but for hash, the LRU links and
// dropped, which mu guards.
type layoutMemo struct {
	seed maphash.Seed
	mu   sync.Mutex
	max  int
	used int
	id   uint64
	m    map[memoKey][]*memoNode
	// head is the most recently used node, tail the least.
	head, tail *memoNode
	// replays counts the contents laid out from the memo.
	replays atomic.Int64
	// heads are the heads remembered (memoHead), by slot; headReplays
	// counts the heads laid out from them.
	heads       [memoHeads]atomic.Pointer[memoHead]
	headReplays atomic.Int64
}

// memoHead is a head laid out for a tenant: what it was laid out from,
// compared in full before it is used (tenant and model too), and the
// chain's state and digest after it. A small request's head is one of
// its two SHA-256 finalisations (issue 17); a long systemInstruction or
// tools is hashed again on every request of every conversation that
// sends it. Immutable once published.
type memoHead struct {
	tenant, model string
	si, tools, tc []byte
	state         []byte
	sum           [sha256.Size]byte
	written       int
}

// memoKey names a content: scope identifies the tenant and the contents
// before it in the body (root, memoScope), fp its first memoWindow bytes. Neither is trusted
// for identity: a node is used only when its bytes are the body's.
type memoKey struct{ scope, fp uint64 }

// memoNode is one remembered content.
type memoNode struct {
	key   memoKey
	id    uint64
	raw   []byte // the content's JSON object, a copy
	role  string
	parts []memoPart
	// hash is the content's layout from one chain state; nil until one
	// is known. Guarded by layoutMemo.mu.
	hash       *memoHash
	size       int
	prev, next *memoNode
	dropped    bool // forgotten: no longer in the map or the LRU list
}

// memoPart is a scannedPart with offsets from the content's start.
type memoPart struct {
	raw0, raw1, text0, text1 int
	isText, esc, textNil     bool
}

// memoHash is a content's layout after the chain state named by entry
// (its whole digest) and written (the bytes hashed before it).
type memoHash struct {
	entry       [sha256.Size]byte
	written     int
	keyedBefore bool
	// The content's checkpoints, one element each in every slice but
	// texts: sums, their own bytes and fixed tokens, their leads (nil,
	// textLeads[1:] or textLeads[:]) and, for the checkpoints with a text
	// chunk not escaped, where it lies (memoText). Kept as columns so
	// that replay appends them with copies rather than one checkpoint at
	// a time (issue 17: replay was 280 K instructions of the 1 MB
	// request's 11.4 M).
	sums   []uint64
	nbytes []int
	fixed  []float64
	leads  [][]byte
	texts  []memoText
	// esc are the content's escaped chunks, i relative to its first
	// checkpoint, off and end to its start.
	esc []escChunk
	// state is the chain's state after the content (encoding.BinaryAppender),
	// writtenAfter the bytes hashed then.
	state        []byte
	exit         [sha256.Size]byte // the chain's digest then
	writtenAfter int
	afterText    bool
	media        bool
	// key is the layout's key when the content holds the checkpoint that
	// set it (keyed).
	keyed bool
	key   [ledgerEndBytes]byte
}

// memoText is the text chunk of a content's checkpoint i, at offsets
// text0 to text1 (text0 < text1) from the content's start.
type memoText struct {
	i, text0, text1 int
}

func newLayoutMemo(maxBytes int) *layoutMemo {
	return &layoutMemo{seed: maphash.MakeSeed(), max: maxBytes, m: make(map[memoKey][]*memoNode)}
}

// root returns the scope of a body's first content: the tenant's, so
// that no tenant's layout time tells whether another sent the same
// contents.
func (mm *layoutMemo) root(tenant string) uint64 {
	return maphash.String(mm.seed, tenant)
}

// memoScope returns the scope after a content: the node's id when the
// content is remembered, else a hash of its bytes (a short content).
func (mm *layoutMemo) memoScope(scope uint64, n *memoNode, raw []byte) uint64 {
	x := uint64(0)
	if n != nil {
		x = n.id
	} else {
		x = maphash.Bytes(mm.seed, raw) | 1<<63
	}
	// splitmix64 of the pair.
	z := scope*0x9e3779b97f4a7c15 ^ x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// find returns the node remembered for the content at body[pos:] after
// scope, and its hash, or nil.
func (mm *layoutMemo) find(scope uint64, body []byte, pos int) (*memoNode, *memoHash) {
	if len(body)-pos < memoWindow || body[pos] != '{' {
		return nil, nil
	}
	k := memoKey{scope, maphash.Bytes(mm.seed, body[pos:pos+memoWindow])}
	// The candidates are compared without the lock: a content may be
	// megabytes.
	var nodes [memoPerKey]*memoNode
	var hashes [memoPerKey]*memoHash
	mm.mu.Lock()
	c := copy(nodes[:], mm.m[k])
	for i := range c {
		hashes[i] = nodes[i].hash
	}
	mm.mu.Unlock()
	rest := body[pos:]
	for i, n := range nodes[:c] {
		if len(rest) < len(n.raw) {
			continue
		}
		// A candidate starts as the content does (its name); one that is
		// not the content (an edited turn, a longer or shorter text)
		// differs most often near its end, where it closes: the last
		// word is compared first, so that such a miss costs 8 bytes
		// rather than up to the content's length. A hit compares every byte once.
		t := len(n.raw) - 8 // len(n.raw) >= memoWindow
		if !bytes.Equal(rest[t:len(n.raw)], n.raw[t:]) || !bytes.Equal(rest[:t], n.raw[:t]) {
			continue
		}
		mm.mu.Lock()
		if !n.dropped {
			mm.touch(n)
		}
		mm.mu.Unlock()
		return n, hashes[i]
	}
	return nil, nil
}

// layHead lays out a request's head into b, which has written nothing yet,
// from the head remembered for the same tenant, model and bytes, or as
// b.head does, then remembering it. root is the tenant's scope (root).
func (mm *layoutMemo) layHead(b *layoutBuilder, root uint64, tenant, model string, si, tools, tc []byte) {
	slot := &mm.heads[(root^maphash.String(mm.seed, model))%memoHeads]
	if h := slot.Load(); h != nil && h.tenant == tenant && h.model == model &&
		bytes.Equal(h.si, si) && bytes.Equal(h.tools, tools) && bytes.Equal(h.tc, tc) {
		if err := b.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.state); err == nil {
			b.written = h.written
			b.sum = h.sum
			b.checked(len(si)+len(tools)+len(tc), 0, nil, nil)
			mm.headReplays.Add(1)
			return
		}
		b.h.Reset()
	}
	b.head(model, si, tools, tc)
	if len(si)+len(tools)+len(tc) > min(memoHeadBytes, mm.max/64) {
		return
	}
	state, err := b.h.(encoding.BinaryAppender).AppendBinary(nil)
	if err != nil {
		return
	}
	slot.Store(&memoHead{tenant: tenant, model: model, si: bytes.Clone(si), tools: bytes.Clone(tools), tc: bytes.Clone(tc),
		state: state, sum: b.exit, written: b.written})
}

// touch makes n the most recently used node. mu held.
func (mm *layoutMemo) touch(n *memoNode) {
	if mm.head == n {
		return
	}
	mm.unlink(n)
	n.next = mm.head
	if mm.head != nil {
		mm.head.prev = n
	}
	mm.head = n
	if mm.tail == nil {
		mm.tail = n
	}
}

func (mm *layoutMemo) unlink(n *memoNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else if mm.head == n {
		mm.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else if mm.tail == n {
		mm.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

// memoEntry is what layoutScan records of one content as it builds the
// layout, for the memo.
type memoEntry struct {
	// node is the content's node when the scan found it; hash is the
	// content's layout when it was built rather than replayed.
	node *memoNode
	hash *memoHash
}

// remember stores what a successful layout learned: a node for each
// content not yet remembered (at least memoWindow bytes), and the hash of
// each remembered content built from another chain state.
func (mm *layoutMemo) remember(root uint64, body []byte, contents []scannedContent, parts []scannedPart, entries []memoEntry) {
	// The new nodes are made before the lock is taken: their ids come
	// after it, so scopes are computed under it.
	type pending struct {
		i int
		n *memoNode
	}
	var fresh []pending
	for i, c := range contents {
		e := entries[i]
		if e.node != nil || c.end-c.pos < memoWindow || c.end-c.pos > mm.max/4 || e.hash == nil {
			// Found, short, too large to keep (it would push out a
			// quarter of the memo), or not laid out by the scanner.
			continue
		}
		n := &memoNode{raw: bytes.Clone(body[c.pos:c.end]), role: string(c.role), hash: e.hash}
		for _, pt := range parts[c.from:c.to] {
			mp := memoPart{raw0: offsetIn(body, pt.raw) - c.pos, isText: pt.isText, esc: pt.esc}
			mp.raw1 = mp.raw0 + len(pt.raw)
			switch {
			case pt.esc:
				mp.text0, mp.text1 = pt.off-c.pos, pt.end-c.pos
			case pt.isText && pt.text == nil:
				mp.textNil = true
			case pt.isText:
				mp.text0 = offsetIn(body, pt.text) - c.pos
				mp.text1 = mp.text0 + len(pt.text)
			}
			n.parts = append(n.parts, mp)
		}
		// A checkpoint is 48 bytes in the columns (sum, bytes, fixed, a
		// lead's slice header) and its text 24 more: counted as 64 and 24.
		n.size = len(n.raw) + 64*len(n.parts) + 64*len(e.hash.sums) + 24*len(e.hash.texts) + 48*len(e.hash.esc) + len(e.hash.state) + 256
		fresh = append(fresh, pending{i, n})
	}
	mm.mu.Lock()
	defer mm.mu.Unlock()
	scope := root
	f := 0
	for i, c := range contents {
		e := entries[i]
		n := e.node
		switch {
		case n != nil:
			if e.hash != nil {
				n.hash = e.hash
			}
		case f < len(fresh) && fresh[f].i == i:
			n = fresh[f].n
			f++
			mm.id++
			n.id = mm.id
			n.key = memoKey{scope, maphash.Bytes(mm.seed, n.raw[:memoWindow])}
			list := mm.m[n.key]
			if len(list) >= memoPerKey {
				mm.drop(list[len(list)-1])
				list = mm.m[n.key]
			}
			mm.m[n.key] = append([]*memoNode{n}, list...)
			mm.used += n.size
			mm.touch(n)
		case c.end-c.pos >= memoWindow:
			// Not remembered: the contents after it cannot be found.
			return
		}
		scope = mm.memoScope(scope, n, body[c.pos:c.end])
	}
	for mm.used > mm.max && mm.tail != nil {
		mm.drop(mm.tail)
	}
}

// drop forgets n. mu held.
func (mm *layoutMemo) drop(n *memoNode) {
	n.dropped = true
	mm.unlink(n)
	list := mm.m[n.key]
	for i, x := range list {
		if x == n {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(mm.m, n.key)
	} else {
		mm.m[n.key] = list
	}
	mm.used -= n.size
}

// offsetIn returns the offset of sub, a slice of body, in body.
func offsetIn(body, sub []byte) int {
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(body))))
}

// entry starts a content: it appends the chain so far to the layout's
// content ends (after the first content) and returns it whole.
func (b *layoutBuilder) entry() [sha256.Size]byte {
	s := b.exit
	if !b.exitOK {
		// Into the builder's scratch: a local array passed to the
		// interface's Sum would be moved to the heap.
		b.h.Sum(b.sum[:0])
		s = b.sum
	}
	if len(b.p.sums) > 1 {
		var e [ledgerEndBytes]byte
		copy(e[:], s[:])
		b.p.ends = append(b.p.ends, e)
	}
	return s
}

// replay appends the checkpoints of a content remembered from the same
// chain state, the content lying at body[pos:]. It is replayRef
// (ledgermemo_ref_test.go) with the columns copied at once: the same
// sums, leads, running bytes and fixed tokens (added one by one, in the
// same order, so the same floats), texts and escaped chunks.
func (b *layoutBuilder) replay(h *memoHash, body []byte, pos int) bool {
	if err := b.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.state); err != nil {
		return false
	}
	p := b.p
	base, k := len(p.sums), len(h.sums)
	p.sums = append(p.sums, h.sums...)
	p.leads = append(p.leads, h.leads...)
	p.bytes = slices.Grow(p.bytes, k)
	for _, n := range h.nbytes {
		b.bytesSoFar += n
		p.bytes = append(p.bytes, b.bytesSoFar)
	}
	p.fixed = slices.Grow(p.fixed, k)
	for _, f := range h.fixed {
		b.fixedSoFar += f
		p.fixed = append(p.fixed, b.fixedSoFar)
	}
	t0 := len(p.texts)
	p.texts = slices.Grow(p.texts, k)[:t0+k]
	texts := p.texts[t0:]
	clear(texts)
	for _, t := range h.texts {
		texts[t.i] = unsafe.String(&body[pos+t.text0], t.text1-t.text0)
	}
	e0 := len(p.esc)
	p.esc = append(p.esc, h.esc...)
	for i := range p.esc[e0:] {
		e := &p.esc[e0+i]
		e.i += base
		e.off += pos
		e.end += pos
	}
	b.replayed(h, body)
	return true
}

// replayed ends a replay of h, the content lying in body: the layout's
// body, media and key, and the builder's chain after the content.
func (b *layoutBuilder) replayed(h *memoHash, body []byte) {
	p := b.p
	if len(h.esc) > 0 {
		p.body = body
	}
	if h.media {
		p.media = true
	}
	if h.keyed {
		p.key, b.keyed = h.key, true
	}
	b.written = h.writtenAfter
	b.afterText = h.afterText
	b.exit, b.exitOK = h.exit, true
}

// record returns the memoHash of the content just built, whose entry
// chain was entry, written and keyed as given, its first checkpoint base
// and its first escaped chunk escBase, the content lying at body[pos:].
func (b *layoutBuilder) record(entry [sha256.Size]byte, written int, keyed bool, base, escBase, mediaBefore int, body []byte, pos int) *memoHash {
	p := b.p
	h := &memoHash{entry: entry, written: written, keyedBefore: keyed, writtenAfter: b.written, afterText: b.afterText,
		media: b.mediaParts > mediaBefore}
	state, err := b.h.(encoding.BinaryAppender).AppendBinary(nil)
	if err != nil {
		return nil
	}
	h.state = state
	if b.exitOK {
		h.exit = b.exit
	} else {
		b.h.Sum(h.exit[:0])
	}
	if !keyed && b.keyed {
		h.keyed, h.key = true, p.key
	}
	k := len(p.sums) - base
	h.sums = slices.Clone(p.sums[base:])
	h.nbytes, h.fixed, h.leads = make([]int, k), make([]float64, k), make([][]byte, k)
	prevBytes, prevFixed := 0, 0.0
	if base > 0 {
		prevBytes, prevFixed = p.bytes[base-1], p.fixed[base-1]
	}
	for j := range k {
		i := base + j
		h.nbytes[j], h.fixed[j] = p.bytes[i]-prevBytes, p.fixed[i]-prevFixed
		prevBytes, prevFixed = p.bytes[i], p.fixed[i]
		switch {
		case p.leads[i] == nil:
		case len(p.leads[i]) == 1:
			h.leads[j] = textLeads[1:]
		default:
			h.leads[j] = textLeads[:]
		}
		if t := p.texts[i]; len(t) > 0 {
			t0 := offsetIn(body, unsafe.Slice(unsafe.StringData(t), len(t))) - pos
			h.texts = append(h.texts, memoText{i: j, text0: t0, text1: t0 + len(t)})
		}
	}
	for _, e := range p.esc[escBase:] {
		e.i -= base
		e.off -= pos
		e.end -= pos
		h.esc = append(h.esc, e)
	}
	return h
}

// layoutOf is layoutOf with the ledger's memo, for a request of tenant.
func (l *ledger) layoutOf(tenant string, body []byte, model string) (*layout, error) {
	if p, ok := layoutScan(body, model, l.memo, tenant); ok {
		return p, nil
	}
	return layoutDecoded(body, model)
}

// layoutPool holds layouts whose request was settled, so that the
// checkpoints of the next are not allocated (about 64 bytes a 512-byte
// chunk).
var layoutPool sync.Pool

// releaseLayout puts p in layoutPool; p must not be used after.
func releaseLayout(p *layout) {
	if p == nil {
		return
	}
	// Drop the references to the request's body.
	clear(p.leads)
	clear(p.texts)
	clear(p.keys)
	*p = layout{sums: p.sums[:0], bytes: p.bytes[:0], fixed: p.fixed[:0], leads: p.leads[:0], texts: p.texts[:0],
		ends: p.ends[:0], esc: p.esc[:0], keys: p.keys[:0]}
	layoutPool.Put(p)
}
