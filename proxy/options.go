package proxy

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultMaxBodyBytes is the hard request body limit when
	// Options.MaxBodyBytes is zero: the API's 100 MB inline limit plus room
	// for JSON framing.
	DefaultMaxBodyBytes = 128 << 20
	// DefaultRewriteMaxBodyBytes is the largest body rewritten when
	// RewriteOptions.MaxBodyBytes is zero.
	DefaultRewriteMaxBodyBytes = 32 << 20
	// DefaultMaxIdleConnsPerHost is the upstream pool size when
	// Options.MaxIdleConnsPerHost is zero (net/http's default is 2).
	DefaultMaxIdleConnsPerHost = 256
)

// Options configures a Handler. Only Upstream is required.
type Options struct {
	// Upstream is the Gemini API base URL, for example
	// https://generativelanguage.googleapis.com. A path prefix in it is kept
	// in front of every forwarded path. Required.
	Upstream *url.URL
	// VertexUpstream receives Vertex AI paths
	// (/{v1|v1beta1}/projects/{p}/locations/{l}/… and
	// /{v}/publishers/google/models/…) with the caller's Authorization
	// header. Nil (or an empty URL) sends them to Upstream.
	VertexUpstream *url.URL
	// APIKey, when set, replaces the client's credential on Gemini API
	// (non-Vertex) routes: the x-goog-api-key header and the key query
	// parameter are removed and x-goog-api-key is set to APIKey. An
	// Authorization header is forwarded untouched. Empty forwards the
	// client's credential.
	APIKey APIKey
	// BasePath is a path prefix the proxy is mounted under, such as
	// "/gemini". It is removed from incoming paths before forwarding and
	// added back to rewritten X-Goog-Upload-Url headers. Paths outside it
	// are forwarded unchanged. Empty means the proxy serves the root.
	BasePath string
	// PublicURL, when set, is the proxy's address as clients reach it (for
	// example https://gemini-proxy.example.com behind a TLS-terminating load
	// balancer); rewritten X-Goog-Upload-Url headers point there. Nil means
	// the scheme and Host of each request (plain http unless the proxy
	// itself served TLS) followed by BasePath.
	PublicURL *url.URL
	// MaxBodyBytes is the hard limit on a request body, in bytes; larger
	// bodies get a 413. Zero means DefaultMaxBodyBytes; negative, no limit.
	MaxBodyBytes int64
	// BodyIdleTimeout bounds the wait for each piece of a request body: a
	// client that stops sending its body for this long gets 408 and its
	// connection closed. It never limits a slow but moving upload, nor the
	// response. Zero means no limit.
	BodyIdleTimeout time.Duration
	// Rewrite configures the rewriting of generateContent and
	// streamGenerateContent requests.
	Rewrite RewriteOptions
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers after the request is sent. It never cuts a stream once headers
	// arrived. Zero means no limit.
	ResponseHeaderTimeout time.Duration
	// DialTimeout bounds establishing a TCP connection to the upstream.
	// Zero means no limit beyond the operating system's.
	DialTimeout time.Duration
	// IdleConnTimeout closes pooled upstream connections idle this long.
	// Zero means no limit.
	IdleConnTimeout time.Duration
	// MaxIdleConnsPerHost is the number of idle upstream connections kept
	// per host. Zero means DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int
	// Transport, when set, replaces the transport New builds from
	// http.DefaultTransport (tests, custom TLS). The timeout and pool
	// fields above are then ignored.
	Transport http.RoundTripper
	// ModelAllowlist lists the normalised model names used as the metrics
	// model label; other models are labelled "_other". Nil means
	// DefaultModelAllowlist; an empty non-nil slice labels every model
	// "_other".
	ModelAllowlist []string
	// TenantSecret keys the HMAC that turns a credential into a tenant id.
	// Replicas that share state need the same secret. Nil means a random
	// 32-byte secret for this process.
	TenantSecret []byte
	// TenantHeader, when set, names a trusted request header (set by a
	// gateway in front of the proxy) whose value identifies the tenant
	// instead of the credential. Requests without it fall back to the
	// credential. Empty means the credential always decides.
	TenantHeader string
	// Verifier returns the rewrite.Verifier for a tenant (responses served
	// to it, for un-flattening). Nil verifies nothing.
	Verifier func(tenant string) rewrite.Verifier
	// Prices maps model names, as in request paths (gemini-2.5-flash), to
	// their prices for the dollar estimates. A model not in it is counted
	// in gemini_proxy_unpriced_requests_total, never guessed. Nil prices
	// nothing.
	Prices map[string]Price
	// CountTokensSampleRate is the fraction (0..1) of rewritten requests
	// the upstream accepted for which the proxy calls the upstream's free
	// countTokens on the original body, after the response, to export the
	// exact original token count next to its estimate and to calibrate the
	// estimate. Zero disables sampling. Vertex paths are never sampled.
	CountTokensSampleRate float64
	// CountTokensPerSecond caps those countTokens calls (a token bucket
	// with bursts of max(1, rate)); at most 4 run at once. Zero means 1.
	CountTokensPerSecond float64
	// OnExchange, when set, is called synchronously after each generate
	// response has been copied to the client (or has failed), on the
	// request's goroutine. It must not block for long.
	// OnServed, when set, is called with the model's visible text of a
	// generate response with status 200 (candidate 0, at most MaxTextBytes
	// bytes; truncated reports a cut) as soon as the upstream's body was
	// read in full, on the request's goroutine, before the last bytes of
	// the body are written to the client: a client that sends its next
	// turn the instant it has the answer finds it recorded. It must be
	// cheap (cache.Store.RecordServed is one hash pass); it is not called
	// for a response cut short.
	OnServed   func(tenant, text string, truncated bool)
	OnExchange func(Exchange)
	// ServedText, when set, is used instead of OnServed: called when the
	// headers of a generate response with status 200 arrive, it returns
	// the writer that receives the text OnServed would get, in pieces as
	// the tap reads them (each event of a stream), so that the answer is
	// normalised and hashed as it passes, with no copy of it made for the
	// purpose (cache.Store.ServedRecorder). Served is called where OnServed
	// would be, with a non-empty text; for a response cut short it is not
	// called and the writer is dropped.
	ServedText func(tenant string) ServedWriter
	// ExchangeWithoutText says that OnExchange does not read Exchange.Text
	// (nor TextTruncated): the tap keeps no copy of the model's text for
	// it, and Text is empty.
	ExchangeWithoutText bool
	// MemoryBudgetBytes is the process-wide budget (budget.go) of the
	// buffers that grow with traffic: the response taps' event and object
	// buffers past 64 KiB each, request bodies being rewritten (four times
	// the body: the body, the rewrite's output, the ledger's copies) and chunked request bodies
	// buffered before they are forwarded. When it is spent the tap skips
	// the event (text marked truncated), the rewrite is skipped
	// (rewrite_skipped=memory) and a chunked body gets 503; nothing waits.
	// The ledger's layout memo takes its share first (splitMemoryBudget:
	// at most 32 MiB, a quarter of the budget).
	// serve sizes it from memory.limit_bytes. Zero means no budget.
	MemoryBudgetBytes int64
	// Interactions configures continuing conversations server-side through
	// the Interactions API. The zero value is off.
	Interactions InteractionsOptions
	// ContextCache, when set, turns on explicit context caching of stable
	// prefixes of generate requests (see ContextCacheOptions and package
	// contextcache). It applies to bodies rewritten in mode on. Nil means
	// off.
	ContextCache *ContextCacheOptions
	// Ledger configures the net dollar ledger: the per-conversation state
	// behind the counterfactual, and the holdout. The zero value keeps the
	// state in this process and holds no conversation out.
	Ledger LedgerOptions
}

