package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of every environment variable the proxy reads.
const EnvPrefix = "GEMINI_PROXY"

// flagKeys maps the command-line flags to the keys they set.
var flagKeys = map[string]string{
	"listen":       "server.listen",
	"admin-listen": "admin.listen",
	"upstream":     "upstream.url",
}

// BindFlags registers the configuration flags on fs: --config and one flag
// for each of the keys that are commonly set on the command line.
func BindFlags(fs *pflag.FlagSet) {
	d := Default()
	fs.String("config", "", "path to a YAML configuration file")
	fs.String("listen", d.Server.Listen, "proxy listen address (server.listen)")
	fs.String("admin-listen", d.Admin.Listen, "admin listen address for /metrics, /healthz, /readyz (admin.listen)")
	fs.String("upstream", d.Upstream.URL, "Gemini API base URL (upstream.url)")
}

// Load builds the configuration from defaults, the file named by --config,
// the environment and the flags in fs set on the command line (each
// overriding the one before), then validates it. fs may be nil. Unknown keys
// in the file or in GEMINI_PROXY_* variables and invalid values are
// reported together.
func Load(fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	keys := Keys()
	// Without a default for every key, AutomaticEnv + Unmarshal silently
	// ignores environment variables of keys viper does not know (viper#188).
	flat := flatten(Default())
	for _, k := range keys {
		v.SetDefault(k, flat[k])
	}

	var errs []error
	if fs != nil {
		if f := fs.Lookup("config"); f != nil && f.Value.String() != "" {
			v.SetConfigFile(f.Value.String())
			v.SetConfigType("yaml")
			if err := v.ReadInConfig(); err != nil {
				return Config{}, fmt.Errorf("reading config file: %w", err)
			}
		}
		for name, key := range flagKeys {
			if f := fs.Lookup(name); f != nil && f.Changed {
				v.Set(key, f.Value.String())
			}
		}
	}
	errs = append(errs, unknownEnv(keys)...)

	var c Config
	err := v.UnmarshalExact(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.TextUnmarshallerHookFunc(),
		mapstructure.StringToTimeDurationHookFunc(),
		stringToSlice,
	)))
	if err != nil {
		errs = append(errs, err)
	} else if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// stringToSlice splits a comma-separated string (from the environment) into
