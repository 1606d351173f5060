package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// localStoreRef is localStore as it was, keyed by "tenant\x00key": the
// oracle of the pair-keyed store.
type localStoreRef struct {
	mu    sync.Mutex
	max   int
	m     map[string][]byte
	order []string
}

func (s *localStoreRef) Conversations(tenant string, keys []string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = s.m[tenant+"\x00"+k]
	}
	return out
}

func (s *localStoreRef) SetConversation(tenant, key string, value []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := tenant + "\x00" + key
	if _, ok := s.m[k]; !ok {
		s.order = append(s.order, k)
		if len(s.order) > s.max {
			delete(s.m, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.m[k] = value
	return true
}

// checkLocalStore runs ops (a write when op%3 == 0, else a lookup of two
// keys) on both stores and fails at the first answer that differs.
func checkLocalStore(t *testing.T, max int, ops []uint16) {
	t.Helper()
	got, want := newLocalStore(max), &localStoreRef{max: max, m: map[string][]byte{}}
	// No tenant holds a NUL (a tenant id is a digest or a header value,
	// which net/http refuses with one): the old key was ambiguous for
	// one ("t1\x00a" with key "b" is "t1" with key "a\x00b"), the pair is
	// not.
	tenants := []string{"", "t1", "t2", "t1a"}
	keys := []string{"", "a", "b", "a\x00b", "c", "\x00"}
	for i, op := range ops {
		tenant, key := tenants[int(op>>2)%len(tenants)], keys[int(op>>5)%len(keys)]
		if op%3 == 0 {
			v := []byte(fmt.Sprint(i))
			if got.SetConversation(tenant, key, v) != want.SetConversation(tenant, key, v) {
				t.Fatalf("op %d: SetConversation differs", i)
			}
			continue
		}
		ks := []string{key, keys[int(op>>9)%len(keys)]}
		g, w := got.Conversations(tenant, ks), want.Conversations(tenant, ks)
		for j := range w {
			if !bytes.Equal(g[j], w[j]) || (g[j] == nil) != (w[j] == nil) {
				t.Fatalf("op %d: Conversations(%q, %q) = %q, want %q", i, tenant, ks, g, w)
			}
		}
	}
	if len(got.order) != len(want.order) || len(got.m) != len(want.m) {
		t.Fatalf("%d keys in order, %d held; want %d, %d", len(got.order), len(got.m), len(want.order), len(want.m))
	}
}

func TestLocalStoreReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 2, 3, 5, 8, 100} {
		ops := make([]uint16, 2000)
		for i := range ops {
			ops[i] = uint16(r.Uint32())
		}
		checkLocalStore(t, max, ops)
	}
}

func FuzzLocalStore(f *testing.F) {
	f.Add([]byte{0, 3, 6, 1, 2, 9, 12, 4, 5}, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, max uint8) {
		ops := make([]uint16, len(b)/2)
		for i := range ops {
			ops[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
		}
		checkLocalStore(t, 1+int(max%16), ops)
	})
}
