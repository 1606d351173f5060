package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/spf13/pflag"
)

func emulatorFlags(fs *pflag.FlagSet) {
	fs.String("listen", "127.0.0.1:9000", "emulator listen address")
	fs.StringSlice("keys", nil, "the only valid API keys (default: any non-empty key)")
	fs.Bool("lenient", false, "accept unknown request fields (the real API rejects them)")
	fs.Int("implicit-cache-min-tokens", 0, "smallest repeated prefix reported as implicitly cached, for every model (default: per model, e.g. 512 on gemini-2.5-flash, 4096 on gemini-3.x)")
	fs.String("log-level", "info", "debug logs one line per request")
	fs.Int("stream-chunk-bytes", 0, "answer text per streamed chunk (default 64)")
}

// runEmulator runs the local Gemini API emulator, for the demo, the examples
// and load tests: no API key or network needed.
func runEmulator(ctx context.Context, fs *pflag.FlagSet, _, stderr io.Writer) error {
	addr, _ := fs.GetString("listen")
	keys, _ := fs.GetStringSlice("keys")
	lenient, _ := fs.GetBool("lenient")
	minTokens, _ := fs.GetInt("implicit-cache-min-tokens")
	level, _ := fs.GetString("log-level")
	chunk, _ := fs.GetInt("stream-chunk-bytes")
	logger := newLogger(config.Log{Level: level, Format: "text"}, stderr)
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return err
	}
	h := emulator.New(emulator.Options{
		ValidKeys:              keys,
		Lenient:                lenient,
		ImplicitCacheMinTokens: minTokens,
		StreamChunkBytes:       chunk,
		Logger:                 logger,
	})
	l, err := listen("emulator", addr, h, config.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}, logger)
	if err != nil {
		return err
	}
	var ready atomic.Bool
	return serveUntil(ctx, []*listener{l}, 0, 5*time.Second, &ready, logger)
}
