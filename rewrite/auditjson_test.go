package rewrite

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestAuditFailsJSON tampers with good rewrites of JSON texts and tool
// results and checks that the audit fails each (issue 15): a bad JSON
// rewrite never reaches the upstream.
func TestAuditFailsJSON(t *testing.T) {
	first := func(t *testing.T, rep *Report, src Source, r Rule) int {
		t.Helper()
		for i, x := range rep.Replacements {
			if x.Source == src && x.Rule == r {
				return i
			}
		}
		t.Fatalf("no %s %s replacement", src, r)
		return -1
	}
	sub := func(c *auditCut) *auditSub {
		x := *c.x
		c.x = &x
		return &x
	}
	tests := []struct {
		name   string
		golden string
		tamper func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report)
		want   AuditReason
	}{
		{"reference escaped only once", "json-text-object.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// A reference whose name holds a quote, written into the
			// JSON text escaped for the text only: the text would end
			// the value early and no longer be the same JSON.
			i := first(t, rep, SourceJSONText, RuleUnchanged)
			r := &rep.Replacements[i]
			old := string(appendEscaped(nil, string(appendEscaped(nil, r.Reference))))
			r.Reference = strings.Replace(r.Reference, "package main", `package "main"`, 1)
			bad := string(appendEscaped(nil, r.Reference))
			if !bytes.Contains(out, []byte(old)) {
				t.Fatal("reference not in the output")
			}
			return in, bytes.Replace(out, []byte(old), []byte(bad), 1), rep
		}, AuditRefMismatch},
		{"span that splits an escape of the value", "json-text-unicode-escapes.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The raw span starts inside the value's own escape of a
			// quote (\\\" in the body): a text boundary, not a value one.
			c := &rep.aud.cuts[0]
			k := bytes.Index(in[c.start:c.end], []byte(`\\\"`))
			if k < 0 {
				t.Fatal("no escaped quote in the value")
			}
			c.start += k + 2
			c.cs = c.start
			return in, out, rep
		}, AuditJSONStructure},
		{"value block not the whole value", "json-text-object.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			c := &rep.aud.cuts[first(t, rep, SourceJSONText, RuleSuperseded)]
			c.start += 7 // after "package"
			c.cs = c.start
			return in, out, rep
		}, AuditJSONStructure},
		{"box that is not JSON", "json-text-object.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			c := &rep.aud.cuts[0]
			x := sub(c)
			x.box.start++ // drops the opening brace
			return in, out, rep
		}, AuditJSONStructure},
		{"superseded tool result", "tool-result-repeat.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			i := first(t, rep, SourceToolResult, RuleUnchanged)
			if !bytes.Contains(out, []byte("[unchanged: ")) {
				t.Fatal("reference not in the output")
			}
			rep.aud.cuts[i].super = true
			r := &rep.Replacements[i]
			r.Reference = strings.Replace(r.Reference, "[unchanged: ", "[superseded: ", 1)
			return in, bytes.Replace(out, []byte("[unchanged: "), []byte("[superseded: "), 1), rep
		}, AuditSupersededNotDocument},
		{"tool result pointing at a later copy", "tool-result-repeat.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The third read is sent in full, and the second claims it,
			// a later copy, as its full copy.
			c, last := rep.aud.cuts[0], rep.aud.cuts[1]
			ref := []byte(rep.Replacements[1].Reference)
			k := bytes.LastIndex(out, ref)
			if k < 0 || len(rep.aud.cuts) != 2 {
				t.Fatal("not the two references of the golden")
			}
			out = slices.Concat(out[:k], in[last.start:last.end], out[k+len(ref):])
			c.tstr, c.ts, c.te, c.tfull, c.tx = last.str, last.cs, last.ce, span{last.start, last.end}, last.x
			rep.aud.cuts, rep.Replacements = []auditCut{c}, rep.Replacements[:1]
			return in, out, rep
		}, AuditTargetMissing},
		{"part of a tool result", "tool-result-repeat.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			c := &rep.aud.cuts[0]
			c.end -= 10
			return in, out, rep
		}, AuditJSONStructure},
		{"tool result outside a response", "tool-result-repeat.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			c := &rep.aud.cuts[0]
			x := sub(c)
			x.box.start--
			return in, out, rep
		}, AuditJSONStructure},
		{"a call's argument cut", "tool-result-written.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The record swaps the read and the call it points to: the
			// span is now a functionCall's argument, never to be cut.
			c := &rep.aud.cuts[0]
			if c.tx == nil || c.tx.key != "args" {
				t.Fatal("the full copy is not a call's argument")
			}
			c.x = c.tx
			return in, out, rep
		}, AuditJSONStructure},
		{"nested reference in the output decoded once", "json-text-crlf.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The record says the cut is in a text, not in a value: the
			// audit then expects a text's reference and a hash of the
			// span decoded once, which is not the content.
			rep.aud.cuts[0].x = nil
			return in, out, rep
		}, AuditRefMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out, rep := goldenCase(t, tt.golden)
			in, out, rep = tt.tamper(t, in, out, copyReport(rep))
			err := Audit(in, out, rep)
			ae, ok := err.(*AuditError)
			if !ok || ae.Reason != tt.want {
				t.Fatalf("Audit = %v, want reason %s", err, tt.want)
			}
			t.Log(err)
		})
	}
}
