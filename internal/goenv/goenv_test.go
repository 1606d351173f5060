package goenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "VERSION"), []byte("go1.99.1\ntime 2026-01-01T00:00:00Z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	noGo := func(...string) ([]string, error) { return nil, errors.New("no go command") }
	goCmd := func(vars ...string) ([]string, error) { return []string{root, "/cache"}, nil }
	for _, c := range []struct {
		name    string
		getenv  func(string) string
		run     func(...string) ([]string, error)
		want    Env
		wantErr string
	}{
		{"environment", env(map[string]string{"GOROOT": root, "GOMODCACHE": "/m"}), noGo, Env{GOROOT: root, Version: "go1.99.1", GOMODCACHE: "/m"}, ""},
		{"go env", env(nil), goCmd, Env{GOROOT: root, Version: "go1.99.1", GOMODCACHE: "/cache"}, ""},
		{"GOROOT only, no go command", env(map[string]string{"GOROOT": root}), noGo, Env{GOROOT: root, Version: "go1.99.1"}, ""},
		{"nothing", env(nil), noGo, Env{}, "set GOROOT or put go in PATH"},
		{"no VERSION", env(map[string]string{"GOROOT": t.TempDir(), "GOMODCACHE": "/m"}), noGo, Env{}, "reading the Go version"},
	} {
		got, err := find(c.getenv, c.run)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: find = %+v, %v, want an error containing %q", c.name, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: find = %+v, %v, want %+v", c.name, got, err, c.want)
		}
	}
}

// Lookup finds the installation that runs the test, and ModuleFile a
// dependency's file in the module cache.
func TestLookupAndModuleFile(t *testing.T) {
	e, err := Lookup()
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if _, err := os.Stat(e.File("src/bufio/scan.go")); err != nil {
		t.Errorf("GOROOT %s: %v", e.GOROOT, err)
	}
	if !strings.HasPrefix(e.Version, "go1.") {
		t.Errorf("Version = %q", e.Version)
	}
	f, v, err := e.ModuleFile("google.golang.org/genai", "README.md")
	if err != nil {
		t.Fatalf("ModuleFile: %v", err)
	}
	if !strings.HasPrefix(v, "v1.") || !strings.Contains(f, "genai@"+v) {
		t.Errorf("ModuleFile = %s, %s", f, v)
	}
	if _, err := os.Stat(f); err != nil {
		t.Errorf("module file: %v", err)
	}
	if _, _, err := e.ModuleFile("example.com/not/a/dependency", "x"); err == nil {
		t.Errorf("ModuleFile(not a dependency) succeeded")
	}
}

func TestEscape(t *testing.T) {
	if got := escape("github.com/BurntSushi/toml"); got != "github.com/!burnt!sushi/toml" {
		t.Errorf("escape = %q", got)
	}
}
