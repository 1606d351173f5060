package cache_test

import (
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
)

// TestConversationLocal: SetConversation is read back by Conversation for
// the same tenant only.
func TestConversationLocal(t *testing.T) {
	s := newStore(t, cache.Options{})
	if !s.SetConversation(tenantA, "ix:abc", []byte("v1_id")) {
		t.Fatal("SetConversation rejected a small entry")
	}
	s.Wait()
	if v, ok := s.Conversation(tenantA, "ix:abc"); !ok || string(v) != "v1_id" {
		t.Errorf("Conversation(A) = %q, %v; want v1_id, true", v, ok)
	}
	if v, ok := s.Conversation(tenantB, "ix:abc"); ok {
		t.Errorf("Conversation(B) = %q, true; want a miss for another tenant", v)
	}
	if _, ok := s.Conversation(tenantA, "ix:other"); ok {
		t.Error("Conversation of an unknown key hit")
	}
}

// TestConversationRedis: a conversation entry written by one replica is
// read by another through a real redis-server, and never by another
// tenant.
func TestConversationRedis(t *testing.T) {
	srv := cachetest.StartRedis(t)
	a := newStore(t, cache.Options{RedisURL: srv.URL()})
	b := newStore(t, cache.Options{RedisURL: srv.URL()})
	a.SetConversation(tenantA, "ix:0123", []byte("v1_shared"))
	a.Wait()
	if v, ok := b.Conversation(tenantA, "ix:0123"); !ok || string(v) != "v1_shared" {
		t.Fatalf("replica B Conversation = %q, %v; want v1_shared, true", v, ok)
	}
	if _, ok := b.Conversation(tenantB, "ix:0123"); ok {
		t.Error("replica B found tenant A's entry for tenant B")
	}
	// Now local on B: it survives Redis stopping.
	b.Wait()
	srv.Stop()
	if v, ok := b.Conversation(tenantA, "ix:0123"); !ok || string(v) != "v1_shared" {
		t.Errorf("after Redis stopped, replica B Conversation = %q, %v; want the local copy", v, ok)
	}
}
