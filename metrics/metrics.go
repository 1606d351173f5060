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
	// OutcomeInvalidRequest is a body the client sent as malformed JSON:
	// forwarded unchanged (the upstream answers it), not a rewriter fault.
	OutcomeInvalidRequest = "invalid_request"

	// Cases of gemini_proxy_rewrite_rejections_total: an error answer to a
	// rewritten request. The first two are retried with the original body
	// (the rewrite may be the cause); the others are passed to the client.
	RejectionInvalidArgument = "invalid_argument" // 400 INVALID_ARGUMENT
	RejectionInternal        = "internal"         // 500
	RejectionBadRequest      = "bad_request"      // another 400
	RejectionRateLimited     = "rate_limited"     // 429
	RejectionUnavailable     = "unavailable"      // 503
	RejectionTimeout         = "timeout"          // 504
	RejectionOther           = "other"            // any other 5xx
)

// RejectionCases lists the case label values of
// gemini_proxy_rewrite_rejections_total.
var RejectionCases = []string{RejectionInvalidArgument, RejectionInternal, RejectionBadRequest,
	RejectionRateLimited, RejectionUnavailable, RejectionTimeout, RejectionOther}

const (
	// Upstream error kinds for gemini_proxy_upstream_errors_total.
	UpstreamTimeout     = "timeout"
	UpstreamUnreachable = "unreachable"
	UpstreamTLS         = "tls"
	UpstreamAborted     = "aborted"
	UpstreamOther       = "other"

	// Calibration sources for gemini_proxy_tokens_per_byte_samples_total:
	// usageMetadata of a rewritten request, or an exact countTokens sample.
	SourceUsage       = "usage"
	SourceCountTokens = "count_tokens"

	// Kinds for gemini_proxy_sampled_prompt_tokens_total: the exact token
	// count of the original request (countTokens), the proxy's estimate of
	// it (sent prompt tokens plus estimated savings), and the prompt tokens
	// of the request actually sent.
	SampledOriginalExact     = "original_exact"
	SampledOriginalEstimated = "original_estimated"
	SampledSent              = "sent"

	// Outcomes for gemini_proxy_count_tokens_requests_total.
	CountTokensOK          = "ok"
	CountTokensError       = "error"
	CountTokensRateLimited = "rate_limited"
	CountTokensBusy        = "busy"

	// Price kinds for gemini_proxy_price_dollars_per_million_tokens.
	PriceInput       = "input"
	PriceCachedInput = "cached_input"
	PriceOutput      = "output"

	// Operations and results for
	// gemini_proxy_context_cache_operations_total: cachedContents calls
	// the proxy made (dropped: no free worker, tried again later).
	CacheOpCreate      = "create"
	CacheOpRenew       = "renew"
	CacheOpDelete      = "delete"
	CacheResultOK      = "ok"
	CacheResultError   = "error"
	CacheResultDropped = "dropped"

	// Cost kinds for gemini_proxy_context_cache_cost_dollars_total.
	CacheCostCreation = "creation"
	CacheCostStorage  = "storage"

	// Outcomes for gemini_proxy_context_cache_requests_total: the request
	// named a cache the proxy made, or went out in full.
	CacheOutcomeCached = "cached"
	CacheOutcomeFull   = "full"
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
	RewriteRejections   *prometheus.CounterVec // case
	RewriteAuditFails   *prometheus.CounterVec // reason

	// RewriteSourceSavedBytes and RewriteSourceReplacements split the
	// rewrite figures by where the spans were (rewrite.Sources).
	RewriteSourceSavedBytes   *prometheus.CounterVec // source
	RewriteSourceReplacements *prometheus.CounterVec // source

	TokensSaved        *prometheus.CounterVec // rule, model
	TokensPerByte      *prometheus.GaugeVec   // model
	CalibrationSamples *prometheus.CounterVec // model, source
	SavedDollars       *prometheus.CounterVec // model
	SpentDollars       *prometheus.CounterVec // model
	UnpricedRequests   *prometheus.CounterVec // model
	Price              *prometheus.GaugeVec   // model, kind
	PriceChecked       *prometheus.GaugeVec   // model
	CountTokens        *prometheus.CounterVec // outcome
	SampledTokens      *prometheus.CounterVec // model, kind

	UpstreamErrors    *prometheus.CounterVec // kind
	UpstreamResponses *prometheus.CounterVec // route, code
	ClientCancels     prometheus.Counter
	StallGrace        prometheus.Counter
	BuildInfo         *prometheus.GaugeVec // version, goversion

	// Interactions continuation (issue 8, upstream_state.interactions).
	InteractionRequests             *prometheus.CounterVec // kind
	InteractionSavedBytes           prometheus.Counter
	InteractionFallbacks            *prometheus.CounterVec // reason
	ContextCacheCreated             *prometheus.CounterVec // model
	ContextCacheLive                *prometheus.GaugeVec   // model
	ContextCacheStorageTokenSeconds *prometheus.CounterVec // model
	ContextCacheCachedTokens        *prometheus.CounterVec // model
	ContextCacheSavedDollars        *prometheus.CounterVec // model
	ContextCacheCostDollars         *prometheus.CounterVec // model, kind
	ContextCacheFallbacks           *prometheus.CounterVec // model
	ContextCacheRequests            *prometheus.CounterVec // model, outcome
	ContextCacheOperations          *prometheus.CounterVec // op, result

	// The net dollar ledger (issue 14, ledger.go).
	CostIncreaseDollars  *prometheus.CounterVec // model
	PrefixChanges        *prometheus.CounterVec // reason
	PrefixChangeTokens   prometheus.Counter
	LedgerRequests       *prometheus.CounterVec // group, turn
	LedgerBilledDollars  *prometheus.CounterVec // group, turn
	LedgerBilledSquares  *prometheus.CounterVec // group, turn
	LedgerCounterfactual *prometheus.CounterVec // group, turn
	CompactionDecisions  *prometheus.CounterVec // reason

	// The process-wide memory budget and the access log (memory.go).
	MemoryBudgetLimit    prometheus.Gauge
	MemoryBudgetUsed     prometheus.Gauge
	MemoryBudgetRefusals *prometheus.CounterVec // consumer
	AccessLogDropped     prometheus.Counter
}

