package config

import (
	"time"

	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// Config is the whole configuration of gemini-proxy. Every field has a
// documented default in [Default]; examples/config.yaml lists them all.
type Config struct {
	Server   Server   `mapstructure:"server"`
	Admin    Admin    `mapstructure:"admin"`
	Upstream Upstream `mapstructure:"upstream"`
	Rewrite  Rewrite  `mapstructure:"rewrite"`
	Cache    Cache    `mapstructure:"cache"`
	Metrics  Metrics  `mapstructure:"metrics"`
	Log      Log      `mapstructure:"log"`
	Memory   Memory   `mapstructure:"memory"`

	UpstreamState UpstreamState `mapstructure:"upstream_state"`
}

// Server configures the proxy listener.
type Server struct {
	// Listen is the proxy's address (host:port).
	Listen string `mapstructure:"listen"`
	// BasePath is a path prefix the proxy is mounted under (for example
	// "/gemini" when clients use http://host/gemini/ as base URL). It is
	// stripped before forwarding. Empty means the root.
	BasePath string `mapstructure:"base_path"`
	// PublicURL is the proxy's address as clients reach it, when that
	// differs from what the proxy sees (a TLS-terminating load balancer:
	// https://gemini-proxy.example.com/gemini). Resumable-upload URLs are
	// pointed there. Empty means the request's own scheme and Host.
	PublicURL string `mapstructure:"public_url"`
	// MaxBodyBytes is the hard limit on a request body; larger bodies get 413.
	MaxBodyBytes ByteSize `mapstructure:"max_body_bytes"`
	// ReadHeaderTimeout bounds reading a request's headers. It never limits
	// a body or a response, so it cannot cut a stream.
	ReadHeaderTimeout time.Duration `mapstructure:"read_header_timeout"`
	// BodyIdleTimeout bounds the wait for each piece of a request body: a
	// client that stops sending its body this long gets 408. It never
	// limits a slow but moving upload or the response. Zero means no limit.
	BodyIdleTimeout time.Duration `mapstructure:"body_idle_timeout"`
	// IdleTimeout closes idle keep-alive client connections.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// ShutdownDelay is how long the proxy keeps accepting and serving
	// requests after a shutdown signal, with /readyz already answering 503,
	// so that a load balancer stops routing to it before its port closes.
	ShutdownDelay time.Duration `mapstructure:"shutdown_delay"`
	// ShutdownGrace is how long in-flight requests and streams may run after
	// the listeners closed before they are cut.
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
	// TenantHeader, when set, names a request header trusted to identify the
	// tenant (for a gateway behind an authenticating front end). Empty means
	// the tenant is derived from the caller's credential.
	TenantHeader string `mapstructure:"tenant_header"`
}

// Admin configures the admin listener (metrics, health, pprof).
type Admin struct {
	// Listen is the admin address (host:port). It must differ from
	// server.listen. Empty disables the admin listener.
	Listen string `mapstructure:"listen"`
	// Pprof serves /debug/pprof/ on the admin listener when true.
	Pprof bool `mapstructure:"pprof"`
}

// Upstream configures where requests go.
type Upstream struct {
	// URL is the Gemini API base URL. A path prefix in it is kept.
	URL string `mapstructure:"url"`
	// VertexURL is the base URL for Vertex AI paths
	// (/v1/projects/{p}/locations/{l}/publishers/…).
	VertexURL string `mapstructure:"vertex_url"`
	// APIKey, when set, replaces whatever key the client sent (for a sidecar
	// whose app has none). Secret: never logged or printed.
	APIKey string `mapstructure:"api_key"`
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers (a unary generateContent answers only when generation ends).
	// It never cuts a stream once headers arrived. Zero means no limit.
	ResponseHeaderTimeout time.Duration `mapstructure:"response_header_timeout"`
	// DialTimeout bounds establishing a connection to the upstream.
	DialTimeout time.Duration `mapstructure:"dial_timeout"`
	// IdleConnTimeout closes idle pooled upstream connections.
	IdleConnTimeout time.Duration `mapstructure:"idle_conn_timeout"`
	// MaxIdleConnsPerHost sizes the upstream connection pool.
	MaxIdleConnsPerHost int `mapstructure:"max_idle_conns_per_host"`
}

// Rewrite configures the rewriting of generateContent requests.
type Rewrite struct {
	// Enabled turns rewriting on. When false every request passes through.
	Enabled bool `mapstructure:"enabled"`
	// MinBlockBytes is the smallest block that may be replaced by a reference.
	MinBlockBytes int `mapstructure:"min_block_bytes"`
	// Similarity is the line-set similarity (0..1] at which an unnamed block
	// is taken as a new version of an earlier document.
	Similarity float64 `mapstructure:"similarity"`
	// CompactSuperseded replaces copies of older versions by references.
	CompactSuperseded bool `mapstructure:"compact_superseded"`
	// Unflatten is "verified" (split flattened transcripts whose model turns
	// were served by this proxy) or "off".
	Unflatten string `mapstructure:"unflatten"`
	// MaxBodyBytes: larger bodies are streamed through without rewriting.
	MaxBodyBytes ByteSize `mapstructure:"max_body_bytes"`
	// MaxInflightBytes bounds the request bodies being rewritten at once,
	// reserved once each body is read; one tenant may hold a quarter of
	// it; past it a request is forwarded unchanged. 0 means no limit.
	MaxInflightBytes ByteSize `mapstructure:"max_inflight_bytes"`
	// MaxParts, MaxLines and MaxBlocks bound the rewriter's memory for one
	// request (rewrite.Options): a request with more parts, lines or
	// blocks is forwarded unchanged. 0 means no limit.
	MaxParts  int `mapstructure:"max_parts"`
	MaxLines  int `mapstructure:"max_lines"`
	MaxBlocks int `mapstructure:"max_blocks"`
	// DocumentTags are the XML-like tag names treated as document wrappers.
	DocumentTags []string `mapstructure:"document_tags"`
	// Labels extends the built-in transcript label lexicon.
	Labels Labels `mapstructure:"labels"`
	// StablePrefix puts large blocks that end a user turn's text ahead of
	// the question before them, for Gemini's implicit cache.
	StablePrefix bool `mapstructure:"stable_prefix"`
	// ToolResults is "dedup" (a long string value of a functionResponse
	// that repeats content present in full earlier in the request becomes
	// an unchanged reference) or "off" (tool results are never touched).
	ToolResults string `mapstructure:"tool_results"`
	// CacheAwareCompaction compacts turns a conversation already sent
	// only when that saves more than the implicit-cache prefix it breaks
	// costs (rewrite.Options.Sent, fed by the dollar ledger's
	// conversation state).
	CacheAwareCompaction bool `mapstructure:"cache_aware_compaction"`
}

// Labels are extra transcript labels, in addition to the built-in lexicon.
type Labels struct {
	// User labels mark user turns (for example "Customer").
	User []string `mapstructure:"user"`
	// Model labels mark model turns (for example a persona name).
	Model []string `mapstructure:"model"`
}

// Cache configures per-tenant memory.
type Cache struct {
	// Backend is "local" (an in-process cache per replica) or "redis"
	// (served responses shared by replicas through Redis, with the local
	// cache in front).
	Backend string `mapstructure:"backend"`
	// MaxBytes bounds the local cache's memory.
	MaxBytes ByteSize `mapstructure:"max_bytes"`
	// TTL is how long an entry is kept after it was last written.
	TTL time.Duration `mapstructure:"ttl"`
	// RedisURL is the Redis server for backend redis
	// (redis://[:password@]host:port/db, or rediss:// for TLS). Its password
	// is redacted when printed.
	RedisURL string `mapstructure:"redis_url"`
	// RedisCluster makes a redis_url with one host a Redis Cluster seed
	// (several seeds: addr= query parameters make it a Cluster anyway).
	RedisCluster bool `mapstructure:"redis_cluster"`
	// RedisSentinelMaster, when set, makes redis_url's hosts Sentinels
	// watching the master of that name (or use redis-sentinel:// with
	// ?master_name=).
	RedisSentinelMaster string `mapstructure:"redis_sentinel_master"`
	// RedisTLSCAFile, RedisTLSCertFile and RedisTLSKeyFile are PEM files
	// for a rediss:// URL: the CAs that sign the server's certificate
	// (empty: the system's) and a client certificate with its key.
	RedisTLSCAFile   string `mapstructure:"redis_tls_ca_file"`
	RedisTLSCertFile string `mapstructure:"redis_tls_cert_file"`
	RedisTLSKeyFile  string `mapstructure:"redis_tls_key_file"`
	// RedisTLSServerName overrides the name checked in the server's
	// certificate (empty: the URL's host).
	RedisTLSServerName string `mapstructure:"redis_tls_server_name"`
	// RedisPoolSize bounds the connections per Redis node (0: go-redis's
	// default, 10 per CPU).
	RedisPoolSize int `mapstructure:"redis_pool_size"`
	// RedisTimeout bounds each Redis call; a call that takes longer is
	// an error, and the replica uses its local cache only for a second.
	RedisTimeout time.Duration `mapstructure:"redis_timeout"`
	// RedisBudget bounds the Redis time one request spends verifying
	// earlier answers, so that a slow Redis adds at most about this much
	// to a request.
	RedisBudget time.Duration `mapstructure:"redis_budget"`
	// TenantSecret keys the tenant hash (HMAC of the caller's credential).
	// Replicas that share state must share it. Empty means a random key per
	// process. Secret: never logged or printed. At least 16 bytes.
	TenantSecret string `mapstructure:"tenant_secret"`
}

// Metrics configures the Prometheus metrics.
type Metrics struct {
	// Models is the allowlist of model names used as the "model" label; any
	// other model is counted as "_other", so label values stay bounded.
	Models []string `mapstructure:"models"`
	// CountTokensSampleRate is the fraction (0..1) of rewritten requests for
	// which the proxy asks the upstream's free countTokens for the exact
	// token count of the original request, off the request path. Zero
	// disables it.
	CountTokensSampleRate float64 `mapstructure:"count_tokens_sample_rate"`
	// CountTokensPerSecond caps those countTokens calls.
	CountTokensPerSecond float64 `mapstructure:"count_tokens_per_second"`
	// HoldoutFraction (0..1) is the share of conversations, chosen per
	// tenant and conversation, forwarded unrewritten so that the billed
	// cost of both groups, by turn, measures what the rewrite saves
	// (gemini_proxy_ledger_* by group). Zero rewrites every conversation.
	HoldoutFraction float64 `mapstructure:"holdout_fraction"`
	// Prices is the price table for the money estimates, USD per million
	// tokens. A model not in it is counted as unpriced, never guessed.
	Prices []Price `mapstructure:"prices"`
}

// Price is one model's price, in USD per million tokens (standard tier,
// prompts up to 200k tokens).
type Price struct {
	// Model is the model name as in the request path, e.g. gemini-2.5-flash.
	Model string `mapstructure:"model"`
	// Input is the price of uncached prompt tokens.
	Input float64 `mapstructure:"input"`
	// CachedInput is the price of cached prompt tokens.
	CachedInput float64 `mapstructure:"cached_input"`
	// Output is the price of output tokens, thinking included.
	Output float64 `mapstructure:"output"`
	// Checked is the date (YYYY-MM-DD) the price was last checked.
	Checked string `mapstructure:"checked"`
	// Storage is the price of keeping a million tokens in an explicit
	// context cache for one hour. Zero means unknown: with
	// upstream_state.context_cache on, such a model is never cached.
	Storage float64 `mapstructure:"storage"`
}

// DefaultPrices are Google's published standard-tier prices, from the price
// data in shared/gemini-api.md §6.3 (each row with the date it was checked).
// Verify against https://ai.google.dev/gemini-api/docs/pricing.
var DefaultPrices = []Price{
	// Storage 1.00 for 2.5 Flash is marked "recalled" in gemini-api.md
	// §6.3; 2.5 Pro's 4.50 is from a forum answer. Check both.
	{"gemini-2.5-flash", 0.30, 0.03, 2.50, "2025-10-31", 1.00},
	{"gemini-2.5-flash-lite", 0.10, 0.01, 0.40, "2025-10-31", 0},
	{"gemini-2.5-pro", 1.25, 0.125, 10, "2025-10-31", 4.50},
	{"gemini-3-flash-preview", 0.50, 0.05, 3.00, "2025-12-19", 0},
	{"gemini-3-pro-preview", 2, 0.20, 12, "2025-11-18", 0},
	{"gemini-3.1-pro-preview", 2, 0.20, 12, "2026-02-23", 0},
	{"gemini-3.1-flash-lite", 0.25, 0.025, 1.50, "2026-05-12", 0},
	{"gemini-3.5-flash", 1.50, 0.15, 9.00, "2026-05-19", 0},
	{"gemini-3.5-flash-lite", 0.30, 0.03, 2.50, "2026-07-22", 0},
	{"gemini-3.6-flash", 0.75, 0.075, 3.75, "2026-08-13", 0.50},
	{"gemini-3.7-flash", 0.75, 0.075, 3.75, "2026-08-13", 0.50},
}

// UpstreamState configures state the proxy keeps at the upstream for its
// clients (issue #8).
type UpstreamState struct {
	// Interactions continues conversations server-side through the
	// Interactions API: a generate request whose contents begin with an
	// earlier exchange of the same tenant and model sends only its new
	// turns, with previous_interaction_id. It needs rewrite.enabled (the
	// proxy reads generate bodies only then). False (the default) sends
	// every request as generateContent.
	Interactions bool `mapstructure:"interactions"`
	// ContextCache turns on explicit context caching: a stable prefix
	// (systemInstruction, tools, toolConfig, leading contents) that a tenant
	// sends again and again to one model is put in a cachedContents entry,
	// made with that tenant's credential, when the price model says it
	// pays, and requests name it instead of carrying it.
	ContextCache bool `mapstructure:"context_cache"`
	// ContextCacheTTL is the lifetime of each cache and of each renewal.
	ContextCacheTTL time.Duration `mapstructure:"context_cache_ttl"`
	// ContextCacheMinTokens lists models' minimum cache sizes in tokens
	// (gemini-api.md §6.1); other models use
	// ContextCacheDefaultMinTokens.
	ContextCacheMinTokens []ModelTokens `mapstructure:"context_cache_min_tokens"`
	// ContextCacheDefaultMinTokens is the minimum cache size of models not
	// in ContextCacheMinTokens.
	ContextCacheDefaultMinTokens int `mapstructure:"context_cache_default_min_tokens"`
	// ContextCacheMaxPrefixes bounds the request prefixes tracked in
	// memory over all tenants.
	ContextCacheMaxPrefixes int `mapstructure:"context_cache_max_prefixes"`
	// ContextCacheMaxScopes bounds the scopes (tenant × credential × model)
	// tracked; the least recently used are forgotten first.
	ContextCacheMaxScopes int `mapstructure:"context_cache_max_scopes"`
	// ContextCacheWorkers bounds the cachedContents calls in flight.
	ContextCacheWorkers int `mapstructure:"context_cache_workers"`
}

// ModelTokens is a token count for one model.
type ModelTokens struct {
	// Model is the model name as in the request path.
	Model string `mapstructure:"model"`
	// Tokens is the count.
	Tokens int `mapstructure:"tokens"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `mapstructure:"level"`
	// Format is text or json.
	Format string `mapstructure:"format"`
	// BufferBytes bounds the log lines waiting to be written: lines are
	// written by a goroutine of their own, in batches, so that a request
	// never waits for a write; a line that does not fit is dropped and
	// counted (gemini_proxy_access_log_dropped_total). The buffer is
	// flushed on shutdown. Zero writes each line synchronously.
	BufferBytes ByteSize `mapstructure:"buffer_bytes"`
}

// Memory configures the process-wide memory limit (issue 16 item 10).
type Memory struct {
	// LimitBytes is the memory the process should fit in. It sets the Go
	// runtime's soft limit (debug.SetMemoryLimit) and, minus
	// cache.max_bytes and MemoryReserve, the budget of the buffers that
	// grow with traffic (response taps, request bodies being rewritten,
	// buffered chunked bodies) and of the ledger's layout memo; see
	// proxy.Options.MemoryBudgetBytes. The
	// default, 448MiB, fits a 512 MiB container with the default cache.
	// Zero means no limit and no budget.
	LimitBytes ByteSize `mapstructure:"limit_bytes"`
}

// MemoryReserve is the part of memory.limit_bytes left to what no budget
// counts: the runtime, goroutine stacks, connection buffers, the rewriter's
// pools and records, metrics.
const MemoryReserve = 48 << 20

// MinMemoryBudget is the smallest budget memory.limit_bytes may leave for
// the buffers: two large requests' worth.
const MinMemoryBudget = 16 << 20

// MemoryBudget returns the byte budget of the traffic buffers that
// c.Memory.LimitBytes leaves after the cache and MemoryReserve; 0 when
// there is no limit.
func (c Config) MemoryBudget() int64 {
	if c.Memory.LimitBytes <= 0 {
		return 0
	}
	return int64(c.Memory.LimitBytes) - int64(c.Cache.MaxBytes) - MemoryReserve
}

// DefaultModels are the model names counted under their own label.
var DefaultModels = []string{
	"gemini-2.0-flash", "gemini-2.0-flash-lite",
	"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro",
	"gemini-3-flash-preview", "gemini-3-pro-preview",
	"gemini-3.1-pro-preview", "gemini-3.1-flash-lite",
	"gemini-3.5-flash", "gemini-3.5-flash-lite", "gemini-3.6-flash", "gemini-3.7-flash",
	"gemini-embedding-001", "text-embedding-004",
}

// Default returns the documented defaults.
func Default() Config {
	rw := rewrite.DefaultOptions()
	return Config{
		Server: Server{
			Listen:            ":8080",
			MaxBodyBytes:      128 << 20,
			ReadHeaderTimeout: 10 * time.Second,
			BodyIdleTimeout:   time.Minute,
			IdleTimeout:       120 * time.Second,
			ShutdownGrace:     30 * time.Second,
		},
		Admin: Admin{Listen: ":9090"},
		Upstream: Upstream{
			URL:                   "https://generativelanguage.googleapis.com",
			VertexURL:             "https://aiplatform.googleapis.com",
			ResponseHeaderTimeout: 10 * time.Minute,
			DialTimeout:           10 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   256,
		},
		Rewrite: Rewrite{
			Enabled:           true,
			MinBlockBytes:     rw.MinBlockBytes,
			Similarity:        rw.Similarity,
			CompactSuperseded: rw.CompactSuperseded,
			Unflatten:         string(rw.Unflatten),
			MaxBodyBytes:      32 << 20,
			MaxInflightBytes:  256 << 20,
			MaxParts:          rw.MaxParts,
			MaxLines:          rw.MaxLines,
			MaxBlocks:         rw.MaxBlocks,
			DocumentTags:      rw.DocumentTags,
			Labels:            Labels{User: []string{}, Model: []string{}},
			StablePrefix:      rw.StablePrefix,
			ToolResults:       string(rw.ToolResults),
			// Weighs compaction against the sent prefix (BENCHMARKS.md).
			CacheAwareCompaction: true,
		},
		Cache: Cache{Backend: "local", MaxBytes: 256 << 20, TTL: time.Hour, RedisTimeout: 50 * time.Millisecond, RedisBudget: 100 * time.Millisecond},
		Metrics: Metrics{
			Models:               append([]string(nil), DefaultModels...),
			CountTokensPerSecond: 1,
			Prices:               append([]Price(nil), DefaultPrices...),
		},
		Log:    Log{Level: "info", Format: "text", BufferBytes: 1 << 20},
		Memory: Memory{LimitBytes: 448 << 20},
		UpstreamState: UpstreamState{
			ContextCacheTTL: 5 * time.Minute,
			ContextCacheMinTokens: []ModelTokens{
				{"gemini-2.5-flash", 2048},
				{"gemini-2.5-pro", 2048},
			},
			ContextCacheDefaultMinTokens: 4096,
			ContextCacheMaxPrefixes:      100_000,
			ContextCacheMaxScopes:        10_000,
			ContextCacheWorkers:          2,
		},
	}
}

// Secret keys are redacted when the configuration is printed.
var secretKeys = map[string]bool{
	"upstream.api_key":    true,
	"cache.tenant_secret": true,
}

// redactedURLKeys hold URLs whose password is redacted when printed.
var redactedURLKeys = map[string]bool{"cache.redis_url": true}
