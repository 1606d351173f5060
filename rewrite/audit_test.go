package rewrite

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reportCmp compares Reports with their unexported records.
var reportCmp = cmp.AllowUnexported(Report{}, convInput{}, auditRec{}, auditCut{}, auditSplit{}, auditUnflat{}, auditTurn{}, span{}, flatSpan{})

// auditKnown lists the golden cases whose rewrite today breaks a rule the
// audit checks, with the reason, until the detectors are fixed (issue 13,
// defects 1-3). The golden test fails on any other audit failure, and on
// a listed case that passes or fails for another reason.
var auditKnown = map[string]AuditReason{}

// auditKnownReasons are the audit failures that the fuzz targets accept
// while a detector fix of issue 13 is pending; none since the identity
// rules keep every version in the newest user turn (defect 1).
var auditKnownReasons = map[AuditReason]bool{}

// auditKnownReason reports whether err is an audit failure of a reason in
// auditKnownReasons.
func auditKnownReason(err error) bool {
	ae, ok := err.(*AuditError)
	return ok && auditKnownReasons[ae.Reason]
}

// auditGolden audits a golden case's output.
func auditGolden(t *testing.T, name string, in, out []byte, rep *Report) {
	t.Helper()
	err := Audit(in, out, rep)
	want, known := auditKnown[name]
	var got AuditReason
	if ae, ok := err.(*AuditError); ok {
		got = ae.Reason
	} else if err != nil {
		t.Fatalf("audit: %v is not an *AuditError", err)
	}
	switch {
	case known && got != want:
		t.Errorf("audit: %v; the case is listed as failing with %s (issue 13): update auditKnown", err, want)
	case !known && err != nil:
		t.Errorf("audit: %v", err)
	}
}
