package rewrite

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"hash"
	"unsafe"
)

// shaSums is the SHA-256 memo of one request (engine.sha): each distinct
// content is hashed once, and a content that begins with the bytes of one
// hashed before resumes from that one's digest state at the last of its
// checkpoints that the two share, instead of hashing those bytes again.
// SHA-256 reads its input in 64-byte blocks from a state that depends on
// nothing but the bytes before it, so the sum is the one of hashing the
// whole content. Issue 17: the 1 MB overhead request's new turn ends in a
// cut copy of its first document (40 KB, the first 30 KB of it that
// document, hashed whole by then), and coalesce hashes a merged span whose
// first block was hashed alone; an edited document re-sent shares its
// prefix with the version before it.
//
// Contents are indexed by their first shaHeadBytes: those that share a
// head are chained, newest first, and a look-up reads at most shaWalk of
// them. A content found past that is hashed again, which costs time, never
// a different sum. Nothing outlives the request (state.release): the
// contents are the request's text, and a sum kept for another request
// would answer it faster when it holds the same bytes.
type shaSums struct {
	heads map[string]int32 // first shaHeadBytes → 1 + index in sums of the newest
	sums  []shaSum
	cks   []shaCheck
	// states holds the checkpoints' digest states (encoding.BinaryAppender
	// of the digest, stateLen bytes each).
	states   []byte
	stateLen int
	d        hash.Hash // reused for contents that take checkpoints
	out      [sha256.Size]byte
	// every is the distance between checkpoints, a multiple of 64; zero
	// means shaEvery. Tests set it small.
	every int
	// resumed counts the bytes not hashed again thanks to a checkpoint,
	// for tests.
	resumed int
}

// shaSum is one content hashed: its hex sum, the previous sum with the
// same head (1 + index, 0 for none) and its checkpoints cks[ck:ck+nck],
// in ascending position.
type shaSum struct {
	s, hex  string
	next    int32
	ck, nck int32
}

// shaCheck is the digest state after hashing the first pos bytes of a
// content, at states[state:state+stateLen].
type shaCheck struct {
	pos, state int32
}

const (
	// shaHeadBytes is the head that indexes contents; a content shorter
	// than that is indexed by all of it.
	shaHeadBytes = 64
	// shaEvery is the default distance between checkpoints: a digest
	// state (108 bytes) per 4 KB hashed, and at most 4 KB hashed again of
	// a prefix two contents share.
	shaEvery = 4096
	// shaWalk bounds the contents with the same head that a look-up reads.
	shaWalk = 8
)

// sha returns the hex SHA-256 of s, computing it once per distinct span
// (shaSums). The exhaustive path never resumes from a checkpoint.
func (e *engine) sha(s string) string {
	c := &e.st.shas
	every := c.every
	if every <= 0 {
		every = shaEvery
	}
	head := s[:min(len(s), shaHeadBytes)]
	first := c.heads[head]
	// The checkpoint to resume from: the furthest one, among the contents
	// with this head, that lies within the prefix it shares with s.
	from, fromPos := -1, 0
	var fromSum *shaSum
	walk := 0
	for j := first; j != 0 && walk < shaWalk; j = c.sums[j-1].next {
		walk++
		p := &c.sums[j-1]
		if len(p.s) == len(s) && p.s == s {
			return p.hex
		}
		if e.exhaustive || p.nck == 0 || len(s) < every {
			continue
		}
		cks := c.cks[p.ck : p.ck+p.nck]
		if int(cks[len(cks)-1].pos) <= fromPos {
			continue // nothing further than the one found
		}
		l := commonPrefix(bytesOf(s), bytesOf(p.s))
		for k := len(cks) - 1; k >= 0; k-- {
			if pos := int(cks[k].pos); pos <= l {
				if pos > fromPos {
					from, fromPos, fromSum = int(p.ck)+k, pos, p
				}
				break
			}
		}
	}
	var sum [sha256.Size]byte
	ck, nck := int32(len(c.cks)), int32(0)
	if len(s) < every {
		// Too short to checkpoint: nothing to resume either.
		sum = sha256.Sum256(bytesOf(s))
	} else {
		if c.d == nil {
			c.d = sha256.New()
		}
		d := c.d
		d.Reset()
		pos := 0
		if from >= 0 {
			f := c.cks[from]
			if err := d.(encoding.BinaryUnmarshaler).UnmarshalBinary(c.states[f.state : int(f.state)+c.stateLen]); err != nil {
				d.Reset() // never: the state is one AppendBinary wrote; hash it all
				from = -1
			}
		}
		if from >= 0 {
			f := c.cks[from]
			pos = int(f.pos)
			c.resumed += pos
			// Up to pos, s has the checkpoints of the prefix it shares.
			c.cks = append(c.cks, c.cks[fromSum.ck:int32(from)+1]...)
			nck += int32(from) + 1 - fromSum.ck
		}
		b := bytesOf(s)
		for next := (pos/every + 1) * every; next <= len(s); next += every {
			d.Write(b[pos:next])
			pos = next
			nck += c.check(pos)
		}
		if last := len(s) &^ 63; last > pos {
			d.Write(b[pos:last])
			pos = last
			nck += c.check(pos)
		}
		d.Write(b[pos:])
		// Into a buffer of c: a local array passed to the interface's
		// method would be allocated on each call.
		sum = [sha256.Size]byte(d.Sum(c.out[:0]))
	}
	e.grow(2 * len(sum))
	n := len(e.strs)
	e.strs = hex.AppendEncode(e.strs, sum[:])
	h := e.str(n)
	if c.heads == nil {
		c.heads = make(map[string]int32)
	}
	c.sums = append(c.sums, shaSum{s: s, hex: h, next: first, ck: ck, nck: nck})
	c.heads[head] = int32(len(c.sums))
	return h
}

// check records the state of c.d after the first pos bytes of the content
// being hashed, and returns the number of checkpoints it added (0 only if
// the digest could not be saved, which crypto/sha256's never fails to).
func (c *shaSums) check(pos int) int32 {
	at := len(c.states)
	states, err := c.d.(encoding.BinaryAppender).AppendBinary(c.states)
	if err != nil {
		return 0
	}
	c.states = states
	c.stateLen = len(c.states) - at
	c.cks = append(c.cks, shaCheck{int32(pos), int32(at)})
	return 1
}

// reset empties c for the next request, keeping its buffers unless they
// grew past what a pooled state keeps.
func (c *shaSums) reset() {
	if len(c.heads) > maxPooledKeys || cap(c.sums) > maxPooledKeys {
		c.heads, c.sums = nil, nil
	}
	if cap(c.states) > maxPooled {
		c.states, c.cks = nil, nil
	}
	clear(c.heads)
	clear(c.sums) // the contents are the request's text
	c.sums, c.cks, c.states = c.sums[:0], c.cks[:0], c.states[:0]
	c.resumed = 0
}

// bytesOf views the bytes of s; the callers only read them.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
