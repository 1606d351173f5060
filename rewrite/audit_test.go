package rewrite

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

// reportCmp compares Reports with their unexported records.
var reportCmp = cmp.AllowUnexported(Report{}, convInput{}, auditRec{}, auditCut{}, auditSplit{}, auditUnflat{}, auditTurn{}, span{}, flatSpan{}, auditSub{})

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

// auditBoth returns Audit's verdict and fails t when the audit without
// the rewrite's memo of hashes (which computes every hash itself) gives
// another one (the memo only saves work), or when either audit wrote into
// the original body.
func auditBoth(t *testing.T, in, out []byte, rep *Report) error {
	t.Helper()
	orig := bytes.Clone(in)
	err := Audit(in, out, rep)
	full := audit(in, out, rep, false)
	if !bytes.Equal(in, orig) {
		t.Fatalf("the audit modified the original body")
	}
	if reasonOf(err) != reasonOf(full) {
		t.Fatalf("Audit = %v, without the memo %v", err, full)
	}
	return err
}

// reasonOf returns the reason of an *AuditError, "" for nil and "?" for
// another error.
func reasonOf(err error) AuditReason {
	if err == nil {
		return ""
	}
	if ae, ok := err.(*AuditError); ok {
		return ae.Reason
	}
	return "?"
}

