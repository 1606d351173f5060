package stack

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gemini-proxy/gemini-proxy/config"
)

var examplesDir = filepath.Join("..", "..", "examples")

// yamlDocs decodes every document of a YAML file into generic maps.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
}

// dig walks nested maps and lists: keys are map keys or list indices.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func port(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("%q: %v", hostport, err)
	}
	return p
}

func TestDockerCompose(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(examplesDir, "docker-compose.yml"))
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	services, _ := docs[0]["services"].(map[string]any)
	for _, s := range []string{"proxy", "emulator", "prometheus", "grafana"} {
		if services[s] == nil {
			t.Errorf("service %s missing", s)
		}
	}
	admin, _ := dig(services, "proxy", "environment", "GEMINI_PROXY_ADMIN_LISTEN").(string)
	up, _ := dig(services, "proxy", "environment", "GEMINI_PROXY_UPSTREAM_URL").(string)
	if !strings.HasPrefix(up, "http://emulator:") {
		t.Errorf("proxy upstream %q is not the emulator service", up)
	}
	if emu := dig(services, "emulator", "command"); !strings.Contains(strings.Join(toStrings(emu), " "), "0.0.0.0:"+strings.TrimPrefix(up, "http://emulator:")) {
		t.Errorf("emulator command %v does not listen on the port the proxy uses (%s)", emu, up)
	}
	// Prometheus scrapes the proxy's admin port.
	prom := yamlDocs(t, promConfigFile)[0]
	target, _ := dig(prom, "scrape_configs", "0", "static_configs", "0", "targets", "0").(string)
	if target != "proxy:"+port(t, admin) {
		t.Errorf("prometheus target %q, want proxy:%s (GEMINI_PROXY_ADMIN_LISTEN)", target, port(t, admin))
	}
	// Every bind mount exists.
	for _, s := range []string{"prometheus", "grafana"} {
		for _, v := range toStrings(dig(services, s, "volumes")) {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, "./") {
				continue // a named volume
			}
			if _, err := os.Stat(filepath.Join(examplesDir, src)); err != nil {
				t.Errorf("service %s mounts %s: %v", s, src, err)
			}
		}
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// TestKubernetes checks the manifests against each other and the config:
// the ConfigMap is a valid configuration, and the probes, the scrape
// annotations, the Service and the ServiceMonitor all use its admin port.
func TestKubernetes(t *testing.T) {
	dir := filepath.Join(examplesDir, "kubernetes")
	byKind := map[string]map[string]any{}
	for _, f := range []string{"configmap.yaml", "deployment.yaml", "service.yaml", "servicemonitor.yaml"} {
		for _, d := range yamlDocs(t, filepath.Join(dir, f)) {
			byKind[d["kind"].(string)] = d
		}
	}
	for _, r := range toStrings(dig(yamlDocs(t, filepath.Join(dir, "kustomization.yaml"))[0], "resources")) {
		if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}

	cfgText, _ := dig(byKind["ConfigMap"], "data", "config.yaml").(string)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	config.BindFlags(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(fs)
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml does not load: %v", err)
	}
	adminPort := port(t, c.Admin.Listen)

	pod := dig(byKind["Deployment"], "spec", "template")
	if got := dig(pod, "metadata", "annotations", "prometheus.io/port"); got != adminPort {
		t.Errorf("prometheus.io/port = %v, want the admin port %s", got, adminPort)
	}
	if got := dig(pod, "metadata", "annotations", "prometheus.io/scrape"); got != "true" {
		t.Errorf("prometheus.io/scrape = %v", got)
	}
	sidecar := dig(pod, "spec", "initContainers", "0")
	if dig(sidecar, "name") != "gemini-proxy" || dig(sidecar, "restartPolicy") != "Always" {
		t.Errorf("initContainers[0] is not the gemini-proxy native sidecar: %v", sidecar)
	}
	if got := strconv.Itoa(toInt(dig(sidecar, "ports", "0", "containerPort"))); got != adminPort || dig(sidecar, "ports", "0", "name") != "metrics" {
		t.Errorf("sidecar port %v, want metrics:%s", dig(sidecar, "ports", "0"), adminPort)
	}
	for probe, want := range map[string]string{"startupProbe": "/readyz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if dig(sidecar, probe, "httpGet", "path") != want || dig(sidecar, probe, "httpGet", "port") != "metrics" {
			t.Errorf("%s = %v, want GET %s on the metrics port", probe, dig(sidecar, probe), want)
		}
	}
	if dig(sidecar, "resources", "limits", "memory") == nil || dig(sidecar, "resources", "requests", "cpu") == nil {
		t.Errorf("sidecar resources incomplete: %v", dig(sidecar, "resources"))
	}
	app := dig(pod, "spec", "containers", "0")
	baseURL := ""
	for _, e := range dig(app, "env").([]any) {
		if dig(e, "name") == "GOOGLE_GEMINI_BASE_URL" {
			baseURL, _ = dig(e, "value").(string)
		}
	}
	if baseURL != "http://"+c.Server.Listen {
		t.Errorf("app GOOGLE_GEMINI_BASE_URL = %q, want http://%s (server.listen)", baseURL, c.Server.Listen)
	}

	svc := byKind["Service"]
	if dig(svc, "spec", "ports", "0", "name") != "metrics" || strconv.Itoa(toInt(dig(svc, "spec", "ports", "0", "port"))) != adminPort {
		t.Errorf("service port %v, want metrics:%s", dig(svc, "spec", "ports", "0"), adminPort)
	}
	sm := byKind["ServiceMonitor"]
	for k, v := range dig(sm, "spec", "selector", "matchLabels").(map[string]any) {
		if dig(svc, "metadata", "labels", k) != v {
			t.Errorf("ServiceMonitor selects %s=%v, the Service has %v", k, v, dig(svc, "metadata", "labels", k))
		}
	}
	if dig(sm, "spec", "endpoints", "0", "port") != "metrics" || dig(sm, "spec", "endpoints", "0", "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %v", dig(sm, "spec", "endpoints", "0"))
	}
}

func toInt(v any) int {
	i, _ := v.(int)
	return i
}
