package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/gemini-proxy/gemini-proxy/internal/suggest"
)

// EnvPrefix is the prefix of every environment variable the proxy reads.
const EnvPrefix = "GEMINI_PROXY"

// EnvConfig names the configuration file when --config is not given, so
// that serve and the container's health check read the same file.
const EnvConfig = EnvPrefix + "_CONFIG"

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
	fs.String("config", "", "path to a YAML configuration file (default: $"+EnvConfig+")")
	fs.String("listen", d.Server.Listen, "proxy listen address (server.listen)")
	fs.String("admin-listen", d.Admin.Listen, "admin listen address for /metrics, /healthz, /readyz (admin.listen)")
	fs.String("upstream", d.Upstream.URL, "Gemini API base URL (upstream.url)")
}

// Load builds the configuration from defaults, the file named by --config,
// the environment and the flags in fs set on the command line (each
// overriding the one before), then validates it. fs may be nil. Without
// --config, the file is the one GEMINI_PROXY_CONFIG names, if any.
//
// Every problem is reported at once, one per line: unknown keys in the file
// or in GEMINI_PROXY_* variables (with the nearest known one), values that
// do not decode, and values that decode but are invalid. Each names its key,
// the value (secrets aside) and where it was set: the file and line, the
// environment variable or the flag. A YAML syntax error names the line of
// the file where the document stops parsing.
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

	src := sources{flags: map[string]string{}}
	var errs []error
	path := os.Getenv(EnvConfig)
	if fs != nil {
		if f := fs.Lookup("config"); f != nil && f.Value.String() != "" {
			path = f.Value.String()
		}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("reading config file: %w", err)
		}
		lines, err := yamlKeyLines(data)
		if err != nil {
			return Config{}, errors.Join(append([]error{fmt.Errorf("reading config file %s: %w", path, err)}, unknownEnv(keys)...)...)
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("reading config file %s: %w", path, err)
		}
		src.file, src.lines = path, lines
	}
	if fs != nil {
		for name, key := range flagKeys {
			if f := fs.Lookup(name); f != nil && f.Changed {
				v.Set(key, f.Value.String())
				src.flags[key] = name
			}
		}
	}
	errs = append(errs, src.unknownFileKeys(keys)...)
	errs = append(errs, unknownEnv(keys)...)

	// Each key is decoded on its own so that one bad value does not hide
	// the others, nor the validation of the rest; a key that does not
	// decode keeps its default.
	c := Default()
	failed := map[string]bool{}
	sections := src.scalarSections(keys)
	hook := mapstructure.ComposeDecodeHookFunc(
		mapstructure.TextUnmarshallerHookFunc(),
		mapstructure.StringToTimeDurationHookFunc(),
		stringToSlice,
	)
	walk(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.Value) {
		if slices.ContainsFunc(sections, func(s string) bool { return strings.HasPrefix(key, s+".") }) {
			failed[key] = true // its section is a value in the file, reported above
			return
		}
		raw := v.Get(key)
		out := reflect.New(f.Type())
		dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
			DecodeHook:       hook,
			ErrorUnused:      true,
			WeaklyTypedInput: true, // as viper: "2048" from the environment is a number
			Result:           out.Interface(),
		})
		if err == nil {
			err = dec.Decode(raw)
		}
		if err != nil {
			failed[key] = true
			errs = append(errs, fmt.Errorf("%s: %s%s", key, decodeProblem(key, f.Type(), raw, err), src.of(key)))
			return
		}
		f.Set(out.Elem())
	})

	if err := c.Validate(); err != nil {
		for _, e := range unjoin(err) {
			key, _, _ := strings.Cut(e.Error(), ": ")
			key, _, _ = strings.Cut(key, "[")
			if failed[key] {
				continue // reported above; the default stood in for it
			}
			errs = append(errs, fmt.Errorf("%w%s%s", e, src.valueNote(c, key, e.Error()), src.of(key)))
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// unjoin returns the errors that errors.Join combined into err, or err.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// sources tells where each key's value came from, for error messages.
type sources struct {
	file  string         // path of the configuration file, or ""
	lines map[string]int // line of each key set in the file
	flags map[string]string
}

// of returns " (from WHERE)" for the place that set key, or "" for a
// default.
func (s sources) of(key string) string {
	if name, ok := s.flags[key]; ok {
		return fmt.Sprintf(" (from flag --%s)", name)
	}
	if os.Getenv(EnvName(key)) != "" {
		return fmt.Sprintf(" (from %s)", EnvName(key))
	}
	if line, ok := s.lines[key]; ok {
		return fmt.Sprintf(" (from %s line %d)", s.file, line)
	}
	return ""
}

// valueNote returns ", got VALUE" for a validation message about a scalar
// key that does not quote the value itself, and "" for a secret, a list or
// a message that already shows it.
func (s sources) valueNote(c Config, key, msg string) string {
	if secretKeys[key] || redactedURLKeys[key] {
		return ""
	}
	var note string
	walk(reflect.ValueOf(c), "", func(k string, f reflect.Value) {
		if k != key || f.Kind() == reflect.Slice || f.Kind() == reflect.Struct {
			return
		}
		val := yamlValue(k, f)
		if strings.Contains(msg, val) || strings.Contains(msg, strings.Trim(val, `"`)) {
			return
		}
		note = ", got " + val
	})
	return note
}

// scalarSections returns the sections of keys that the file sets to a
// value instead of a mapping of keys.
func (s sources) scalarSections(keys []string) []string {
	var out []string
	for k := range s.lines {
		if slices.ContainsFunc(keys, func(known string) bool { return strings.HasPrefix(known, k+".") }) {
			out = append(out, k)
		}
	}
	return out
}

// unknownFileKeys reports keys of the configuration file that name no
// setting, with the nearest known key.
func (s sources) unknownFileKeys(keys []string) []error {
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		known[k] = true
	}
	var unknown []string
	for k := range s.lines {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	slices.SortFunc(unknown, func(a, b string) int { return s.lines[a] - s.lines[b] })
	var errs []error
	for _, k := range unknown {
		if slices.ContainsFunc(keys, func(known string) bool { return strings.HasPrefix(known, k+".") }) {
			errs = append(errs, fmt.Errorf("%s: must be a section of keys, not a value (%s line %d)", k, s.file, s.lines[k]))
			continue
		}
		hint := ""
		if near := suggest.Nearest(k, keys); near != "" {
			hint = fmt.Sprintf("; did you mean %s?", near)
		}
		errs = append(errs, fmt.Errorf("unknown key %s (%s line %d)%s", k, s.file, s.lines[k], hint))
	}
	return errs
}

// decodeProblem says why raw is not a value of type t, quoting raw unless
// key is a secret.
func decodeProblem(key string, t reflect.Type, raw any, err error) string {
	val := fmt.Sprintf("%v", raw)
	if s, ok := raw.(string); ok {
		val = strconv.Quote(s)
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		// Lists of records: mapstructure names the offending item and field.
		return strings.TrimPrefix(err.Error(), "decoding failed due to the following error(s):\n\n")
	}
	if len(val) > 80 {
		val = val[:77] + "..."
	}
	if secretKeys[key] || redactedURLKeys[key] {
		val = "the value"
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return val + " is not a duration (like 90s, 5m or 1h)"
	case t == reflect.TypeFor[ByteSize]():
		return val + " is not a size (bytes, or a number with KiB, MiB, GiB, KB, MB or GB)"
	case t.Kind() == reflect.Bool:
		return val + " is not true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return val + " is not a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return val + " is not a number"
	case t == reflect.TypeFor[[]string]():
		return val + " is not a list of strings"
	}
	return fmt.Sprintf("%s does not fit: %v", val, err)
}

// yamlKeyLines parses a YAML configuration document and returns the line of
// every key it sets, as dotted lower-case paths (viper's keys); it does not
// descend into lists. A syntax error names the first line after the longest
// prefix of the document that parses, which is where the document goes
// wrong: the YAML parser's own line is off by one or more for errors found
// while parsing a block (yaml.v3 reports a 0-based line there).
func yamlKeyLines(data []byte) (map[string]int, error) {
	var doc yaml.Node
	err := yaml.Unmarshal(data, &doc)
	if err == nil {
		// Duplicate keys are an error only when decoding into a map, as
		// viper does; its message names both lines.
		var m map[string]any
		err = yaml.Unmarshal(data, &m)
	}
	if err != nil {
		return nil, yamlSyntaxError(data, err)
	}
	lines := map[string]int{}
	var visit func(n *yaml.Node, prefix string)
	visit = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			visit(n.Content[0], prefix)
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			key := strings.ToLower(k.Value)
			if prefix != "" {
				key = prefix + "." + key
			}
			if val.Kind == yaml.MappingNode && !leafKeys()[key] {
				visit(val, key)
				continue
			}
			lines[key] = k.Line
		}
	}
	visit(&doc, "")
	return lines, nil
}

