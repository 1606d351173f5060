package cache

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisKeyPrefix starts every key the Store writes to Redis; the tenant id
// (itself an HMAC) and an HMAC of what the key names follow, so a key never
// holds a credential, text or a digest of text.
const redisKeyPrefix = "gemini-proxy:"

// macSize is the length of the HMAC-SHA256 that precedes every value the
// Store writes to Redis, and the length of the tag after each candidate id.
const (
	macSize = sha256.Size
	tagSize = 16
)

// MinSecretBytes is the shortest Options.Secret New accepts.
const MinSecretBytes = 16

// redisPause is how long the Store stays local-only after a Redis error
// before it tries Redis again.
const redisPause = time.Second

// redisBatch is the most served responses written in one pipeline.
const redisBatch = 32

// servedWrite is one served response waiting to be written to Redis, or,
// when key is set, one conversation entry (SetConversation) written as a
// plain SET of val.
type servedWrite struct {
	tenant   string
	id       digest
	rec      []byte
	prefixes []digest
	key      string
	val      []byte
}

// redisBackend shares the served-response index through Redis. Reads are
// bounded by Options.RedisTimeout and the Verifier's budget; writes go
// through a bounded queue to one background writer. After an error it is
// skipped for redisPause (a circuit breaker), so a dead Redis costs a
// request nothing.
type redisBackend struct {
	c       redis.UniversalClient
	mode    string // RedisModeSingle, RedisModeSentinel or RedisModeCluster
	log     *slog.Logger
	timeout time.Duration
	ttl     time.Duration
	queue   chan servedWrite
	done    chan struct{}
	exited  chan struct{}
	// wctx bounds the writer's calls; close cancels it when its flush
	// bound ends, so that a batch in flight cannot hold Close longer.
	wctx    context.Context
	wcancel context.CancelFunc

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	cond    *sync.Cond
	pending int // queued or being written
	// queuedKeys counts the conversation writes queued or being written,
	// by Redis key: until they landed, this replica's local copy is newer
	// than Redis's.
	queuedKeys map[string]int

	// keyKey keys the HMAC in every key name, valKey the HMAC of every
	// value; both are derived from Options.Secret.
	keyKey, valKey []byte

	// reads and writes degrade separately (issue 16 item 5): a Redis that
	// refuses writes (out of memory, a read-only replica) but answers
	// reads keeps serving them.
	reads, writes breaker

	written, dropped, hits, invalid atomic.Uint64
	// lockTimeouts counts context-cache scope locks not taken in time,
	// leasesWon the create leases this replica won.
	lockTimeouts, leasesWon atomic.Uint64
}

// breaker pauses one kind of Redis call after an error, for redisPause.
type breaker struct {
	kind        string       // "reads" or "writes", for the log
	pausedUntil atomic.Int64 // unix nanoseconds
	down        atomic.Bool
	errors      atomic.Uint64
}

// available reports whether this kind of call may be made now.
func (b *breaker) available() bool {
	return time.Now().UnixNano() >= b.pausedUntil.Load()
}

// failed records an error: count it, pause, log the change.
func (b *breaker) failed(log *slog.Logger, err error) {
	b.errors.Add(1)
	b.pausedUntil.Store(time.Now().Add(redisPause).UnixNano())
	if !b.down.Swap(true) {
		log.Warn("redis unavailable, using the local cache only", "calls", b.kind, "error", err.Error(), "retry_after", redisPause)
	}
}

// succeeded records a successful call.
func (b *breaker) succeeded(log *slog.Logger) {
	if b.down.Swap(false) {
		log.Info("redis available again", "calls", b.kind)
	}
}

func newRedis(s *Store, opts Options) (*redisBackend, error) {
	if len(opts.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("cache: redis needs a secret of at least %d bytes", MinSecretBytes)
	}
	target, err := parseRedisTarget(opts)
	if err != nil {
		return nil, err
	}
	r := &redisBackend{
		c:          newRedisClient(target),
		mode:       target.mode,
		log:        s.log,
		timeout:    opts.RedisTimeout,
		ttl:        opts.TTL,
		queue:      make(chan servedWrite, opts.RedisQueue),
		done:       make(chan struct{}),
		exited:     make(chan struct{}),
		queuedKeys: map[string]int{},
		keyKey:     derive(opts.Secret, "gemini-proxy redis key names v1"),
		valKey:     derive(opts.Secret, "gemini-proxy redis values v1"),
	}
	r.wctx, r.wcancel = context.WithCancel(context.Background())
	r.cond = sync.NewCond(&r.mu)
	r.reads.kind, r.writes.kind = "reads", "writes"
	go r.writer()
	return r, nil
}

