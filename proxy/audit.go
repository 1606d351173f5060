package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// auditFunc is the signature of rewrite.Audit.
type auditFunc func(original, rewritten []byte, rep *rewrite.Report) error

// audit checks a successful rewrite of orig into res before it is sent,
// also in dry-run mode, and reports whether it passed. On a failure it
// counts gemini_proxy_rewrite_audit_failures_total{reason}, logs the
// reason at Warn (never content), marks the request's report header and
// access log, and leaves st as a failed rewrite: the original body is
// forwarded and nothing is counted as saved.
func (h *Handler) audit(st *reqState, orig, res []byte, rep *rewrite.Report) (ok bool) {
	reason := rewrite.AuditStructure
	defer func() {
		// The audit must never take the request down: a panic is a
		// failure like any other.
		if p := recover(); p != nil {
			ok = false
			h.auditFailed(st, orig, reason, "audit panicked")
		}
	}()
	err := h.auditFn(orig, res, rep)
	if err == nil {
		return true
	}
	detail := "audit error"
	var ae *rewrite.AuditError
	if errors.As(err, &ae) {
		reason, detail = ae.Reason, ae.Detail
	}
	h.auditFailed(st, orig, reason, detail)
	return false
}

// auditFailed records a failed audit of st's rewrite.
func (h *Handler) auditFailed(st *reqState, orig []byte, reason rewrite.AuditReason, detail string) {
	h.m.RewriteAuditFails.WithLabelValues(string(reason)).Inc()
	h.log.LogAttrs(context.Background(), slog.LevelWarn, "rewrite audit failed",
		slog.String("reason", string(reason)),
		slog.String("detail", detail), // offsets and counts only
		slog.String("route", string(st.info.route)),
		slog.String("tenant", shortTenant(st.tenant)))
	st.outcome = metrics.OutcomeError
	st.report = nil
	st.repHeader = fmt.Sprintf("bytes=%d->%d; audit_failed=%s", len(orig), len(orig), reason)
	if st.mode == metrics.ModeDryRun {
		st.repHeader += "; mode=dry-run"
	}
	st.rwErr = "audit failed: " + string(reason)
}
