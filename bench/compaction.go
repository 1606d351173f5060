package bench

import (
	"errors"
	"fmt"
	"io"
)

// Compaction is the savings measured through three proxies that differ
// only in how they compact (issue 14 item 3): rewrite.
// cache_aware_compaction on (Weighed: compaction of turns already sent
// only where it pays against the implicit cache), off (Always: every
// older version superseded, as before), and rewrite.compact_superseded
// off (Off: exact repeats only).
type Compaction struct {
	Weighed *Savings `json:"weighed"`
	Always  *Savings `json:"always"`
	Off     *Savings `json:"off"`
}

// WriteCompactionTable writes, per session and in total, the billed cost
// through each of the three proxies, in US dollars per 1,000 sessions, and
// how many requests the weighing proxy sent with the sent prefix kept.
func WriteCompactionTable(w io.Writer, c *Compaction) {
	fmt.Fprintln(w, "| session | billed, weighed | always compacted | compact_superseded off | weighed − lower of the two | prefix kept (requests) | prompt tokens weighed | always | implicit-cache weighed | always |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	row := func(on, always, off SessionResult, bold bool) {
		name := on.Name
		if bold {
			name = "**" + name + "**"
		}
		fmt.Fprintf(w, "| %s | $%.2f | $%.2f | $%.2f | $%+.2f | %d | %d | %d | %d | %d |\n", name,
			1000*on.Proxy.Billed, 1000*always.Proxy.Billed, 1000*off.Proxy.Billed,
			1000*(on.Proxy.Billed-min(always.Proxy.Billed, off.Proxy.Billed)), on.Kept,
			on.Proxy.Prompt, always.Proxy.Prompt, on.Proxy.Cached, always.Proxy.Cached)
	}
	for i, on := range c.Weighed.Sessions {
		if i < len(c.Always.Sessions) && i < len(c.Off.Sessions) {
			row(on, c.Always.Sessions[i], c.Off.Sessions[i], false)
		}
	}
	row(c.Weighed.Total, c.Always.Total, c.Off.Total, true)
}

// compactionSlack is what the weighed bill may exceed the lower of the
// other two by, per session, in US dollars: rounding, not a cost.
const compactionSlack = 1e-9

// CheckCompaction returns an error naming every session billed more with
// the weighing than with compaction always on or compact_superseded off,
// or whose answers differ or requests failed.
func CheckCompaction(c *Compaction) error {
	if c == nil || c.Weighed == nil || c.Always == nil || c.Off == nil {
		return errors.New("compaction: no measurement")
	}
	if len(c.Weighed.Sessions) != len(c.Always.Sessions) || len(c.Weighed.Sessions) != len(c.Off.Sessions) {
		return fmt.Errorf("compaction: %d, %d and %d sessions", len(c.Weighed.Sessions), len(c.Always.Sessions), len(c.Off.Sessions))
	}
	var errs []error
	for i, on := range c.Weighed.Sessions {
		always, off := c.Always.Sessions[i], c.Off.Sessions[i]
		switch {
		case on.Proxy.Billed > min(always.Proxy.Billed, off.Proxy.Billed)+compactionSlack:
			errs = append(errs, fmt.Errorf("compaction: session %s: billed $%.6f weighed, $%.6f always compacted, $%.6f with compact_superseded off", on.Name, on.Proxy.Billed, always.Proxy.Billed, off.Proxy.Billed))
		case !on.AnswersMatch || !always.AnswersMatch || !off.AnswersMatch || len(on.Errors)+len(always.Errors)+len(off.Errors) > 0:
			errs = append(errs, fmt.Errorf("compaction: session %s: answers differ or requests failed", on.Name))
		}
	}
	return errors.Join(errs...)
}
