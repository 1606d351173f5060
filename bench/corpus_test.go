package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/goenv"
)

// needCorpus skips t when this machine lacks a document of the corpus (the
// Go installation, the module cache or Debian's common-licenses).
func needCorpus(t *testing.T) {
	t.Helper()
	if _, err := LoadCorpus(); err != nil {
		t.Skipf("the bench corpus is not readable here: %v", err)
	}
}

func TestLoadCorpus(t *testing.T) {
	needCorpus(t)
	c, _ := LoadCorpus()
	if got, want := len(c.Names()), len(corpusSources); got != want {
		t.Errorf("corpus has %d documents, want %d", got, want)
	}
	env, err := goenv.Lookup()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(env.GOROOT, "src", "bufio", "scan.go"))
	if err != nil {
		t.Fatal(err)
	}
	if Document("scan.go") != string(want) {
		t.Errorf("Document(scan.go) is not GOROOT/src/bufio/scan.go")
	}
	s := c.String()
	for _, w := range []string{"Go installation " + env.Version, "google.golang.org/genai v", "gonum.org/v1/plot v", "Debian base-files", "corpus sha256:" + c.SHA256} {
		if !strings.Contains(s, w) {
			t.Errorf("corpus description lacks %q:\n%s", w, s)
		}
	}
	if len(c.SHA256) != 64 {
		t.Errorf("SHA256 = %q, want 64 hex digits", c.SHA256)
	}
}

// A missing document is an error that names it and the place looked at.
func TestReadCorpusMissing(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "src", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "src", "a", "a.go"), []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := goenv.Env{GOROOT: root, Version: "go1.99"}
	ok := []corpusSource{{name: "a.go", origin: fromGo, path: "src/a/a.go"}}
	c, err := readCorpus(env, ok, func() string { return "x" })
	if err != nil || c.docs["a.go"] != "package a\n" {
		t.Fatalf("readCorpus(present) = %v, %v", c, err)
	}
	if len(c.Origins) != 1 || c.Origins[0].Version != "go1.99" || c.Origins[0].Files[0] != "src/a/a.go" {
		t.Errorf("origins = %+v", c.Origins)
	}
	missing := append(ok, corpusSource{name: "b.go", origin: fromGo, path: "src/b/b.go"}, corpusSource{name: "m", origin: fromModule, module: "example.com/m", path: "README.md"})
	_, err = readCorpus(env, missing, func() string { return "x" })
	if err == nil || !strings.Contains(err.Error(), "b.go") || !strings.Contains(err.Error(), "module cache is unknown") || !strings.Contains(err.Error(), root) {
		t.Errorf("readCorpus(missing) error = %v, want one naming b.go, the module cache and %s", err, root)
	}
}
