package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/pflag"
)

func healthFlags(fs *pflag.FlagSet) {
	fs.String("url", "http://127.0.0.1:9090/healthz", "health endpoint to check")
	fs.Duration("timeout", 3*time.Second, "time-out of the check")
}

// health checks a health endpoint and fails unless it answers 200. It lets a
// container image without a shell or curl check itself (Dockerfile
// HEALTHCHECK).
func health(ctx context.Context, fs *pflag.FlagSet, stdout, _ io.Writer) error {
	u, _ := fs.GetString("url")
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
