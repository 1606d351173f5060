package rewrite

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// The audit of Elide (session mode, issue 8). Elide's references point at
// a copy the upstream holds from an earlier request of the same session,
// not at one in the body, so the audit cannot check a full copy in the
// output. It checks instead, from the bytes Elide was given and the
// session's own record of what was sent:
//
//   - replacing each recorded span of the input by its reference gives
//     the output byte for byte, and nothing else changed (output);
//   - each span is in order, inside a text string (or is an inlineData
//     part), and decodes to content whose SHA-256, computed by the audit,
//     is the hash the reference names (contents; no memo is used for a
//     session reference);
//   - that full hash is in the session's sent set, asked again by the
//     audit with the hash it computed, and the span lies inside the last
//     content, the new turn, which the audit finds in the body itself with
//     encoding/json (lastContent), not from the engine's records
//     (sessionCut), and that content is a user turn: its one "role" is
//     "user" or it has none, never a model prefill (userContent);
//   - the reference is exactly the session form for the recorded name
//     (which holds no bracket or newline) and hash, so it says where the
//     copy is;
//   - every other reference Elide made (one Request would still make) is
//     audited as Audit audits Request's: its full copy stays in the output.

// auditSession is Audit for the output of Elide: session references are
// checked against sent. original is the body given to Elide.
func auditSession(original, rewritten []byte, rep *Report, sent func(string) bool) error {
	if sent == nil {
		return auditFail(AuditStructure, -1, "no sent set")
	}
	if rep == nil || rep.aud == nil || rep.aud.uf != nil || len(rep.aud.splits) > 0 {
		return auditFail(AuditStructure, -1, "no records, or records Elide does not make")
	}
	a := rep.aud
	if len(a.cuts) != len(rep.Replacements) {
		return auditFail(AuditStructure, -1, "%d records for %d replacements", len(a.cuts), len(rep.Replacements))
	}
	au := auditor{rep: rep, a: a, b1: original, memo: true, pass: true, sent: sent}
	// Where the new turn is, found by the audit itself (encoding/json,
	// no code of the scanner), not taken from the engine's record; only
	// a body with a session reference pays for it.
	if slices.ContainsFunc(a.cuts, func(c auditCut) bool { return c.session }) {
		var ok bool
		if au.last, ok = lastContent(original); !ok {
			return auditFail(AuditStructure, -1, "no last content found in the body")
		}
		if !userContent(original[au.last.start:au.last.end]) {
			return auditFail(AuditTargetMissing, -1, "session references in a last content that is not a user turn")
		}
	}
	if err := au.spans(); err != nil {
		return err
	}
	if err := au.contents(); err != nil {
		return err
	}
	return au.output(rewritten)
}

// sessionCut checks session reference i (cut c, replacement r), whose
// hash contents has verified against the replaced bytes.
func (au *auditor) sessionCut(i int, c *auditCut, r *Replacement) error {
	if au.sent == nil {
		return auditFail(AuditTargetMissing, i, "a reference to a copy earlier in a session, outside session mode")
	}
	if c.super || r.Target != -1 {
		return auditFail(AuditRefMismatch, i, "a session reference recorded as another kind")
	}
	var want string
	if c.kind == kindImage {
		want = "[same " + r.Document + " sha256:" + r.SHA256[:12] + " as " + SessionWhere + "]"
	} else {
		want = "[unchanged: " + r.Document + " sha256:" + r.SHA256[:12] + ", identical to the copy " + SessionWhere + "]"
	}
	if r.Reference != want || strings.ContainsAny(r.Document, "[]\n") {
		return auditFail(AuditRefMismatch, i, "not the session reference for its name and hash")
	}
	if !au.sent(r.SHA256) {
		return auditFail(AuditTargetMissing, i, "the replaced content was not sent earlier in the session")
	}
	if l := au.last; l.end <= l.start || !insideSpan(l, c.start, c.end) {
		return auditFail(AuditTargetMissing, i, "a session reference outside the new turn")
	}
	return nil
}

// lastContent returns the raw span of the last element of the top-level
// "contents" array of body, read with encoding/json (one pass over the
// body; only a session request with a session reference pays it). It
// fails on a body that is not one JSON object, on "contents" given twice,
// and on an empty or missing array.
func lastContent(body []byte) (span, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return span{}, false
	}
	var last span
	seen := false
	var raw json.RawMessage
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return span{}, false
		}
		if k != "contents" {
			if dec.Decode(&raw) != nil {
				return span{}, false
			}
			continue
		}
		if seen {
			return span{}, false
		}
		seen = true
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return span{}, false
		}
		for dec.More() {
			if dec.Decode(&raw) != nil {
				return span{}, false
			}
			end := int(dec.InputOffset())
			last = span{end - len(raw), end}
		}
		if t, err := dec.Token(); err != nil || t != json.Delim(']') {
			return span{}, false
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return span{}, false
	}
	if _, err := dec.Token(); err == nil {
		return span{}, false // more than one value
	}
	return last, seen && last.end > last.start && last.end <= len(body) && body[last.start] == '{'
}

// userContent reports whether the content object raw (one element of
// "contents", as lastContent found it) is a user turn: no "role" member,
// or exactly one whose value is the JSON string "user" (any escaped
// spelling of it). A role given twice is not a user turn: a reader that
// keeps the first and one that keeps the last would disagree.
func userContent(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	roles := 0
	var skip json.RawMessage
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return false
		}
		if k != "role" {
			if dec.Decode(&skip) != nil {
				return false
			}
			continue
		}
		roles++
		v, err := dec.Token()
		if err != nil || v != "user" || roles > 1 {
			return false
		}
	}
	return true
}
