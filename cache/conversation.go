package cache

import (
	"bytes"
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// kindConversation is the Redis key kind of conversation entries.
const kindConversation = "c:"

// conversationKey is the Redis key of a conversation entry.
func (r *redisBackend) conversationKey(tenant, k string) string {
	return r.key(tenant, kindConversation, []byte(k))
}

// Conversation returns the value SetConversation stored under (tenant, k)
// in AreaConversations. In shared mode (Options.RedisURL) Redis holds the
// fleet's newest value: it is asked first, bounded by Options.RedisTimeout,
// and what it has is kept locally; the local copy answers when Redis has
// nothing, is unavailable, or while this replica's own write of k is still
// queued for Redis. The caller must not modify the value. k must not be
// prompt text: hash text first.
func (s *Store) Conversation(tenant, k string) ([]byte, bool) {
	v := s.Conversations(tenant, []string{k})[0]
	return v, v != nil
}

// Conversations is Conversation for several keys of one tenant at once: the
// value of keys[i] is at index i, nil when missing. In shared mode the keys
// are asked of Redis in one MGET (a per-node pipeline in Cluster mode), one
// round trip bounded by Options.RedisTimeout however many keys there are,
// except keys whose local write is still queued; no Redis call in
// local-only mode or while Redis is paused after an error. A replica's
// local copy may be older than another replica's later write (a
// conversation's turns go to any replica), which is why Redis is asked
// even for keys held locally. The caller must not modify the values.
func (s *Store) Conversations(tenant string, keys []string) [][]byte {
	out := make([][]byte, len(keys))
	var ask []int
	for i, k := range keys {
		if v, ok := s.Get(AreaConversations, tenant, k); ok {
			out[i] = v
		}
		if s.redis != nil && !s.redis.queued(s.redis.conversationKey(tenant, k)) {
			ask = append(ask, i)
		}
	}
	if len(ask) == 0 {
		return out
	}
	rk := make([]string, len(ask))
	for j, i := range ask {
		rk[j] = s.redis.conversationKey(tenant, keys[i])
	}
	vs := s.redis.getValues(rk)
	for j, v := range vs {
		if v == nil {
			continue
		}
		i := ask[j]
		if !bytes.Equal(out[i], v) {
			out[i] = v
			s.areas[AreaConversations].set(key(tenant, keys[i]), v, s.opts.TTL)
		}
	}
	return out
}

// SetConversation stores value under (tenant, k) in AreaConversations for
// Options.TTL and, in shared mode, queues the same write for Redis (with
// the TTL) so that other replicas see it once it landed; it never waits
// for Redis. The local write is visible to Conversation and Conversations
// when SetConversation returns (it waits for the local cache to apply it,
// unlike Set; see the README section on Interactions continuation for the
// measured cost), so a client's next turn on this replica finds it however
// soon it comes. It reports whether the local cache accepted the entry. The
// Store keeps value: the caller must not modify it afterwards. Call Wait
// before expecting the Redis write to be visible to other replicas.
//
// Only a new key waits: ristretto applies the Set of a key it holds at
// once (an update), so when the cache already holds the key after the Set
// the wait, a round trip through ristretto's goroutine, is skipped. A
// value identical to the one held, written less than refreshSlack ago, is
// not written again locally (setChanged: no wake-up of ristretto's
// goroutine); Redis gets the write as always.
func (s *Store) SetConversation(tenant, k string, value []byte) bool {
	a := s.areas[AreaConversations]
	ik := key(tenant, k)
	// The one read of the key, as before (it was made after the Set, to
	// see whether the Set was applied at once).
	old, had := a.get(ik)
	ok := a.setChanged(ik, old, value, had, s.opts.TTL)
	if ok {
		if _, held := a.c.GetTTL(ik); !held {
			a.c.Wait()
		}
	}
	if s.redis != nil {
		s.redis.enqueue(servedWrite{tenant: tenant, key: s.redis.conversationKey(tenant, k), val: value})
	}
	return ok
}

// getValue reads one sealed value; an invalid one is a miss.
func (r *redisBackend) getValue(k string) ([]byte, bool) {
	if !r.readable() {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	b, err := r.c.Get(ctx, k).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		r.readOK()
		return nil, false
	case err != nil:
		r.readFailed(err)
		return nil, false
	}
	r.readOK()
	v, ok := r.open(k, b)
	if ok {
		r.hits.Add(1)
	}
	return v, ok
}

// getValues reads sealed values with one MGET: the value of keys[i] at
// index i, nil when missing, invalid or when Redis is unavailable.
func (r *redisBackend) getValues(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	if !r.readable() || len(keys) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	vs, err := r.mget(ctx, keys)
	if err != nil {
		r.readFailed(err)
		return out
	}
	r.readOK()
	for i, v := range vs {
		if s, ok := v.(string); ok && i < len(out) {
			if b, ok := r.open(keys[i], []byte(s)); ok {
				out[i] = b
				r.hits.Add(1)
			}
		}
	}
	return out
}

// mget reads keys in one round trip: an MGET, or in Cluster mode, where
// the keys of one call may live in several slots and an MGET across slots
// fails (CROSSSLOT), a pipeline of GETs, which go-redis sends to each
// node in parallel. A missing key is nil.
func (r *redisBackend) mget(ctx context.Context, keys []string) ([]any, error) {
	if r.mode != RedisModeCluster {
		return r.c.MGet(ctx, keys...).Result()
	}
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]any, len(keys))
	for i, c := range cmds {
		if v, err := c.Result(); err == nil {
			out[i] = v
		}
	}
	return out, nil
}

// SetConversationNow is SetConversation, and in shared mode it also waits
// until the Redis write was attempted (behind this replica's earlier
// writes of k, in order), at most the writer's bound (ten times
// Options.RedisTimeout), so that once it returns another replica reading
// k finds value unless the write failed. It is for state whose next reader
// cannot tell an older value from the newest: a session's interaction,
// which a client that sends no history continues on whichever replica its
// next turn reaches. It does not wait while Redis writes are paused.
func (s *Store) SetConversationNow(tenant, k string, value []byte) bool {
	ok := s.SetConversation(tenant, k, value)
	if s.redis != nil {
		s.redis.waitKey(s.redis.conversationKey(tenant, k), 10*s.redis.timeout)
	}
	return ok
}