// derive returns HMAC-SHA256(secret, label): one key per use of the secret.
func derive(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// key returns the Redis key of (tenant, kind, name): the prefix, the
// tenant, the kind, then HMAC(keyKey, tenant, kind, name) in hex, so that
// whoever reads Redis cannot confirm a guessed text by its digest, and
// whoever writes it cannot name the key of a text of their choosing.
func (r *redisBackend) key(tenant, kind string, name []byte) string {
	m := hmac.New(sha256.New, r.keyKey)
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write([]byte(kind))
	m.Write(name)
	var sum [sha256.Size]byte
	return redisKeyPrefix + tenant + ":" + kind + hex.EncodeToString(m.Sum(sum[:0]))
}

func (r *redisBackend) recordKey(tenant string, id digest) string {
	return r.key(tenant, kindRecord, id[:])
}

func (r *redisBackend) prefixKey(tenant string, p digest) string {
	return r.key(tenant, kindPrefix, p[:])
}

// mac returns HMAC(valKey, key, value): a value is valid only under the
// key it was written for, so it cannot be moved to another tenant or text.
// The MAC is appended to dst.
func (r *redisBackend) mac(dst []byte, key string, val []byte) []byte {
	m := hmac.New(sha256.New, r.valKey)
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write(val)
	return m.Sum(dst)
}

// seal returns the value stored in Redis for val under key: its MAC, then
// val.
func (r *redisBackend) seal(key string, val []byte) []byte {
	return append(r.mac(make([]byte, 0, macSize+len(val)), key, val), val...)
}

// open returns the value sealed under key, or false (counted as invalid)
// when its MAC does not match.
func (r *redisBackend) open(key string, b []byte) ([]byte, bool) {
	var sum [macSize]byte
	if len(b) >= macSize && hmac.Equal(b[:macSize], r.mac(sum[:0], key, b[macSize:])) {
		return b[macSize:], true
	}
	r.invalid.Add(1)
	return nil, false
}

// tagID returns a candidate list element: id, then the first tagSize bytes
// of its MAC under the list's key.
func (r *redisBackend) tagID(key string, id []byte) []byte {
	var sum [macSize]byte
	return append(append(make([]byte, 0, len(id)+tagSize), id...), r.mac(sum[:0], key, id)[:tagSize]...)
}

// readable reports whether Redis may be read now.
func (r *redisBackend) readable() bool { return r.reads.available() }

// readFailed and readOK record the outcome of a read.
func (r *redisBackend) readFailed(err error) { r.reads.failed(r.log, err) }
func (r *redisBackend) readOK()              { r.reads.succeeded(r.log) }

// getRecord reads the record of response id.
func (r *redisBackend) getRecord(tenant string, id digest) ([]byte, bool) {
	return r.getValue(r.recordKey(tenant, id))
}

// getCandidates reads the candidate ids of prefix p, concatenated.
func (r *redisBackend) getCandidates(tenant string, p digest) []byte {
	if !r.readable() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	k := r.prefixKey(tenant, p)
	ids, err := r.c.LRange(ctx, k, 0, maxCandidates-1).Result()
	if err != nil {
		r.readFailed(err)
		return nil
	}
	r.readOK()
	var out []byte
	for _, e := range ids {
		const n = len(digest{})
		if len(e) != n+tagSize || !hmac.Equal([]byte(e[n:]), r.tagID(k, []byte(e[:n]))[n:]) {
			r.invalid.Add(1)
			continue
		}
		out = append(out, e[:n]...)
	}
	return out
}

// enqueue hands w to the writer, or drops it when the queue is full or
// Redis is paused. It never blocks.
func (r *redisBackend) enqueue(w servedWrite) {
	if !r.writes.available() {
		r.dropped.Add(1)
		return
	}
	r.mu.Lock()
	r.pending++
	if w.key != "" {
		r.queuedKeys[w.key]++
	}
	r.mu.Unlock()
	select {
	case r.queue <- w:
	default:
		r.dropped.Add(1)
		r.finish(w)
	}
}

// queued reports whether a conversation write of key is queued or being
// written.
func (r *redisBackend) queued(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queuedKeys[key] > 0
}

// finish marks the writes ws done.
func (r *redisBackend) finish(ws ...servedWrite) {
	keyDone := false
	r.mu.Lock()
	r.pending -= len(ws)
	for _, w := range ws {
		if w.key == "" {
			continue
		}
		if r.queuedKeys[w.key]--; r.queuedKeys[w.key] <= 0 {
			delete(r.queuedKeys, w.key)
			keyDone = true
		}
	}
	if r.pending == 0 || keyDone {
		r.cond.Broadcast()
	}
	r.mu.Unlock()
}

// waitKey blocks until no conversation write of key is queued or being
// written, or d passed; it reports whether the writes were attempted.
func (r *redisBackend) waitKey(key string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	wake := time.AfterFunc(d, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer wake.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.queuedKeys[key] > 0 {
		if !time.Now().Before(deadline) {
			return false
		}
		r.cond.Wait()
	}
	return true
}

// wait blocks until every queued write was attempted.
func (r *redisBackend) wait() {
	r.mu.Lock()
	for r.pending > 0 {
		r.cond.Wait()
	}
	r.mu.Unlock()
}

// writer writes queued responses in pipelines of up to redisBatch.
func (r *redisBackend) writer() {
	defer close(r.exited)
	batch := make([]servedWrite, 0, redisBatch)
	for {
		select {
		case <-r.done:
			return
		case w := <-r.queue:
			batch = r.drain(append(batch[:0], w))
		}
		r.send(r.wctx, batch)
	}
}

// drain appends what is queued to batch, up to redisBatch, without
// waiting.
func (r *redisBackend) drain(batch []servedWrite) []servedWrite {
	for len(batch) < redisBatch {
		select {
		case w := <-r.queue:
			batch = append(batch, w)
		default:
			return batch
		}
	}
	return batch
}

// send writes batch and marks its writes done.
func (r *redisBackend) send(ctx context.Context, batch []servedWrite) {
	r.write(ctx, batch)
	r.finish(batch...)
	clear(batch)
}

// write sends one pipeline: per response, SET of its record and, per
// prefix, LREM+LPUSH+LTRIM+EXPIRE of the candidate list, all with the TTL.
// ctx may bound it further than the writer's own time-out.
func (r *redisBackend) write(ctx context.Context, batch []servedWrite) {
	if !r.writes.available() || ctx.Err() != nil {
		r.dropped.Add(uint64(len(batch)))
		return
	}
	// Writes are off the request path; a larger bound lets a batch through
	// a briefly slow Redis.
	ctx, cancel := context.WithTimeout(ctx, 10*r.timeout)
	defer cancel()
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, w := range batch {
			if w.key != "" {
				p.Set(ctx, w.key, r.seal(w.key, w.val), r.ttl)
				continue
			}
			rk := r.recordKey(w.tenant, w.id)
			p.Set(ctx, rk, r.seal(rk, w.rec), r.ttl)
			for _, pre := range w.prefixes {
				k := r.prefixKey(w.tenant, pre)
				e := r.tagID(k, w.id[:])
				p.LRem(ctx, k, 0, e)
				p.LPush(ctx, k, e)
				p.LTrim(ctx, k, 0, maxCandidates-1)
				p.Expire(ctx, k, r.ttl)
			}
		}
		return nil
	})
	if err != nil {
		r.writes.failed(r.log, fmt.Errorf("writing %d served responses: %w", len(batch), err))
		return
	}
	r.writes.succeeded(r.log)
	r.written.Add(uint64(len(batch)))
}

