package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// Label values of the cache metrics.
const (
	// CacheVerified and CacheRejected label
	// gemini_proxy_cache_unflatten_checks_total.
	CacheVerified = "verified"
	CacheRejected = "rejected"
	// RedisRead and RedisWrite label gemini_proxy_cache_redis_errors_total.
	RedisRead  = "read"
	RedisWrite = "write"
)

// cacheCollector exports a cache.Store's figures, read at scrape time
// (client_golang example_clustermanager_test.go), so that the request path
// pays nothing for them.
type cacheCollector struct {
	stats func() cache.Stats

	hits, misses, evictions, entries, bytes, maxBytes *prometheus.Desc
	recorded, checks                                  *prometheus.Desc
	redisUp, redisErrors, redisWrites, redisDropped   *prometheus.Desc
	redisHits, redisInvalid                           *prometheus.Desc
	redisMode, redisLockTimeouts, redisLeasesWon      *prometheus.Desc
}

// RegisterCache registers a collector that reads stats (normally
// (*cache.Store).Stats) at every scrape. Labels: area is one of
// cache.Areas. It panics if the names are already registered, like New.
func RegisterCache(reg prometheus.Registerer, stats func() cache.Stats) {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "cache", name), help, labels, nil)
	}
	reg.MustRegister(&cacheCollector{
		stats:       stats,
		hits:        d("hits_total", "Cache lookups that found an entry, by area (served: transcript segments verified as served responses; blocks: blocks seen before).", "area"),
		misses:      d("misses_total", "Cache lookups that found nothing, by area.", "area"),
		evictions:   d("evictions_total", "Cache entries removed to make room or because their TTL passed, by area.", "area"),
		entries:     d("entries", "Entries held in the local cache, by area.", "area"),
		bytes:       d("bytes", "Bytes held in the local cache (as costed: value plus per-entry overhead), by area.", "area"),
		maxBytes:    d("max_bytes", "The local cache's bound in bytes, by area.", "area"),
		recorded:    d("served_responses_total", "Model responses recorded in the served-response index."),
		checks:      d("unflatten_checks_total", "Flattened-transcript segments checked against served responses, by result (verified: may become a model turn; rejected: stays user text).", "result"),
		redisUp:     d("redis_up", "1 when the shared Redis backend answered its last call, 0 while the cache runs local-only after an error; absent without Redis."),
		redisErrors: d("redis_errors_total", "Redis calls that failed or timed out, by operation.", "op"),
		redisWrites: d("redis_writes_total", "Served responses written to Redis."),
		redisDropped: d("redis_dropped_writes_total",
			"Served responses not written to Redis because the write queue was full or Redis was unavailable."),
		redisHits: d("redis_hits_total", "Served-response lookups answered by Redis after a local miss."),
		redisInvalid: d("redis_invalid_values_total",
			"Values read from Redis whose HMAC (keyed by cache.tenant_secret) did not match, each treated as a miss: written by another secret, altered or moved."),
		redisMode: d("redis_mode", "1 for the kind of Redis deployment the shared cache uses (single, sentinel or cluster); absent without Redis.", "mode"),
		redisLockTimeouts: d("redis_lock_timeouts_total",
			"Context-cache scope locks another replica held past the wait; that request's context-cache bookkeeping stayed local."),
		redisLeasesWon: d("redis_leases_won_total", "Context-cache create leases this replica won (it made the fleet's one cache of that prefix)."),
	})
}

// Describe implements prometheus.Collector.
func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.hits, c.misses, c.evictions, c.entries, c.bytes, c.maxBytes,
		c.recorded, c.checks, c.redisUp, c.redisErrors, c.redisWrites, c.redisDropped, c.redisHits, c.redisInvalid,
		c.redisMode, c.redisLockTimeouts, c.redisLeasesWon} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, a := range st.Areas {
		name := string(a.Area)
		counter(c.hits, a.Hits, name)
		counter(c.misses, a.Misses, name)
		counter(c.evictions, a.Evictions, name)
		gauge(c.entries, a.Entries, name)
		gauge(c.bytes, a.Bytes, name)
		gauge(c.maxBytes, a.MaxBytes, name)
	}
	counter(c.recorded, st.Recorded)
	counter(c.checks, st.Verified, CacheVerified)
	counter(c.checks, st.Rejected, CacheRejected)
	if r := st.Redis; r.Enabled {
		up := uint64(0)
		if r.Up {
			up = 1
		}
		gauge(c.redisUp, up)
		counter(c.redisErrors, r.ReadErrors, RedisRead)
		counter(c.redisErrors, r.WriteErrors, RedisWrite)
		counter(c.redisWrites, r.Writes)
		counter(c.redisDropped, r.Dropped)
		counter(c.redisHits, r.Hits)
		counter(c.redisInvalid, r.Invalid)
		gauge(c.redisMode, 1, r.Mode)
		counter(c.redisLockTimeouts, r.LockTimeouts)
		counter(c.redisLeasesWon, r.LeasesWon)
	}
}
