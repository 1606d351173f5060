package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/metrics"
)

func TestCacheCollector(t *testing.T) {
	st := cache.Stats{
		Areas: []cache.AreaStats{
			{Area: cache.AreaServed, Hits: 3, Misses: 4, Evictions: 5, Entries: 6, Bytes: 700, MaxBytes: 1000},
			{Area: cache.AreaBlocks},
		},
		Recorded: 2, Verified: 3, Rejected: 4,
		Redis: cache.RedisStats{Enabled: true, Up: true, ReadErrors: 1, WriteErrors: 2, Writes: 9, Dropped: 1, Hits: 7},
	}
	reg := prometheus.NewRegistry()
	metrics.RegisterCache(reg, func() cache.Stats { return st })
	want := `
# HELP gemini_proxy_cache_bytes Bytes held in the local cache (as costed: value plus per-entry overhead), by area.
# TYPE gemini_proxy_cache_bytes gauge
gemini_proxy_cache_bytes{area="blocks"} 0
gemini_proxy_cache_bytes{area="served"} 700
# HELP gemini_proxy_cache_unflatten_checks_total Flattened-transcript segments checked against served responses, by result (verified: may become a model turn; rejected: stays user text).
# TYPE gemini_proxy_cache_unflatten_checks_total counter
gemini_proxy_cache_unflatten_checks_total{result="rejected"} 4
gemini_proxy_cache_unflatten_checks_total{result="verified"} 3
# HELP gemini_proxy_cache_redis_errors_total Redis calls that failed or timed out, by operation.
# TYPE gemini_proxy_cache_redis_errors_total counter
gemini_proxy_cache_redis_errors_total{op="read"} 1
gemini_proxy_cache_redis_errors_total{op="write"} 2
# HELP gemini_proxy_cache_redis_up 1 when the shared Redis backend answered its last call, 0 while the cache runs local-only after an error; absent without Redis.
# TYPE gemini_proxy_cache_redis_up gauge
gemini_proxy_cache_redis_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gemini_proxy_cache_bytes", "gemini_proxy_cache_unflatten_checks_total", "gemini_proxy_cache_redis_errors_total", "gemini_proxy_cache_redis_up"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestCacheCollectorLocal: without Redis, no Redis series appear.
func TestCacheCollectorLocal(t *testing.T) {
	s, err := cache.New(cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := prometheus.NewRegistry()
	metrics.RegisterCache(reg, s.Stats)
	if n, err := testutil.GatherAndCount(reg, "gemini_proxy_cache_redis_up", "gemini_proxy_cache_redis_errors_total"); err != nil || n != 0 {
		t.Errorf("redis series without Redis = %d, %v; want 0", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "gemini_proxy_cache_entries"); err != nil || n != len(cache.Areas) {
		t.Errorf("entries series = %d, %v; want one per area (%d)", n, err, len(cache.Areas))
	}
}
