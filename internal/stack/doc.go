// Package stack checks the monitoring stack end to end and generates its
// Grafana dashboard.
//
// Dashboard renders Panels, the dashboard's definition in Go, as the JSON
// file examples/grafana/dashboards/gemini-proxy.json; TestDashboardFile
// fails when the file is stale (regenerate it with
// `go test ./internal/stack -run TestDashboardFile -update`).
//
// TestStack builds the gemini-proxy binary, runs it in front of the
// in-process emulator, starts a real Prometheus (/usr/bin/prometheus, the
// Debian package) scraping the admin listener every second with the alert
// rules of examples/prometheus loaded, drives a scripted naive workload
// through the proxy and directly against the emulator, and then evaluates
// every PromQL expression of the dashboard and of the alert rules through
// Prometheus' HTTP API: each must return data. It also checks that the
// savings Prometheus reports agree with what the emulator received: bytes
// exactly, estimated tokens saved within 10% of the emulator's own count.
// Without /usr/bin/prometheus the test is skipped, unless CI=true.
package stack