// Kinds for gemini_proxy_interactions_requests_total: how a generate
// request eligible for the Interactions API was finally answered.
const (
	// InteractionContinued: only the new turns, with previous_interaction_id.
	InteractionContinued = "continued"
	// InteractionSession: a session request (X-Gemini-Proxy-Session)
	// continuing its session's interaction.
	InteractionSession = "session"
	// InteractionStarted: the whole request as a new stored interaction.
	InteractionStarted = "started"
	// InteractionFull: the generateContent request (not translatable, or
	// after a fallback).
	InteractionFull = "full"
)

// Reasons for gemini_proxy_interactions_fallbacks_total.
const (
	// FallbackNotFound: the upstream no longer has the interaction (404).
	FallbackNotFound = "not_found"
	// FallbackRejected: the upstream rejected the interaction request (400).
	FallbackRejected = "rejected"
	// FallbackUpstreamError: any other non-2xx status.
	FallbackUpstreamError = "upstream_error"
	// FallbackUntranslatable: the interaction could not be translated back
	// exactly (or failed, or its stream ended early) before any byte was sent.
	FallbackUntranslatable = "untranslatable"
	// FallbackTransport: the interaction request got no response.
	FallbackTransport = "transport"
)

// InteractionKinds and FallbackReasons list the label values above.
var (
	InteractionKinds = []string{InteractionContinued, InteractionSession, InteractionStarted, InteractionFull}
	FallbackReasons  = []string{FallbackNotFound, FallbackRejected, FallbackUpstreamError, FallbackUntranslatable, FallbackTransport}
)

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
			Help:    "Time spent in the proxy itself before the upstream request starts: routing, decoding, rewriting and encoding the body; the time the client took to upload the body is left out.",
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
			Help: "Body bytes of generate requests the rewriter ran on (mode on) before and after the rewrite, counted when the upstream accepted the request without a fallback.",
		}, []string{"stage"}),
		RewriteSavedBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_saved_bytes_total",
			Help: "Bytes removed from request bodies by each rewrite rule (replaced content minus the references), counted only when the rewritten body was what the upstream accepted (no fallback).",
		}, []string{"rule"}),
		RewriteReplacements: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_replacements_total",
			Help: "Spans replaced by each rewrite rule (turns created, for unflatten; parts split, for stable).",
		}, []string{"rule"}),
		RewriteSourceSavedBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_source_saved_bytes_total",
			Help: "Bytes removed from request bodies by where the replaced spans were: text (a text part), json_text (a string value of a JSON text or fenced JSON block), tool_result (a functionResponse value) or inline_data; same condition as rewrite_saved_bytes_total.",
		}, []string{"source"}),
		RewriteSourceReplacements: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_source_replacements_total",
			Help: "Spans replaced, by where they were (text, json_text, tool_result, inline_data); same condition as rewrite_saved_bytes_total.",
		}, []string{"source"}),
		RewriteErrors: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_errors_total",
			Help: "Rewrites that failed or panicked; the original body was forwarded.",
		}),
		RewriteAuditFails: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_audit_failures_total",
			Help: "Rewritten bodies that failed the audit against the original (rewrite.AuditReasons); the original body was forwarded.",
		}, []string{"reason"}),
		RewriteFallbacks: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_fallbacks_total",
			Help: "Rewritten requests retried with the original body after the upstream answered 400 INVALID_ARGUMENT or 500.",
		}),
		RewriteRejections: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rewrite_rejections_total",
			Help: "Rewritten requests the upstream answered with 400, 429 or 5xx, by case: invalid_argument (400 INVALID_ARGUMENT) and internal (500) are retried with the original body; bad_request (another 400), rate_limited (429), unavailable (503), timeout (504) and other (5xx) go to the client unretried.",
		}, []string{"case"}),
		TokensSaved: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "tokens_saved_total",
			Help: "Estimated prompt tokens not sent upstream, by rewrite rule and normalised model: bytes removed times the model's calibrated tokens per byte (see gemini_proxy_tokens_per_byte). Counted only for rewritten bodies the upstream really received (no fallback).",
		}, []string{"rule", "model"}),
		TokensPerByte: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "tokens_per_byte",
			Help: "Prompt tokens per byte of text currently used to estimate saved tokens, by normalised model; calibrated from usageMetadata of rewritten requests, or from exact countTokens samples when there are any.",
		}, []string{"model"}),
		CalibrationSamples: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "tokens_per_byte_samples_total",
			Help: "Requests that calibrated gemini_proxy_tokens_per_byte, by normalised model and source (usage or count_tokens).",
		}, []string{"model", "source"}),
		SpentDollars: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "spent_dollars_total",
			Help: "Estimated US dollars spent on generate requests, from usageMetadata and the configured price table (uncached and tool-use prompt at the input price, cached at the cached-input price, candidates and thoughts at the output price).",
		}, []string{"model"}),
		UnpricedRequests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "unpriced_requests_total",
			Help: "Generate requests whose model is not in the price table; their dollars are not estimated.",
		}, []string{"model"}),
		Price: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "price_dollars_per_million_tokens",
			Help: "The configured price in US dollars per million tokens, by normalised model and kind (input, cached_input, output).",
		}, []string{"model", "kind"}),
		PriceChecked: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "price_checked_timestamp_seconds",
			Help: "Unix time of the date the configured price of the model was last checked.",
		}, []string{"model"}),
		CountTokens: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "count_tokens_requests_total",
			Help: "Sampled countTokens calls the proxy made on original requests, by outcome: ok, error, rate_limited or busy (not made).",
		}, []string{"outcome"}),
		SampledTokens: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "sampled_prompt_tokens_total",
			Help: "For requests sampled with countTokens: the exact prompt tokens of the original request (original_exact), the proxy's estimate of it (original_estimated) and the prompt tokens actually sent (sent).",
		}, []string{"model", "kind"}),
		UpstreamErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "upstream_errors_total",
			Help: "Upstream failures by kind: timeout, unreachable, tls, aborted (mid-response) or other.",
		}, []string{"kind"}),
		UpstreamResponses: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "upstream_responses_total",
			Help: "Responses received from the upstream, by route and HTTP status code, including the rejected first attempt of a fallback.",
		}, []string{"route", "code"}),
		ClientCancels: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "client_cancels_total",
			Help: "Requests whose client went away before the response completed.",
		}),
		StallGrace: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "stall_grace_total",
			Help: "Client connection read deadlines (request headers, keep-alive idle, request body) that expired while the process was stalled (not scheduled) and were extended once by the stall's length instead of closing the connection.",
		}),
		BuildInfo: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "build_info",
			Help: "Always 1; labelled with the version of the running build and the Go version.",
		}, []string{"version", "goversion"}),
		ContextCacheCreated: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_created_total",
			Help: "Explicit context caches (cachedContents) the proxy created, by normalised model.",
		}, []string{"model"}),
		ContextCacheLive: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "context_cache_live",
			Help: "Explicit context caches the proxy made that have not expired or been deleted, by normalised model.",
		}, []string{"model"}),
		ContextCacheStorageTokenSeconds: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_storage_token_seconds_total",
			Help: "Storage billed for the proxy's explicit context caches, in token-seconds (tokens times seconds from creation to when the cache ended: its deletion, or its expiry when it expired or a delete failed; divide by 3600 for the token-hours prices are quoted in), counted when each cache ends.",
		}, []string{"model"}),
		ContextCacheCachedTokens: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_cached_tokens_total",
			Help: "Prompt tokens billed at the cached rate (usageMetadata.cachedContentTokenCount) on requests that named a cache the proxy made.",
		}, []string{"model"}),
		ContextCacheSavedDollars: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_saved_dollars_total",
			Help: "Estimated US dollars the proxy's explicit context caches saved before their own costs: cached tokens times (input price minus cached-input price) times (1 minus the share of the prefix implicit caching was billing at the cached rate already, as estimated for the decision to create the cache).",
		}, []string{"model"}),
		ContextCacheCostDollars: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_cost_dollars_total",
			Help: "Estimated US dollars the proxy's explicit context caches cost, by kind: creation (cache tokens at the input price) and storage (token-hours at the storage price).",
		}, []string{"model", "kind"}),
		ContextCacheFallbacks: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_fallbacks_total",
			Help: "Requests naming a proxy-made cache that the upstream answered with 400, 403, 404 or 5xx and that were resent once with the client's original body before any byte reached the client.",
		}, []string{"model"}),
		ContextCacheRequests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_requests_total",
			Help: "Generate requests the upstream answered while context caching was on, by whether they named a proxy-made cache (cached) or went out in full (full).",
		}, []string{"model", "outcome"}),
		ContextCacheOperations: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "context_cache_operations_total",
			Help: "cachedContents calls the proxy made, by operation (create, renew, delete) and result (ok, error, dropped when no worker was free).",
		}, []string{"op", "result"}),
	}
	for _, k := range []string{UpstreamTimeout, UpstreamUnreachable, UpstreamTLS, UpstreamAborted, UpstreamOther} {
		m.UpstreamErrors.WithLabelValues(k)
	}
	for _, s := range []string{StageBefore, StageAfter} {
		m.RewriteBytes.WithLabelValues(s)
	}
	for _, c := range RejectionCases {
		m.RewriteRejections.WithLabelValues(c)
	}
	for _, o := range []string{CountTokensOK, CountTokensError, CountTokensRateLimited, CountTokensBusy} {
		m.CountTokens.WithLabelValues(o)
	}
	m.newInteractions(f)
	m.newLedger(f)
	m.newMemory(f)
	return m
}