// a list, trimming blanks, so that "a, b" and "" behave as a user expects.
func stringToSlice(f, t reflect.Type, data any) (any, error) {
	if f.Kind() != reflect.String || t.Kind() != reflect.Slice {
		return data, nil
	}
	s := strings.TrimSpace(data.(string))
	out := []string{}
	if s == "" {
		return out, nil
	}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// unknownEnv reports GEMINI_PROXY_* variables that name no key, so that a
// typo does not silently leave a default in place.
func unknownEnv(keys []string) []error {
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		known[EnvName(k)] = true
	}
	var errs []error
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix+"_") && !known[name] {
			errs = append(errs, fmt.Errorf("unknown environment variable %s", name))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// EnvName returns the environment variable that sets key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns every configuration key, in declaration order.
func Keys() []string {
	var keys []string
	walk(reflect.ValueOf(Default()), "", func(key string, _ reflect.Value) {
		keys = append(keys, key)
	})
	return keys
}

// flatten maps each key of c to its value.
func flatten(c Config) map[string]any {
	m := make(map[string]any)
	walk(reflect.ValueOf(c), "", func(key string, v reflect.Value) {
		switch x := v.Interface().(type) {
		case ByteSize:
			m[key] = int64(x)
		default:
			m[key] = x
		}
	})
	return m
}

// walk calls fn for every leaf field of the struct v, with its dotted key.
func walk(v reflect.Value, prefix string, fn func(key string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		key := t.Field(i).Tag.Get("mapstructure")
		if prefix != "" {
			key = prefix + "." + key
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]() {
			walk(f, key, fn)
			continue
		}
		fn(key, f)
	}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	checkAddr := func(key, addr string, optional bool) {
		if addr == "" && optional {
			return
		}
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			bad(key, "%q is not a host:port address", addr)
		}
	}
	checkURL := func(key, s string) {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(key, "%q is not an absolute http or https URL", s)
			return
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			bad(key, "must not carry a query, fragment or user info")
		}
	}
	nonNegative := func(key string, d time.Duration) {
		if d < 0 {
			bad(key, "must not be negative")
		}
	}

	checkAddr("server.listen", c.Server.Listen, false)
	checkAddr("admin.listen", c.Admin.Listen, true)
	if _, port, _ := net.SplitHostPort(c.Admin.Listen); c.Admin.Listen != "" && c.Admin.Listen == c.Server.Listen && port != "0" {
		bad("admin.listen", "must differ from server.listen")
	}
	if p := c.Server.BasePath; p != "" && (!strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/")) {
		bad("server.base_path", "%q must start with / and not end with /", p)
	}
	if c.Server.PublicURL != "" {
		checkURL("server.public_url", c.Server.PublicURL)
	}
	if c.Server.MaxBodyBytes <= 0 {
		bad("server.max_body_bytes", "must be positive")
	}
	nonNegative("server.read_header_timeout", c.Server.ReadHeaderTimeout)
	nonNegative("server.body_idle_timeout", c.Server.BodyIdleTimeout)
	nonNegative("server.idle_timeout", c.Server.IdleTimeout)
	nonNegative("server.shutdown_delay", c.Server.ShutdownDelay)
	nonNegative("server.shutdown_grace", c.Server.ShutdownGrace)
	if h := c.Server.TenantHeader; h != "" && strings.ContainsAny(h, " :\t\r\n") {
		bad("server.tenant_header", "%q is not a header name", h)
	}

	checkURL("upstream.url", c.Upstream.URL)
	checkURL("upstream.vertex_url", c.Upstream.VertexURL)
	nonNegative("upstream.response_header_timeout", c.Upstream.ResponseHeaderTimeout)
	nonNegative("upstream.dial_timeout", c.Upstream.DialTimeout)
	nonNegative("upstream.idle_conn_timeout", c.Upstream.IdleConnTimeout)
	if c.Upstream.MaxIdleConnsPerHost < 1 {
		bad("upstream.max_idle_conns_per_host", "must be at least 1")
	}
	if strings.ContainsAny(c.Upstream.APIKey, " \t\r\n") {
		bad("upstream.api_key", "must not contain white space")
	}

	if c.Rewrite.MinBlockBytes < 64 {
		bad("rewrite.min_block_bytes", "must be at least 64 (a reference is up to 200 bytes)")
	}
	if s := c.Rewrite.Similarity; !(s > 0 && s <= 1) {
		bad("rewrite.similarity", "%v must be in (0, 1]", s)
	}
	if u := c.Rewrite.Unflatten; u != "verified" && u != "off" {
		bad("rewrite.unflatten", "%q must be verified or off", u)
	}
	if c.Rewrite.MaxInflightBytes < 0 {
		bad("rewrite.max_inflight_bytes", "must be 0 (no limit) or positive")
	}
	if c.Rewrite.MaxBodyBytes <= 0 {
		bad("rewrite.max_body_bytes", "must be positive")
	} else if c.Rewrite.MaxBodyBytes > c.Server.MaxBodyBytes {
		bad("rewrite.max_body_bytes", "must not exceed server.max_body_bytes")
	}
	for _, l := range []struct {
		key string
		n   int
	}{{"rewrite.max_parts", c.Rewrite.MaxParts}, {"rewrite.max_lines", c.Rewrite.MaxLines}, {"rewrite.max_blocks", c.Rewrite.MaxBlocks}} {
		if l.n < 0 {
			bad(l.key, "must be 0 (no limit) or positive")
		}
	}
	for _, tag := range c.Rewrite.DocumentTags {
		if tag == "" || strings.ContainsAny(tag, " <>/\"'=") {
			bad("rewrite.document_tags", "%q is not a tag name", tag)
		}
	}
	for _, l := range slices.Concat(c.Rewrite.Labels.User, c.Rewrite.Labels.Model) {
		if strings.TrimSpace(l) == "" || strings.ContainsAny(l, "\r\n") {
			bad("rewrite.labels", "%q is not a label", l)
		}
	}

	switch c.Cache.Backend {
	case "local":
	case "redis":
		u, err := url.Parse(c.Cache.RedisURL)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			bad("cache.redis_url", "must be a redis:// or rediss:// URL when cache.backend is redis")
		}
		if c.Cache.TenantSecret == "" {
			// Without a shared secret each replica hashes tenants with its
			// own random key, so nothing it writes to Redis is ever found
			// by another replica.
			bad("cache.tenant_secret", "must be set (the same on every replica) when cache.backend is redis")
		}
	default:
		bad("cache.backend", "%q must be local or redis", c.Cache.Backend)
	}
	if c.Cache.MaxBytes < 1<<20 {
		bad("cache.max_bytes", "must be at least 1MiB")
	}
	if c.Cache.TTL <= 0 {
		bad("cache.ttl", "must be positive")
	}
	if s := c.Cache.TenantSecret; s != "" && len(s) < 16 {
		bad("cache.tenant_secret", "must be at least 16 bytes")
	}
	if c.UpstreamState.Interactions && !c.Rewrite.Enabled {
		bad("upstream_state.interactions", "needs rewrite.enabled: generate bodies are read only when rewriting")
	}
	if len(c.Metrics.Models) > 200 {
		bad("metrics.models", "at most 200 models (label values must stay bounded)")
	}
	if r := c.Metrics.CountTokensSampleRate; !(r >= 0 && r <= 1) {
		bad("metrics.count_tokens_sample_rate", "%v must be in [0, 1]", r)
	}
	if c.Metrics.CountTokensPerSecond <= 0 {
		bad("metrics.count_tokens_per_second", "must be positive")
	}
	seen := map[string]bool{}
	for i, p := range c.Metrics.Prices {
		key := fmt.Sprintf("metrics.prices[%d]", i)
		if p.Model == "" {
			bad(key, "model is empty")
		} else if seen[p.Model] {
			bad(key, "model %q is listed twice", p.Model)
		}
		seen[p.Model] = true
		if p.Input < 0 || p.CachedInput < 0 || p.Output < 0 {
			bad(key, "prices must not be negative")
		}
		if p.Checked != "" {
			if _, err := time.Parse(time.DateOnly, p.Checked); err != nil {
				bad(key, "checked %q is not a YYYY-MM-DD date", p.Checked)
			}
		}
	}
	for i, p := range c.Metrics.Prices {
		if p.Storage < 0 {
			bad(fmt.Sprintf("metrics.prices[%d]", i), "storage must not be negative")
		}
	}
	if c.UpstreamState.ContextCacheTTL < 2*time.Second {
		bad("upstream_state.context_cache_ttl", "must be at least 2s")
	}
	for i, mt := range c.UpstreamState.ContextCacheMinTokens {
		if mt.Model == "" || mt.Tokens < 1 {
			bad(fmt.Sprintf("upstream_state.context_cache_min_tokens[%d]", i), "needs a model and a positive token count")
		}
	}
	if c.UpstreamState.ContextCacheDefaultMinTokens < 1 {
		bad("upstream_state.context_cache_default_min_tokens", "must be positive")
	}
	if c.UpstreamState.ContextCacheMaxPrefixes < 1 {
		bad("upstream_state.context_cache_max_prefixes", "must be positive")
	}
	if c.UpstreamState.ContextCacheMaxScopes < 1 {
		bad("upstream_state.context_cache_max_scopes", "must be positive")
	}
	if w := c.UpstreamState.ContextCacheWorkers; w < 1 || w > 64 {
		bad("upstream_state.context_cache_workers", "%d must be in [1, 64]", w)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q must be debug, info, warn or error", c.Log.Level)
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		bad("log.format", "%q must be text or json", f)
	}
	return errors.Join(errs...)
}
