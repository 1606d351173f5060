package cache_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
)

// TestConversationLocal: SetConversation is read back by Conversation for
// the same tenant only.
func TestConversationLocal(t *testing.T) {
	s := newStore(t, cache.Options{})
	if !s.SetConversation(tenantA, "ix:abc", []byte("v1_id")) {
		t.Fatal("SetConversation rejected a small entry")
	}
	s.Wait()
	if v, ok := s.Conversation(tenantA, "ix:abc"); !ok || string(v) != "v1_id" {
		t.Errorf("Conversation(A) = %q, %v; want v1_id, true", v, ok)
	}
	if v, ok := s.Conversation(tenantB, "ix:abc"); ok {
		t.Errorf("Conversation(B) = %q, true; want a miss for another tenant", v)
	}
	if _, ok := s.Conversation(tenantA, "ix:other"); ok {
		t.Error("Conversation of an unknown key hit")
	}
}

// TestConversationRedis: a conversation entry written by one replica is
// read by another through a real redis-server, and never by another
// tenant.
func TestConversationRedis(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	b := newStore(t, sharedOpts(srv))
	a.SetConversation(tenantA, "ix:0123", []byte("v1_shared"))
	a.Wait()
	if v, ok := b.Conversation(tenantA, "ix:0123"); !ok || string(v) != "v1_shared" {
		t.Fatalf("replica B Conversation = %q, %v; want v1_shared, true", v, ok)
	}
	if _, ok := b.Conversation(tenantB, "ix:0123"); ok {
		t.Error("replica B found tenant A's entry for tenant B")
	}
	// Now local on B: it survives Redis stopping.
	b.Wait()
	srv.Stop()
	if v, ok := b.Conversation(tenantA, "ix:0123"); !ok || string(v) != "v1_shared" {
		t.Errorf("after Redis stopped, replica B Conversation = %q, %v; want the local copy", v, ok)
	}
}

// TestConversationImmediate: a SetConversation is visible to Conversation
// and Conversations as soon as it returns, without Wait: a client's next
// turn may arrive right after the previous response ended.
func TestConversationImmediate(t *testing.T) {
	s := newStore(t, cache.Options{})
	for i := range 200 {
		k := fmt.Sprintf("ix:%04d", i)
		want := fmt.Sprintf("v1_%d", i)
		if !s.SetConversation(tenantA, k, []byte(want)) {
			t.Fatalf("SetConversation(%s) rejected", k)
		}
		if v, ok := s.Conversation(tenantA, k); !ok || string(v) != want {
			t.Fatalf("Conversation(%s) right after SetConversation = %q, %v; want %s, true", k, v, ok, want)
		}
		if vs := s.Conversations(tenantA, []string{k}); string(vs[0]) != want {
			t.Fatalf("Conversations(%s) right after SetConversation = %q; want %s", k, vs[0], want)
		}
	}
}

