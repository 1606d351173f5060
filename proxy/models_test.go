package proxy

import (
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// TestDefaultAllowlistCoversKnownModels checks that every model of the
// default price table and of serve's default metrics.models, every generation model the emulator serves and
// every model it answers an alias as (modelVersion) has a model label of
// its own with the default allowlist: a priced model labelled "_other"
// would pool its dollars with every unknown model's.
func TestDefaultAllowlistCoversKnownModels(t *testing.T) {
	f := newFixture(t, "http://127.0.0.1:1", Options{})
	var names []string
	for _, p := range config.DefaultPrices {
		names = append(names, p.Model)
	}
	names = append(names, config.DefaultModels...)
	for _, m := range emulator.DefaultModels {
		if strings.HasPrefix(m, "gemini-") {
			names = append(names, m)
		}
	}
	names = append(names, "gemini-3.6-flash", "gemini-3.7-flash")
	for _, name := range names {
		m := normalizeModel(name)
		if got := f.h.modelLabel(m); got != m {
			t.Errorf("model %s is labelled %q, want %q: add it to DefaultModelAllowlist", name, got, m)
		}
	}
}
