package proxy

import (
	"encoding/json"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// testutilValue is the number of 200 stream requests recorded by f.
func testutilValue(f *fixture) float64 {
	return testutil.ToFloat64(f.m.Requests.WithLabelValues("stream_generate_content", "gemini-2.5-flash", "200", "true"))
}
