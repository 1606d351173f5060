package cache

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultMaxBytes is the memory bound when Options.MaxBytes is zero.
	DefaultMaxBytes = 256 << 20
	// DefaultTTL is the entry lifetime when Options.TTL is zero.
	DefaultTTL = time.Hour
	// DefaultRedisTimeout bounds each Redis call when Options.RedisTimeout
	// is zero.
	DefaultRedisTimeout = 50 * time.Millisecond
	// DefaultRedisBudget bounds the Redis time one request's Verifier may
	// spend when Options.RedisBudget is zero.
	DefaultRedisBudget = 100 * time.Millisecond
	// DefaultRedisQueue is the number of pending Redis writes when
	// Options.RedisQueue is zero.
	DefaultRedisQueue = 1024
	// DefaultRedisFlush bounds the time Close spends writing queued
	// responses to Redis when Options.RedisFlush is zero.
	DefaultRedisFlush = 2 * time.Second
)

// entryOverhead is the memory, in bytes, that one entry costs besides its
// value: ristretto's store item (64 bytes) in a Go map, its expiration
// bucket and policy map entries, the value's slice header and the
// allocator's size-class rounding. BenchmarkServedMemory measures the
// figure this approximates.
const entryOverhead = 320

// Area names a part of the cache. Each area has its own share of
// Options.MaxBytes, so that one kind of entry cannot evict another.
type Area string

const (
	// AreaServed holds the served-response index used by Verifier.
	AreaServed Area = "served"
	// AreaBlocks holds the block index (RecordBlocks, Block).
	AreaBlocks Area = "blocks"
	// AreaConversations holds per-conversation state through Get and Set.
	// Nothing in the proxy uses it yet: the rewrite analysis memo was
	// measured slower than re-analysing (see doc.go), and server-side
	// continuation (issue 8) will keep its interaction ids here.
	AreaConversations Area = "conversations"
)

// Areas lists every Area in a stable order (metrics label values).
var Areas = []Area{AreaServed, AreaBlocks, AreaConversations}

// areaShare is each area's share of MaxBytes, in eighths.
var areaShare = map[Area]int64{AreaServed: 6, AreaBlocks: 1, AreaConversations: 1}

// Options configures a Store.
type Options struct {
	// MaxBytes bounds the memory, in bytes, of the entries held locally,
	// split between the areas (served 6/8, blocks 1/8, conversations 1/8).
	// Zero means DefaultMaxBytes.
	MaxBytes int64
	// TTL is how long an entry lives after it was last written, locally
	// and in Redis. Zero means DefaultTTL.
	TTL time.Duration
	// RedisURL, when set, shares the served-response index with other
	// replicas through Redis. The local cache stays in front of it. Empty
	// means local only. redis://[user:password@]host:port/db (rediss://
	// for TLS) names one server; addr=host:port query parameters add
	// Cluster seeds (a Cluster client); redis-sentinel:// (or
	// rediss-sentinel://) names sentinels, with the master_name query
	// parameter (see parseRedisTarget).
	RedisURL string
	// RedisCluster makes RedisURL's host a Cluster seed even without addr
	// parameters.
	RedisCluster bool
	// RedisMasterName, when set, makes RedisURL's hosts sentinels watching
	// the master of that name.
	RedisMasterName string
	// RedisTLS holds the CA and client-certificate files of a rediss://
	// URL; the zero value uses the system's CAs and no client certificate.
	RedisTLS RedisTLS
	// RedisPoolSize bounds the connections per Redis node. Zero means
	// go-redis's default (10 per CPU) or the URL's pool_size.
	RedisPoolSize int
	// RedisTimeout bounds each Redis call. Zero means DefaultRedisTimeout.
	RedisTimeout time.Duration
	// RedisBudget bounds the total Redis time one Verifier spends, so a
	// slow Redis adds at most about this much to a request. Zero means
	// DefaultRedisBudget.
	RedisBudget time.Duration
	// RedisQueue is the number of served responses waiting to be written
	// to Redis; more are dropped and counted. Zero means DefaultRedisQueue.
	RedisQueue int
	// RedisFlush bounds the time Close spends writing the responses still
	// queued for Redis, a batch already being written included; what is
	// left then is dropped and counted. Zero means DefaultRedisFlush; negative
	// drops them at once.
	RedisFlush time.Duration
	// Secret keys the names of the Redis keys and authenticates every
	// value written to Redis (HMAC-SHA256; a value that fails is a miss,
	// counted in RedisStats.Invalid). Replicas sharing a Redis need the
	// same Secret. Required with RedisURL, at least MinSecretBytes long;
	// unused without it.
	Secret []byte
	// Logger receives Redis state changes. Nil discards them.
	Logger *slog.Logger
}

