package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
)

// BenchmarkTapUnary feeds a 256 KB unary answer (Markdown prose and code
// with new lines, JSON-encoded as encoding/json writes it, as
// bench.LongAnswers serves it) to a tap in 32 KB reads, recording the
// served text as serve does (cache.ServedRecorder, no copy kept), and once
// in one write (the object read whole), and a 1 KB answer in one write.
// The tap's cost per answer, without the network.
//
//	go test ./proxy -run '^$' -bench TapUnary -benchmem
func BenchmarkTapUnary(b *testing.B) {
	para := "The difference is ownership of the backing storage.\n\nAn **array** in Go has a fixed length that is part of its type: `[4]int` and `[5]int` are different types.\n\n```go\na := [4]int{1, 2, 3, 4}\ns := a[1:3] // len 2, cap 3\n```\n\n<b>&amp;</b> \"quoted\" é 日本\n\n"
	text := strings.Repeat(para, 256<<10/len(para))
	doc := map[string]any{
		"candidates": []any{map[string]any{
			"content":      map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"},
			"finishReason": "STOP", "index": 0,
		}},
		"usageMetadata": map[string]any{"promptTokenCount": 9, "candidatesTokenCount": 70000, "totalTokenCount": 70009},
		"modelVersion":  "gemini-2.5-flash",
	}
	body, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	s, err := cache.New(cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	small := []byte(`{"candidates": [{"content": {"parts": [{"text": "` + strings.ReplaceAll(strings.Repeat(para[:200], 5), "\n", `\n`) + `"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 250,"totalTokenCount": 259},"modelVersion": "gemini-2.5-flash"}`)
	for _, c := range []struct {
		name string
		body []byte
		read int
	}{{"32K", body, 32 << 10}, {"whole", body, len(body)}, {"1K", small, len(small)}} {
		body, read := c.body, c.read
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			cpu0 := processCPU()
			for b.Loop() {
				tp := newTap("", true)
				tp.text.keep = false
				tp.text.w = s.ServedRecorder("t")
				for i := 0; i < len(body); i += read {
					tp.Write(body[i:min(i+read, len(body))]) //nolint:errcheck // never fails
				}
				tp.finish()
				tp.text.w.Served(tp.textTruncated)
			}
			reportCPU(b, cpu0)
		})
	}
	// The 256 KB answer's last 32 KB read alone, last-ns/op: what the
	// proxy does between the upstream's last bytes and the client's (the
	// tap's read, the record). ns/op is the whole answer.
	b.Run("32K-last", func(b *testing.B) {
		// The answer's last read is a full one, as when the object ends
		// a 32 KB read of the upstream's body.
		last := len(body) - 32<<10
		var wall time.Duration
		for b.Loop() {
			tp := newTap("", true)
			tp.text.keep = false
			tp.text.w = s.ServedRecorder("t")
			for i := 0; i < last; i += 32 << 10 {
				tp.Write(body[i:min(i+32<<10, last)]) //nolint:errcheck // never fails
			}
			t0 := time.Now()
			endAnswer(tp, body[last:])
			wall += time.Since(t0)
		}
		b.ReportMetric(float64(wall)/float64(b.N), "last-ns/op")
	})
}

// endAnswer is the last read of an answer through tp and its record, as
// tapBody.Read does it.
//
//go:noinline
func endAnswer(tp *tap, p []byte) {
	tp.Write(p) //nolint:errcheck // never fails
	tp.finish()
	tp.text.w.Served(tp.textTruncated)
}
