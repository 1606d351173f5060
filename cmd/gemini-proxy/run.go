package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gemini-proxy/gemini-proxy/internal/suggest"
)

// errUsage reports a command-line mistake whose explanation was already
// printed.
var errUsage = errors.New("usage")

// command is one subcommand of gemini-proxy.
type command struct {
	name, summary string
	// flags registers the command's flags.
	flags func(fs *pflag.FlagSet)
	// run executes the command after its flags were parsed.
	run func(ctx context.Context, fs *pflag.FlagSet, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the proxy", serveFlags, serve},
		{"bench", "measure savings on a session corpus and the proxy's latency, CPU and memory; replay recorded requests", benchFlags, benchCommand},
		{"demo", "run emulator and proxy in-process, drive a naive conversation through both, print the savings", demoFlags, demo},
		{"emulator", "run the local Gemini API emulator (no API key or network needed)", emulatorFlags, runEmulator},
		{"config", "print the effective configuration, secrets redacted", configFlags, printConfig},
		{"version", "print the version", func(*pflag.FlagSet) {}, printVersion},
		{"health", "check a health endpoint and exit non-zero unless it answers 200 (for container health checks)", healthFlags, health},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "gemini-proxy %s: a rewriting reverse proxy for the Gemini API\n\nUsage:\n  gemini-proxy <command> [flags]\n\nCommands:\n", version())
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'gemini-proxy <command> --help' for the flags of a command.\n")
}

// run parses args and executes the named command. It returns nil when ctx
// is cancelled during a clean shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
		fs.SetOutput(stderr)
		c.flags(fs)
		// pflag calls Usage only for --help and -h (ContinueOnError): help
		// that was asked for goes to stdout, so that it pages.
		fs.Usage = func() {
			fmt.Fprintf(stdout, "Usage: gemini-proxy %s [flags]\n\n%s.\n\nFlags:\n%s", c.name, capitalize(c.summary), fs.FlagUsages())
		}
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, pflag.ErrHelp) {
				return nil
			}
			fmt.Fprintf(stderr, "gemini-proxy %s: %v%s\nRun 'gemini-proxy %s --help' for its flags.\n", c.name, err, flagHint(fs, err), c.name)
			return errUsage
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "gemini-proxy %s: unexpected argument %q\n", c.name, fs.Arg(0))
			return errUsage
		}
		err := c.run(ctx, fs, stdout, stderr)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	names := make([]string, 0, len(commands()))
	for _, c := range commands() {
		names = append(names, c.name)
	}
	hint := ""
	if near := suggest.Nearest(args[0], names); near != "" {
		hint = fmt.Sprintf("; did you mean %s?", near)
	}
	fmt.Fprintf(stderr, "gemini-proxy: unknown command %q%s\n\n", args[0], hint)
	usage(stderr)
	return errUsage
}

// flagHint returns "; did you mean --NAME?" for an unknown flag in err
// that is a likely typo of one of fs's flags, and "" otherwise.
func flagHint(fs *pflag.FlagSet, err error) string {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if near := suggest.Nearest(ne.GetSpecifiedName(), names); near != "" {
		return fmt.Sprintf("; did you mean --%s?", near)
	}
	return ""
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
