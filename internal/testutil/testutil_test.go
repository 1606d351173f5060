package testutil

import (
	"bytes"
	"compress/gzip"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestListening feeds Listening the two "listening" lines as
// cmd/gemini-proxy's server.go logs them, in both log formats, after other
// lines and in either order.
func TestListening(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		for _, adminFirst := range []bool{false, true} {
			var buf bytes.Buffer
			h := slog.Handler(slog.NewTextHandler(&buf, nil))
			if format == "json" {
				h = slog.NewJSONHandler(&buf, nil)
			}
			logger := slog.New(h)
			logger.Info("starting", "upstream", "http://127.0.0.1:9")
			lines := [][2]string{{"proxy", "127.0.0.1:4100"}, {"admin", "[::1]:4200"}}
			if adminFirst {
				lines[0], lines[1] = lines[1], lines[0]
			}
			for _, l := range lines {
				logger.Info("listening", "listener", l[0], "addr", l[1])
			}
			logger.Info("request", "upstream_status", 200)
			select {
			case got := <-Listening(&buf):
				if want := [2]string{"127.0.0.1:4100", "[::1]:4200"}; got != want {
					t.Errorf("%s, admin first %v: Listening = %q, want %q", format, adminFirst, got, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s, admin first %v: Listening sent nothing for:\n%s", format, adminFirst, buf.String())
			}
		}
	}
}

// TestListeningIncomplete: without the admin line nothing is sent, and
// the reader is still read to its end.
func TestListeningIncomplete(t *testing.T) {
	pr, pw := io.Pipe()
	addrs := Listening(pr)
	written := make(chan struct{})
	go func() {
		defer close(written)
		io.WriteString(pw, "level=INFO msg=listening listener=proxy addr=127.0.0.1:1\n")
		io.WriteString(pw, strings.Repeat("x", 1<<16)+"\n") // a pipe write returns once read
		pw.Close()
	}()
	select {
	case <-written:
	case <-time.After(5 * time.Second):
		t.Fatal("Listening stopped reading the log")
	}
	select {
	case got := <-addrs:
		t.Errorf("Listening = %q without an admin line", got)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestGzip(t *testing.T) {
	in := []byte(strings.Repeat("gemini-proxy ", 100))
	zr, err := gzip.NewReader(bytes.NewReader(Gzip(in)))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(out, in) {
		t.Errorf("gunzip(Gzip(in)) = %q, %v; want in", out, err)
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := NewClock(start)
	c.Advance(90 * time.Second)
	if got, want := c.Now(), start.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
}

// TestImportedOnlyByTests fails when a non-test file of the module imports
// this package: it is test support, not product code.
func TestImportedOnlyByTests(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	const self = "github.com/gemini-proxy/gemini-proxy/internal/testutil"
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == self && f.Name.Name != "testutil" {
				t.Errorf("%s imports %s; only tests may", path, self)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("read only %d Go files below %s; is the walk rooted right?", files, root)
	}
}