// Store is the per-tenant conversation cache: a served-response index for
// verified un-flattening, a block index, and a generic byte-bounded
// key-value area. Every entry is keyed by tenant; no lookup crosses tenants.
// Safe for concurrent use. Build it with New and Close it when done.
type Store struct {
	opts   Options
	log    *slog.Logger
	areas  map[Area]*area
	redis  *redisBackend // nil without Options.RedisURL
	blocks *blockWorker

	locks [64]sync.Mutex // read-modify-write of list and block entries, by key hash

	recorded, verified, rejected atomic.Uint64
}

// area is one ristretto cache with its own counters.
type area struct {
	c                       *ristretto.Cache[string, []byte]
	max                     int64
	hits, misses, evictions atomic.Uint64
	// refreshSkipped counts the writes setChanged skipped.
	refreshSkipped atomic.Uint64
}

// New builds a Store. With Options.RedisURL it connects lazily: an
// unreachable Redis degrades to local-only, it never fails New.
func New(opts Options) (*Store, error) {
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxBytes < 1<<16 {
		return nil, fmt.Errorf("cache: max bytes %d below 64 KiB", opts.MaxBytes)
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < 0 {
		return nil, errors.New("cache: negative ttl")
	}
	if opts.RedisTimeout == 0 {
		opts.RedisTimeout = DefaultRedisTimeout
	}
	if opts.RedisBudget == 0 {
		opts.RedisBudget = DefaultRedisBudget
	}
	if opts.RedisQueue == 0 {
		opts.RedisQueue = DefaultRedisQueue
	}
	if opts.RedisFlush == 0 {
		opts.RedisFlush = DefaultRedisFlush
	}
	s := &Store{opts: opts, log: opts.Logger, areas: make(map[Area]*area, len(Areas))}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, name := range Areas {
		a, err := newArea(opts.MaxBytes * areaShare[name] / 8)
		if err != nil {
			s.closeAreas()
			return nil, fmt.Errorf("cache: area %s: %w", name, err)
		}
		s.areas[name] = a
	}
	if opts.RedisURL != "" {
		r, err := newRedis(s, opts)
		if err != nil {
			s.closeAreas()
			return nil, err
		}
		s.redis = r
	}
	s.blocks = newBlockWorker(s)
	return s, nil
}

// newArea builds a ristretto cache whose costs, counters included, stay
// within budget bytes.
func newArea(budget int64) (*area, error) {
	// Ten counters per expected entry (ristretto's advice), assuming 1 KiB
	// entries; each counter costs about 3 bytes, taken from the budget so
	// that the bound covers them too.
	counters := max(budget/1024*10, 1000)
	a := &area{max: budget - counters*3}
	if a.max <= 0 {
		return nil, errors.New("budget too small")
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		NumCounters:        counters,
		MaxCost:            a.max,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true, // entryOverhead is in every cost
		OnEvict:            func(*ristretto.Item[[]byte]) { a.evictions.Add(1) },
	})
	if err != nil {
		return nil, err
	}
	a.c = c
	return a, nil
}

