// Package goenv locates the Go installation and the module cache at run
// time, so that the bench, the demo and the tests can read third-party
// documents (Go's own sources, module READMEs) where they are installed
// instead of keeping copies in the repository.
//
// It asks the go command (`go env`), not runtime.GOROOT: a binary may run
// on a machine where the toolchain that built it is absent or elsewhere.
package goenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Env is where the Go installation and the module cache are.
type Env struct {
	// GOROOT is the root of the Go installation; Version its release
	// ("go1.26.8", the first line of GOROOT/VERSION).
	GOROOT, Version string
	// GOMODCACHE is the module cache; empty when unknown.
	GOMODCACHE string
}

// Lookup returns the Go environment: the GOROOT and GOMODCACHE environment
// variables when set, else what `go env` prints. It runs the go command at
// most once per process and fails when no Go installation is found.
func Lookup() (Env, error) { return lookup() }

var lookup = sync.OnceValues(func() (Env, error) {
	return find(os.Getenv, goEnv)
})

// find resolves the environment from getenv and, for what getenv leaves
// unset, run (the go command).
func find(getenv func(string) string, run func(vars ...string) ([]string, error)) (Env, error) {
	e := Env{GOROOT: getenv("GOROOT"), GOMODCACHE: getenv("GOMODCACHE")}
	if e.GOROOT == "" || e.GOMODCACHE == "" {
		vals, err := run("GOROOT", "GOMODCACHE")
		if err != nil {
			if e.GOROOT == "" {
				return Env{}, fmt.Errorf("locating the Go installation (set GOROOT or put go in PATH): %w", err)
			}
		} else {
			if e.GOROOT == "" {
				e.GOROOT = vals[0]
			}
			if e.GOMODCACHE == "" {
				e.GOMODCACHE = vals[1]
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(e.GOROOT, "VERSION"))
	if err != nil {
		return Env{}, fmt.Errorf("reading the Go version: %w", err)
	}
	e.Version, _, _ = strings.Cut(string(b), "\n")
	e.Version = strings.TrimSpace(e.Version)
	return e, nil
}

// goEnv runs `go env vars...` and returns one value per variable.
func goEnv(vars ...string) ([]string, error) {
	vals, err := goCmd(append([]string{"env"}, vars...)...)
	if err == nil && len(vals) != len(vars) {
		err = fmt.Errorf("go env printed %d lines for %d variables", len(vals), len(vars))
	}
	return vals, err
}

// goCmd runs the go command with args and returns the lines it printed.
func goCmd(args ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("go %s: %w: %s", args[0], err, msg)
		}
		return nil, fmt.Errorf("go %s: %w", args[0], err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, nil
}

// File returns the path of rel (slash-separated) inside the Go
// installation.
func (e Env) File(rel string) string {
	return filepath.Join(e.GOROOT, filepath.FromSlash(rel))
}

// ModuleFile returns the path of rel inside module path at the version this
// binary was built with (its build information), in the module cache, and
// that version.
func (e Env) ModuleFile(path, rel string) (file, version string, err error) {
	if e.GOMODCACHE == "" {
		return "", "", errors.New("the module cache is unknown (set GOMODCACHE or put go in PATH)")
	}
	version, err = ModuleVersion(path)
	if err != nil {
		return "", "", err
	}
	dir := escape(path) + "@" + escape(version)
	return filepath.Join(e.GOMODCACHE, filepath.FromSlash(dir), filepath.FromSlash(rel)), version, nil
}

// ModuleVersion returns the version of module path this binary was built
// with. Test binaries carry no dependency versions: then it asks the go
// command for the version the current module requires (`go list -m`).
func ModuleVersion(path string) (string, error) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				if m.Replace != nil {
					m = m.Replace
				}
				return m.Version, nil
			}
		}
	}
	v, err := goCmd("list", "-m", "-f", "{{.Version}}", path)
	if err != nil || len(v) != 1 || v[0] == "" {
		return "", fmt.Errorf("module %s is not a dependency of this binary (go list: %v)", path, err)
	}
	return v[0], nil
}

// escape applies the module cache's case encoding: an upper-case letter
// becomes '!' and its lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
