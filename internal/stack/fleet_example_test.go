package stack

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spf13/pflag"

	"github.com/gemini-proxy/gemini-proxy/config"
)

// TestKubernetesFleet checks examples/kubernetes/fleet.yaml: its
// ConfigMap, with the tenant secret and Redis URL the Deployment takes
// from the Secret in the environment, is a valid redis-backed
// configuration with context caching on; the Deployment runs several
// replicas that read that file, take both settings from the Secret, and
// probe the admin port; the Service routes the proxy and admin ports.
func TestKubernetesFleet(t *testing.T) {
	byKind := map[string]map[string]any{}
	for _, d := range yamlDocs(t, filepath.Join(examplesDir, "kubernetes", "fleet.yaml")) {
		byKind[d["kind"].(string)] = d
	}
	pod := dig(byKind["Deployment"], "spec", "template", "spec")
	if n := toInt(dig(byKind["Deployment"], "spec", "replicas")); n < 2 {
		t.Errorf("replicas = %d, want a fleet", n)
	}
	ctr := dig(pod, "containers", "0")
	env := map[string]any{}
	for _, e := range dig(ctr, "env").([]any) {
		env[dig(e, "name").(string)] = e
	}
	for _, name := range []string{"GEMINI_PROXY_CACHE_TENANT_SECRET", "GEMINI_PROXY_CACHE_REDIS_URL"} {
		if dig(env[name], "valueFrom", "secretKeyRef", "name") != "gemini-proxy-fleet" {
			t.Errorf("%s does not come from the Secret: %v", name, env[name])
		}
	}
	cfgPath, _ := dig(env["GEMINI_PROXY_CONFIG"], "value").(string)
	mounted := false
	for _, m := range dig(ctr, "volumeMounts").([]any) {
		if dig(m, "name") == "config" && filepath.Join(dig(m, "mountPath").(string), "config.yaml") == cfgPath {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("GEMINI_PROXY_CONFIG %q is not the mounted ConfigMap", cfgPath)
	}

	cfgText, _ := dig(byKind["ConfigMap"], "data", "config.yaml").(string)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GEMINI_PROXY_CACHE_TENANT_SECRET", "a-secret-of-at-least-16-bytes")
	t.Setenv("GEMINI_PROXY_CACHE_REDIS_URL", "rediss://proxy:pw@redis-0.redis:6379?addr=redis-1.redis:6379&addr=redis-2.redis:6379")
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	config.BindFlags(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(fs)
	if err != nil {
		t.Fatalf("the fleet ConfigMap does not load with the Secret's values: %v", err)
	}
	if c.Cache.Backend != "redis" || !c.UpstreamState.ContextCache {
		t.Errorf("backend %q, context cache %v; want redis and on", c.Cache.Backend, c.UpstreamState.ContextCache)
	}
	adminPort, proxyPort := port(t, c.Admin.Listen), port(t, c.Server.Listen)
	ports := map[string]string{}
	for _, p := range dig(ctr, "ports").([]any) {
		ports[dig(p, "name").(string)] = strconv.Itoa(toInt(dig(p, "containerPort")))
	}
	if ports["metrics"] != adminPort || ports["proxy"] != proxyPort {
		t.Errorf("container ports %v, want proxy %s and metrics %s", ports, proxyPort, adminPort)
	}
	if dig(ctr, "readinessProbe", "httpGet", "port") != "metrics" || dig(ctr, "readinessProbe", "httpGet", "path") != "/readyz" {
		t.Errorf("readinessProbe = %v", dig(ctr, "readinessProbe"))
	}
	for _, p := range dig(byKind["Service"], "spec", "ports").([]any) {
		if _, ok := ports[dig(p, "targetPort").(string)]; !ok {
			t.Errorf("Service port %v targets no container port", p)
		}
	}
}
