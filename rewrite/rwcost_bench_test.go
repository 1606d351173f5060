package rewrite_test

import (
	"syscall"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// notServed is a Verifier that has served nothing, as the serve path's
// store is for the bench's requests: the un-flatten pre-check runs in full.
type notServed struct{}

func (notServed) Served(string) bool { return false }

// BenchmarkBenchSizes runs Request and Audit, as the proxy runs them, on
// the overhead bench's request bodies (bench.Sizes: small, medium 70 KB
// with 6 turns, large 1 MB), so that the rewrite's share of
// BenchmarkServe's cells can be profiled and compared without the network.
// The output buffers come from Options.Buffer, reused between iterations
// as the proxy's pooled buffers are. Compare cpu-us/op (the process's CPU
// time per request, GC included) between builds: on a loaded machine it
// varies far less than ns/op.
//
//	go test ./rewrite -run '^$' -bench BenchSizes -benchmem -count 6
func BenchmarkBenchSizes(b *testing.B) {
	for _, size := range bench.Sizes() {
		b.Run(size.Name, func(b *testing.B) {
			var bufs [2][]byte // a request builds at most two bodies
			next := 0
			opts := rewrite.DefaultOptions()
			opts.Buffer = func(n int) []byte {
				i := next % 2
				next++
				if cap(bufs[i]) < n {
					bufs[i] = make([]byte, n)
				}
				return bufs[i][:n]
			}
			b.SetBytes(int64(len(size.Body)))
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				next = 0
				out, rep, err := rewrite.Request(size.Body, opts, notServed{})
				if err != nil {
					b.Fatal(err)
				}
				if err := rewrite.Audit(size.Body, out, rep); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-us/op")
		})
	}
}

// cpuTime returns the CPU time of this process so far, in nanoseconds:
// unlike ns/op, it does not count the time the benchmark waits for a CPU
// that the shared machine's other work holds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
