package rewrite

import (
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"unsafe"
)

// analysisVersion names the segmentation algorithm whose results a Memo
// holds. It is part of every memo key: bump it whenever segmentLines (or
// anything it calls) may find different blocks for the same text, so that
// results stored by an older build are never used.
const analysisVersion = 2

// memoFormat is the first byte of every memo value.
const memoFormat = 1

// memoCheckBytes is the size of the check that ends every memo value.
const memoCheckBytes = 8

// memoKeyBytes is the size of a turn's key before hex encoding: 128 bits.
const memoKeyBytes = 16

// memoSeeds seed the two independent 64-bit halves of the memo's hash
// chain. They are the package's only global state, set once when the
// program starts and never written again, and nothing that Request returns
// depends on them: they only name memo entries. A per-process seed is
// enough because a Memo is in memory, per replica, and never shared (keys
// from another process are never looked up here), and it keeps the chain
// keyed: a caller who cannot see the seed cannot build two requests whose
// turns collide.
var memoSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// turnMemo reads and writes the per-turn analysis of one request (issue 4:
// turn N of a conversation only analyses what is new). A turn's key is the
// hex of a 128-bit chain of two seeded maphash hashes (memoSeeds) over the
// options that segmentation depends on and the raw bytes of contents
// 0..i, so it names no prompt text, and two requests that share a prefix
// of turns share their keys. The chain is not cryptographic: the memo is
// never a security boundary, and a SHA-256 chain made hashing the body
// cost more than the analysis the memo saves. A value is checked against
// its key before use, and its blocks must lie inside the turn's texts.
type turnMemo struct {
	m     Memo
	chain [][memoKeyBytes]byte // chain[i] covers contents 0..i
}

func newTurnMemo(m Memo, body []byte, req *request, opts *Options) *turnMemo {
	tm := &turnMemo{m: m, chain: make([][memoKeyBytes]byte, len(req.contents))}
	var hs [2]maphash.Hash
	for k := range hs {
		hs[k].SetSeed(memoSeeds[k])
	}
	var buf [binary.MaxVarintLen64]byte
	write := func(b []byte) {
		hs[0].Write(b)
		hs[1].Write(b)
	}
	write([]byte("gemini-proxy rewrite analysis\x00"))
	write(binary.AppendUvarint(buf[:0], analysisVersion))
	write(binary.AppendUvarint(buf[:0], uint64(len(opts.DocumentTags))))
	for _, t := range opts.DocumentTags {
		write(binary.AppendUvarint(buf[:0], uint64(len(t))))
		write([]byte(t))
	}
	var prev [memoKeyBytes]byte
	sum := func() {
		binary.LittleEndian.PutUint64(prev[0:], hs[0].Sum64())
		binary.LittleEndian.PutUint64(prev[8:], hs[1].Sum64())
	}
	sum()
	for i := range req.contents {
		c := &req.contents[i]
		hs[0].Reset()
		hs[1].Reset()
		write(prev[:])
		write(body[c.obj.start:c.obj.end])
		sum()
		tm.chain[i] = prev
	}
	return tm
}

func (tm *turnMemo) key(turn int) string { return hex.EncodeToString(tm.chain[turn][:]) }

// check returns the check that binds a value's payload to the turn's key.
func (tm *turnMemo) check(turn int, payload []byte) [memoCheckBytes]byte {
	var h maphash.Hash
	h.SetSeed(memoSeeds[0])
	h.Write(tm.chain[turn][:])
	h.Write(payload)
	var c [memoCheckBytes]byte
	binary.LittleEndian.PutUint64(c[:], h.Sum64())
	return c
}

// get returns the blocks of each text part of the turn, or false.
func (tm *turnMemo) get(turn int, texts []string) ([][]block, bool) {
	v, ok := tm.m.GetAnalysis(tm.key(turn))
	if !ok || len(v) < 1+memoCheckBytes || v[0] != memoFormat {
		return nil, false
	}
	payload := v[:len(v)-memoCheckBytes]
	if c := tm.check(turn, payload); string(c[:]) != string(v[len(payload):]) {
		return nil, false
	}
	return decodeBlocks(payload[1:], texts)
}

