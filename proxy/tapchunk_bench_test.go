package proxy

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// BenchmarkTapChunks feeds SSE streams of 6 and 100 events (the bench's
// fake events, cycled as bench.LongAnswers cycles them) to a tap one event
// per write, as the proxy reads a stream flushed after every event,
// recording the served text as serve does (cache.ServedRecorder, no copy
// kept). The tap's cost per chunk, without the network, is
// (cpu-ns/op of 100 - cpu-ns/op of 6) / 94.
//
//	go test ./proxy -run '^$' -bench TapChunks -benchmem
func BenchmarkTapChunks(b *testing.B) {
	raw, err := os.ReadFile("../bench/upstream/stream.sse")
	if err != nil {
		b.Fatal(err)
	}
	all := strings.SplitAfter(string(raw), "\r\n\r\n")
	all = all[:len(all)-1]
	s, err := cache.New(cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, n := range []int{6, 100} {
		events := make([][]byte, n)
		for i := range n - 1 {
			events[i] = []byte(all[i%(len(all)-1)])
		}
		events[n-1] = []byte(all[len(all)-1])
		b.Run("sse"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				tp := newTap("", true)
				tp.text.keep = false
				tp.text.w = s.ServedRecorder("t")
				for _, e := range events {
					tp.Write(e) //nolint:errcheck // never fails
				}
				tp.finish()
				tp.text.w.Served(tp.textTruncated)
			}
			reportCPU(b, cpu0)
		})
	}
}

// processCPU is the CPU time of the process so far (user and system, all
// threads). On a machine shared with others a benchmark's wall time
// counts the time it waited for a CPU; its CPU time does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since cpu0, cpu-ns/op.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
