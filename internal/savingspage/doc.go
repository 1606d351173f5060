// Package savingspage is the savings page at / on the proxy's admin
// listener: plain HTML and inline SVG from html/template, no script and no
// external asset, for a sidecar user without Grafana.
//
// It shows requests, tokens and dollars saved since the process started and
// over the last hour, by model and by rule, the share of prompt tokens the
// upstream served from its cache and the proxy cache's hit share, the last
// requests' X-Gemini-Proxy-Report values (never content), and a per-turn
// chart of a conversation (the demo's: naive against through the proxy).
//
// Figures are read from the proxy's own registry (a prometheus.Gatherer)
// at every view, so the page and /metrics agree. The last-hour figures are
// the difference to the newest per-minute snapshot at least an hour old;
// the page keeps 62 snapshots and a bounded ring of recent reports, so its
// memory does not grow with traffic.
package savingspage