func (s *Store) closeAreas() {
	for _, a := range s.areas {
		a.c.Close()
	}
}

// Close stops the background writers and releases the caches. Served
// responses still queued for Redis are written first, for at most
// Options.RedisFlush.
func (s *Store) Close() error {
	s.blocks.close()
	var err error
	if s.redis != nil {
		err = s.redis.close(s.opts.RedisFlush)
	}
	s.closeAreas()
	return err
}

// Wait blocks until every write made before the call is visible to reads:
// ristretto applies Set asynchronously, and the block index and Redis are
// written by background workers.
func (s *Store) Wait() {
	s.blocks.wait()
	if s.redis != nil {
		s.redis.wait()
	}
	for _, a := range s.areas {
		a.c.Wait()
	}
}

// key is the internal key of a tenant's entry. Ristretto keeps only a
// 128-bit hash of it, never the string.
func key(tenant, k string) string { return tenant + "\x00" + k }

// Get returns the value stored under (area, tenant, key). The caller must
// not modify it. key must not be prompt text: hash text first.
func (s *Store) Get(ar Area, tenant, k string) ([]byte, bool) {
	a := s.areas[ar]
	if a == nil {
		return nil, false
	}
	v, ok := a.c.Get(key(tenant, k))
	if ok {
		a.hits.Add(1)
	} else {
		a.misses.Add(1)
	}
	return v, ok
}

// Set stores value under (area, tenant, key) for Options.TTL and reports
// whether it was accepted; like every cache it may drop or later evict an
// entry. The Store keeps value: the caller must not modify it afterwards.
// The write is visible to Get after Wait (ristretto applies it
// asynchronously).
func (s *Store) Set(ar Area, tenant, k string, value []byte) bool {
	a := s.areas[ar]
	if a == nil {
		return false
	}
	return a.set(key(tenant, k), value, s.opts.TTL)
}

func (a *area) set(k string, v []byte, ttl time.Duration) bool {
	return a.c.SetWithTTL(k, v, int64(len(v))+entryOverhead, ttl)
}

// setChanged is set for a caller that has just read k's value old (with
// get, under the key's lock or as the read it makes anyway): when v is
// old's bytes and k was written less than refreshSlack(ttl) ago, the write
// is skipped and it reports true. Every ristretto Set is a send to its
// policy goroutine, which wakes it (a context switch per write at low
// load); re-storing the same bytes changes nothing but the expiry, by less
// than refreshSlack. No read is added, so the policy's access counts, and
// with them eviction, are what they were; the cost is the same bytes'.
// The bytes are compared before the expiry is read: a changed value, the
// ledger's state on every request (it holds the time), costs no GetTTL
// (issue 17); both are reads without side effects, so the order changes
// nothing else.
func (a *area) setChanged(k string, old, v []byte, had bool, ttl time.Duration) bool {
	if had && bytes.Equal(old, v) && a.fresh(k, ttl) {
		a.refreshSkipped.Add(1)
		return true
	}
	return a.set(k, v, ttl)
}

// fresh reports whether k is held and expires no more than
// refreshSlack(ttl) before a write now would make it expire. GetTTL reads
// the store without touching the policy (no access is counted).
func (a *area) fresh(k string, ttl time.Duration) bool {
	if ttl <= 0 {
		return false
	}
	left, ok := a.c.GetTTL(k)
	return ok && left > 0 && left >= ttl-refreshSlack(ttl)
}

// refreshSlack is how much sooner than a write would make it an entry
// re-stored with identical bytes may expire: a hundredth of the TTL, at
// most a second (so at most a second sooner, whatever the TTL).
func refreshSlack(ttl time.Duration) time.Duration { return min(ttl/100, time.Second) }

// get looks k up without counting a hit or a miss.
func (a *area) get(k string) ([]byte, bool) { return a.c.Get(k) }

// lock returns the mutex that serialises read-modify-write of k.
func (s *Store) lock(k string) *sync.Mutex { return &s.locks[s.lockIndex(k)] }

