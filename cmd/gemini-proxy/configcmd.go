package main

import (
	"context"
	"io"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/spf13/pflag"
)

func configFlags(fs *pflag.FlagSet) { config.BindFlags(fs) }

func printConfig(_ context.Context, fs *pflag.FlagSet, stdout, _ io.Writer) error {
	c, err := config.Load(fs)
	if err != nil {
		return err
	}
	return c.Write(stdout)
}
