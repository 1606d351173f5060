package testutil

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// BuildProxy builds the gemini-proxy command (./cmd/gemini-proxy of the
// module the test runs in) into the file out, with the race detector when
// race is true. Its error carries the compiler's output.
func BuildProxy(ctx context.Context, out string, race bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("finding go: %w", err)
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goBin, append(args, "./cmd/gemini-proxy")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
	return nil
}

// moduleRoot returns the nearest directory at or above the working
// directory (a test's package directory) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// listeningRE matches the "listening" log line of gemini-proxy serve in
// the text and the JSON log formats.
var listeningRE = regexp.MustCompile(`listener"?[=:]"?(proxy|admin)"?[ ,]"?addr"?[=:]"?([0-9.:\[\]]+)`)

// Listening reads the log of a `gemini-proxy serve` process from r and,
// once both of its "listening" lines have passed, sends the proxy and the
// admin address, in that order, on the returned channel. It reads r to its
// end, so that the process never blocks on a full pipe.
func Listening(r io.Reader) <-chan [2]string {
	addrs := make(chan [2]string, 1)
	go func() {
		var p, a string
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				if m[1] == "proxy" {
					p = m[2]
				} else {
					a = m[2]
				}
				if p != "" && a != "" {
					addrs <- [2]string{p, a}
					break
				}
			}
		}
		io.Copy(io.Discard, r)
	}()
	return addrs
}

// Stop sends sig to p and waits up to wait for exited to close (the caller
// closes it once p's Wait returned); if it does not, Stop kills p, waits
// for exited and reports false.
func Stop(p *os.Process, exited <-chan struct{}, sig os.Signal, wait time.Duration) bool {
	p.Signal(sig)
	select {
	case <-exited:
		return true
	case <-time.After(wait):
		p.Kill()
		<-exited
		return false
	}
}