// RewriteOptions configures request rewriting.
type RewriteOptions struct {
	// Enabled turns rewriting on. When false, generate requests pass through
	// byte-for-byte like every other route.
	Enabled bool
	// MaxBodyBytes is the largest body, in bytes, that is read and rewritten;
	// larger bodies are streamed through unchanged without buffering. Zero
	// means DefaultRewriteMaxBodyBytes.
	MaxBodyBytes int64
	// MaxInflightBytes bounds the request bodies being rewritten at once
	// (by the bytes read: reserved once the body is read, so that a slow
	// upload holds nothing), held from the rewrite to the end of the
	// request: a request that would pass it is forwarded unchanged
	// (outcome skipped, logged as busy). One tenant may hold at most a
	// quarter of it. A rewrite holds about three times its body (the body,
	// its decoded text, the output) plus its records, so this bounds the
	// rewriter's memory across concurrent requests. A request is let in
	// whatever its size when nothing else is being rewritten, and when its
	// tenant has nothing else being rewritten, within the total. Zero
	// means no limit.
	MaxInflightBytes int64
	// Options are passed to rewrite.Request. The zero value means
	// rewrite.DefaultOptions().
	Options rewrite.Options
}

// APIKey is a credential. It formats and logs as "REDACTED"; convert it
// with string(k) to use it.
type APIKey string

// String returns "REDACTED" so that the key never reaches a log by accident.
func (APIKey) String() string { return "REDACTED" }

// LogValue implements slog.LogValuer.
func (APIKey) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// Exchange describes one completed generate call, for the conversation
// cache. It never goes to a log.
type Exchange struct {
	// Tenant is the tenant id (hex HMAC of the credential).
	Tenant string
	// Route is RouteGenerate or RouteStreamGenerate.
	Route Route
	// Model is the normalised model name from the path.
	Model string
	// Stream reports whether the response was streamed (SSE or JSON array).
	Stream bool
	// Status is the HTTP status the client received (499: client gone).
	Status int
	// Complete reports whether the whole response body reached the client.
	Complete bool
	// Usage is the last usageMetadata seen; nil when there was none.
	Usage *Usage
	// ModelVersion is the response's modelVersion.
	ModelVersion string
	// Text is the model's visible text of candidate 0 (thought parts left
	// out), at most MaxTextBytes bytes; TextTruncated reports a cut.
	Text          string
	TextTruncated bool
	// Request is the client's original request body when the proxy read it
	// for rewriting; nil when the body was streamed through. It lies in a
	// pooled buffer that is reused once the request is over: valid during
	// the OnExchange call only, copy it to keep it.
	Request []byte
	// Report is the rewrite report; nil when no rewrite ran.
	Report *rewrite.Report
	// ReportHeader is the X-Gemini-Proxy-Report value the client got,
	// without "; fallback": Report.Header() and the proxy's own notes
	// ("; holdout", "; mode=dry-run"), formatted once per request.
	ReportHeader string
	// RewriteMode is the metrics mode: on, dry-run, off or disabled.
	RewriteMode string
	// Fallback reports whether the rewritten request was retried with the
	// original body.
	Fallback bool
	// Ledger is the ledger's account of the request; nil when it was not
	// accounted (not answered 2xx with usage, not read for rewriting, or a
	// model without a price).
	Ledger *Ledger
}

// ServedWriter receives the model's text of one served response
// (Options.ServedText). Its writes never fail.
type ServedWriter interface {
	// Grow says that about n more bytes follow.
	Grow(n int)
	Write(p []byte) (int, error)
	WriteString(s string) (int, error)
	// Served records the text written; truncated reports that it is only
	// the first part of the response.
	Served(truncated bool)
}
