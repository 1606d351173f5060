package cache_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// response returns a distinct, already normalised response of n bytes.
func response(i, n int) string {
	return words(fmt.Sprintf("response %d says", i), n)
}

// BenchmarkServedMemory records b.N distinct responses and reports the
// live heap and the costed bytes per response. Run with a fixed count:
//
//	go test ./cache -run '^$' -bench ServedMemory -benchtime 20000x
func BenchmarkServedMemory(b *testing.B) {
	for _, size := range []int{300, 2000, 20000} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			s, err := cache.New(cache.Options{MaxBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			texts := make([]string, b.N)
			for i := range texts {
				texts[i] = response(i, size)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := range b.N {
				s.RecordServed(tenantA, texts[i], false)
			}
			s.Wait()
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			var cost uint64
			for _, a := range s.Stats().Areas {
				cost += a.Bytes
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "heap-B/response")
			b.ReportMetric(float64(cost)/float64(b.N), "cost-B/response")
			b.ReportMetric(float64(size), "text-B/response")
			if !s.Verifier(tenantA).Served(texts[b.N-1]) {
				b.Fatal("last response not verified")
			}
			runtime.KeepAlive(texts)
		})
	}
}

// BenchmarkServedLookup verifies transcript segments against 1,000 and
// 100,000 stored responses of 1 KiB: a full match, a 60% prefix, and an
// unknown text. The time per lookup must not grow with the count.
//
//	go test ./cache -run '^$' -bench ServedLookup
func BenchmarkServedLookup(b *testing.B) {
	for _, stored := range []int{1000, 100000} {
		s, err := cache.New(cache.Options{MaxBytes: 2 << 30})
		if err != nil {
			b.Fatal(err)
		}
		for i := range stored {
			s.RecordServed(tenantA, response(i, 1024), false)
			if i%4096 == 0 {
				s.Wait() // keep ristretto's set buffer from dropping
			}
		}
		s.Wait()
		target := response(stored/2, 1024)
		queries := []struct {
			name, text string
			want       bool
		}{
			{"full", target, true},
			{"prefix", target[:620], true},
			{"unknown", response(stored+1, 1024), false},
		}
		for _, q := range queries {
			b.Run(fmt.Sprintf("stored=%d/%s", stored, q.name), func(b *testing.B) {
				v := s.Verifier(tenantA)
				if v.Served(q.text) != q.want {
					b.Fatalf("Served = %v, want %v", !q.want, q.want)
				}
				b.SetBytes(int64(len(q.text)))
				b.ReportAllocs()
				for b.Loop() {
					v.Served(q.text)
				}
			})
		}
		s.Close()
	}
}
