package cache

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// updatesApplied returns how many updates of a held key area ar's
// ristretto goroutine has applied: each one was a Set sent to it.
func updatesApplied(s *Store, ar Area) uint64 {
	s.Wait()
	return s.areas[ar].c.Metrics.KeysUpdated()
}

// TestSetConversationIdenticalSkipped: writing a conversation key again
// with the bytes it holds, at once, sends nothing to ristretto's goroutine
// (no update is applied), keeps the value visible and its expiry within
// refreshSlack of a fresh write's; a different value, an empty one after a
// non-empty one, and another tenant's key are written as before.
func TestSetConversationIdenticalSkipped(t *testing.T) {
	const ttl = time.Hour
	s, err := New(Options{MaxBytes: 64 << 20, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := s.areas[AreaConversations]
	v := []byte(strings.Repeat("state ", 50))
	if !s.SetConversation("t1", "k", v) {
		t.Fatal("first SetConversation rejected")
	}
	base := updatesApplied(s, AreaConversations)
	for i := range 20 {
		same := append([]byte(nil), v...) // equal bytes, other memory
		if !s.SetConversation("t1", "k", same) {
			t.Fatalf("identical SetConversation %d rejected", i)
		}
		if got, ok := s.Conversation("t1", "k"); !ok || string(got) != string(v) {
			t.Fatalf("after identical write %d: %q, %v", i, got, ok)
		}
	}
	if got := updatesApplied(s, AreaConversations) - base; got != 0 {
		t.Errorf("identical writes applied %d updates; want 0", got)
	}
	if got := a.refreshSkipped.Load(); got != 20 {
		t.Errorf("refreshSkipped = %d; want 20", got)
	}
	if left, ok := a.c.GetTTL(key("t1", "k")); !ok || left < ttl-refreshSlack(ttl)-time.Minute {
		t.Errorf("TTL left %v, %v; want about %v", left, ok, ttl)
	}
	// Changes are written: each is an update ristretto applies.
	for i, nv := range [][]byte{[]byte("other"), {}, []byte("other")} {
		if !s.SetConversation("t1", "k", nv) {
			t.Fatalf("change %d rejected", i)
		}
		if got, ok := s.Conversation("t1", "k"); !ok || string(got) != string(nv) {
			t.Fatalf("change %d: %q, %v; want %q", i, got, ok, nv)
		}
	}
	if got := updatesApplied(s, AreaConversations) - base; got != 3 {
		t.Errorf("three changes applied %d updates; want 3", got)
	}
	// Another tenant's key is its own entry: written, not skipped.
	s.SetConversation("t2", "k", []byte("other"))
	if got, ok := s.Conversation("t2", "k"); !ok || string(got) != "other" {
		t.Fatalf("t2: %q, %v", got, ok)
	}
	if got := a.refreshSkipped.Load(); got != 20 {
		t.Errorf("refreshSkipped = %d after changes; want still 20", got)
	}
}

// TestSetConversationRefreshesOldEntry: an identical value written once
// the entry is older than refreshSlack is written again, so that its TTL
// starts over as before (refreshSlack of a 200 ms TTL is 2 ms).
func TestSetConversationRefreshesOldEntry(t *testing.T) {
	const ttl = 200 * time.Millisecond
	s, err := New(Options{MaxBytes: 64 << 20, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := s.areas[AreaConversations]
	s.SetConversation("t1", "k", []byte("v"))
	base := updatesApplied(s, AreaConversations)
	for i := range 5 {
		time.Sleep(20 * time.Millisecond) // > refreshSlack: the write is due
		if !s.SetConversation("t1", "k", []byte("v")) {
			t.Fatalf("write %d rejected", i)
		}
		if left, ok := a.c.GetTTL(key("t1", "k")); !ok || left < ttl-refreshSlack(ttl)-20*time.Millisecond && left < ttl/2 {
			t.Fatalf("write %d: TTL left %v, %v; the write did not refresh it", i, left, ok)
		}
	}
	if got := updatesApplied(s, AreaConversations) - base; got != 5 {
		t.Errorf("writes of an older entry applied %d updates; want 5", got)
	}
	if got := a.refreshSkipped.Load(); got != 0 {
		t.Errorf("refreshSkipped = %d; want 0", got)
	}
	// Past the TTL (the last write was 0 ms ago: wait for it to expire),
	// the key is gone and is written as a new key.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := s.Conversation("t1", "k"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("entry never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.SetConversation("t1", "k", []byte("v"))
	if got, ok := s.Conversation("t1", "k"); !ok || string(got) != "v" {
		t.Fatalf("after expiry: %q, %v", got, ok)
	}
}

// TestRecordServedAgainSkipsCandidates: recording a long response a second
// time leaves its prefixes' candidate lists as they are, so only the record
// itself is written again (one update, not one per prefix); a second
// response sharing the prefixes changes the lists, which are written.
func TestRecordServedAgainSkipsCandidates(t *testing.T) {
	s, err := New(Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	text := strings.Repeat("0123456789abcdef ", 4000) // every prefix cut
	s.RecordServed("t1", text, false)
	base := updatesApplied(s, AreaServed)
	s.RecordServed("t1", text, false)
	if got := updatesApplied(s, AreaServed) - base; got != 1 {
		t.Errorf("recording again applied %d updates; want 1 (the record)", got)
	}
	prefixes := int(s.areas[AreaServed].refreshSkipped.Load())
	if prefixes == 0 {
		t.Fatal("no candidate write skipped")
	}
	s.RecordServed("t1", text+" and more", false)
	if got := updatesApplied(s, AreaServed) - base; got != 1+uint64(prefixes) {
		t.Errorf("a second response applied %d updates; want %d (its lists changed)", got-1, prefixes)
	}
	for i, want := range []string{text + " and more", text} {
		if !s.Verifier("t1").Served(want) {
			t.Errorf("response %d not verified", i)
		}
	}
}

// TestLockIndexSpreads checks that lockIndex is a function of the key
// alone, within s.locks, and spreads the keys the Store locks (a served
// answer's prefix lists, blocks) over every mutex, none with more than
// twice its share.
func TestLockIndexSpreads(t *testing.T) {
	s := &Store{}
	counts := make([]int, len(s.locks))
	const n = 64 * 200
	for i := range n {
		var d digest
		for j := range d {
			d[j] = byte(i*31 + j*7 + i>>8*j)
		}
		k := idKey(strings.Repeat("t", i%40), kindPrefix, d)
		if i%2 == 1 {
			// A block's key: a tenant and a hex SHA-256.
			k = key("tenant", fmt.Sprintf("%064x", d))
		}
		x := s.lockIndex(k)
		if x < 0 || x >= len(s.locks) {
			t.Fatalf("lockIndex(%q) = %d, outside [0, %d)", k, x, len(s.locks))
		}
		if y := s.lockIndex(strings.Clone(k)); y != x {
			t.Fatalf("lockIndex(%q) = %d, then %d", k, x, y)
		}
		counts[x]++
	}
	for i, c := range counts {
		if c == 0 || c > 2*n/len(s.locks) {
			t.Errorf("mutex %d holds %d of %d keys, want 1 to %d", i, c, n, 2*n/len(s.locks))
		}
	}
}