// close stops the writer, then writes what is still queued; the batch in
// flight and the rest together get at most flush (a shutdown should not
// lose the last responses served, nor wait on a hung Redis). What remains
// after it, or while Redis is down, is dropped and counted.
func (r *redisBackend) close(flush time.Duration) error {
	// Cancelling alone would not interrupt a read already waiting on a
	// hung Redis: closing the client closes its connections, in use or not.
	stop := time.AfterFunc(flush, func() { r.wcancel(); r.closeClient() }) //nolint:errcheck // returned below
	defer stop.Stop()
	defer r.wcancel()
	close(r.done)
	<-r.exited
	batch := make([]servedWrite, 0, redisBatch)
	for {
		batch = r.drain(batch[:0])
		if len(batch) == 0 {
			return r.closeClient()
		}
		r.send(r.wctx, batch)
	}
}

// closeClient closes the Redis client once and returns that call's error.
func (r *redisBackend) closeClient() error {
	r.closeOnce.Do(func() { r.closeErr = r.c.Close() })
	return r.closeErr
}

func (r *redisBackend) stats() RedisStats {
	return RedisStats{
		Enabled: true, Mode: r.mode, Up: !r.reads.down.Load() && !r.writes.down.Load(),
		ReadsUp: !r.reads.down.Load(), WritesUp: !r.writes.down.Load(),
		ReadErrors: r.reads.errors.Load(), WriteErrors: r.writes.errors.Load(),
		Writes: r.written.Load(), Dropped: r.dropped.Load(), Hits: r.hits.Load(),
		Invalid: r.invalid.Load(), LockTimeouts: r.lockTimeouts.Load(), LeasesWon: r.leasesWon.Load(),
	}
}
