// Command gemini-proxy is a drop-in reverse proxy for the Gemini API that
// rewrites naive generateContent requests into deduplicated multi-turn
// contents. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "gemini-proxy:", err)
		os.Exit(1)
	}
}
