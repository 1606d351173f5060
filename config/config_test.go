package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// clearEnv hides GEMINI_PROXY_* variables of the calling environment, so
// that the tests see only what they set.
func clearEnv(t *testing.T) {
	t.Helper()
	testutil.ClearEnv(t, EnvPrefix+"_")
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestLoadDefaults(t *testing.T) {
	clearEnv(t)
	got, err := Load(flags(t))
	if err != nil {
		t.Fatalf("Load() error: %v", err)
	}
	if diff := cmp.Diff(Default(), got); diff != "" {
		t.Errorf("Load() with nothing set differs from Default() (-want +got):\n%s", diff)
	}
}

func TestLoadPrecedence(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, `
server:
  listen: "127.0.0.1:7000"
  max_body_bytes: 64MiB
upstream:
  url: "http://file.example:1"
  response_header_timeout: 90s
rewrite:
  min_block_bytes: 1024
  document_tags: ["file", "doc"]
log:
  level: debug
`)
	t.Setenv("GEMINI_PROXY_UPSTREAM_URL", "http://127.0.0.1:9000")
	t.Setenv("GEMINI_PROXY_REWRITE_MIN_BLOCK_BYTES", "2048")
	t.Setenv("GEMINI_PROXY_REWRITE_LABELS_USER", "Customer, Cliente")
	t.Setenv("GEMINI_PROXY_SERVER_LISTEN", "127.0.0.1:7001")
	got, err := Load(flags(t, "--config", file, "--listen", "127.0.0.1:7002"))
	if err != nil {
		t.Fatalf("Load() error: %v", err)
	}
	want := Default()
	want.Server.Listen = "127.0.0.1:7002"       // flag beats env and file
	want.Server.MaxBodyBytes = 64 << 20         // file
	want.Upstream.URL = "http://127.0.0.1:9000" // env beats file
	want.Upstream.ResponseHeaderTimeout = 90 * time.Second
	want.Rewrite.MinBlockBytes = 2048                   // env beats file
	want.Rewrite.DocumentTags = []string{"file", "doc"} // file
	want.Rewrite.Labels.User = []string{"Customer", "Cliente"}
	want.Log.Level = "debug"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load() (-want +got):\n%s", diff)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		want []string // every one must appear in the error
	}{
		{
			name: "unknown file key",
			file: "rewrite:\n  min_blok_bytes: 10\n",
			want: []string{"min_blok_bytes"},
		},
		{
			name: "interactions without rewriting",
			env:  map[string]string{"GEMINI_PROXY_UPSTREAM_STATE_INTERACTIONS": "true", "GEMINI_PROXY_REWRITE_ENABLED": "false"},
			want: []string{"upstream_state.interactions", "rewrite.enabled"},
		},
		{
			name: "unknown env variable",
			env:  map[string]string{"GEMINI_PROXY_UPSTREM_URL": "http://x"},
			want: []string{"unknown environment variable GEMINI_PROXY_UPSTREM_URL"},
		},
		{
			name: "all invalid values listed at once",
			file: `
server:
  listen: "nope"
  base_path: "gemini/"
upstream:
  url: "ftp://x"
rewrite:
  similarity: 1.5
  unflatten: "always"
  tool_results: "always"
  min_block_bytes: 10
log:
  level: loud
  format: xml
cache:
  tenant_secret: short
`,
			want: []string{
				"server.listen", "server.base_path", "upstream.url", "rewrite.similarity",
				"rewrite.unflatten", "rewrite.tool_results", "rewrite.min_block_bytes", "log.level", "log.format",
				"cache.tenant_secret",
			},
		},
		{
			name: "redis backend without URL, bad prices",
			file: "cache:\n  backend: redis\nmetrics:\n  count_tokens_sample_rate: 2\n  prices:\n    - {model: m, input: -1}\n    - {model: m, checked: yesterday}\n",
			want: []string{"cache.redis_url", "cache.tenant_secret: must be set", "metrics.count_tokens_sample_rate", "prices must not be negative", `model "m" is listed twice`, "YYYY-MM-DD"},
		},
		{
			name: "redis timeouts out of range",
			file: "cache:\n  backend: redis\n  redis_url: redis://127.0.0.1:6379/0\n  tenant_secret: a-secret-of-at-least-16-bytes\n  redis_timeout: 0s\n  redis_budget: 2m\n",
			want: []string{"cache.redis_timeout: must be between 1ms and 10s", "cache.redis_budget: must be at least cache.redis_timeout and at most 1m"},
		},
		{
			name: "holdout fraction above 1",
			env:  map[string]string{"GEMINI_PROXY_METRICS_HOLDOUT_FRACTION": "1.5"},
			want: []string{"metrics.holdout_fraction: 1.5 must be in [0, 1]"},
		},
		{
			name: "bad size",
			env:  map[string]string{"GEMINI_PROXY_SERVER_MAX_BODY_BYTES": "12 parsecs"},
			want: []string{"max_body_bytes"},
		},
		{
			name: "rewrite limit above hard limit",
			file: "server:\n  max_body_bytes: 1MiB\nrewrite:\n  max_body_bytes: 2MiB\n",
			want: []string{"rewrite.max_body_bytes: must not exceed server.max_body_bytes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var args []string
			if tt.file != "" {
				args = []string{"--config", writeFile(t, tt.file)}
			}
			_, err := Load(flags(t, args...))
			if err == nil {
				t.Fatalf("Load() = nil error, want one mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load() error = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestWriteRedactsAndRoundTrips(t *testing.T) {
	clearEnv(t)
	c := Default()
	c.Upstream.APIKey = "AIzaSy-very-secret-key"
	c.Cache.TenantSecret = "0123456789abcdef-secret"
	c.Rewrite.Labels.Model = []string{"FRIDAY"}
	c.Cache.RedisURL = "redis://:hunter2-redis-password@127.0.0.1:6379/0"
	var b strings.Builder
	if err := c.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, secret := range []string{c.Upstream.APIKey, c.Cache.TenantSecret, "hunter2-redis-password"} {
		if strings.Contains(out, secret) {
			t.Errorf("Write() output contains secret %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, `api_key: "REDACTED"`) {
		t.Errorf("Write() output does not say the key is redacted:\n%s", out)
	}
	// Every key is printed, and the output (without secrets) loads back as the same config.
	for _, k := range Keys() {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(out, leaf+":") {
			t.Errorf("Write() output lacks key %s", k)
		}
	}
	noSecrets := strings.NewReplacer(`api_key: "REDACTED"`, `api_key: ""`, `tenant_secret: "REDACTED"`, `tenant_secret: ""`).Replace(out)
	got, err := Load(flags(t, "--config", writeFile(t, noSecrets)))
	if err != nil {
		t.Fatalf("Load(Write(c)) error: %v\n%s", err, noSecrets)
	}
	want := c
	want.Upstream.APIKey, want.Cache.TenantSecret = "", ""
	want.Cache.RedisURL = "redis://:xxxxx@127.0.0.1:6379/0"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load(Write(c)) (-want +got):\n%s", diff)
	}
}

func TestParseByteSize(t *testing.T) {
	good := map[string]ByteSize{"0": 0, "512": 512, "512B": 512, "4KiB": 4096, "1MiB": 1 << 20, "2 GiB": 2 << 30, "3KB": 3000, "5MB": 5e6}
	for in, want := range good {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "10 parsecs", "99999999999GiB"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestExampleConfig keeps examples/config.yaml complete and equal to the
// defaults, so the documented file never drifts from the code.
func TestExampleConfig(t *testing.T) {
	clearEnv(t)
	path := filepath.Join("..", "examples", "config.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(string(raw), "\n  "+leaf+":") && !strings.Contains(string(raw), "\n    "+leaf+":") {
			t.Errorf("%s does not list key %s", path, k)
		}
	}
	got, err := Load(flags(t, "--config", path))
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	if diff := cmp.Diff(Default(), got); diff != "" {
		t.Errorf("%s differs from the defaults (-want +got):\n%s", path, diff)
	}
}

// TestREADMEListsEveryKey keeps the README's configuration table complete.
func TestREADMEListsEveryKey(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !strings.Contains(string(raw), "| `"+k+"` |") {
			t.Errorf("README.md has no table row for key %s", k)
		}
	}
}

// TestLoadErrorsNameSourceAndValue checks that decode and validation
// problems are reported together, each naming its key, its value (secrets
// aside) and where it was set.
func TestLoadErrorsNameSourceAndValue(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, `server:
  listen: "nope"
cache:
  ttl: forever
rewrite:
  min_blok_bytes: 10
  similarity: 1.5
metrics:
  count_tokens_per_second: 0
`)
	t.Setenv("GEMINI_PROXY_CACHE_MAX_BYTES", "lots")
	t.Setenv("GEMINI_PROXY_UPSTREAM_API_KEY", "AIza secret")
	t.Setenv("GEMINI_PROXY_UPSTREM_URL", "http://x")
	_, err := Load(flags(t, "--config", file, "--admin-listen", "also-nope"))
	if err == nil {
		t.Fatal("Load() = nil error")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		"unknown key rewrite.min_blok_bytes (" + file + " line 6); did you mean rewrite.min_block_bytes?",
		"unknown environment variable GEMINI_PROXY_UPSTREM_URL; did you mean GEMINI_PROXY_UPSTREAM_URL?",
		`cache.max_bytes: "lots" is not a size (bytes, or a number with KiB, MiB, GiB, KB, MB or GB) (from GEMINI_PROXY_CACHE_MAX_BYTES)`,
		`cache.ttl: "forever" is not a duration (like 90s, 5m or 1h) (from ` + file + ` line 4)`,
		`server.listen: "nope" is not a host:port address (from ` + file + ` line 2)`,
		`admin.listen: "also-nope" is not a host:port address (from flag --admin-listen)`,
		"upstream.api_key: must not contain white space (from GEMINI_PROXY_UPSTREAM_API_KEY)",
		"rewrite.similarity: 1.5 must be in (0, 1] (from " + file + " line 7)",
		"metrics.count_tokens_per_second: must be positive, got 0 (from " + file + " line 9)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load() error lines (-want +got):\n%s", diff)
	}
	if strings.Contains(err.Error(), "AIza") {
		t.Errorf("Load() error shows the API key:\n%v", err)
	}
}

// TestLoadSectionGivenValue checks that a section set to a plain value is
// reported once, not once per key beneath it.
func TestLoadSectionGivenValue(t *testing.T) {
	clearEnv(t)
	file := writeFile(t, "log: debug\n")
	_, err := Load(flags(t, "--config", file))
	want := "log: must be a section of keys, not a value (" + file + " line 1)"
	if err == nil || err.Error() != want {
		t.Errorf("Load() error = %v, want %q", err, want)
	}
}

// TestLoadYAMLSyntaxLine checks that a YAML syntax error names the line
// where the document goes wrong; the YAML parser itself names an earlier
// line for errors found inside a block.
func TestLoadYAMLSyntaxLine(t *testing.T) {
	tests := []struct {
		name, file string
		want       string
	}{
		{"key outdented", "server:\n  listen: \"a:1\"\n cache: 1\nlog:\n  level: info\n", "line 3: did not find expected key"},
		{"list item in a mapping", "server:\n  listen: \"a:1\"\n  - b\nlog:\n  level: info\n", "line 3: did not find expected key"},
		{"unclosed flow list", "server:\n  listen: [a\nlog:\n  level: info\n", "line 2: did not find expected ',' or ']'"},
		{"unclosed quote", "server:\n  listen: \"a:1\"\n\nlog:\n  level: \"x\n\n", "line 5: found unexpected end of stream"},
		{"tab indentation", "server:\n\tlisten: x\n", "line 2: found character that cannot start any token"},
		{"duplicate key", "log:\n  level: info\n  level: debug\n", `line 3: mapping key "level" already defined at line 2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			file := writeFile(t, tt.file)
			_, err := Load(flags(t, "--config", file))
			want := "reading config file " + file + ": " + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("Load() error = %v, want %q", err, want)
			}
		})
	}
}

// TestLoadConfigFileFromEnv checks GEMINI_PROXY_CONFIG: it names the file
// when --config is not given, and --config wins over it.
func TestLoadConfigFileFromEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv(EnvConfig, writeFile(t, "admin:\n  listen: \"127.0.0.1:7101\"\n"))
	got, err := Load(flags(t))
	if err != nil || got.Admin.Listen != "127.0.0.1:7101" {
		t.Errorf("Load() with %s: admin.listen = %q, %v; want 127.0.0.1:7101", EnvConfig, got.Admin.Listen, err)
	}
	got, err = Load(flags(t, "--config", writeFile(t, "admin:\n  listen: \"127.0.0.1:7102\"\n")))
	if err != nil || got.Admin.Listen != "127.0.0.1:7102" {
		t.Errorf("Load(--config) with %s: admin.listen = %q, %v; want 127.0.0.1:7102 from --config", EnvConfig, got.Admin.Listen, err)
	}
}
