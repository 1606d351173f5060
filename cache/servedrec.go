package cache

import (
	"crypto/sha256"
	"encoding"
	"hash"
	"math/bits"
	"sync"
	"unicode"
	"unicode/utf8"
)

// ServedRecorder records one served response whose text arrives in pieces
// (the events of a stream, the parts of an answer): each piece is
// normalised and hashed as it is written, so that recording the response
// once it is complete costs no pass over its text, and no copy of the
// text is kept but the normalised one the record stores. The record is
// exactly the one RecordServed makes of the pieces joined, however the
// text is cut (FuzzServedRecorder). Build one with Store.ServedRecorder;
// not safe for concurrent use.
type ServedRecorder struct {
	s      *Store
	tenant string
	// buf is the normalised text, in a buffer from recorderBuffers; bp is
	// the pointer the pool gave it in, reused to return buf (whatever it
	// has grown to) so that putBuf allocates no slice header.
	buf   []byte
	bp    *[]byte
	space bool // white space since the last byte of text written
	// carry holds the start of a rune cut between two writes.
	carry  [utf8.UTFMax]byte
	nc     int
	trail  [maxTrail]byte // the white space the text ends with, so far
	nt     int            // its length; past maxTrail it is only counted
	h      hash.Hash
	done   int // bytes of the normalised text hashed
	cut    int // prefix cuts taken
	rehash bool
	pref   [len(prefixCuts)]digest
	// mark is the state Mark saved. While marked, the text past mark.n is
	// hashed as it comes, as the rest is (so that a long unary answer's
	// SHA-256 is not left for its last read, between the upstream's last
	// bytes and the client's), and the hash's state from before is kept
	// in spec so that Rewind can take it back exactly.
	mark   recorderMark
	marked bool
	spec   hashMark
	head   [2 + maxTrail]byte // the record's header, while it is made
	sum    digest             // the record's digest, while it is made (in the recorder: Sum's slice does not escape a new one)
}

// recorderMark is what Rewind restores.
type recorderMark struct {
	n     int
	space bool
	carry [utf8.UTFMax]byte
	nc    int
	trail [maxTrail]byte
	nt    int
}

// hashMark is the hashing state before the first text past a Mark was
// hashed: the hash's own state (its binary form), how much was hashed
// and the prefix cuts taken.
type hashMark struct {
	on     bool
	done   int
	cut    int
	rehash bool
	state  [sha256StateBytes]byte
	ns     int
}

// sha256StateBytes bounds the binary form of a SHA-256 state (108 bytes
// in Go 1.26: a magic, the eight words, the block and the length).
const sha256StateBytes = 128

// recorderBuffers recycles the recorders' buffers (up to
// maxRecorderBuffer bytes): the record itself is made at its exact size
// once the response is over, so a stream's text, whose size is not known
// in advance, grows in a buffer that serves again.
var recorderBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxRecorderBuffer = 1 << 20

// ServedRecorder returns a recorder of one response served to tenant.
func (s *Store) ServedRecorder(tenant string) *ServedRecorder {
	bp := recorderBuffers.Get().(*[]byte)
	return &ServedRecorder{s: s, tenant: tenant, buf: (*bp)[:0], bp: bp, h: sha256.New()}
}

// Grow makes room for n more bytes of text.
func (r *ServedRecorder) Grow(n int) {
	if cap(r.buf)-len(r.buf) < n {
		// Doubling, as append would: a stream grows it event by event.
		// The outgrown buffer is dropped, not pooled: the larger one
		// returns to recorderBuffers in its place, so the pool's buffers
		// come to the size of the answers served and a stream stops
		// growing (and copying) its buffer event by event.
		b := make([]byte, len(r.buf), max(len(r.buf)+n, 2*cap(r.buf)))
		copy(b, r.buf)
		r.buf = b
	}
}

// putBuf returns the recorder's buffer to recorderBuffers.
func (r *ServedRecorder) putBuf() {
	if cap(r.buf) <= maxRecorderBuffer {
		bp := r.bp
		if bp == nil {
			bp = new([]byte)
		}
		*bp = r.buf[:0]
		recorderBuffers.Put(bp)
	}
	r.buf, r.bp = nil, nil
}

// Write adds p to the response's text. It never fails.
func (r *ServedRecorder) Write(p []byte) (int, error) {
	writeServed(r, p)
	return len(p), nil
}

// WriteString adds s to the response's text.
func (r *ServedRecorder) WriteString(s string) (int, error) {
	writeServed(r, s)
	return len(s), nil
}

func writeServed[T string | []byte](r *ServedRecorder, p T) {
	if r.nc > 0 {
		// Finish the rune cut by the previous write: the carry and the
		// first bytes of p, read together.
		var tmp [2 * utf8.UTFMax]byte
		n := copy(tmp[:], r.carry[:r.nc])
		k := copy(tmp[n:], p)
		left := normalizeTo(r, tmp[:n+k], false)
		used := n + k - left
		if used < n {
			// Still not a whole rune: p was all taken.
			r.nc = copy(r.carry[:], tmp[used:n+k])
			return
		}
		r.nc = 0
		p = p[used-n:]
	}
	if left := normalizeTo(r, p, false); left > 0 {
		r.nc = copy(r.carry[:], p[len(p)-left:])
	}
	r.hashOn()
}