// newInteractions creates the Interactions continuation collectors.
func (m *Metrics) newInteractions(f promauto.Factory) {
	m.InteractionRequests = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "interactions_requests_total",
		Help: "Generate requests eligible for the Interactions API (upstream_state.interactions), by how they were answered: continued (only the new turns, with previous_interaction_id), session (continuing an X-Gemini-Proxy-Session), started (a new stored interaction) or full (the generateContent request).",
	}, []string{"kind"})
	m.InteractionSavedBytes = f.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "interactions_saved_bytes_total",
		Help: "Request body bytes not uploaded thanks to Interactions continuation: the generateContent body (after rewriting) minus the interaction body sent instead, for continued and session requests the upstream answered.",
	})
	m.InteractionFallbacks = f.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "interactions_fallbacks_total",
		Help: "Interaction requests replaced by the generateContent request before any byte reached the client, by reason: not_found (404, expired), rejected (400), upstream_error (other status), untranslatable, transport.",
	}, []string{"reason"})
	for _, k := range InteractionKinds {
		m.InteractionRequests.WithLabelValues(k)
	}
	for _, r := range FallbackReasons {
		m.InteractionFallbacks.WithLabelValues(r)
	}
}

// SetBuildInfo sets gemini_proxy_build_info{version, goversion} to 1.
func (m *Metrics) SetBuildInfo(version string) {
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}
