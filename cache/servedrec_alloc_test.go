package cache

import (
	"bytes"
	"strings"
	"testing"
)

// TestServedRecorderAllocs bounds what recording a 256 KB answer allocates
// beside the record itself: the recorder, its SHA-256 and the record (the
// pool's buffer, warmed by the first run, and the pointer it is returned
// in are reused; the digest is summed into the recorder). The record is
// its own allocation at its exact size.
func TestServedRecorderAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations")
	}
	s, err := New(Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	text := []byte(strings.Repeat("0123456789abcdef ", 256<<10/17))
	var rec []byte
	allocs := testing.AllocsPerRun(20, func() {
		r := s.ServedRecorder("t")
		for p := text; len(p) > 0; p = p[min(len(p), 32<<10):] {
			r.Write(p[:min(len(p), 32<<10)])
		}
		_, rec, _, _ = r.record(false)
	})
	if allocs > 3 {
		t.Errorf("recording a 256 KB answer: %v allocations, want at most 3 (recorder, hash, record)", allocs)
	}
	// The text ends in one space: flag, trail length, the space, the text.
	if want := bytes.TrimSpace(text); len(rec) != cap(rec) || !bytes.Equal(rec[3:], want) || len(rec) != 3+len(want) {
		t.Errorf("record: len %d cap %d, not the header and the text at its exact size", len(rec), cap(rec))
	}
}

// TestServedRecorderPutBufReusesPointer checks that putBuf returns the
// buffer, whatever it has grown to, in the pointer the pool gave.
func TestServedRecorderPutBufReusesPointer(t *testing.T) {
	bp := new([]byte)
	r := &ServedRecorder{buf: (*bp)[:0], bp: bp}
	r.Grow(10 << 10)
	r.buf = append(r.buf, "text"...)
	grown := &r.buf[:1][0]
	r.putBuf()
	if r.buf != nil || r.bp != nil {
		t.Fatal("putBuf kept the buffer")
	}
	if len(*bp) != 0 || cap(*bp) < 10<<10 || &(*bp)[:1][0] != grown {
		t.Errorf("the pool's pointer holds len %d cap %d, not the grown buffer", len(*bp), cap(*bp))
	}
}
