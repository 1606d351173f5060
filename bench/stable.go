package bench

import (
	"errors"
	"fmt"
	"io"
)

// StablePrefix is the savings measured twice, through a proxy with
// rewrite.stable_prefix off and through one with it on, everything else
// equal, to decide the option's default on evidence (issue #8).
type StablePrefix struct {
	Off *Savings `json:"off"`
	On  *Savings `json:"on"`
}

// CachedShare is the share of the proxied prompt tokens that the upstream
// reported as implicit-cache hits.
func (r SessionResult) CachedShare() float64 { return share(r.Proxy.Cached, r.Proxy.Prompt) }

// WriteStablePrefixTable writes, per session and in total, the proxied
// prompt and implicit-cache tokens with the option off and on.
func WriteStablePrefixTable(w io.Writer, sp *StablePrefix) {
	fmt.Fprintln(w, "| session | kind | prompt tokens off | on | implicit-cache off | on | cached share off | on | rewritten off | on |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	row := func(off, on SessionResult, bold bool) {
		name := off.Name
		if bold {
			name = "**" + name + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %.1f%% | %.1f%% | %d | %d |\n", name, off.Kind,
			off.Proxy.Prompt, on.Proxy.Prompt, off.Proxy.Cached, on.Proxy.Cached, 100*off.CachedShare(), 100*on.CachedShare(), off.Changed, on.Changed)
	}
	for i, off := range sp.Off.Sessions {
		if i < len(sp.On.Sessions) {
			row(off, sp.On.Sessions[i], false)
		}
	}
	row(sp.Off.Total, sp.On.Total, true)
}

// CheckStablePrefix returns an error naming every session where the option
// hurts: fewer implicit-cache tokens or more prompt tokens with it on, or
// different answers.
func CheckStablePrefix(sp *StablePrefix) error {
	if sp == nil || sp.Off == nil || sp.On == nil {
		return errors.New("stable_prefix: no measurement")
	}
	if len(sp.Off.Sessions) != len(sp.On.Sessions) {
		return fmt.Errorf("stable_prefix: %d sessions off, %d on", len(sp.Off.Sessions), len(sp.On.Sessions))
	}
	var errs []error
	for i, off := range sp.Off.Sessions {
		on := sp.On.Sessions[i]
		switch {
		case on.Proxy.Cached < off.Proxy.Cached:
			errs = append(errs, fmt.Errorf("stable_prefix: session %s: implicit-cache tokens %d off, %d on", off.Name, off.Proxy.Cached, on.Proxy.Cached))
		case on.Proxy.Prompt > off.Proxy.Prompt:
			errs = append(errs, fmt.Errorf("stable_prefix: session %s: prompt tokens %d off, %d on", off.Name, off.Proxy.Prompt, on.Proxy.Prompt))
		case !on.AnswersMatch || !off.AnswersMatch || len(on.Errors)+len(off.Errors) > 0:
			errs = append(errs, fmt.Errorf("stable_prefix: session %s: answers differ or requests failed", off.Name))
		}
	}
	return errors.Join(errs...)
}