// le64 reads eight bytes of p, little-endian.
func le64[T string | []byte](p T) uint64 {
	_ = p[7]
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
		uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
}

// spaceMask has 0x80 in each byte of x that is an ASCII space, and only
// there (Hacker's Delight 6-1, exact form).
func spaceMask(x uint64) uint64 {
	const lo7, sp = 0x7f7f7f7f7f7f7f7f, 0x2020202020202020
	v := x ^ sp
	return ^((v&lo7 + lo7) | v | lo7)
}

// normalizeTo appends the normalisation of p to the text, as appendNormalized
// does for the whole text, and keeps the trail. Unless final, a rune cut
// at the end of p is left for the next write: it returns its length.
func normalizeTo[T string | []byte](r *ServedRecorder, p T, final bool) int {
	const msb = 0x8080808080808080
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf && !asciiSpace[c] {
			// A run of ASCII text with single spaces between words.
			j := i + 1
			for {
				// p[j-1] is not a space here. sp has 0x80 in its low byte
				// when the word before ends in a space, so that a space
				// last in a word costs no break: only the next word's
				// first byte tells whether it is a single space.
				sp := uint64(0)
				for j+8 <= len(p) {
					x := le64(p[j:])
					m := spaceMask(x)
					// No byte >= 0x80 or < ' ', no two spaces in a row.
					if stop := (x | (x-0x2020202020202020)&^x | m&(m<<8|sp)) & msb; stop != 0 {
						// The bytes before the lowest mark (exact: a
						// borrow marks only bytes above a true one) are
						// in the run, but a space just before it: the
						// byte by byte step goes on from there, not from
						// the word's start (which tested the word again
						// after each of its bytes).
						j += bits.TrailingZeros64(stop) >> 3
						sp = 0
						if p[j-1] == ' ' {
							j--
						}
						break
					}
					sp = m >> 56
					j += 8
				}
				if sp != 0 {
					// A space last: the byte by byte step below decides it.
					j--
				}
				if j >= len(p) {
					break
				}
				d := p[j]
				if d >= utf8.RuneSelf {
					break
				}
				if asciiSpace[d] {
					if d != ' ' || j+1 >= len(p) || p[j+1] >= utf8.RuneSelf || asciiSpace[p[j+1]] {
						break
					}
					j++
				}
				j++
			}
			textTo(r, p[i:j])
			i = j
			continue
		}
		if c < utf8.RuneSelf {
			whiteTo(r, p[i:i+1])
			i++
			continue
		}
		var q [utf8.UTFMax]byte
		k := copy(q[:], p[i:])
		if !final && !utf8.FullRune(q[:k]) {
			return len(p) - i
		}
		ru, n := utf8.DecodeRune(q[:k])
		if unicode.IsSpace(ru) {
			whiteTo(r, p[i:i+n])
		} else {
			textTo(r, p[i:i+n])
		}
		i += n
	}
	return 0
}

// textTo appends bytes that are not white space.
func textTo[T string | []byte](r *ServedRecorder, p T) {
	if r.space {
		r.space = false
		r.buf = append(r.buf, ' ')
	}
	r.buf = append(r.buf, p...)
	r.nt = 0
}

// whiteTo notes white space.
func whiteTo[T string | []byte](r *ServedRecorder, p T) {
	r.space = len(r.buf) > 0
	if r.nt+len(p) <= maxTrail {
		if len(p) == 1 {
			r.trail[r.nt] = p[0] // most white space: no copy call
		} else {
			copy(r.trail[r.nt:], p)
		}
	}
	r.nt += len(p)
}

// Mark notes the text written so far: Rewind takes back what is written
// after it, Commit keeps it. The tap marks the text of a large unary answer
// that it writes as its bytes pass, before it knows whether the answer's
// JSON object keeps it (a thought part, another candidate, an object that
// turns out invalid). A new Mark replaces the last one.
func (r *ServedRecorder) Mark() {
	m := &r.mark
	m.n, m.space, m.carry, m.nc = len(r.buf), r.space, r.carry, r.nc
	m.nt = r.nt
	if r.nt <= maxTrail {
		copy(m.trail[:r.nt], r.trail[:r.nt])
	}
	r.marked = true
	r.spec.on = false // what an earlier Mark held back is kept
}

