package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisKeyPrefix starts every key the Store writes to Redis; the tenant id
// (itself an HMAC) follows, so a key never holds a credential or text.
const redisKeyPrefix = "gemini-proxy:"

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
	c       *redis.Client
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

	pausedUntil atomic.Int64 // unix nanoseconds
	up          atomic.Bool

	readErrors, writeErrors, writes, dropped, hits atomic.Uint64
}

func newRedis(s *Store, opts Options) (*redisBackend, error) {
	ro, err := redis.ParseURL(opts.RedisURL)
	if err != nil {
		// The URL may hold a password: do not quote it.
		return nil, errors.New("cache: invalid redis url")
	}
	ro.DialTimeout = opts.RedisTimeout
	ro.ReadTimeout = opts.RedisTimeout
	ro.WriteTimeout = opts.RedisTimeout
	ro.PoolTimeout = opts.RedisTimeout
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = -1
	ro.DialerRetries = 1
	ro.DisableIdentity = true
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	r := &redisBackend{
		c:       redis.NewClient(ro),
		log:     s.log,
		timeout: opts.RedisTimeout,
		ttl:     opts.TTL,
		queue:   make(chan servedWrite, opts.RedisQueue),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	r.wctx, r.wcancel = context.WithCancel(context.Background())
	r.cond = sync.NewCond(&r.mu)
	r.up.Store(true)
	go r.writer()
	return r, nil
}

func redisKey(tenant, kind string, d digest) string {
	return redisKeyPrefix + tenant + ":" + kind + hexID(d)
}

// available reports whether Redis may be called now.
func (r *redisBackend) available() bool {
	return time.Now().UnixNano() >= r.pausedUntil.Load()
}

// failed records a Redis error: count it, pause Redis, log the change.
func (r *redisBackend) failed(counter *atomic.Uint64, err error) {
	counter.Add(1)
	r.pausedUntil.Store(time.Now().Add(redisPause).UnixNano())
	if r.up.Swap(false) {
		r.log.Warn("redis unavailable, using the local cache only", "error", err.Error(), "retry_after", redisPause)
	}
}

// succeeded records a successful call.
func (r *redisBackend) succeeded() {
	if !r.up.Swap(true) {
		r.log.Info("redis available again")
	}
}

// getRecord reads the record of response id.
func (r *redisBackend) getRecord(tenant string, id digest) ([]byte, bool) {
	return r.getValue(redisKey(tenant, kindRecord, id))
}

// getCandidates reads the candidate ids of prefix p, concatenated.
func (r *redisBackend) getCandidates(tenant string, p digest) []byte {
	if !r.available() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	ids, err := r.c.LRange(ctx, redisKey(tenant, kindPrefix, p), 0, maxCandidates-1).Result()
	if err != nil {
		r.failed(&r.readErrors, err)
		return nil
	}
	r.succeeded()
	var out []byte
	for _, id := range ids {
		if len(id) == len(digest{}) {
			out = append(out, id...)
		}
	}
	return out
}

// enqueue hands w to the writer, or drops it when the queue is full or
// Redis is paused. It never blocks.
func (r *redisBackend) enqueue(w servedWrite) {
	if !r.available() {
		r.dropped.Add(1)
		return
	}
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
	select {
	case r.queue <- w:
	default:
		r.dropped.Add(1)
		r.finish(1)
	}
}

func (r *redisBackend) finish(n int) {
	r.mu.Lock()
	r.pending -= n
	if r.pending == 0 {
		r.cond.Broadcast()
	}
	r.mu.Unlock()
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
	clear(batch)
	r.finish(len(batch))
}

// write sends one pipeline: per response, SET of its record and, per
// prefix, LREM+LPUSH+LTRIM+EXPIRE of the candidate list, all with the TTL.
// ctx may bound it further than the writer's own time-out.
func (r *redisBackend) write(ctx context.Context, batch []servedWrite) {
	if !r.available() || ctx.Err() != nil {
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
				p.Set(ctx, w.key, w.val, r.ttl)
				continue
			}
			p.Set(ctx, redisKey(w.tenant, kindRecord, w.id), w.rec, r.ttl)
			for _, pre := range w.prefixes {
				k := redisKey(w.tenant, kindPrefix, pre)
				p.LRem(ctx, k, 0, w.id[:])
				p.LPush(ctx, k, w.id[:])
				p.LTrim(ctx, k, 0, maxCandidates-1)
				p.Expire(ctx, k, r.ttl)
			}
		}
		return nil
	})
	if err != nil {
		r.failed(&r.writeErrors, fmt.Errorf("writing %d served responses: %w", len(batch), err))
		return
	}
	r.succeeded()
	r.writes.Add(uint64(len(batch)))
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
		Enabled: true, Up: r.up.Load(),
		ReadErrors: r.readErrors.Load(), WriteErrors: r.writeErrors.Load(),
		Writes: r.writes.Load(), Dropped: r.dropped.Load(), Hits: r.hits.Load(),
	}
}
