package cache_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
)

// TestRedisShared: two Stores (two replicas) share the served index
// through a real redis-server, tenants stay apart, keys hold no text, and a
// stopped Redis degrades to local-only without failing or stalling.
func TestRedisShared(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	b := newStore(t, sharedOpts(srv))
	full := words("Shared answer", 3000)
	short := "Yes, it is."
	a.RecordServed(tenantA, full, false)
	a.RecordServed(tenantA, short, false)
	a.Wait()

	tests := []struct {
		name   string
		tenant string
		text   string
		want   bool
	}{
		{"full", tenantA, full, true},
		{"short", tenantA, short, true},
		{"prefix", tenantA, full[:2000], true},
		{"extended", tenantA, full + " more", false},
		{"other tenant", tenantB, full, false},
		{"other tenant prefix", tenantB, full[:2000], false},
	}
	for _, tt := range tests {
		// A fresh Store each time: nothing local, everything from Redis.
		c := newStore(t, sharedOpts(srv))
		if got := c.Verifier(tt.tenant).Served(tt.text); got != tt.want {
			t.Errorf("%s: replica C Served = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !b.Verifier(tenantA).Served(full[:2500]) {
		t.Fatal("replica B did not verify replica A's response")
	}
	if st := b.Stats().Redis; !st.Enabled || !st.Up || st.Hits == 0 {
		t.Errorf("replica B redis stats = %+v, want enabled, up, hits", st)
	}

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no keys in Redis")
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "gemini-proxy:"+tenantA+":") || strings.Contains(k, "Shared") {
			t.Errorf("unexpected Redis key %q", k)
		}
		if ttl := rc.TTL(context.Background(), k).Val(); ttl <= 0 || ttl > cache.DefaultTTL {
			t.Errorf("key %q TTL = %v, want within the cache TTL", k, ttl)
		}
	}

	srv.Stop()
	// Replica B keeps what it already verified (now local) and answers
	// for everything else without Redis (TestRedisSlowBudget bounds the
	// time of that).
	for i := range 20 {
		v := b.Verifier(tenantA)
		if !v.Served(full) {
			t.Fatal("replica B lost a locally cached response when Redis stopped")
		}
		if v.Served(words("unknown", 200+i)) {
			t.Fatal("Served = true for an unknown text with Redis down")
		}
	}
	// Replica A keeps recording and verifying locally.
	a.RecordServed(tenantA, "Recorded while Redis is down.", false)
	a.Wait()
	if !a.Verifier(tenantA).Served("Recorded while Redis is down.") {
		t.Error("local verification failed with Redis down")
	}
	st := b.Stats().Redis
	if st.Up || st.ReadErrors == 0 {
		t.Errorf("replica B redis stats after stop = %+v, want down with read errors", st)
	}
}

// TestRedisSlowBudget: a Redis that never answers adds at most about the
// budget to one Verifier, however many lookups it makes. Unbounded, the
// lookups would wait 100 time-outs (25 s); the bound allows eight times the
// budget plus a time-out, so a machine four times slower still passes.
func TestRedisSlowBudget(t *testing.T) {
	ln := blackhole(t)
	const timeout, budget = 250 * time.Millisecond, 250 * time.Millisecond
	s := newStore(t, cache.Options{RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout, RedisBudget: budget})
	v := s.Verifier(tenantA)
	start := time.Now()
	for i := range 50 {
		v.Served(words("nothing", 100+i))
	}
	if d := time.Since(start); d > 8*(budget+timeout) {
		t.Errorf("50 lookups against a silent Redis took %v, want about the %v budget", d, budget)
	}
	if st := s.Stats().Redis; st.ReadErrors == 0 || st.Up {
		t.Errorf("redis stats = %+v, want a read error and down", st)
	}
}

// TestRedisQueueFull: with a Redis that never answers, RecordServed never
// blocks; what does not fit in the queue is dropped and counted. Blocking
// on the writer would take 49 pipelines of 10 time-outs (24 s); the bound
// is eight times below.
func TestRedisQueueFull(t *testing.T) {
	ln := blackhole(t)
	const timeout = 50 * time.Millisecond
	s := newStore(t, cache.Options{RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout, RedisQueue: 2})
	start := time.Now()
	for i := range 100 {
		s.RecordServed(tenantA, words("queued", 100+i), false)
	}
	if d, blocked := time.Since(start), 49*10*timeout; d > blocked/8 {
		t.Errorf("100 RecordServed calls with a silent Redis took %v, want far below %v", d, blocked)
	}
	s.Wait()
	st := s.Stats().Redis
	if st.Dropped < 90 || st.Writes != 0 || st.WriteErrors == 0 {
		t.Errorf("redis stats = %+v, want most writes dropped, none written, a write error", st)
	}
	// Local verification is unaffected.
	if !s.Verifier(tenantA).Served(words("queued", 150)) {
		t.Error("local verification failed while Redis is silent")
	}
}

// TestRedisFlushOnClose: responses still queued for Redis when the Store
// closes are written, not dropped, so a replica that shuts down right
// after serving still shares them.
func TestRedisFlushOnClose(t *testing.T) {
	srv := cachetest.StartRedis(t)
	s, err := cache.New(sharedOpts(srv))
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	texts := make([]string, n)
	for i := range texts {
		texts[i] = words("flushed "+strings.Repeat("x", i%13)+" answer", 3000+i)
		s.RecordServed(tenantA, texts[i], false)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := s.Stats().Redis; st.Dropped != 0 || st.Writes != n {
		t.Errorf("after Close: redis stats = %+v, want %d writes, none dropped", st, n)
	}
	c := newStore(t, sharedOpts(srv))
	for i, text := range texts {
		if !c.Verifier(tenantA).Served(text) {
			t.Fatalf("response %d of %d is not in Redis after Close", i, n)
		}
	}
}

// TestRedisFlushBounded: with a Redis that never answers, Close gives up
// after its flush bound, the batch in flight included, and drops what is
// left. Without the bound, Close would wait at least for the writer's
// batch in flight (one 30 s time-out); the check allows twenty times the
// flush bound and four seconds, so a machine ten times slower passes.
func TestRedisFlushBounded(t *testing.T) {
	ln := blackhole(t)
	const timeout, flush = 30 * time.Second, 200 * time.Millisecond
	s, err := cache.New(cache.Options{RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout, RedisFlush: flush})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		s.RecordServed(tenantA, words("stuck", 100+i), false)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 20*flush+4*time.Second {
		t.Errorf("Close took %v with a silent Redis, want about %v at most", d, flush)
	}
	if st := s.Stats().Redis; st.Writes != 0 || st.Dropped == 0 {
		t.Errorf("redis stats = %+v, want nothing written, the rest dropped", st)
	}
}