// auditGolden audits a golden case's output.
func auditGolden(t *testing.T, name string, in, out []byte, rep *Report) {
	t.Helper()
	err := auditBoth(t, in, out, rep)
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

// goldenCase rewrites the request of golden file name with its options.
func goldenCase(t *testing.T, name string) (in, out []byte, rep *Report) {
	t.Helper()
	a, err := txtar.ParseFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var co caseOptions
	if c := bytes.TrimSpace(a.Comment); len(c) > 0 {
		if err := json.Unmarshal(c, &co); err != nil {
			t.Fatal(err)
		}
	}
	opts, v := co.options()
	in, _ = file(a, "request.json")
	in = bytes.TrimSuffix(in, []byte("\n"))
	out, rep, err = Request(in, opts, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := Audit(in, out, rep); err != nil {
		t.Fatalf("the untampered rewrite fails its audit: %v", err)
	}
	return in, out, rep
}

// copyReport returns a copy of rep whose records may be changed without
// changing rep's.
func copyReport(rep *Report) *Report {
	r := *rep
	r.Replacements = slices.Clone(rep.Replacements)
	a := *rep.aud
	a.cuts = slices.Clone(a.cuts)
	a.splits = slices.Clone(a.splits)
	if a.uf != nil {
		uf := *a.uf
		uf.turns = slices.Clone(uf.turns)
		for i := range uf.turns {
			uf.turns[i].pieces = slices.Clone(uf.turns[i].pieces)
		}
		a.uf = &uf
	}
	r.aud = &a
	return &r
}

// TestAuditFails tampers with good rewrites, their outputs or their
// records, and checks that the audit fails each with the right reason.
func TestAuditFails(t *testing.T) {
	// flip changes the byte of b at the first occurrence of sub after
	// the first occurrence of after, plus off.
	flip := func(t *testing.T, b []byte, after, sub string, off int) []byte {
		t.Helper()
		i := bytes.Index(b, []byte(after))
		j := bytes.Index(b[i+1:], []byte(sub))
		if i < 0 || j < 0 {
			t.Fatalf("%q after %q not found", sub, after)
		}
		b = bytes.Clone(b)
		b[i+1+j+off] ^= 0x20
		return b
	}
	// cutOf returns the index of the first replacement of rule r.
	cutOf := func(t *testing.T, rep *Report, r Rule) int {
		t.Helper()
		for i, x := range rep.Replacements {
			if x.Rule == r {
				return i
			}
		}
		t.Fatalf("no %s replacement", r)
		return -1
	}
	const uf = "unflatten-verified.txtar" // turn 0 superseded, model turn 1, turn 2 unchanged
	tests := []struct {
		name   string
		golden string
		tamper func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report)
		want   AuditReason
	}{
		{"records dropped", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			rep.aud = nil
			return in, out, rep
		}, AuditStructure},
		{"span outside the text string", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			rep.aud.cuts[0].str.start--
			return in, out, rep
		}, AuditStructure},
		{"hash of other bytes", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// A consistent lie: the reference, the report and the output
			// all name the hash of something else.
			r := &rep.Replacements[0]
			fake := hexSHA([]byte("something else"))
			old := r.SHA256[:12]
			r.Reference = strings.Replace(r.Reference, old, fake[:12], 1)
			r.SHA256 = fake
			return in, bytes.Replace(out, []byte(old), []byte(fake[:12]), 1), rep
		}, AuditRefMismatch},
		{"hash of other bytes, with a memo of those bytes", "ask-fenced-every-turn.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The consistent lie names the hash of the second cut's
			// bytes shifted by one, and the memo holds exactly that
			// hash for exactly those bytes: an honest entry, but for
			// other bytes than the cut replaced, so it is no evidence.
			c := &rep.aud.cuts[1]
			var other span
			var dec []byte
			for k := 1; k < 8 && dec == nil; k++ {
				if b := rep.aud.body; escBoundary(b, c.str.start, c.start+k) {
					other = span{c.start + k, c.end}
					dec, _ = decodeRaw(nil, b[other.start:other.end])
				}
			}
			if dec == nil {
				t.Fatal("no shifted span decodes")
			}
			fake := hexSHA(dec)
			r := &rep.Replacements[1]
			old := r.SHA256[:12]
			r.Reference = strings.Replace(r.Reference, old, fake[:12], 1)
			r.SHA256 = fake
			c.sum, c.sumSHA = other, fake
			i := bytes.Index(out, []byte(old))
			i += 1 + bytes.Index(out[i+1:], []byte(old)) // the second reference
			out = bytes.Clone(out)
			copy(out[i:], fake[:12])
			return in, out, rep
		}, AuditRefMismatch},
		{"reference of another kind", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			r := &rep.Replacements[0]
			r.Reference = strings.Replace(r.Reference, "[superseded: ", "[unchanged: ", 1)
			return in, out, rep
		}, AuditRefMismatch},
		{"reference changed in the output", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			return in, flip(t, out, "", "[superseded: ", 3), rep
		}, AuditRefMismatch},
		{"kept text changed", "ask-fenced-every-turn.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			return in, flip(t, out, `"role"`, "e", 0), rep
		}, AuditExpandMismatch},
		{"a user turn of the transcript changed", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			return in, flip(t, out, "", "Make f1 return", 0), rep
		}, AuditUnflattenMismatch},
		{"a question left out", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The record claims the last user turn starts later: what
			// lies before it is more than a label.
			p := &rep.aud.uf.turns[len(rep.aud.uf.turns)-1].pieces[0]
			p.start += 4 * maxGapBytes
			return in, out, rep
		}, AuditUnflattenMismatch},
		{"served answer without its last byte", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The output drops the answer's final byte (defect 3 would
			// drop its trailing white space) while the record says the
			// whole range was promoted.
			i := bytes.Index(out, []byte("I changed f1 to return x*100+5."))
			if i < 0 {
				t.Fatal("answer not found")
			}
			i += len("I changed f1 to return x*100+5.") - 1
			return in, append(bytes.Clone(out[:i]), out[i+1:]...), rep
		}, AuditServedAnswerAltered},
		{"served answer joined from two ranges", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			m := &rep.aud.uf.turns[1]
			p := m.pieces[0]
			m.pieces = []flatSpan{{p.start, p.start + 10}, {p.start + 12, p.end}}
			return in, out, rep
		}, AuditServedAnswerAltered},
		{"unchanged copy points at other bytes", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			c := &rep.aud.cuts[cutOf(t, rep, RuleUnchanged)]
			c.ts, c.tfull.start = c.ts+1, c.tfull.start+1
			return in, out, rep
		}, AuditTargetMissing},
		{"unchanged copy is itself replaced", "ask-fenced-every-turn.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The second reference claims the first replaced span as its
			// full copy.
			c, first := &rep.aud.cuts[1], rep.aud.cuts[0]
			c.tstr, c.ts, c.te, c.tfull = first.str, first.cs, first.ce, span{first.start, first.end}
			return in, out, rep
		}, AuditTargetMissing},
		{"superseded in the newest user turn", uf, func(t *testing.T, _, _ []byte, _ *Report) ([]byte, []byte, *Report) {
			// The body's last turn made a model turn, in the original and
			// the output alike: the superseded reference's turn is now the
			// newest user turn (TestAuditNewestFromBody has more).
			in, out, rep := newestCase(t)
			const user, model = `{"role": "user"`, `{"role":"model"`
			return bytes.Replace(in, []byte(user), []byte(model), 1), bytes.Replace(out, []byte(user), []byte(model), 1), rep
		}, AuditSupersededNewestTurn},
		{"superseded run of lines", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			rep.aud.cuts[cutOf(t, rep, RuleSuperseded)].kind = kindRun
			return in, out, rep
		}, AuditSupersededNotDocument},
		{"superseded across a transcript turn boundary", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// Split the first turn's range at a blank line inside the
			// superseded file: the rebuilt text is the same, but the
			// span now crosses from one piece into the next.
			u := rep.aud.uf
			text := unescape(in[u.str.start:u.str.end])
			p := u.turns[0].pieces[0]
			k := strings.Index(text[p.start:p.end], "package main\n\n") + len("package main")
			u.turns[0].pieces = []flatSpan{{p.start, p.start + k}, {p.start + k + 2, p.end}}
			return in, out, rep
		}, AuditSupersededCrossesTurn},
		{"newer version replaced too", uf, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			c, other := &rep.aud.cuts[cutOf(t, rep, RuleSuperseded)], rep.aud.cuts[cutOf(t, rep, RuleUnchanged)]
			c.tstr, c.ts, c.te, c.tfull = other.str, other.cs, other.ce, span{other.start, other.end}
			return in, out, rep
		}, AuditSupersededTargetMissing},
		{"a key claimed as the replaced value", "json-text-object.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The record claims the value's span is a key's.
			c := &rep.aud.cuts[0]
			x := *c.x
			k := bytes.LastIndex(in[:x.in.start], []byte("currentSource"))
			x.in = span{k, k + len("currentSource")}
			c.x = &x
			return in, out, rep
		}, AuditJSONStructure},
		{"split part changed", "stable-question-first.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			rep.aud.splits[0].at++
			return in, out, rep
		}, AuditExpandMismatch},
	}
	seen := map[AuditReason]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out, rep := goldenCase(t, tt.golden)
			in, out, rep = tt.tamper(t, in, out, copyReport(rep))
			err := Audit(in, out, rep)
			ae, ok := err.(*AuditError)
			if !ok || ae.Reason != tt.want {
				t.Fatalf("Audit = %v, want reason %s", err, tt.want)
			}
			if !slices.Contains(AuditReasons, ae.Reason) {
				t.Errorf("reason %q is not in AuditReasons", ae.Reason)
			}
			seen[ae.Reason] = true
		})
	}
	for _, r := range AuditReasons {
		if !seen[r] {
			t.Errorf("no test makes the audit fail with %s", r)
		}
	}
}

