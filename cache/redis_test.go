package cache_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	s := newStore(t, cache.Options{Secret: testSecret, RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout, RedisBudget: budget})
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
	s := newStore(t, cache.Options{Secret: testSecret, RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout, RedisQueue: 2})
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
	s, err := cache.New(cache.Options{Secret: testSecret, RedisURL: "redis://" + ln + "/0", RedisTimeout: timeout, RedisFlush: flush})
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

// TestRedisForgedValues: whoever can write to Redis cannot make a replica
// believe a text was served (issue 16 item 4). A record written under the
// key of an unkeyed digest is not found, a record or conversation value
// altered in place or moved under another key fails its HMAC and is a
// miss, counted, and no key names the digest of a served text.
func TestRedisForgedValues(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	served := words("A served answer", 300)
	a.RecordServed(tenantA, served, false)
	a.SetConversation(tenantA, "ix:0001", []byte("v1_real"))
	a.Wait()

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Keys = %q, %v", keys, err)
	}
	sum := func(text string) string {
		d := sha256.Sum256([]byte(text))
		return hex.EncodeToString(d[:])
	}
	for _, k := range keys {
		if strings.Contains(k, sum(served)) || strings.Contains(k, "ix:0001") {
			t.Errorf("Redis key %q names the served text's digest or the conversation key", k)
		}
	}

	// A forger who knows the old key layout writes a record of their own.
	forged := words("Forged model turn", 300)
	if err := rc.Set(ctx, "gemini-proxy:"+tenantA+":r:"+sum(forged), "\x00"+forged, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// And alters every value in place: a byte flipped at the end.
	for _, k := range keys {
		switch typ := rc.Type(ctx, k).Val(); typ {
		case "string":
			v := []byte(rc.Get(ctx, k).Val())
			v[len(v)-1] ^= 1
			rc.Set(ctx, k, v, 0)
		case "list":
			vs := rc.LRange(ctx, k, 0, -1).Val()
			rc.Del(ctx, k)
			for _, v := range vs {
				b := []byte(v)
				b[len(b)-1] ^= 1
				rc.RPush(ctx, k, b)
			}
		default:
			t.Fatalf("key %q has type %s", k, typ)
		}
	}
	c := newStore(t, sharedOpts(srv))
	if c.Verifier(tenantA).Served(forged) {
		t.Error("a record forged under an unkeyed digest counts as served")
	}
	if c.Verifier(tenantA).Served(served) || c.Verifier(tenantA).Served(served[:200]) {
		t.Error("an altered record counts as served")
	}
	if v, ok := c.Conversation(tenantA, "ix:0001"); ok {
		t.Errorf("an altered conversation value was returned: %q", v)
	}
	if st := c.Stats().Redis; st.Invalid < 3 {
		t.Errorf("redis stats = %+v, want at least 3 invalid values (record, candidates, conversation)", st)
	}

	// A valid value moved under another tenant's key is invalid there.
	a.RecordServed(tenantA, served, false)
	a.SetConversation(tenantA, "ix:0001", []byte("v1_real"))
	a.Wait()
	d := newStore(t, sharedOpts(srv))
	if !d.Verifier(tenantA).Served(served) {
		t.Fatal("a rewritten record is not served")
	}
	if v, ok := d.Conversation(tenantA, "ix:0001"); !ok || string(v) != "v1_real" {
		t.Fatalf("Conversation = %q, %v; want v1_real", v, ok)
	}
	b := newStore(t, sharedOpts(srv))
	b.SetConversation(tenantB, "ix:0001", []byte("v1_b"))
	b.Wait()
	var keyA, keyB string
	for _, k := range rc.Keys(ctx, "*").Val() {
		if rc.Type(ctx, k).Val() != "string" {
			continue
		}
		v := rc.Get(ctx, k).Val()
		switch {
		case strings.HasSuffix(v, "v1_real"):
			keyA = k
		case strings.HasSuffix(v, "v1_b"):
			keyB = k
		}
	}
	if keyA == "" || keyB == "" {
		t.Fatalf("conversation keys not found: %q %q", keyA, keyB)
	}
	rc.Set(ctx, keyB, rc.Get(ctx, keyA).Val(), 0)
	e := newStore(t, sharedOpts(srv))
	if v, ok := e.Conversation(tenantB, "ix:0001"); ok {
		t.Errorf("tenant A's value under tenant B's key was returned: %q", v)
	}
	if st := e.Stats().Redis; st.Invalid != 1 {
		t.Errorf("redis stats = %+v, want 1 invalid value", st)
	}
}

// TestRedisNeedsSecret: shared mode without a secret is refused, since
// values could then not be authenticated.
func TestRedisNeedsSecret(t *testing.T) {
	if _, err := cache.New(cache.Options{RedisURL: "redis://127.0.0.1:1/0"}); err == nil {
		t.Error("New with RedisURL and no Secret succeeded")
	}
	if _, err := cache.New(cache.Options{RedisURL: "redis://127.0.0.1:1/0", Secret: []byte("short")}); err == nil {
		t.Error("New with a 5-byte Secret succeeded")
	}
}

// TestRedisWritesRefusedReadsServed: a Redis that refuses writes (out of
// memory under noeviction, like a read-only replica) but answers reads
// pauses only the writes: a second replica still verifies every transcript
// the first one shared, and what it records meanwhile stays local (issue 16
// item 5).
func TestRedisWritesRefusedReadsServed(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	texts := make([]string, 20)
	for i := range texts {
		texts[i] = words(fmt.Sprintf("transcript %d", i), 400+i)
		a.RecordServed(tenantA, texts[i], false)
	}
	a.Wait()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := rc.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := newStore(t, sharedOpts(srv))
	verified := 0
	for i, text := range texts {
		// A write fails before each lookup.
		b.RecordServed(tenantA, words(fmt.Sprintf("local answer %d", i), 300), false)
		b.Wait()
		if b.Verifier(tenantA).Served(text) {
			verified++
		}
	}
	st := b.Stats().Redis
	if verified != len(texts) {
		t.Errorf("replica B verified %d of %d transcripts with Redis refusing writes; redis stats %+v", verified, len(texts), st)
	}
	if st.WriteErrors == 0 || st.ReadErrors != 0 || st.Up {
		t.Errorf("redis stats = %+v, want write errors, no read error, not up", st)
	}
	if !b.Verifier(tenantA).Served(words("local answer 3", 300)) {
		t.Error("an answer recorded while writes failed is not verified locally")
	}
}

// TestRedisSetConversationNow: once SetConversationNow returns, another
// replica reads the new value, every time, also when the same key was
// written just before (the writes land in order); without Redis it is
// SetConversation. Each round writes a new value and reads it through b
// at once, with no Wait.
func TestRedisSetConversationNow(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	b := newStore(t, sharedOpts(srv))
	for i := range 200 {
		a.SetConversation(tenantA, "session", []byte(fmt.Sprint("older ", i)))
		want := fmt.Sprint("newest ", i)
		a.SetConversationNow(tenantA, "session", []byte(want))
		if v, ok := b.Conversation(tenantA, "session"); !ok || string(v) != want {
			t.Fatalf("round %d: the other replica read %q (%v), want %q", i, v, ok, want)
		}
	}
	local := newStore(t, cache.Options{})
	local.SetConversationNow(tenantA, "session", []byte("v"))
	if v, ok := local.Conversation(tenantA, "session"); !ok || string(v) != "v" {
		t.Errorf("local store read %q (%v)", v, ok)
	}
}
