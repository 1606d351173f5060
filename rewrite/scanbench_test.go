package rewrite

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkScan scans the bodies of BenchmarkRequest's 10 KB and 100 KB
// cells, and one escape-dense 10 KB text (Go source) on its own, with
// reused buffers as Request does, and reports the time relative to SHA-256
// over the same bytes (see benchScan).
func BenchmarkScan(b *testing.B) {
	raw, _ := json.Marshal(sourceFile(240, -1))
	b.Run("text=10KB", func(b *testing.B) { benchScan(b, []byte(`{"contents":[{"parts":[{"text":`+string(raw)+`}]}]}`)) })
	for _, size := range []int{10 << 10, 100 << 10} {
		for _, turns := range []int{2, 10, 50} {
			body := sizedSession(size, turns)
			b.Run(fmt.Sprintf("size=%dKB/turns=%d", size>>10, turns), func(b *testing.B) { benchScan(b, body) })
		}
	}
}

// benchScan times SHA-256 and scanWith over body in the same iterations
// and reports their fifth percentiles: the machine is shared, and a call
// preempted half-way says nothing about the code.
func benchScan(b *testing.B, body []byte) {
	st := &state{}
	small := DefaultOptions().MinBlockBytes
	b.ReportAllocs()
	var shaT, scanT []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sha256.Sum256(body)
		t1 := time.Now()
		if _, err := scanWith(body, st, small, limits{}); err != nil {
			b.Fatal(err)
		}
		shaT = append(shaT, t1.Sub(t0))
		scanT = append(scanT, time.Since(t1))
	}
	slices.Sort(shaT)
	slices.Sort(scanT)
	sha, scan := shaT[len(shaT)/20], scanT[len(scanT)/20]
	b.ReportMetric(float64(scan)/float64(sha), "scan/sha")
	b.ReportMetric(float64(scan.Nanoseconds()), "scan-ns")
}

// BenchmarkScanInline scans a body with a 1 MB inlineData part, whose
// base64 string the scanner only validates.
func BenchmarkScanInline(b *testing.B) {
	data := make([]byte, 750<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	body, err := json.Marshal(map[string]any{"contents": []any{map[string]any{"parts": []any{map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": data}}}}}})
	if err != nil {
		b.Fatal(err)
	}
	benchScan(b, body)
}
