package rewrite

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Review of Elide's audit (branch elidelead): adversarial cases.

// reviewSent is the sent set of a first request holding parts.
func reviewSent(t *testing.T, opts Options, parts ...any) map[string]bool {
	t.Helper()
	first := elideBody(t, map[string]any{"role": "user", "parts": parts})
	blocks, err := SessionBlocks(first, opts)
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	for _, b := range blocks {
		sent[b.SHA256] = true
	}
	return sent
}

func tpart(s string) map[string]any { return map[string]any{"text": s} }

func ipart(img []byte) map[string]any {
	return map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(img)}}
}

// TestReviewElideShapes: Elide end to end on shapes where the audit could
// be wrong: each must either be audited and accepted with at least one
// session reference, and Request's Audit must reject that output; and
// un-sending each session reference's hash must fail the session audit.
func TestReviewElideShapes(t *testing.T) {
	file := elideFile(3)
	crlf := strings.ReplaceAll(file, "\n", "\r\n")
	img := bytes.Repeat([]byte("\x89PNG review bytes \x00\xff"), 40)
	fence := "```go main.go\n" + file + "```"
	jsonText := func(s string) string {
		b, _ := json.Marshal(map[string]any{"path": "main.go", "content": s})
		return string(b)
	}
	tests := []struct {
		name  string
		first []any // parts of the earlier request (the sent set)
		body  []any // contents of this request
	}{
		{"fence in a JSON string value", []any{tpart(jsonText(fence))},
			[]any{textTurn("user", "hi"), textTurn("model", "ok"), map[string]any{"role": "user", "parts": []any{tpart("Again:"), tpart(jsonText(fence))}}}},
		{"inline image", []any{ipart(img)},
			[]any{textTurn("user", "hi"), textTurn("model", "ok"), map[string]any{"role": "user", "parts": []any{tpart("see"), ipart(img)}}}},
		{"fence nested in a document tag", []any{tpart("x\n" + fence + "\ny")},
			[]any{textTurn("user", "hi"), textTurn("model", "ok"), textTurn("user", "<document name=\"d\">\nintro\n"+fence+"\nmore\n</document>\nQ?")}},
		{"odd name", []any{tpart("```go a]b[c\r\"\\é\t.go\n" + file + "```")},
			[]any{textTurn("user", "hi"), textTurn("model", "ok"), textTurn("user", "```go a]b[c\r\"\\é\t.go\n"+file+"```\nQ?")}},
		{"CRLF content", []any{tpart("```go w.go\r\n" + crlf + "```")},
			[]any{textTurn("user", "hi"), textTurn("model", "ok"), textTurn("user", "```go w.go\r\n"+crlf+"```\r\nQ?")}},
		{"new turn block also in an earlier turn", []any{tpart(fence)},
			[]any{textTurn("user", "Look:\n"+fence), textTurn("model", "ok"), textTurn("user", "Again:\n"+fence+"\nQ?")}},
		{"Request cuts mixed with session cuts", []any{tpart("```go other.go\n" + elideFile(9) + "```")},
			[]any{textTurn("user", "Look:\n"+fence), textTurn("model", "ok"),
				textTurn("user", "Again:\n"+fence+"\nand\n```go other.go\n"+elideFile(9)+"```\nQ?")}},
		{"image in history and sent", []any{ipart(img)},
			[]any{map[string]any{"role": "user", "parts": []any{ipart(img)}}, textTurn("model", "ok"),
				map[string]any{"role": "user", "parts": []any{tpart("again"), ipart(img)}}}},
	}
	type tcase struct {
		name        string
		first, body []any
		all         bool // every block of the new turn was sent too
	}
	var all []tcase
	for _, tt := range tests {
		all = append(all, tcase{tt.name, tt.first, tt.body, false}, tcase{tt.name + " (all sent)", tt.first, tt.body, true})
	}
	for _, tt := range all {
		t.Run(tt.name, func(t *testing.T) {
			opts := DefaultOptions()
			sent := reviewSent(t, opts, tt.first...)
			in := elideBody(t, tt.body...)
			if tt.all {
				blocks, err := SessionBlocks(in, opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range blocks {
					sent[b.SHA256] = true
				}
			}
			isSent := func(h string) bool { return sent[h] }
			out, reps, err := Elide(in, opts, isSent)
			if err != nil {
				t.Fatalf("Elide: %v", err)
			}
			nsess := 0
			for _, r := range reps {
				if r.Target == -1 {
					nsess++
				}
			}
			t.Logf("%d replacements, %d session", len(reps), nsess)
			if !json.Valid(out) {
				t.Fatalf("invalid JSON: %s", out)
			}
			_, rep, err := elide(in, opts, isSent)
			if err != nil {
				t.Fatal(err)
			}
			if nsess == 0 {
				return
			}
			var ae *AuditError
			if err := Audit(in, out, rep); !errors.As(err, &ae) {
				t.Errorf("Request's Audit accepted a session cut: %v", err)
			}
			for _, r := range rep.Replacements {
				if r.Target != -1 {
					continue
				}
				h := r.SHA256
				if auditSession(in, out, rep, func(x string) bool { return x != h && sent[x] }) == nil {
					t.Errorf("session audit passed %s unsent", h[:12])
				}
			}
			// Flipping a session cut to a Request cut must fail both audits.
			for i := range rep.aud.cuts {
				if !rep.aud.cuts[i].session {
					continue
				}
				rep.aud.cuts[i].session = false
				if auditSession(in, out, rep, isSent) == nil || Audit(in, out, rep) == nil {
					t.Errorf("cut %d flipped to a Request cut passed", i)
				}
				rep.aud.cuts[i].session = true
			}
		})
	}
}

// TestReviewElideJSONPath: the JSON string value case really takes the
// auditjson path (c.x != nil), and tampering there fails.
func TestReviewElideJSONPath(t *testing.T) {
	fence := "```go main.go\n" + elideFile(3) + "```"
	jt, _ := json.Marshal(map[string]any{"path": "main.go", "content": fence})
	opts := DefaultOptions()
	sent := reviewSent(t, opts, tpart(string(jt)))
	in := elideBody(t, textTurn("user", "hi"), textTurn("model", "ok"),
		map[string]any{"role": "user", "parts": []any{tpart("Again:"), tpart(string(jt))}})
	isSent := func(h string) bool { return sent[h] }
	out, rep, err := elide(in, opts, isSent)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Replacements) != 1 || rep.aud.cuts[0].x == nil || !rep.aud.cuts[0].session {
		t.Fatalf("want one session cut in a JSON string value, got %+v", rep.Replacements)
	}
	if err := auditSession(in, out, rep, isSent); err != nil {
		t.Fatal(err)
	}
	var ae *AuditError
	if err := Audit(in, out, rep); !errors.As(err, &ae) || ae.Reason != AuditTargetMissing {
		t.Errorf("Audit = %v, want %s", err, AuditTargetMissing)
	}
	for name, tamper := range map[string]func(in, out []byte) ([]byte, []byte){
		"edited content": func(in, out []byte) ([]byte, []byte) {
			return bytes.Replace(in, []byte("return 7 * 3"), []byte("return 7 * 4"), 1), out
		},
		"text dropped": func(in, out []byte) ([]byte, []byte) {
			return in, bytes.Replace(out, []byte(`,\"path\":\"main.go\"`), nil, 1)
		},
		"outside the new turn": func(in, out []byte) ([]byte, []byte) {
			return appendTurns(in), appendTurns(out)
		},
	} {
		in2, out2 := tamper(bytes.Clone(in), bytes.Clone(out))
		if bytes.Equal(in2, in) && bytes.Equal(out2, out) {
			t.Fatalf("%s: tamper changed nothing", name)
		}
		if err := auditSession(in2, out2, rep, isSent); err == nil {
			t.Errorf("%s: the audit passed", name)
		}
	}
}

