// Package cachetest starts a real redis-server for tests of the cache's
// shared mode.
package cachetest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Redis is a redis-server process started for one test.
type Redis struct {
	// Addr is its loopback host:port.
	Addr string
	cmd  *exec.Cmd
	t    testing.TB
}

// URL returns the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// StartRedis starts redis-server on a free loopback port, without
// persistence, and stops it when the test ends. Without a redis-server
// binary the test is skipped, except under CI (CI=true), where it fails:
// .ci/run installs the Debian package.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	port := FreePort(t)
	return startServer(t, port, nil, "--port", strconv.Itoa(port))
}

// redisBin returns the path of redis-server, or skips (fails under CI).
func redisBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found under CI (.ci/run installs the Debian package): %v", err)
		}
		t.Skip("redis-server not installed (apt-get install redis-server)")
	}
	return bin
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// startServer runs redis-server with args (after the common ones) and
// waits until ready reports nil, or, when ready is nil, until port answers
// PING in plain text.
func startServer(t testing.TB, port int, ready func() error, args ...string) *Redis {
	t.Helper()
	bin := redisBin(t)
	args = append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--loglevel", "warning"}, args...)
	return startCmd(t, exec.Command(bin, args...), port, ready)
}

// startCmd starts cmd, stops it when the test ends, and waits for it to
// be ready (as startServer).
func startCmd(t testing.TB, cmd *exec.Cmd, port int, ready func() error) *Redis {
	t.Helper()
	// Its output (start banner, kernel warnings) is noise in test logs.
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, t: t}
	t.Cleanup(r.Stop)
	if ready == nil {
		ready = r.ping
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := ready(); err == nil {
			return r
		} else if time.Now().After(deadline) {
			r.Stop()
			t.Fatalf("redis-server on port %d not ready: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Redis) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Stop kills the server and waits for it to exit. It may be called more
// than once.
func (r *Redis) Stop() {
	if r.cmd.Process == nil || r.cmd.ProcessState != nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
}
