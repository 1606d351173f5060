package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const namespace = "gemini_proxy"

// Label values shared by the proxy and the dashboard. Every label takes its
// values from a closed set; these are the sets this package owns.
const (
	// StageReceived and StageSent label gemini_proxy_request_bytes_total.
	StageReceived = "received"
	StageSent     = "sent"

	// StageBefore and StageAfter label gemini_proxy_rewrite_bytes_total.
	StageBefore = "before"
	StageAfter  = "after"

	// Token kinds for gemini_proxy_usage_tokens_total.
	TokensPrompt     = "prompt"
	TokensCached     = "cached"
	TokensCandidates = "candidates"
	TokensThoughts   = "thoughts"
	TokensToolUse    = "tool_use"

	// Rewrite modes for gemini_proxy_rewrite_requests_total.
	ModeOn       = "on"
	ModeDryRun   = "dry-run"
	ModeOff      = "off"
	ModeDisabled = "disabled"

	// Rewrite outcomes for gemini_proxy_rewrite_requests_total.
	OutcomeChanged   = "changed"
	OutcomeUnchanged = "unchanged"
	OutcomeError     = "error"
	OutcomeSkipped   = "skipped"

	// Upstream error kinds for gemini_proxy_upstream_errors_total.
	UpstreamTimeout     = "timeout"
	UpstreamUnreachable = "unreachable"
	UpstreamTLS         = "tls"
	UpstreamAborted     = "aborted"
	UpstreamOther       = "other"
)

// LatencyBuckets are the buckets, in seconds, of the request, upstream and
// time-to-first-byte histograms. They reach 300 s because thinking models
// can take minutes to answer; prometheus.DefBuckets stops at 10 s.
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}

// OverheadBuckets are the buckets, in seconds, of the proxy overhead
// histogram: 10 µs to 1 s, dense below a millisecond.
var OverheadBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// Metrics holds every collector. Build it with New; the fields are safe for
// concurrent use. The doc.go table describes each metric.
type Metrics struct {
	Requests         *prometheus.CounterVec   // route, model, code, stream
	RequestDuration  *prometheus.HistogramVec // route, stream
	UpstreamDuration *prometheus.HistogramVec // route
	TimeToFirstByte  *prometheus.HistogramVec // route
	ProxyOverhead    *prometheus.HistogramVec // route
	InFlight         prometheus.Gauge
	RequestBytes     *prometheus.CounterVec // route, stage
	ResponseBytes    *prometheus.CounterVec // route
	UsageTokens      *prometheus.CounterVec // model, kind
	ClientRequests   *prometheus.CounterVec // sdk, deprecated

	RewriteRequests     *prometheus.CounterVec // mode, outcome
	RewriteBytes        *prometheus.CounterVec // stage
	RewriteSavedBytes   *prometheus.CounterVec // rule
	RewriteReplacements *prometheus.CounterVec // rule
	RewriteErrors       prometheus.Counter
	RewriteFallbacks    prometheus.Counter

	UpstreamErrors *prometheus.CounterVec // kind
	ClientCancels  prometheus.Counter
	BuildInfo      *prometheus.GaugeVec // version, goversion
}

// New creates every collector and registers it with reg. It panics if a
// name is already registered, like promauto. Nothing is registered with the
// global registry.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Requests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Requests served, by route, normalised model, final HTTP status code (499 when the client went away) and stream flag.",
		}, []string{"route", "model", "code", "stream"}),
		RequestDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "request_duration_seconds",
			Help:    "Time from request arrival until the response body is complete.",
			Buckets: LatencyBuckets,
		}, []string{"route", "stream"}),
		UpstreamDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "upstream_duration_seconds",
			Help:    "Time from sending the upstream request until its response headers arrive.",
			Buckets: LatencyBuckets,
		}, []string{"route"}),
		TimeToFirstByte: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "time_to_first_byte_seconds",
			Help:    "For streaming responses, time from request arrival until the first body byte is written to the client.",
			Buckets: LatencyBuckets,
		}, []string{"route"}),
		ProxyOverhead: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "proxy_overhead_seconds",
			Help:    "Time spent in the proxy itself before the upstream request starts: reading, rewriting and encoding the body.",
			Buckets: OverheadBuckets,
		}, []string{"route"}),
		InFlight: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "in_flight_requests",
			Help: "Requests currently being served.",
		}),
		RequestBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "request_bytes_total",
			Help: "Request body bytes received from clients (stage=received) and sent upstream (stage=sent, after rewriting, including fallback retries).",
		}, []string{"route", "stage"}),
		ResponseBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "response_bytes_total",
			Help: "Response body bytes written to clients.",
		}, []string{"route"}),
		UsageTokens: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "usage_tokens_total",
			Help: "Tokens reported by the last usageMetadata of each generate response, by normalised model and kind (prompt includes cached).",
		}, []string{"model", "kind"}),
		ClientRequests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "client_requests_total",
			Help: "Requests by client SDK family, taken from the x-goog-api-client header.",
		}, []string{"sdk", "deprecated"}),
		RewriteRequests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_requests_total",
			Help: "Generate requests by rewrite mode and outcome.",
		}, []string{"mode", "outcome"}),
		RewriteBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_bytes_total",
			Help: "Body bytes of rewritten requests before and after the rewrite.",
		}, []string{"stage"}),
		RewriteSavedBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_saved_bytes_total",
			Help: "Bytes removed from request bodies by each rewrite rule (replaced content minus the references).",
		}, []string{"rule"}),
		RewriteReplacements: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_replacements_total",
			Help: "Spans replaced by each rewrite rule (turns created, for unflatten).",
		}, []string{"rule"}),
		RewriteErrors: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_errors_total",
			Help: "Rewrites that failed or panicked; the original body was forwarded.",
		}),
		RewriteFallbacks: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_fallbacks_total",
			Help: "Rewritten requests retried with the original body after the upstream answered 400 or 5xx.",
		}),
		UpstreamErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "upstream_errors_total",
			Help: "Upstream failures by kind: timeout, unreachable, tls, aborted (mid-response) or other.",
		}, []string{"kind"}),
		ClientCancels: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "client_cancels_total",
			Help: "Requests whose client went away before the response completed.",
		}),
		BuildInfo: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "build_info",
			Help: "Always 1; labelled with the version of the running build and the Go version.",
		}, []string{"version", "goversion"}),
	}
	for _, k := range []string{UpstreamTimeout, UpstreamUnreachable, UpstreamTLS, UpstreamAborted, UpstreamOther} {
		m.UpstreamErrors.WithLabelValues(k)
	}
	for _, s := range []string{StageBefore, StageAfter} {
		m.RewriteBytes.WithLabelValues(s)
	}
	return m
}

// SetBuildInfo sets gemini_proxy_build_info{version, goversion} to 1.
func (m *Metrics) SetBuildInfo(version string) {
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}
