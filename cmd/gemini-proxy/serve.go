package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/savingspage"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
)

func serveFlags(fs *pflag.FlagSet) {
	config.BindFlags(fs)
	fs.String("record", "", "append generate requests (path without key, JSON body; never headers) to this file, created 0600, for bench --replay")
}

func serve(ctx context.Context, fs *pflag.FlagSet, _, stderr io.Writer) error {
	c, err := config.Load(fs)
	if err != nil {
		return err
	}
	var out io.Writer = stderr
	if c.Log.BufferBytes > 0 {
		aw := newAsyncWriter(stderr, int(c.Log.BufferBytes))
		defer aw.Close() // last: flushes what the shutdown logged
		out = aw
		ctx = context.WithValue(ctx, logWriterKey{}, aw)
	}
	logger := newLogger(c.Log, out)
	if c.Memory.LimitBytes > 0 && os.Getenv("GOMEMLIMIT") == "" {
		// The Go runtime's soft limit: the collector works harder as the
		// heap nears it, instead of letting it grow past the container.
		debug.SetMemoryLimit(int64(c.Memory.LimitBytes))
		logger.Info("memory limit", "limit_bytes", int64(c.Memory.LimitBytes), "budget_bytes", c.MemoryBudget())
	}
	if path, _ := fs.GetString("record"); path != "" {
		rec, err := newRecorder(path, int64(c.Rewrite.MaxBodyBytes), logger)
		if err != nil {
			return err
		}
		defer rec.Close()
		return serveConfig(ctx, c, logger, nil, rec.wrap)
	}
	return serveConfig(ctx, c, logger, nil)
}

// serveConfig runs the proxy and admin listeners for c until ctx is done.
// started, when not nil, receives the bound addresses once both listen.
// wrap, applied in order, wraps the proxy handler (serve --record).
func serveConfig(ctx context.Context, c config.Config, logger *slog.Logger, started func(proxyAddr, adminAddr string), wrap ...func(http.Handler) http.Handler) error {
	return serveWithPage(ctx, c, logger, nil, started, wrap...)
}

// servedRecordsRead reports whether a served answer's record can ever be
// read: by this process's un-flattening, which verifies model turns
// against them (rewrite.enabled with rewrite.unflatten "verified"), or by
// other replicas through a shared Redis index, whose configuration may
// differ from this one's during a rolling change. Otherwise nothing reads
// the records, and recording them would cost a pass, a SHA-256 and a
// cache entry for every answer (issue 17).
func servedRecordsRead(c config.Config) bool {
	return c.Cache.Backend == "redis" || c.Rewrite.Enabled && rewrite.UnflattenMode(c.Rewrite.Unflatten) == rewrite.UnflattenVerified
}

