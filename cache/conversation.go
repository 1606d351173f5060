package cache

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// kindConversation is the Redis key kind of conversation entries.
const kindConversation = "c:"

// conversationKey is the Redis key of a conversation entry.
func conversationKey(tenant, k string) string {
	return redisKeyPrefix + tenant + ":" + kindConversation + k
}

// Conversation returns the value SetConversation stored under (tenant, k)
// in AreaConversations. On a local miss in shared mode (Options.RedisURL)
// it asks Redis, bounded by Options.RedisTimeout, and keeps what it finds
// locally. The caller must not modify the value. k must not be prompt
// text: hash text first.
func (s *Store) Conversation(tenant, k string) ([]byte, bool) {
	if v, ok := s.Get(AreaConversations, tenant, k); ok {
		return v, true
	}
	if s.redis == nil {
		return nil, false
	}
	v, ok := s.redis.getValue(conversationKey(tenant, k))
	if !ok {
		return nil, false
	}
	s.areas[AreaConversations].set(key(tenant, k), v, s.opts.TTL)
	return v, true
}

// SetConversation stores value under (tenant, k) in AreaConversations for
// Options.TTL and, in shared mode, queues the same write for Redis (with
// the TTL) so that other replicas see it once it landed; it never waits
// for Redis. It reports whether the local cache accepted the entry. The
// Store keeps value: the caller must not modify it afterwards. Call Wait
// before expecting the write to be visible.
func (s *Store) SetConversation(tenant, k string, value []byte) bool {
	ok := s.Set(AreaConversations, tenant, k, value)
	if s.redis != nil {
		s.redis.enqueue(servedWrite{tenant: tenant, key: conversationKey(tenant, k), val: value})
	}
	return ok
}

// getValue reads one plain value.
func (r *redisBackend) getValue(k string) ([]byte, bool) {
	if !r.available() {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	b, err := r.c.Get(ctx, k).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		r.succeeded()
		return nil, false
	case err != nil:
		r.failed(&r.readErrors, err)
		return nil, false
	}
	r.succeeded()
	r.hits.Add(1)
	return b, true
}