// leafKeys is the set of Keys.
var leafKeys = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, k := range Keys() {
		m[k] = true
	}
	return m
})

// yamlLinePrefix matches the position yaml.v3 puts before its messages.
var yamlLinePrefix = regexp.MustCompile(`^yaml: (line \d+: )?`)

// yamlSyntaxError rewrites err, a yaml.v3 error for data, to name the line
// where data stops parsing.
func yamlSyntaxError(data []byte, err error) error {
	msg := yamlLinePrefix.ReplaceAllString(err.Error(), "")
	if strings.HasPrefix(msg, "unmarshal errors:") {
		// Type and duplicate-key errors carry correct lines already.
		var parts []string
		for _, l := range strings.Split(strings.TrimPrefix(msg, "unmarshal errors:"), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				parts = append(parts, l)
			}
		}
		return errors.New(strings.Join(parts, "; "))
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 5000 {
		return err // too long to search; keep the parser's own line
	}
	good := 0 // lines of the longest prefix that parses
	var prefix []byte
	var node yaml.Node
	for i, l := range lines {
		prefix = append(prefix, l...)
		if yaml.Unmarshal(prefix, &node) == nil {
			good = i + 1
		}
	}
	line := min(good+1, len(lines))
	return fmt.Errorf("line %d: %s", line, msg)
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
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = EnvName(k)
		known[names[i]] = true
	}
	var errs []error
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix+"_") && !known[name] && name != EnvConfig {
			hint := ""
			if near := suggest.Nearest(name, names); near != "" {
				hint = fmt.Sprintf("; did you mean %s?", near)
			}
			errs = append(errs, fmt.Errorf("unknown environment variable %s%s", name, hint))
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
	if u := c.Rewrite.ToolResults; u != "dedup" && u != "off" {
		bad("rewrite.tool_results", "%q must be dedup or off", u)
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
		if err != nil || !slices.Contains([]string{"redis", "rediss", "redis-sentinel", "rediss-sentinel"}, u.Scheme) || u.Host == "" {
			bad("cache.redis_url", "must be a redis://, rediss://, redis-sentinel:// or rediss-sentinel:// URL when cache.backend is redis")
		} else if !strings.HasPrefix(u.Scheme, "rediss") && (c.Cache.RedisTLSCAFile != "" || c.Cache.RedisTLSCertFile != "" || c.Cache.RedisTLSKeyFile != "" || c.Cache.RedisTLSServerName != "") {
			bad("cache.redis_url", "must be rediss:// (TLS) when cache.redis_tls_* is set")
		}
		if (c.Cache.RedisTLSCertFile == "") != (c.Cache.RedisTLSKeyFile == "") {
			bad("cache.redis_tls_cert_file", "and cache.redis_tls_key_file go together")
		}
		if c.Cache.RedisCluster && (c.Cache.RedisSentinelMaster != "" || strings.HasSuffix(u.Scheme, "-sentinel")) {
			bad("cache.redis_cluster", "excludes Sentinel (cache.redis_sentinel_master, redis-sentinel://)")
		}
		if c.Cache.RedisPoolSize < 0 || c.Cache.RedisPoolSize > 10_000 {
			bad("cache.redis_pool_size", "must be 0 (go-redis default) up to 10000")
		}
		if c.Cache.RedisTimeout < time.Millisecond || c.Cache.RedisTimeout > 10*time.Second {
			bad("cache.redis_timeout", "must be between 1ms and 10s")
		}
		if c.Cache.RedisBudget < c.Cache.RedisTimeout || c.Cache.RedisBudget > time.Minute {
			bad("cache.redis_budget", "must be at least cache.redis_timeout and at most 1m")
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
	if r := c.Metrics.HoldoutFraction; !(r >= 0 && r <= 1) {
		bad("metrics.holdout_fraction", "%v must be in [0, 1]", r)
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
	if c.Log.BufferBytes < 0 {
		bad("log.buffer_bytes", "must not be negative")
	}
	switch {
	case c.Memory.LimitBytes < 0:
		bad("memory.limit_bytes", "must not be negative")
	case c.Memory.LimitBytes > 0 && c.MemoryBudget() < MinMemoryBudget:
		bad("memory.limit_bytes", "%s leaves %s for request and response buffers after cache.max_bytes (%s) and the runtime's reserve (%s); at least %s is needed: raise it, lower cache.max_bytes, or 0 for no limit",
			c.Memory.LimitBytes, ByteSize(max(c.MemoryBudget(), 0)), c.Cache.MaxBytes, ByteSize(MemoryReserve), ByteSize(MinMemoryBudget))
	}
	return errors.Join(errs...)
}
