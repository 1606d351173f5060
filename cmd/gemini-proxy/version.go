package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// buildVersion is set at link time: -ldflags "-X main.buildVersion=v1.2.3".
var buildVersion string

// version returns the link-time version, else the module version, else "dev".
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func printVersion(_ context.Context, _ *pflag.FlagSet, stdout, _ io.Writer) error {
	_, err := fmt.Fprintf(stdout, "gemini-proxy %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