// TestAuditDefect1 reproduces issue 13's first defect through the audit: a
// user who pastes an old and a new version in one turn and asks what
// changed gets the old one superseded in the newest user turn.
func TestAuditDefect1(t *testing.T) {
	v1 := sourceFile(40, -1)
	v2 := sourceFile(40, 3)
	text := "Old version:\n```go\n" + v1 + "```\nNew version:\n```go\n" + v2 + "```\nWhat changed?"
	body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}})
	out, rep, err := Request(body, DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = Audit(body, out, rep)
	if !rep.Changed() {
		if err != nil {
			t.Fatalf("unchanged body fails its audit: %v", err)
		}
		t.Log("the identity fix keeps both versions")
		return
	}
	if ae, ok := err.(*AuditError); !ok || ae.Reason != AuditSupersededNewestTurn {
		t.Fatalf("Audit = %v, want %s", err, AuditSupersededNewestTurn)
	}
}

// auditTranscript rewrites a request whose only turn is text, with v, and
// audits the result: the oracle of FuzzUnflatten for the whole request.
func auditTranscript(t *testing.T, text string, v Verifier) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}}})
	if err != nil {
		return
	}
	opts := DefaultOptions()
	opts.MinBlockBytes = 24 // reach the replacements with short texts
	out, rep, err := Request(body, opts, v)
	if err != nil {
		return
	}
	if err := auditBoth(t, body, out, rep); err != nil && !auditKnownReason(err) {
		t.Fatalf("audit: %v\nin:  %q\nout: %q", err, body, out)
	}
}

// TestAuditLeavesOriginal checks that the audit, with and without the
// memo of hashes, never writes into the original body it is given (the
// proxy forwards that body when the audit fails, and in dry-run mode).
// Fuzz input FuzzSession/06ee7b0a5fbc3c0c: the audit that hashes every
// cut itself kept a span without escapes (the "Answer" of turn 1, a view
// of the original) as its decoding scratch, then decoded the escaped
// secondary copy of turn 2 over it, and found "two contents under one
// hash" at turn 3.
func TestAuditLeavesOriginal(t *testing.T) {
	answer := strings.TrimSpace(strings.Repeat("the quick brown fox jumps over the lazy dog ", 5))
	for _, tc := range []struct {
		name  string
		turns []string // user, model, user, …
	}{
		{"plain then escaped then plain", []string{"Why?\n" + answer, answer, "Why?\n" + answer, answer, "And?"}},
		{"escaped then plain", []string{"Why?\n" + answer, "Why?\n" + answer, answer, answer, "And?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := alternating(t, tc.turns)
			opts := DefaultOptions()
			opts.MinBlockBytes = 16
			out, rep, err := Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Replacements) < 2 {
				t.Fatalf("%d replacements, want at least 2: the case no longer reaches the audit's hashing", len(rep.Replacements))
			}
			orig := bytes.Clone(body)
			for _, memo := range []bool{false, true} {
				if err := audit(body, out, rep, memo); err != nil {
					t.Errorf("audit (memo %v): %v", memo, err)
				}
				if !bytes.Equal(body, orig) {
					t.Fatalf("audit (memo %v) modified the original body:\n%s", memo, body)
				}
			}
		})
	}
}
