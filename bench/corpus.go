package bench

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gemini-proxy/gemini-proxy/internal/goenv"
)

// The repository holds only text its authors wrote: the third-party
// documents the sessions re-send (Go's sources, a module's source file,
// licence texts) are read at run time from where they are installed, and
// the bench prints their versions with its figures (Corpus.Origins), so
// that a run can be reproduced with the same Go release, module versions
// and Debian base-files.

// Origins of corpus documents.
const (
	fromGo     = "go"     // the Go installation (go env GOROOT)
	fromModule = "module" // the module cache, at the version this binary was built with
	fromSystem = "system" // the operating system (/usr/share/common-licenses)
)

// commonLicenses is where Debian installs the licence texts (base-files).
const commonLicenses = "/usr/share/common-licenses"

// corpusSource is where one document of the corpus comes from.
type corpusSource struct {
	// name is what the sessions call the document.
	name   string
	origin string
	// module is the module path (fromModule).
	module string
	// path is relative to GOROOT, to the module's directory, or absolute
	// (fromSystem); slash-separated.
	path string
}

// corpusSources lists every document the sessions and the overhead sizes
// use.
var corpusSources = []corpusSource{
	{name: "list.go", origin: fromGo, path: "src/container/list/list.go"},
	{name: "scan.go", origin: fromGo, path: "src/bufio/scan.go"},
	{name: "sort.go", origin: fromGo, path: "src/sort/sort.go"},
	{name: "reverseproxy.go", origin: fromGo, path: "src/net/http/httputil/reverseproxy.go"},
	{name: "gcc_libinit.c", origin: fromGo, path: "src/runtime/cgo/gcc_libinit.c"},
	{name: "memmove_amd64.s", origin: fromGo, path: "src/runtime/memmove_amd64.s"},
	{name: "wasm_exec.js", origin: fromGo, path: "lib/wasm/wasm_exec.js"},
	{name: "wasm_exec_node.js", origin: fromGo, path: "lib/wasm/wasm_exec_node.js"},
	{name: "HACKING.md", origin: fromGo, path: "src/runtime/HACKING.md"},
	{name: "video-001.png", origin: fromGo, path: "src/image/testdata/video-001.png"},
	{name: "path.go", origin: fromGo, path: "src/path/path.go"},
	{name: "builder.go", origin: fromGo, path: "src/strings/builder.go"},
	{name: "reader.go", origin: fromGo, path: "src/encoding/csv/reader.go"},
	{name: "utf8.go", origin: fromGo, path: "src/unicode/utf8/utf8.go"},
	{name: "once.go", origin: fromGo, path: "src/sync/once.go"},
	{name: "ring.go", origin: fromGo, path: "src/container/ring/ring.go"},
	{name: "runtime-gdb.py", origin: fromGo, path: "src/runtime/runtime-gdb.py"},
	{name: "chats.go", origin: fromModule, module: "google.golang.org/genai", path: "chats.go"},
	{name: "barchart.go", origin: fromModule, module: "gonum.org/v1/plot", path: "plotter/barchart.go"},
	{name: "Apache-2.0", origin: fromSystem, path: commonLicenses + "/Apache-2.0"},
	{name: "MPL-2.0", origin: fromSystem, path: commonLicenses + "/MPL-2.0"},
}

// Corpus is the documents the sessions are built from, as read on this
// machine.
type Corpus struct {
	// Origins says where the documents came from and in which version.
	Origins []Origin `json:"origins"`
	// SHA256 is the hash of every document in corpusSources order (each
	// name, a NUL, its length and its bytes): two runs with the same
	// SHA256 replayed the same documents.
	SHA256 string `json:"sha256"`
	docs   map[string]string
}

// Origin is one place corpus documents were read from.
type Origin struct {
	// Source names it: "Go installation", a module path, "Debian
	// base-files".
	Source  string `json:"source"`
	Version string `json:"version"`
	// Dir is the directory read; Files the paths read below it.
	Dir   string   `json:"dir"`
	Files []string `json:"files"`
}

// LoadCorpus reads the corpus (once per process). Its error names every
// document it could not read and where it looked.
func LoadCorpus() (*Corpus, error) { return loadCorpus() }

var loadCorpus = sync.OnceValues(func() (*Corpus, error) {
	env, err := goenv.Lookup()
	if err != nil {
		return nil, fmt.Errorf("bench: the corpus is read from the Go installation: %w", err)
	}
	return readCorpus(env, corpusSources, debianVersion)
})

// readCorpus reads sources; system reports the version of the system's
// documents.
func readCorpus(env goenv.Env, sources []corpusSource, system func() string) (*Corpus, error) {
	c := &Corpus{docs: make(map[string]string, len(sources))}
	origins := map[string]*Origin{}
	var order []string
	var errs []error
	h := sha256.New()
	for _, s := range sources {
		var file string
		o := Origin{}
		switch s.origin {
		case fromGo:
			file = env.File(s.path)
			o = Origin{Source: "Go installation", Version: env.Version, Dir: env.GOROOT}
		case fromModule:
			f, v, err := env.ModuleFile(s.module, s.path)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
				continue
			}
			file = f
			o = Origin{Source: s.module, Version: v, Dir: strings.TrimSuffix(f, filepath.FromSlash("/"+s.path))}
		case fromSystem:
			file = s.path
			o = Origin{Source: "Debian base-files", Version: system(), Dir: filepath.Dir(s.path)}
		}
		b, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			continue
		}
		c.docs[s.name] = string(b)
		fmt.Fprintf(h, "%s\x00%d\x00", s.name, len(b))
		h.Write(b)
		key := o.Source + " " + o.Dir
		if origins[key] == nil {
			origins[key] = &o
			order = append(order, key)
		}
		rel, err := filepath.Rel(origins[key].Dir, file)
		if err != nil {
			rel = file
		}
		origins[key].Files = append(origins[key].Files, filepath.ToSlash(rel))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("bench: reading the corpus documents (Go %s at %s, module cache %s, %s):\n%w", env.Version, env.GOROOT, env.GOMODCACHE, commonLicenses, errors.Join(errs...))
	}
	for _, k := range order {
		c.Origins = append(c.Origins, *origins[k])
	}
	c.SHA256 = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// Document returns the corpus document name. It panics when the corpus
// cannot be read: callers (the bench command, the tests) call LoadCorpus
// first and report its error.
func Document(name string) string {
	c, err := LoadCorpus()
	if err != nil {
		panic(err)
	}
	d, ok := c.docs[name]
	if !ok {
		panic(fmt.Sprintf("bench: %q is not a corpus document", name))
	}
	return d
}

// Names returns the names of the documents in c, sorted.
func (c *Corpus) Names() []string {
	names := make([]string, 0, len(c.docs))
	for n := range c.docs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// String describes where the documents came from, one origin per line.
func (c *Corpus) String() string {
	var b strings.Builder
	for _, o := range c.Origins {
		fmt.Fprintf(&b, "%s %s (%s): %s\n", o.Source, o.Version, o.Dir, strings.Join(o.Files, ", "))
	}
	fmt.Fprintf(&b, "corpus sha256:%s\n", c.SHA256)
	return b.String()
}

// debianVersion returns the version of Debian's base-files package, which
// installs /usr/share/common-licenses, from the dpkg database; "unknown"
// elsewhere.
func debianVersion() string {
	f, err := os.Open("/var/lib/dpkg/status")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			in = false
		case line == "Package: base-files":
			in = true
		case in && strings.HasPrefix(line, "Version: "):
			return strings.TrimPrefix(line, "Version: ")
		}
	}
	return "unknown"
}