// set stores the blocks of each text part of the turn.
func (tm *turnMemo) set(turn int, texts []string, blocks [][]block) {
	v := encodeBlocks([]byte{memoFormat}, texts, blocks)
	c := tm.check(turn, v)
	tm.m.SetAnalysis(tm.key(turn), append(v, c[:]...))
}

// Block names in a value: most names are substrings of their text and are
// stored as an offset, so values hold almost no prompt text.
const (
	nameNone = iota
	nameAt
	nameLiteral
)

const (
	flagBlob = 1 << iota
	flagShell
)

func encodeBlocks(dst []byte, texts []string, blocks [][]block) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(blocks)))
	for p, bs := range blocks {
		dst = binary.AppendUvarint(dst, uint64(len(bs)))
		for _, b := range bs {
			var flags byte
			if b.blob {
				flags |= flagBlob
			}
			if b.shell {
				flags |= flagShell
			}
			dst = append(dst, byte(b.kind), flags)
			for _, x := range [4]int{b.start, b.end, b.cstart, b.cend} {
				dst = binary.AppendUvarint(dst, uint64(x))
			}
			switch off, ok := offsetIn(texts[p], b.name); {
			case b.name == "":
				dst = append(dst, nameNone)
			case ok:
				dst = append(dst, nameAt)
				dst = binary.AppendUvarint(dst, uint64(off))
				dst = binary.AppendUvarint(dst, uint64(len(b.name)))
			default:
				dst = append(dst, nameLiteral)
				dst = binary.AppendUvarint(dst, uint64(len(b.name)))
				dst = append(dst, b.name...)
			}
		}
	}
	return dst
}

// offsetIn returns where s starts inside text when s is a substring of text
// (shares its memory).
func offsetIn(text, s string) (int, bool) {
	if s == "" || text == "" {
		return 0, false
	}
	t0 := uintptr(unsafe.Pointer(unsafe.StringData(text)))
	s0 := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	if s0 < t0 || s0+uintptr(len(s)) > t0+uintptr(len(text)) {
		return 0, false
	}
	return int(s0 - t0), true
}

// decodeBlocks is the inverse of encodeBlocks; any inconsistency with texts
// is a miss.
func decodeBlocks(v []byte, texts []string) ([][]block, bool) {
	d := memoReader{b: v}
	if d.uint(len(texts)) != len(texts) || d.bad {
		return nil, false
	}
	out := make([][]block, len(texts))
	for p, text := range texts {
		n := d.uint(len(v))
		if d.bad {
			return nil, false
		}
		if n == 0 {
			continue
		}
		bs := make([]block, n)
		for k := range bs {
			b := &bs[k]
			kind, flags := d.byte(), d.byte()
			if kind > byte(kindRun) || flags > flagBlob|flagShell {
				return nil, false
			}
			b.kind, b.blob, b.shell = blockKind(kind), flags&flagBlob != 0, flags&flagShell != 0
			b.start, b.end, b.cstart, b.cend = d.uint(len(text)), d.uint(len(text)), d.uint(len(text)), d.uint(len(text))
			if b.start > b.end || b.cstart > b.cend || (k > 0 && b.start < bs[k-1].end) {
				return nil, false
			}
			switch d.byte() {
			case nameNone:
			case nameAt:
				off := d.uint(len(text))
				n := d.uint(len(text) - off)
				b.name = text[off : off+n]
			case nameLiteral:
				n := d.uint(len(d.b))
				b.name = string(d.take(n))
			default:
				return nil, false
			}
			if d.bad {
				return nil, false
			}
		}
		out[p] = bs
	}
	if d.bad || len(d.b) != 0 {
		return nil, false
	}
	return out, true
}

// memoReader reads a memo value; any read past its end or out of range sets
// bad and returns zero.
type memoReader struct {
	b   []byte
	bad bool
}

func (r *memoReader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// uint reads a uvarint no greater than limit.
func (r *memoReader) uint(limit int) int {
	x, n := binary.Uvarint(r.b)
	if n <= 0 || x > uint64(max(limit, 0)) {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return int(x)
}

func (r *memoReader) take(n int) []byte {
	if n > len(r.b) {
		r.bad = true
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}
