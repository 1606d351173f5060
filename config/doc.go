// Package config loads the proxy's configuration from defaults, a YAML file,
// the environment and command-line flags, in increasing order of precedence,
// into one typed [Config], and validates it.
//
// It is the only package that imports viper. Other packages receive narrow
// option structs built from a [Config] by the command.
//
// Keys are dotted paths (YAML nesting). The environment variable of a key is
// GEMINI_PROXY_ followed by the upper-cased key with "." replaced by "_":
// upstream.url is GEMINI_PROXY_UPSTREAM_URL. List values in the environment
// are comma-separated. Sizes accept plain bytes or units (512KiB, 32MiB, 1GB);
// durations use Go syntax (90s, 5m).
//
// [Load] reports every problem at once, one per line: unknown keys and
// variables (with the nearest known name), values that do not decode and
// values that fail validation, each with its key, its value (never a
// secret's) and where it was set (file and line, variable or flag).
package config
