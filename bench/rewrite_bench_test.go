package bench

import (
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// BenchmarkRewriteBodies rewrites and audits the request bodies of
// gemini-proxy bench's overhead cells (Sizes: 1 KB, 70 KB in six
// turns, 1 MB in six turns) as the proxy does: with the default options,
// a cache Verifier and a pooled Options.Buffer. cpu-us/op is the CPU time
// of the process per request, which machine load inflates less than
// ns/op (issue 17).
//
//	go test ./bench -run '^$' -bench RewriteBodies -benchmem -count 5
func BenchmarkRewriteBodies(b *testing.B) {
	store, err := cache.New(cache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	for _, s := range Sizes() {
		b.Run(s.Name, func(b *testing.B) {
			opts := rewrite.DefaultOptions()
			var buf []byte
			opts.Buffer = func(n int) []byte {
				if cap(buf) < n {
					buf = make([]byte, n)
				}
				return buf[:0]
			}
			v := store.Verifier("bench")
			b.ReportAllocs()
			b.SetBytes(int64(len(s.Body)))
			c0 := processCPU()
			for b.Loop() {
				out, rep, err := rewrite.Request(s.Body, opts, v)
				if err != nil {
					b.Fatal(err)
				}
				if err := rewrite.Audit(s.Body, out, rep); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-c0)/1e3/float64(b.N), "cpu-us/op")
		})
	}
}

// cpuTime is the user and system CPU time of the process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
