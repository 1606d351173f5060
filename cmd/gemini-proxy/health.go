package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/gemini-proxy/gemini-proxy/config"
)

func healthFlags(fs *pflag.FlagSet) {
	fs.String("url", "", "health endpoint to check (default: /healthz on the configuration's admin.listen)")
	fs.String("config", "", "path to a YAML configuration file (default: $"+config.EnvConfig+"), as for serve")
	fs.String("admin-listen", config.Default().Admin.Listen, "admin listen address (admin.listen), as for serve")
	fs.Duration("timeout", 3*time.Second, "time-out of the check")
}

// health checks a health endpoint and fails unless it answers 200. It lets a
// container image without a shell or curl check itself (Dockerfile
// HEALTHCHECK). Without --url it checks /healthz on admin.listen, read from
// the same file, GEMINI_PROXY_* variables and flags as serve reads.
func health(ctx context.Context, fs *pflag.FlagSet, stdout, _ io.Writer) error {
	u, _ := fs.GetString("url")
	if u == "" {
		c, err := config.Load(fs)
		if err != nil {
			return fmt.Errorf("health check: %w", err)
		}
		if u, err = healthURL(c.Admin.Listen); err != nil {
			return fmt.Errorf("health check: %w", err)
		}
	}
	timeout, _ := fs.GetDuration("timeout")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer res.Body.Close()
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("health check: %s answered %s", u, res.Status)
	}
	_, err = fmt.Fprintln(stdout, "ok")
	return err
}

// healthURL returns the /healthz URL of an admin listener bound to addr,
// reached over loopback when addr binds every interface.
func healthURL(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("admin.listen is empty: there is no admin listener to check (pass --url)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		return "", fmt.Errorf("admin.listen %q has no fixed port to check (pass --url)", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