// serveWithPage is serveConfig with conv, when not nil, receiving the
// savings page once it exists (demo --serve draws its conversation there).
func serveWithPage(ctx context.Context, c config.Config, logger *slog.Logger, conv func(*savingspage.Page), started func(proxyAddr, adminAddr string), wrap ...func(http.Handler) http.Handler) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m := metrics.New(reg)
	m.SetBuildInfo(version())
	if aw, _ := ctx.Value(logWriterKey{}).(*asyncWriter); aw != nil {
		aw.countDrops(m.AccessLogDropped)
	}

	opts, err := proxyOptions(c)
	if err != nil {
		return err
	}
	co := cache.Options{MaxBytes: int64(c.Cache.MaxBytes), TTL: c.Cache.TTL, Logger: logger.With("component", "cache")}
	if c.Cache.Backend == "redis" {
		co.RedisURL = c.Cache.RedisURL
		co.RedisCluster = c.Cache.RedisCluster
		co.RedisMasterName = c.Cache.RedisSentinelMaster
		co.RedisTLS = cache.RedisTLS{CAFile: c.Cache.RedisTLSCAFile, CertFile: c.Cache.RedisTLSCertFile,
			KeyFile: c.Cache.RedisTLSKeyFile, ServerName: c.Cache.RedisTLSServerName}
		co.RedisPoolSize = c.Cache.RedisPoolSize
		co.RedisTimeout, co.RedisBudget = c.Cache.RedisTimeout, c.Cache.RedisBudget
		co.Secret = []byte(c.Cache.TenantSecret)
	}
	store, err := cache.New(co)
	if err != nil {
		return err
	}
	defer store.Close()
	metrics.RegisterCache(reg, store.Stats)
	opts.Verifier = func(tenant string) rewrite.Verifier { return store.Verifier(tenant) }
	opts.Interactions = proxy.InteractionsOptions{Enabled: c.UpstreamState.Interactions, Store: store}
	opts.Ledger = proxy.LedgerOptions{Store: store, HoldoutFraction: c.Metrics.HoldoutFraction, WeighCompaction: c.Rewrite.CacheAwareCompaction}
	if reg := store.ContextCacheRegistry(); reg != nil && opts.ContextCache != nil {
		// One cache per prefix for the whole fleet.
		opts.ContextCache.Shared = reg
	}
	page := savingspage.New(savingspage.Options{Gatherer: reg})
	if conv != nil {
		conv(page)
	}
	go page.Run(ctx)
	hook, _ := ctx.Value(exchangeHookKey{}).(func(proxy.Exchange))
	// A served answer is recorded as soon as the upstream's body was read,
	// before the client has its last bytes: a client that sends its next
	// turn at once finds it verified (issue 13, defect 4).
	// The answer's text is normalised and hashed as the tap reads it
	// (cache.ServedRecorder), event by event, and no copy of it is kept:
	// OnExchange below reads no Exchange.Text. It is recorded only where a
	// record can be read (servedRecordsRead).
	if servedRecordsRead(c) {
		opts.ServedText = func(tenant string) proxy.ServedWriter { return store.ServedRecorder(tenant) }
	}
	opts.ExchangeWithoutText = true
	opts.OnExchange = func(ex proxy.Exchange) {
		if hook != nil {
			hook(ex)
		}
		if ex.Report != nil {
			page.Record(savingspage.Report{At: time.Now(), Model: ex.Model, Status: ex.Status, Header: ex.ReportHeader,
				BytesBefore: ex.Report.BytesBefore, BytesAfter: ex.Report.BytesAfter})
		}
		// Only what the client received in full counts.
		if !ex.Complete || ex.Status != http.StatusOK {
			return
		}
		if ex.Report != nil && len(ex.Report.Blocks) > 0 {
			// The rewriter already hashed the new turn's blocks; the
			// conversation's id is hashed here, after the response.
			store.RecordBlocks(ex.Tenant, ex.Report.ConversationID(), ex.Report.Blocks)
		}
	}
	h, err := proxy.New(opts, logger, m)
	if err != nil {
		return err
	}

	var ready atomic.Bool
	var ph http.Handler = h
	for _, w := range wrap {
		ph = w(ph)
	}
	pl, err := listen("proxy", c.Server.Listen, ph, c.Server, logger)
	if err != nil {
		return err
	}
	pl.countGrace = m.StallGrace.Inc
	lns := []*listener{pl}
	adminAddr := ""
	if c.Admin.Listen != "" {
		admin := http.NewServeMux()
		admin.Handle("GET /{$}", page)
		admin.Handle("/", proxy.AdminHandler(reg, ready.Load, c.Admin.Pprof))
		al, err := listen("admin", c.Admin.Listen, admin, c.Server, logger)
		if err != nil {
			pl.ln.Close()
			return err
		}
		// The admin listener goes last so that /readyz answers "not ready"
		// while the proxy drains.
		al.countGrace = m.StallGrace.Inc
		lns = append(lns, al)
		adminAddr = al.ln.Addr().String()
	}
	if started != nil {
		started(pl.ln.Addr().String(), adminAddr)
	}
	return serveUntil(ctx, lns, c.Server.ShutdownDelay, c.Server.ShutdownGrace, &ready, logger)
}

// exchangeHookKey is the context key of a func(proxy.Exchange) that
// serveConfig calls with every exchange: the bench reads the proxy's
// ledger per session with it.
type exchangeHookKey struct{}

// logWriterKey is the context key of serve's *asyncWriter, whose dropped
// lines serveConfig counts in its metrics.
type logWriterKey struct{}

