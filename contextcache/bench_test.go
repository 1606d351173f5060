package contextcache_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/contextcache"
)

type failTransport struct{}

func (failTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("offline")
}

// benchBody is a conversation of 40 contents of about 600 bytes each
// whose first content is unique to i: all its prefixes are new.
func benchBody(i int) []byte {
	var cs []string
	for j := range 40 {
		role := "user"
		if j%2 == 1 {
			role = "model"
		}
		text := fmt.Sprintf("turn %d of conversation %d: ", j, i) + strings.Repeat("lorem ipsum dolor ", 32)
		cs = append(cs, fmt.Sprintf(`{"role":%q,"parts":[{"text":%q}]}`, role, text))
	}
	return []byte(`{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[` + strings.Join(cs, ",") + `]}`)
}

// BenchmarkPlanSettle is the bookkeeping cost of one request (Plan, then
// Settle) in a scope that already tracks the most prefixes it may, so
// that each of the request's new prefixes makes room for itself: the
// path whose cost the per-scope recency list keeps constant. It uses the
// exported API only, so that it runs unchanged against older versions.
func BenchmarkPlanSettle(b *testing.B) {
	newManager := func(b *testing.B) *contextcache.Manager {
		m, err := contextcache.New(contextcache.Options{
			Transport: failTransport{},
			MinTokens: map[string]int{"gemini-2.5-flash": 1000},
			Prices:    map[string]contextcache.Price{"gemini-2.5-flash": {Input: 0.30, CachedInput: 0.03, Storage: 1}},
		})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	col, _ := url.Parse("http://127.0.0.1:1/v1beta/cachedContents")
	const pool = 64
	bodies := make([][]byte, pool)
	for i := range bodies {
		bodies[i] = benchBody(i)
	}
	settle := func(m *contextcache.Manager, scope string, body []byte) {
		u := m.Plan(contextcache.Call{Scope: scope, Model: "gemini-2.5-flash", ModelID: "gemini-2.5-flash", Collection: col, Body: body})
		m.Settle(u, contextcache.Usage{PromptTokens: int64(len(body) / 4)}, true)
	}
	b.Run("serial", func(b *testing.B) {
		m := newManager(b)
		for i := range pool {
			settle(m, "s", bodies[i]) // fills the scope's prefixes
		}
		b.ResetTimer()
		i := 0
		for b.Loop() {
			settle(m, "s", bodies[i%pool])
			i++
		}
		m.Wait()
	})
	b.Run("parallel", func(b *testing.B) {
		m := newManager(b)
		for g := 1; g <= runtime.GOMAXPROCS(0); g++ {
			for i := range pool {
				settle(m, fmt.Sprint("s", g), bodies[i])
			}
		}
		var scopes atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			scope := fmt.Sprint("s", scopes.Add(1))
			i := 0
			for pb.Next() {
				settle(m, scope, bodies[i%pool])
				i++
			}
		})
		m.Wait()
	})
}
