package rewrite

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"slices"
	"strings"
)

// hashLine is a fast, deterministic 64-bit hash of one line (a wyhash-style
// mix over 8-byte words). It only finds candidates: every match it suggests
// is confirmed by comparing bytes, but it is also deterministic across
// processes, so that the rewrite of a request never depends on a seed.
func hashLine(s string) uint64 {
	const (
		p0 = 0xa0761d6478bd642f
		p1 = 0xe7037ed1a0b428db
		p2 = 0x8ebc6af09c88c6e3
	)
	h := uint64(len(s)) ^ p0
	for len(s) >= 8 {
		v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		hi, lo := bits.Mul64(v^p1, h^p2)
		h = hi ^ lo
		s = s[8:]
	}
	var t uint64
	for i := len(s) - 1; i >= 0; i-- {
		t = t<<8 | uint64(s[i])
	}
	hi, lo := bits.Mul64(t^p1, h^p0)
	return hi ^ lo
}

// lineSet returns the sorted, de-duplicated hashes of the non-blank lines of
// s, whitespace-trimmed, for line-set similarity.
func lineSet(s string) []uint64 {
	set := make([]uint64, 0, strings.Count(s, "\n")+1)
	for s != "" {
		line := s
		if k := strings.IndexByte(s, '\n'); k >= 0 {
			line, s = s[:k], s[k+1:]
		} else {
			s = ""
		}
		if t := strings.TrimSpace(line); t != "" {
			set = append(set, hashLine(t))
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// similarity is the Jaccard index of two sorted line sets.
func similarity(a, b []uint64) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	inter := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// convEdge is how many bytes of each end of the first content a
// conversation id hashes: a content of up to 2*convEdge bytes is hashed
// whole.
const convEdge = 256

// convInput is what identifies a conversation (Report.ConversationID): the
// raw bytes of its first content when there are at most 2*convEdge, else
// the first and last convEdge bytes followed by the length as 8 big-endian
// bytes. Request copies them (the Report holds nothing of the body) and
// the id is their hex SHA-256, computed when asked for. The id only groups
// the block index's statistics by conversation, so its cost must not grow
// with the content: hashing up to 4 KiB of it in Request was 8% of the
// rewrite of a 10 KB request (issue 3). Two conversations whose first
// contents have the same length, beginning and end share their
// statistics, nothing else. It depends on the bytes alone (no seed), so
// that replicas sharing a block index agree.
type convInput struct {
	buf [2*convEdge + 8]byte
	n   int
}

// set copies the bytes of raw that identify the conversation.
func (c *convInput) set(raw []byte) {
	if len(raw) <= 2*convEdge {
		c.n = copy(c.buf[:], raw)
		return
	}
	copy(c.buf[:], raw[:convEdge])
	copy(c.buf[convEdge:], raw[len(raw)-convEdge:])
	binary.BigEndian.PutUint64(c.buf[2*convEdge:], uint64(len(raw)))
	c.n = len(c.buf)
}

// id returns the hex SHA-256 of the bytes set.
func (c *convInput) id() string {
	sum := sha256.Sum256(c.buf[:c.n])
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// chainTable maps 64-bit keys to the newest entry of a chain (one plus
// its index in the caller's list, whose entries link to the entry with
// the same key before them; 0: none), by open addressing. It holds no
// more than half as many keys as slots. The zero value is ready to use
// once fit is called.
type chainTable struct {
	keys  []uint64
	heads []int32
	used  bool // a key may have been stored since the last reset
}

// reset empties t, dropping a table that grew large. A table that was
// not used costs nothing (a request of short texts never uses it).
func (t *chainTable) reset() {
	if !t.used {
		return
	}
	if len(t.heads) > 1<<16 {
		t.keys, t.heads = nil, nil
	}
	clear(t.heads)
	t.used = false
}

// fit makes room for n keys (at least 256 slots); a caller may then store
// keys in the slots that slot returns.
func (t *chainTable) fit(n int) {
	t.used = true
	if 2*n <= len(t.keys) {
		return
	}
	keys, heads := t.keys, t.heads
	size := max(256, 2*len(keys))
	for size < 2*n {
		size *= 2
	}
	t.keys, t.heads = make([]uint64, size), make([]int32, size)
	for j, hd := range heads {
		if hd != 0 {
			h := t.slot(keys[j])
			t.keys[h], t.heads[h] = keys[j], hd
		}
	}
}

// slot returns the slot of key: the one holding it, or the empty slot
// where it goes.
func (t *chainTable) slot(key uint64) int {
	mask := len(t.keys) - 1
	for h := int(key>>32) & mask; ; h = (h + 1) & mask {
		if t.heads[h] == 0 || t.keys[h] == key {
			return h
		}
	}
}