// proxyOptions maps the configuration onto the proxy's options.
func proxyOptions(c config.Config) (proxy.Options, error) {
	up, err := url.Parse(c.Upstream.URL)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("upstream.url: %w", err)
	}
	vx, err := url.Parse(c.Upstream.VertexURL)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("upstream.vertex_url: %w", err)
	}
	var public *url.URL
	if c.Server.PublicURL != "" {
		if public, err = url.Parse(c.Server.PublicURL); err != nil {
			return proxy.Options{}, fmt.Errorf("server.public_url: %w", err)
		}
	}
	rw := rewrite.DefaultOptions()
	rw.MinBlockBytes = c.Rewrite.MinBlockBytes
	rw.Similarity = c.Rewrite.Similarity
	rw.CompactSuperseded = c.Rewrite.CompactSuperseded
	rw.Unflatten = rewrite.UnflattenMode(c.Rewrite.Unflatten)
	rw.DocumentTags = c.Rewrite.DocumentTags
	rw.StablePrefix = c.Rewrite.StablePrefix
	rw.ToolResults = rewrite.ToolResultsMode(c.Rewrite.ToolResults)
	rw.MaxParts, rw.MaxLines, rw.MaxBlocks = c.Rewrite.MaxParts, c.Rewrite.MaxLines, c.Rewrite.MaxBlocks
	if len(c.Rewrite.Labels.User)+len(c.Rewrite.Labels.Model) > 0 {
		rw.Lexicon = rewrite.DefaultLexicon().Extend(c.Rewrite.Labels.User, c.Rewrite.Labels.Model)
	}
	prices := make(map[string]proxy.Price, len(c.Metrics.Prices))
	for _, p := range c.Metrics.Prices {
		prices[p.Model] = proxy.Price{Input: p.Input, CachedInput: p.CachedInput, Output: p.Output, Storage: p.Storage, Checked: p.Checked}
	}
	var cc *proxy.ContextCacheOptions
	if us := c.UpstreamState; us.ContextCache {
		cc = &proxy.ContextCacheOptions{
			TTL:              us.ContextCacheTTL,
			MinTokens:        make(map[string]int, len(us.ContextCacheMinTokens)),
			DefaultMinTokens: us.ContextCacheDefaultMinTokens,
			MaxPrefixes:      us.ContextCacheMaxPrefixes,
			MaxScopes:        us.ContextCacheMaxScopes,
			Workers:          us.ContextCacheWorkers,
		}
		for _, mt := range us.ContextCacheMinTokens {
			cc.MinTokens[mt.Model] = mt.Tokens
		}
	}
	var secret []byte
	if c.Cache.TenantSecret != "" {
		secret = []byte(c.Cache.TenantSecret)
	}
	return proxy.Options{
		Upstream:        up,
		VertexUpstream:  vx,
		APIKey:          proxy.APIKey(c.Upstream.APIKey),
		BasePath:        c.Server.BasePath,
		PublicURL:       public,
		MaxBodyBytes:    int64(c.Server.MaxBodyBytes),
		BodyIdleTimeout: c.Server.BodyIdleTimeout,
		Rewrite: proxy.RewriteOptions{
			Enabled:          c.Rewrite.Enabled,
			MaxBodyBytes:     int64(c.Rewrite.MaxBodyBytes),
			MaxInflightBytes: int64(c.Rewrite.MaxInflightBytes),
			Options:          rw,
		},
		ResponseHeaderTimeout: c.Upstream.ResponseHeaderTimeout,
		DialTimeout:           c.Upstream.DialTimeout,
		IdleConnTimeout:       c.Upstream.IdleConnTimeout,
		MaxIdleConnsPerHost:   c.Upstream.MaxIdleConnsPerHost,
		ModelAllowlist:        c.Metrics.Models,
		TenantSecret:          secret,
		TenantHeader:          c.Server.TenantHeader,
		Prices:                prices,
		CountTokensSampleRate: c.Metrics.CountTokensSampleRate,
		CountTokensPerSecond:  c.Metrics.CountTokensPerSecond,
		ContextCache:          cc,
		MemoryBudgetBytes:     c.MemoryBudget(),
	}, nil
}
