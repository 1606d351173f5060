package cache_test

import (
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
)

// TestReviewTapIdenticalWriteReachesRedis (review of tapunary): a
// SetConversation of the bytes the local cache holds, less than a second
// after the last, is skipped locally, yet still written to Redis: replica
// A writes v1, replica B then writes v2 (Redis holds v2, A still v1), and
// A writes v1 again at once: Redis must hold v1, as it did before the
// skip existed.
func TestReviewTapIdenticalWriteReachesRedis(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, sharedOpts(srv))
	b := newStore(t, sharedOpts(srv))
	c := newStore(t, sharedOpts(srv))
	a.SetConversation(tenantA, "ix:k", []byte("v1"))
	a.Wait()
	b.SetConversation(tenantA, "ix:k", []byte("v2"))
	b.Wait()
	// (A's local copy is still v1: reading it would refresh it from Redis.)
	a.SetConversation(tenantA, "ix:k", []byte("v1")) // identical locally: skipped there
	a.Wait()
	if vs := c.Conversations(tenantA, []string{"ix:k"}); string(vs[0]) != "v1" {
		t.Fatalf("Redis holds %q after A's last write; want v1", vs[0])
	}
}