// lockIndex is the index in s.locks of k's mutex: a hash of k, eight bytes
// a step (FNV-1a of 64-bit words, then murmur3's finaliser, as only its
// low bits are used). Any pure function of k serialises a key's
// read-modify-writes; this one costs a step per eight bytes rather than
// per byte (a served answer's three prefix keys, about 100 bytes each,
// were 1.8k instructions of a small request, issue 17).
func (s *Store) lockIndex(k string) int {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for ; len(k) >= 8; k = k[8:] {
		w := uint64(k[0]) | uint64(k[1])<<8 | uint64(k[2])<<16 | uint64(k[3])<<24 |
			uint64(k[4])<<32 | uint64(k[5])<<40 | uint64(k[6])<<48 | uint64(k[7])<<56
		h = (h ^ w) * prime
	}
	for i := 0; i < len(k); i++ {
		h = (h ^ uint64(k[i])) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return int(h % uint64(len(s.locks)))
}

// AreaStats are one area's figures.
type AreaStats struct {
	Area Area
	// Hits and Misses count lookups: Get calls, Served calls for
	// AreaServed, recorded blocks seen before (hit) or new (miss) for
	// AreaBlocks.
	Hits, Misses uint64
	// Evictions counts entries removed for room or at their TTL.
	Evictions uint64
	// Entries and Bytes are what the area holds now (bytes as costed);
	// MaxBytes is its bound.
	Entries, Bytes, MaxBytes uint64
}

// Stats are the Store's figures, for metrics.
type Stats struct {
	Areas []AreaStats
	// Recorded counts served responses recorded.
	Recorded uint64
	// Verified and Rejected count Served answers.
	Verified, Rejected uint64
	// Redis is the shared backend's state; zero without Redis.
	Redis RedisStats
}

// RedisStats are the Redis backend's figures.
type RedisStats struct {
	// Mode is the deployment kind: RedisModeSingle, RedisModeSentinel or
	// RedisModeCluster.
	Mode string
	// Enabled reports whether the Store uses Redis; Up whether the last
	// read and the last write both succeeded. ReadsUp and WritesUp say it
	// of each: a failed read pauses reads, a failed write pauses writes,
	// each for a moment, independently.
	Enabled, Up       bool
	ReadsUp, WritesUp bool
	// ReadErrors and WriteErrors count failed or timed-out calls.
	ReadErrors, WriteErrors uint64
	// Writes counts served responses written; Dropped those dropped
	// because the queue was full or Redis was down.
	Writes, Dropped uint64
	// Invalid counts values and candidate entries read from Redis whose
	// HMAC did not match (written without the Secret, altered or moved
	// under another key), each treated as a miss.
	Invalid uint64
	// Hits counts lookups answered by Redis after a local miss.
	Hits uint64
	// LockTimeouts counts context-cache scope locks another replica held
	// past the wait (that request's settlement stayed local); LeasesWon
	// the cache-create leases this replica won (ContextCacheRegistry).
	LockTimeouts, LeasesWon uint64
}

// Stats returns the current figures. It is cheap enough for every scrape.
func (s *Store) Stats() Stats {
	st := Stats{Recorded: s.recorded.Load(), Verified: s.verified.Load(), Rejected: s.rejected.Load()}
	for _, name := range Areas {
		a := s.areas[name]
		m := a.c.Metrics
		used := a.max - a.c.RemainingCost()
		st.Areas = append(st.Areas, AreaStats{
			Area: name, Hits: a.hits.Load(), Misses: a.misses.Load(), Evictions: a.evictions.Load(),
			Entries: sub(m.KeysAdded(), m.KeysEvicted()), Bytes: uint64(max(used, 0)), MaxBytes: uint64(a.max),
		})
	}
	if s.redis != nil {
		st.Redis = s.redis.stats()
	}
	return st
}

// sub returns a-b, or 0 when the counters, read one after the other, crossed.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
