package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// AuditMetric is the proxy's counter of rewritten bodies that failed the
// rewrite audit and were forwarded unchanged (declared in metrics/).
const AuditMetric = "gemini_proxy_rewrite_audit_failures_total"

// AuditCount is what the rewrite audit reported during a savings replay.
type AuditCount struct {
	// Measured reports whether the proxy's metrics were read (its admin
	// URL was known); Exported whether they held a series of AuditMetric.
	// A counter with labels exports no series until its first increment,
	// so an absent metric counts as no failure.
	Measured bool `json:"measured"`
	Exported bool `json:"exported"`
	// Failures is the increase of AuditMetric over the replay, ByReason
	// the same per reason label.
	Failures int            `json:"failures"`
	ByReason map[string]int `json:"by_reason,omitempty"`
}

func (a AuditCount) reasons() string {
	keys := make([]string, 0, len(a.ByReason))
	for k := range a.ByReason {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, a.ByReason[k]))
	}
	return strings.Join(parts, ", ")
}

// readAudit reads AuditMetric from the Prometheus text exposition at
// adminURL/metrics, per reason label.
func readAudit(ctx context.Context, adminURL string) (byReason map[string]int, exported bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(adminURL, "/")+"/metrics", nil)
	if err != nil {
		return nil, false, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("reading the proxy's metrics: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("reading the proxy's metrics: %s", res.Status)
	}
	return parseAudit(res.Body)
}

// parseAudit sums the samples of AuditMetric in a text exposition by their
// reason label ("" when they have none).
func parseAudit(r io.Reader) (map[string]int, bool, error) {
	out := map[string]int{}
	exported := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, AuditMetric)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := ""
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, false, fmt.Errorf("metrics: malformed sample %q", line)
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, false, fmt.Errorf("metrics: sample without a value %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, false, fmt.Errorf("metrics: sample %q: %w", line, err)
		}
		exported = true
		out[labelValue(labels, "reason")] += int(v)
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("metrics: %w", err)
	}
	return out, exported, nil
}

// labelValue returns the value of label name in a Prometheus label set
// (`a="x",b="y"`); label values of the audit metric hold no quotes or
// commas (a closed set of reasons).
func labelValue(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// auditDelta is after minus before, per reason, dropping reasons that did
// not increase.
func auditDelta(before, after map[string]int) (int, map[string]int) {
	total := 0
	d := map[string]int{}
	for k, v := range after {
		if n := v - before[k]; n > 0 {
			d[k] = n
			total += n
		}
	}
	return total, d
}
