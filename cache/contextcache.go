package cache

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ContextCacheRegistry shares the context-cache state of a fleet through
// the Store's Redis (contextcache.Shared): per scope, a state value and a
// lock, and per prefix a create lease. All of a scope's keys carry the
// same hash tag, {<hmac of the scope>}, so that they live in one Cluster
// slot and the unlock script, which touches the lock and the state, runs
// in Cluster mode too. Key names are HMACs (keyed by Options.Secret) and
// every value is sealed like the Store's others; the lock's value is a
// random token. Every call is bounded by Options.RedisTimeout and goes
// through the Store's read and write circuit breakers: a Redis that is
// down makes each call report not ok at once.
type ContextCacheRegistry struct {
	r *redisBackend
}

// ContextCacheRegistry returns the Store's registry for context caching,
// or nil in local-only mode.
func (s *Store) ContextCacheRegistry() *ContextCacheRegistry {
	if s.redis == nil {
		return nil
	}
	return &ContextCacheRegistry{r: s.redis}
}

// lockWait bounds how long Lock waits for a scope lock held by another
// replica; lockPoll is how often it asks.
const (
	lockWait = 500 * time.Millisecond
	lockPoll = 5 * time.Millisecond
)

// kindScope is the key kind of a scope's keys.
const kindScope = "x:"

// scopeTag returns the hash-tagged stem of the keys of (tenant, scope).
func (g *ContextCacheRegistry) scopeTag(tenant, scope string) string {
	m := hmac.New(sha256.New, g.r.keyKey)
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write([]byte(kindScope))
	m.Write([]byte(scope))
	return redisKeyPrefix + tenant + ":" + kindScope + "{" + hex.EncodeToString(m.Sum(nil)) + "}"
}

func (g *ContextCacheRegistry) stateKey(tenant, scope string) string {
	return g.scopeTag(tenant, scope) + "s"
}

func (g *ContextCacheRegistry) lockKey(tenant, scope string) string {
	return g.scopeTag(tenant, scope) + "l"
}

func (g *ContextCacheRegistry) leaseKey(tenant, scope string, key [32]byte) string {
	tag := g.scopeTag(tenant, scope)
	m := hmac.New(sha256.New, g.r.keyKey)
	m.Write([]byte(tag))
	m.Write(key[:])
	return tag + "n" + hex.EncodeToString(m.Sum(nil))
}

// ctx returns a context bounded by the Store's per-call time-out.
func (g *ContextCacheRegistry) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.r.timeout)
}

// Load returns the scope's state without locking.
func (g *ContextCacheRegistry) Load(tenant, scope string) (state []byte, found, ok bool) {
	if !g.r.readable() {
		return nil, false, false
	}
	k := g.stateKey(tenant, scope)
	ctx, cancel := g.ctx()
	defer cancel()
	b, err := g.r.c.Get(ctx, k).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		g.r.readOK()
		return nil, false, true
	case err != nil:
		g.r.readFailed(err)
		return nil, false, false
	}
	g.r.readOK()
	v, valid := g.r.open(k, b)
	return v, valid, true
}

// Lock takes the scope's lock (SET NX PX lease, with a random token) and
// reads its state in the same round trip, retrying for at most lockWait
// while another replica holds it.
func (g *ContextCacheRegistry) Lock(tenant, scope string, lease time.Duration) (state []byte, token string, ok bool) {
	if !g.r.readable() || !g.r.writes.available() {
		return nil, "", false
	}
	var tb [16]byte
	rand.Read(tb[:])
	token = hex.EncodeToString(tb[:])
	lk, sk := g.lockKey(tenant, scope), g.stateKey(tenant, scope)
	deadline := time.Now().Add(lockWait)
	for {
		ctx, cancel := g.ctx()
		var set *redis.BoolCmd
		var get *redis.StringCmd
		_, err := g.r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			set = p.SetNX(ctx, lk, token, lease)
			get = p.Get(ctx, sk)
			return nil
		})
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			g.r.writes.failed(g.r.log, err)
			return nil, "", false
		}
		if set.Val() {
			g.r.readOK()
			b, err := get.Bytes()
			if err != nil {
				return nil, token, true // no state yet
			}
			if v, valid := g.r.open(sk, b); valid {
				return v, token, true
			}
			return nil, token, true
		}
		if time.Now().After(deadline) {
			g.r.lockTimeouts.Add(1)
			return nil, "", false
		}
		time.Sleep(lockPoll)
	}
}

// unlockScript stores the state and deletes the lock only while the lock
// holds the caller's token: KEYS[1] the lock, KEYS[2] the state (same hash
// tag, same slot), ARGV the token, the sealed state ("" keeps it) and its
// TTL in milliseconds.
var unlockScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= "" then redis.call("SET", KEYS[2], ARGV[2], "PX", ARGV[3]) end
redis.call("DEL", KEYS[1])
return 1`)

// Unlock stores state (nil: unchanged) for ttl and releases the lock, if
// token still holds it.
func (g *ContextCacheRegistry) Unlock(tenant, scope, token string, state []byte, ttl time.Duration) bool {
	lk, sk := g.lockKey(tenant, scope), g.stateKey(tenant, scope)
	var sealed []byte
	if state != nil {
		sealed = g.r.seal(sk, state)
	}
	ctx, cancel := g.ctx()
	defer cancel()
	n, err := unlockScript.Run(ctx, g.r.c, []string{lk, sk}, token, sealed, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		g.r.writes.failed(g.r.log, err)
		return false
	}
	g.r.writes.succeeded(g.r.log)
	return n == 1 && state != nil
}

// Claim takes the create lease of key (SET NX with the lease's TTL) or
// reads its value: empty while its winner is creating, the winner's entry
// once published.
func (g *ContextCacheRegistry) Claim(tenant, scope string, key [32]byte, lease time.Duration) (won bool, val []byte, ok bool) {
	if !g.r.readable() || !g.r.writes.available() {
		return false, nil, false
	}
	k := g.leaseKey(tenant, scope, key)
	ctx, cancel := g.ctx()
	defer cancel()
	var set *redis.BoolCmd
	var get *redis.StringCmd
	_, err := g.r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetNX(ctx, k, "", lease)
		get = p.Get(ctx, k)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		g.r.writes.failed(g.r.log, err)
		return false, nil, false
	}
	g.r.writes.succeeded(g.r.log)
	if set.Val() {
		g.r.leasesWon.Add(1)
		return true, nil, true
	}
	b, err := get.Bytes()
	if err != nil || len(b) == 0 {
		return false, nil, true
	}
	v, _ := g.r.open(k, b)
	return false, v, true
}

// Publish replaces the lease of key with val for ttl.
func (g *ContextCacheRegistry) Publish(tenant, scope string, key [32]byte, val []byte, ttl time.Duration) bool {
	if !g.r.writes.available() {
		return false
	}
	k := g.leaseKey(tenant, scope, key)
	ctx, cancel := g.ctx()
	defer cancel()
	if err := g.r.c.Set(ctx, k, g.r.seal(k, val), ttl).Err(); err != nil {
		g.r.writes.failed(g.r.log, err)
		return false
	}
	g.r.writes.succeeded(g.r.log)
	return true
}
