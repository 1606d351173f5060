package main

import (
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/internal/goenv"
)

func TestDemoDocument(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "src", "container", "list")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "list.go"), []byte("package list\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found := func() (goenv.Env, error) { return goenv.Env{GOROOT: root, Version: "go1.99"}, nil }
	file, src := demoDocument(found)
	if file != "package list\n" || !strings.Contains(src, "go1.99 at "+root) {
		t.Errorf("demoDocument(installed) = %q, %q", file, src)
	}
	for name, lookup := range map[string]func() (goenv.Env, error){
		"no Go":     func() (goenv.Env, error) { return goenv.Env{}, errors.New("no go command") },
		"no source": func() (goenv.Env, error) { return goenv.Env{GOROOT: t.TempDir()}, nil },
	} {
		file, src := demoDocument(lookup)
		if file != demoFallbackList || !strings.Contains(src, "written for the demo") {
			t.Errorf("demoDocument(%s) = %.40q, %q, want the fallback", name, file, src)
		}
	}
}

// The fallback is a Go package with what the demo's turns rely on: the
// package comment the hand edit rewords and the methods the questions name.
func TestDemoFallbackList(t *testing.T) {
	if _, err := parser.ParseFile(token.NewFileSet(), "list.go", demoFallbackList, parser.ParseComments); err != nil {
		t.Errorf("fallback list.go does not parse: %v", err)
	}
	for _, want := range []string{"// Package list implements a doubly linked list.\n", "func (l *List) PushBackList(", "func (l *List) Init() *List"} {
		if !strings.Contains(demoFallbackList, want) {
			t.Errorf("fallback list.go lacks %q", want)
		}
	}
}

// Where no Go installation is found, the demo runs on the fallback file
// and says so.
func TestDemoWithoutGo(t *testing.T) {
	clearEnv(t)
	orig := demoSource
	t.Cleanup(func() { demoSource = orig })
	demoSource = func() (string, string) {
		return demoDocument(func() (goenv.Env, error) { return goenv.Env{}, errors.New("no go command") })
	}
	out, errOut, err := runCmd(t, t.Context(), "demo")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{"written for the demo", "answers were identical", "total"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
