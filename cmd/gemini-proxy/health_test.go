package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHealthReadsAdminListen checks that health without --url finds the
// admin listener where serve would put it: from a flag, the environment, or
// the file named by --config or GEMINI_PROXY_CONFIG.
func TestHealthReadsAdminListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("admin:\n  listen: \"127.0.0.1:"+port+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{name: "flag", args: []string{"--admin-listen", "127.0.0.1:" + port}},
		{name: "env, every interface", env: map[string]string{"GEMINI_PROXY_ADMIN_LISTEN": ":" + port}},
		{name: "config flag", args: []string{"--config", file}},
		{name: "GEMINI_PROXY_CONFIG", env: map[string]string{"GEMINI_PROXY_CONFIG": file}},
		{name: "default port is not ours", args: []string{"--admin-listen", "127.0.0.1:1"}, wantErr: "connection refused"},
		{name: "admin disabled", env: map[string]string{"GEMINI_PROXY_ADMIN_LISTEN": ""}, args: []string{"--admin-listen", ""}, wantErr: "admin.listen is empty"},
		{name: "bad config", env: map[string]string{"GEMINI_PROXY_CACHE_TTL": "forever"}, wantErr: `cache.ttl: "forever" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			out, _, err := runCmd(t, t.Context(), append([]string{"health"}, tt.args...)...)
			if tt.wantErr == "" {
				if err != nil || out != "ok\n" {
					t.Errorf("health %q = %q, %v; want ok", tt.args, out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("health %q error = %v, want it to mention %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

func TestHealthURL(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"127.0.0.1:9090", "http://127.0.0.1:9090/healthz"},
		{":9090", "http://127.0.0.1:9090/healthz"},
		{"0.0.0.0:9191", "http://127.0.0.1:9191/healthz"},
		{"[::]:9090", "http://[::1]:9090/healthz"},
		{"[::1]:9090", "http://[::1]:9090/healthz"},
		{"admin.internal:9090", "http://admin.internal:9090/healthz"},
		{"", ""},
		{"127.0.0.1:0", ""},
		{"nope", ""},
	}
	for _, tt := range tests {
		got, err := healthURL(tt.addr)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("healthURL(%q) = %q, %v; want %q", tt.addr, got, err, tt.want)
		}
	}
}

// TestDockerfileHealthcheckReadsConfig checks that the image's HEALTHCHECK
// leaves the address to the configuration instead of hard-coding one.
func TestDockerfileHealthcheckReadsConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)HEALTHCHECK [^\n]*\\\n\s*CMD (\[[^\]]*\])`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Dockerfile has no HEALTHCHECK ... CMD [...]")
	}
	if got, want := string(m[1]), `["/gemini-proxy", "health"]`; got != want {
		t.Errorf("Dockerfile HEALTHCHECK CMD = %s, want %s", got, want)
	}
}