// TestConversationImmediateRewrite: a key written again, which
// SetConversation does not wait for when ristretto applied it at once, is
// visible with its new value as soon as SetConversation returns, also
// among new keys and values of every length (an empty one included), from
// several goroutines at once (each with its own keys).
func TestConversationImmediateRewrite(t *testing.T) {
	s := newStore(t, cache.Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 60 {
				for i := range 12 {
					k := fmt.Sprintf("lg:%d:%d", g, i)
					if i%4 == 3 {
						k = fmt.Sprintf("lg:%d:%d:%d", g, i, round) // a new key every round
					}
					want := []byte(strings.Repeat("v", (round*7+i)%40))
					if !s.SetConversation(tenantA, k, want) {
						errs <- fmt.Errorf("SetConversation(%s) rejected", k)
						return
					}
					if v, ok := s.Conversation(tenantA, k); !ok || !bytes.Equal(v, want) {
						errs <- fmt.Errorf("round %d: Conversation(%s) right after SetConversation = %q, %v; want %q", round, k, v, ok, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConversationsLocal: Conversations returns each key's value at its
// index, nil for missing keys and for another tenant's.
func TestConversationsLocal(t *testing.T) {
	s := newStore(t, cache.Options{})
	s.SetConversation(tenantA, "ix:1", []byte("one"))
	s.SetConversation(tenantA, "ix:3", []byte("three"))
	s.SetConversation(tenantB, "ix:2", []byte("b-two"))
	got := s.Conversations(tenantA, []string{"ix:1", "ix:2", "ix:3", "ix:4"})
	want := [][]byte{[]byte("one"), nil, []byte("three"), nil}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Conversations (-want +got):\n%s", diff)
	}
	if got := s.Conversations(tenantA, nil); len(got) != 0 {
		t.Errorf("Conversations(no keys) = %q, want none", got)
	}
}

// TestConversationsRedis: another replica reads eight conversation keys
// with one MGET (one round trip), keeps them locally, asks Redis again
// (one MGET) even when every key is local, since another replica may have
// written since, and with Redis stopped answers from its local copy.
func TestConversationsRedis(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	b := newStore(t, sharedOpts(srv))
	var keys []string
	var want [][]byte
	for i := range 8 {
		k := fmt.Sprintf("ix:%02d", i)
		keys = append(keys, k)
		if i%2 == 0 {
			a.SetConversation(tenantA, k, []byte("v1_"+k))
			want = append(want, []byte("v1_"+k))
		} else {
			want = append(want, nil)
		}
	}
	a.Wait()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, b.Conversations(tenantA, keys)); diff != "" {
		t.Errorf("replica B Conversations (-want +got):\n%s", diff)
	}
	if got := b.Conversations(tenantB, keys); slices.ContainsFunc(got, func(v []byte) bool { return v != nil }) {
		t.Errorf("replica B found tenant A's entries for tenant B: %q", got)
	}
	b.Wait()
	// Keys found locally are asked again: one more MGET.
	b.Conversations(tenantA, []string{keys[0], keys[2]})
	stats, err := rc.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_mget:calls=3,") || strings.Contains(stats, "cmdstat_get:") {
		t.Errorf("Redis commands = %s; want 3 MGET (tenant A, tenant B, tenant A again) and no GET", stats)
	}

	srv.Stop()
	got := b.Conversations(tenantA, keys)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replica B Conversations with Redis stopped (-want +got):\n%s", diff)
	}
}

// TestConversationsSlowRedis: a Redis that never answers costs one
// Conversations call one Redis timeout, however many keys it asks, and the
// next call no Redis call at all (Redis is paused): one read error in all.
// The time bound is eight times below what one call per key would take,
// so it holds on a machine four times slower than usual.
func TestConversationsSlowRedis(t *testing.T) {
	ln := blackhole(t)
	const timeout = 250 * time.Millisecond
	s := newStore(t, cache.Options{Secret: testSecret, RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout})
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("ix:%02d", i)
	}
	start := time.Now()
	s.Conversations(tenantA, keys)
	s.Conversations(tenantA, keys)
	if d, perKey := time.Since(start), time.Duration(len(keys))*timeout; d > perKey/8 {
		t.Errorf("2×%d keys against a silent Redis took %v; want one %v timeout, far below %v", len(keys), d, timeout, perKey)
	}
	if st := s.Stats().Redis; st.ReadErrors != 1 || st.Up {
		t.Errorf("redis stats = %+v, want one read error and down", st)
	}
}

// BenchmarkSetConversation compares SetConversation, which waits for the
// local cache to apply the write, with Set, which does not, in parallel
// like concurrent requests.
func BenchmarkSetConversation(b *testing.B) {
	for _, tc := range []struct {
		name string
		set  func(s *cache.Store, k string, v []byte)
	}{
		{"Set", func(s *cache.Store, k string, v []byte) { s.Set(cache.AreaConversations, tenantA, k, v) }},
		{"SetConversation", func(s *cache.Store, k string, v []byte) { s.SetConversation(tenantA, k, v) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := cache.New(cache.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			v := []byte("v1_abcdefghijklmnopqrstuvwxyz")
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					tc.set(s, fmt.Sprintf("ix:%p:%d", pb, i), v)
				}
			})
		})
	}
}

// TestConversationNewestAcrossReplicas: a key rewritten by one replica
// after another replica read it gives that replica the new value, not its
// local copy: the ledger keeps a conversation's state under its start and
// rewrites it every turn, and the turns of one conversation go to any
// replica.
func TestConversationNewestAcrossReplicas(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a, b := newStore(t, sharedOpts(srv)), newStore(t, sharedOpts(srv))
	for i := range 3 {
		v := []byte(fmt.Sprintf("turn %d", i))
		w, r := a, b
		if i%2 == 1 {
			w, r = b, a
		}
		w.SetConversation(tenantA, "lg:k:start", v)
		w.Wait()
		if got, ok := r.Conversation(tenantA, "lg:k:start"); !ok || string(got) != string(v) {
			t.Errorf("turn %d: the other replica read %q, want %q", i, got, v)
		}
	}
}