// Rewind takes back the text written since Mark, as if it had not been
// written. Without a Mark it does nothing.
func (r *ServedRecorder) Rewind() {
	if !r.marked {
		return
	}
	m := &r.mark
	r.buf = r.buf[:m.n]
	r.space, r.carry, r.nc, r.nt = m.space, m.carry, m.nc, m.nt
	if m.nt <= maxTrail {
		copy(r.trail[:m.nt], m.trail[:m.nt])
	}
	r.marked = false
	if sp := &r.spec; sp.on {
		sp.on = false
		if err := r.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(sp.state[:sp.ns]); err != nil {
			panic("cache: restoring a SHA-256 state: " + err.Error()) // its own AppendBinary's bytes
		}
		r.done, r.cut, r.rehash = sp.done, sp.cut, sp.rehash
	}
}

// Commit keeps the text written since Mark.
func (r *ServedRecorder) Commit() {
	if r.marked {
		r.marked, r.spec.on = false, false
		r.hashOn()
	}
}

// hashOn hashes the text written so far, taking the prefix digests as
// their cuts are passed; what the next cut may still need stays unhashed.
// Before it hashes past a Mark it saves the hashing state (spec).
func (r *ServedRecorder) hashOn() {
	n := r.buf
	if r.marked && !r.spec.on && len(n) > r.mark.n {
		r.saveHash()
	}
	for r.cut < len(prefixCuts) && prefixCuts[r.cut] < len(n) {
		r.prefix(n)
	}
	limit := len(n)
	if r.cut < len(prefixCuts) {
		limit = min(limit, prefixCuts[r.cut]-utf8.UTFMax)
	}
	if !r.rehash && limit > r.done {
		r.h.Write(n[r.done:limit])
		r.done = limit
	}
}

// saveHash keeps the hashing state for Rewind. Nothing past the mark is
// hashed yet: hashOn saves it before it hashes, or takes a prefix digest,
// past mark.n, and text is only written past it.
func (r *ServedRecorder) saveHash() {
	sp := &r.spec
	b, err := r.h.(encoding.BinaryAppender).AppendBinary(sp.state[:0])
	if err != nil || len(b) > len(sp.state) {
		panic("cache: saving a SHA-256 state") // sha256's digest always can, in 108 bytes
	}
	sp.on, sp.ns, sp.done, sp.cut, sp.rehash = true, len(b), r.done, r.cut, r.rehash
}

// prefix takes the digest of the next prefix cut of n.
func (r *ServedRecorder) prefix(n []byte) {
	cut := cutAt(n, prefixCuts[r.cut])
	if cut < r.done {
		// A run of invalid UTF-8 moved the cut back over text already
		// hashed: hash the whole text again when the record is made.
		r.rehash = true
	}
	if !r.rehash {
		r.h.Write(n[r.done:cut])
		r.done = cut
		r.h.Sum(r.pref[r.cut][:0])
	}
	r.cut++
}

// Served records the response: RecordServed of the text written.
// truncated reports that the text is only the first part of the response.
// The recorder is spent.
func (r *ServedRecorder) Served(truncated bool) {
	if id, rec, prefixes, ok := r.record(truncated); ok {
		r.s.storeServed(r.tenant, id, rec, prefixes)
	}
}

// record returns the response's digest, its record and its prefixes'
// digests; ok is false for a text that normalises to nothing.
func (r *ServedRecorder) record(truncated bool) (id digest, rec []byte, prefixes []digest, ok bool) {
	r.marked, r.spec.on = false, false // what is written is the text, a Mark's included
	if r.nc > 0 {
		normalizeTo(r, r.carry[:r.nc], true)
		r.nc = 0
	}
	n := r.buf
	if len(n) == 0 {
		r.putBuf()
		return id, nil, nil, false
	}
	if r.rehash {
		r.h.Reset()
		r.done, r.cut = 0, 0
		r.rehash = false
		for r.cut < len(prefixCuts) && prefixCuts[r.cut] < len(n) {
			r.prefix(n)
		}
	} else {
		r.hashOn()
	}
	r.h.Write(n[r.done:])
	id = digest(r.h.Sum(r.sum[:0]))

	flag := byte(0)
	switch {
	case truncated:
		flag = flagTruncated
	case r.nt == 0:
		flag = flagEnd
	case r.nt <= maxTrail:
		flag = flagEnd | flagTrail
	}
	hl := 1
	if flag&flagTrail != 0 {
		hl += 1 + r.nt
	}
	// Made at its exact size: the entry's cost counts only its length.
	size := hl
	if len(n) >= MinPrefixBytes {
		// Shorter responses match only in full, which the key proves.
		size += len(n)
	}
	// The header is built apart and the text appended to it, so that the
	// allocation is not cleared before the text is copied over it (append
	// clears only past what it copies; a make would clear it all).
	head := &r.head // in the recorder, already on the heap: no allocation
	head[0] = flag
	if flag&flagTrail != 0 {
		head[1] = byte(r.nt)
		copy(head[2:], r.trail[:r.nt])
	}
	rec = append(head[:hl:hl], n[:size-hl]...)
	rec = rec[:size:size]
	r.putBuf()
	return id, rec, r.pref[:r.cut], true
}