// TestReviewElideAfterRequest: the documented path, Elide on Request's
// output, for the new turn holding a sent file twice. Logged: the
// reference Request wrote then names a copy that Elide replaces by a
// session reference (a chain of two references, both resolvable).
func TestReviewElideAfterRequest(t *testing.T) {
	fence := "```go main.go\n" + elideFile(4) + "```"
	opts := DefaultOptions()
	sent := reviewSent(t, opts, tpart(fence))
	in := elideBody(t, textTurn("user", "hi"), textTurn("model", "ok"), textTurn("user", "A:\n"+fence+"\nB:\n"+fence+"\nQ?"))
	req, _, err := Request(in, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, reps, err := Elide(req, opts, func(h string) bool { return sent[h] })
	if err != nil {
		t.Fatalf("Elide: %v", err)
	}
	if len(reps) != 1 || reps[0].Target != -1 {
		t.Fatalf("want one session reference, got %+v", reps)
	}
	t.Logf("%s", out)
}

// TestReviewElideSupersededTarget: Request supersedes an older version in
// history by the newer one in the new turn, and the session sent the newer
// one. Elide must not cut the full copy that Request's reference names:
// the audit rejects that (superseded_target_missing) and Elide then
// fails, so the proxy loses the session saving and counts an audit
// failure.
func TestReviewElideSupersededTarget(t *testing.T) {
	v1 := "```go main.go\n" + elideFile(1) + "```"
	v2 := "```go main.go\n" + strings.Replace(elideFile(1), "return 5 * 1", "return 5 * 2", 1) + "```"
	opts := DefaultOptions()
	sent := reviewSent(t, opts, tpart(v2))
	in := elideBody(t, textTurn("user", "Old:\n"+v1+"\nQ1"), textTurn("model", "ok"), textTurn("user", "New:\n"+v2+"\nQ2"))
	isSent := func(h string) bool { return sent[h] }
	out, rep, err := elide(in, opts, isSent)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Replacements {
		t.Logf("%s target %d turn %d", r.Rule, r.Target, r.Turn)
	}
	aerr := auditSession(in, out, rep, isSent)
	_, _, eerr := Elide(in, opts, isSent)
	t.Logf("auditSession = %v; Elide err = %v", aerr, eerr)
	if aerr != nil || eerr != nil {
		t.Fatal("Elide cut the full copy a kept reference names: the audit fails and the session saving is lost")
	}
	if len(rep.Replacements) != 1 || rep.Replacements[0].Rule != RuleSuperseded {
		t.Fatalf("replacements %+v, want only Request's superseded reference", rep.Replacements)
	}
}

// TestReviewElideTargetInNewTurn: the new turn holds a sent file twice;
// Request refers the second to the first, which must stay in full.
func TestReviewElideTargetInNewTurn(t *testing.T) {
	fence := "```go main.go\n" + elideFile(4) + "```"
	opts := DefaultOptions()
	sent := reviewSent(t, opts, tpart(fence))
	for _, in := range [][]byte{
		elideBody(t, textTurn("user", "hi"), textTurn("model", "ok"), textTurn("user", "A:\n"+fence+"\nB:\n"+fence+"\nQ?")),
		elideBody(t, textTurn("user", "hi"), textTurn("model", "ok"), map[string]any{"role": "user", "parts": []any{tpart("A:\n" + fence), tpart("B:\n" + fence + "\nQ?")}}),
	} {
		out, reps, err := Elide(in, opts, func(h string) bool { return sent[h] })
		if err != nil {
			t.Fatalf("Elide: %v", err)
		}
		if len(reps) == 0 || bytes.Equal(out, in) {
			t.Fatal("nothing replaced")
		}
		for _, r := range reps {
			t.Logf("%s target %d", r.Rule, r.Target)
		}
	}
}
