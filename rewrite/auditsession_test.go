package rewrite

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// elideFile is a source file large enough to be a block.
func elideFile(v int) string {
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "func g%d() int { return %d * %d }\n", i, i, v)
	}
	return b.String()
}

func elideBody(t testing.TB, contents ...any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"contents": contents})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func textTurn(role, text string) map[string]any {
	return map[string]any{"role": role, "parts": []any{map[string]any{"text": text}}}
}

// elideCase is a session's new turn that re-sends a file and an image the
// upstream holds, and the set of what was sent.
func elideCase(t *testing.T) (in []byte, sent map[string]bool, file string, img []byte) {
	t.Helper()
	file = elideFile(1)
	img = bytes.Repeat([]byte("\x89PNG fake image bytes "), 40)
	in = elideBody(t,
		textTurn("user", "Hello"),
		textTurn("model", "Hi"),
		map[string]any{"role": "user", "parts": []any{
			map[string]any{"text": "Again:\n```go main.go\n" + file + "```\nAnd the picture:"},
			map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(img)}},
		}})
	// What the first request of the session sent: the same file and
	// image, as the proxy records them (SessionBlocks).
	first := elideBody(t, map[string]any{"role": "user", "parts": []any{
		map[string]any{"text": "Look:\n```go main.go\n" + file + "```\nAnd this picture:"},
		map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString(img)}},
	}})
	blocks, err := SessionBlocks(first, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	sent = map[string]bool{}
	for _, b := range blocks {
		sent[b.SHA256] = true
	}
	return in, sent, file, img
}

// TestAuditSessionAccepts: the audit accepts what Elide made, and Elide
// replaced both the file and the image.
func TestAuditSessionAccepts(t *testing.T) {
	in, sent, file, _ := elideCase(t)
	out, reps, err := Elide(in, DefaultOptions(), func(h string) bool { return sent[h] })
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[0].Rule != RuleUnchanged || reps[1].Rule != RuleImage {
		t.Fatalf("replacements = %+v, want the file and the image", reps)
	}
	if bytes.Contains(out, []byte(file[:200])) || !json.Valid(out) {
		t.Fatalf("output still holds the file, or is not JSON:\n%s", out)
	}
}

// TestAuditSessionFails: each way an elision could lose or forge content
// fails the audit, for the right reason.
func TestAuditSessionFails(t *testing.T) {
	replaceOut := func(out []byte, old, new string) []byte {
		return bytes.Replace(out, []byte(old), []byte(new), 1)
	}
	tests := []struct {
		name   string
		tamper func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte)
		want   AuditReason
	}{
		{"not sent in the session", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			delete(sent, rep.Replacements[0].SHA256)
			return in, out
		}, AuditTargetMissing},
		{"image not sent in the session", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			delete(sent, rep.Replacements[1].SHA256)
			return in, out
		}, AuditTargetMissing},
		{"hash of other bytes", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			r := &rep.Replacements[0]
			fake := hexSHA([]byte("something else"))
			sent[fake] = true
			nref := strings.Replace(r.Reference, r.SHA256[:12], fake[:12], 1)
			out = replaceOut(out, r.Reference, nref)
			r.SHA256, r.Reference = fake, nref
			return in, out
		}, AuditRefMismatch},
		{"edited file in the input", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			// The bytes replaced differ from the ones sent: a changed
			// line of the file must never become "unchanged".
			return bytes.Replace(in, []byte("return 7 * 1"), []byte("return 7 * 2"), 1), out
		}, AuditRefMismatch},
		{"reference without where", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			r := &rep.Replacements[0]
			nref := strings.Replace(r.Reference, ", identical to the copy "+SessionWhere, "", 1)
			out = replaceOut(out, r.Reference, nref)
			r.Reference = nref
			return in, out
		}, AuditRefMismatch},
		{"name with a bracket", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			r := &rep.Replacements[0]
			nref := strings.Replace(r.Reference, r.Document, "x] [y", 1)
			out = replaceOut(out, r.Reference, nref)
			r.Document, r.Reference = "x] [y", nref
			return in, out
		}, AuditRefMismatch},
		{"recorded with a target", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			rep.Replacements[0].Target = 0
			return in, out
		}, AuditRefMismatch},
		{"outside the new turn", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			// Turns appended after the one Elide took for the new turn.
			return appendTurns(in), appendTurns(out)
		}, AuditTargetMissing},
		{"new turn a model prefill", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			return lastRole(in, `"role":"model"`), lastRole(out, `"role":"model"`)
		}, AuditTargetMissing},
		{"new turn's role given twice", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			return lastRole(in, `"role":"user","role":"model"`), lastRole(out, `"role":"user","role":"model"`)
		}, AuditTargetMissing},
		{"text dropped next to a reference", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			return in, replaceOut(out, "And the picture:", "And the")
		}, AuditExpandMismatch},
		{"question dropped", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			return in, replaceOut(out, "Hello", "")
		}, AuditExpandMismatch},
		{"span out of order", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			c := rep.aud.cuts
			c[0], c[1] = c[1], c[0]
			return in, out
		}, AuditStructure},
		{"records dropped", func(in, out []byte, rep *Report, sent map[string]bool) ([]byte, []byte) {
			rep.aud = nil
			return in, out
		}, AuditStructure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, sent, _, _ := elideCase(t)
			out, rep, err := elide(in, DefaultOptions(), func(h string) bool { return sent[h] })
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Replacements) != 2 {
				t.Fatalf("%d replacements, want 2", len(rep.Replacements))
			}
			if err := auditSession(in, out, rep, func(h string) bool { return sent[h] }); err != nil {
				t.Fatalf("untampered: %v", err)
			}
			in, out = tt.tamper(bytes.Clone(in), bytes.Clone(out), rep, sent)
			err = auditSession(in, out, rep, func(h string) bool { return sent[h] })
			var ae *AuditError
			if !errors.As(err, &ae) || ae.Reason != tt.want {
				t.Fatalf("audit = %v, want reason %s", err, tt.want)
			}
		})
	}
}

// TestAuditRejectsSessionRefs: Request's audit never accepts a session
// reference (no copy in the body), nor does the session audit without a
// sent set.
func TestAuditRejectsSessionRefs(t *testing.T) {
	in, sent, _, _ := elideCase(t)
	out, rep, err := elide(in, DefaultOptions(), func(h string) bool { return sent[h] })
	if err != nil {
		t.Fatal(err)
	}
	var ae *AuditError
	if err := Audit(in, out, rep); !errors.As(err, &ae) || ae.Reason != AuditTargetMissing {
		t.Errorf("Audit of an elision = %v, want %s", err, AuditTargetMissing)
	}
	if err := auditSession(in, out, rep, nil); !errors.As(err, &ae) || ae.Reason != AuditStructure {
		t.Errorf("auditSession without a sent set = %v, want %s", err, AuditStructure)
	}
}

// FuzzElideAudit: whatever the session and what it sent, Elide's own
// output passes its audit (a failure is an Elide defect or a false alarm
// of the audit), each reference names a sent hash, and un-sending any one
// of them fails the audit.
func FuzzElideAudit(f *testing.F) {
	f.Add("```go a.go\n"+strings.Repeat("func a() { return 1 }\n", 8)+"```", "<file path=\"b\">\n"+strings.Repeat("beta gamma\n", 16)+"</file>", uint16(0x0f0f), uint8(4))
	f.Add("```go a.go\nfunc a() {}\nfunc b() {}\n```", "func a() {}\nfunc c() {}\n", uint16(0x5a5a), uint8(0))
	f.Add("<file path=\"x\">\nalpha\nbeta\n</file>", "--- x ---\nalpha\nbeta\n--- End ---", uint16(0x00ff), uint8(3))
	f.Add("```go a.go\n"+strings.Repeat("\tfmt.Println(\"a\\tb\")\n", 40)+"```", "<file path=\"b\">\n"+strings.Repeat("beta \"gamma\" é\n", 40)+"</file>", uint16(0xf0f0), uint8(1))
	f.Add("```go a.go\n"+strings.Repeat("func a() { return 1 }\n", 8)+"```", "<file path=\"b\">\n"+strings.Repeat("beta gamma\n", 16)+"</file>", uint16(0x8f0f), uint8(0x51))
	f.Add("<file path=\"x\">\n"+strings.Repeat("alpha\n", 20)+"</file>", "Q?", uint16(0x0001), uint8(0x52))
	f.Add("```\n"+strings.Repeat("x := \"é\\t\"\n", 20)+"```", "```\n"+strings.Repeat("x := 1\n", 20)+"```", uint16(0x8000), uint8(0x70))
	f.Add("{\"file\":\"main.go\",\"content\":\""+strings.Repeat("line\\n", 30)+"\"}", "```\n"+strings.Repeat("x := 1\n", 20)+"```", uint16(0x3c3c), uint8(2))
	f.Fuzz(func(t *testing.T, a, b string, pat uint16, shape uint8) {
		// History turns, then the new turn; the session sent a earlier
		// (in a request whose turns the upstream holds, not in this body).
		var contents []any
		n := 2 + int(shape&3)*2
		for i := 0; i < n; i++ {
			text := a
			if pat>>i&1 == 1 || shape&0x40 != 0 {
				text = b
			}
			if pat>>(i+8)&1 == 1 && shape&0x40 == 0 {
				text += "\n" + a
			}
			role := "user"
			if i%2 == 1 {
				role = "model"
			}
			contents = append(contents, textTurn(role, text))
		}
		last := "Again:\n" + a
		if pat&0x8000 != 0 {
			last = b + "\n" + a + "\nWhat changed?"
		}
		contents = append(contents, textTurn("user", last))
		body, err := json.Marshal(map[string]any{"contents": contents})
		if err != nil {
			return
		}
		opts := DefaultOptions()
		opts.MinBlockBytes = 16
		in, _, err := Request(body, opts, nil)
		if err != nil {
			return
		}
		earlier, err := json.Marshal(map[string]any{"contents": []any{textTurn("user", "Earlier:\n"+a+"\n"+b)}})
		if err != nil {
			return
		}
		blocks, err := SessionBlocks(earlier, opts)
		if err != nil {
			t.Fatalf("SessionBlocks: %v", err)
		}
		sent := map[string]bool{}
		for i, bl := range blocks {
			if shape&0x10 != 0 || pat>>(i%16)&1 == 1 {
				sent[bl.SHA256] = true
			}
		}
		if shape&0x20 != 0 {
			sent[hexSHA([]byte(a))] = true
			sent[hexSHA([]byte(b))] = true
		}
		isSent := func(h string) bool { return sent[h] }
		out, rep, err := elide(in, opts, isSent)
		if err != nil {
			t.Fatalf("elide: %v", err)
		}
		if rep.aud == nil {
			if !bytes.Equal(out, in) || len(rep.Replacements) > 0 {
				t.Fatal("a change without records")
			}
			return
		}
		if err := auditSession(in, out, rep, isSent); err != nil {
			t.Fatalf("Elide's output fails its audit: %v\nin: %s\nout: %s", err, in, out)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out: %s", out)
		}
		for _, r := range rep.Replacements {
			if r.Target == -1 && !sent[r.SHA256] {
				t.Fatalf("a session reference to an unsent hash: %+v", r)
			}
		}
		for _, r := range rep.Replacements {
			if r.Target != -1 {
				continue
			}
			h := r.SHA256
			without := func(x string) bool { return x != h && sent[x] }
			if auditSession(in, out, rep, without) == nil {
				t.Fatalf("the audit passed a reference to %s with it unsent", h[:12])
			}
		}
	})
}

// appendTurns returns body, whose last member is "contents", with a model
// turn and a new user turn appended to contents.
func appendTurns(body []byte) []byte {
	i := bytes.LastIndex(body, []byte("]}"))
	return append(append(body[:i:i], `,{"role":"model","parts":[{"text":"ok"}]},{"role":"user","parts":[{"text":"new question"}]}`...), body[i:]...)
}

// lastRole replaces the role member of body's last content.
func lastRole(body []byte, role string) []byte {
	i := bytes.LastIndex(body, []byte(`"role":"user"`))
	return slices.Concat(body[:i], []byte(role), body[i+len(`"role":"user"`):])
}

// TestElideNotInPrefill: a trailing model content is the model's own
// words, continued as they are: Elide puts no session reference there,
// even when it holds a block the session sent.
func TestElideNotInPrefill(t *testing.T) {
	in, sent, _, _ := elideCase(t)
	prefill := lastRole(in, `"role":"model"`)
	out, reps, err := Elide(prefill, DefaultOptions(), func(h string) bool { return sent[h] })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if r.Target == -1 {
			t.Errorf("session reference in a model prefill: %s", r.Reference)
		}
	}
	if !bytes.Equal(out, prefill) {
		t.Errorf("Elide changed a prefill:\n%s", out)
	}
	// The same body as a user turn is elided (the case is live).
	if _, reps, err := Elide(in, DefaultOptions(), func(h string) bool { return sent[h] }); err != nil || len(reps) != 2 {
		t.Fatalf("user turn: %d replacements, err %v; want 2", len(reps), err)
	}
}

func TestUserContent(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want bool
	}{
		{`{"parts":[{"text":"a"}]}`, true},
		{`{"role":"user","parts":[]}`, true},
		{`{"parts":[],"r\u006fle":"us\u0065r"}`, true},
		{`{"role":"model","parts":[]}`, false},
		{`{"role":"","parts":[]}`, false},
		{`{"role":"user","role":"user"}`, false},
		{`{"role":null}`, false},
		{`{"role":["user"]}`, false},
		{`{"parts":[{"role":"model"}]}`, true},
		{`[1]`, false},
	} {
		if got := userContent([]byte(tt.raw)); got != tt.want {
			t.Errorf("userContent(%s) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}

func TestLastContent(t *testing.T) {
	for _, tt := range []struct {
		body string
		want string // "" for not found
	}{
		{`{"contents":[{"a":1},{"b":[2]}]}`, `{"b":[2]}`},
		{` { "x" : {"contents":[{"no":1}]} , "contents" : [ {"a":"]}"} ] , "y":[{"z":1}] } `, `{"a":"]}"}`},
		{`{"contents":[]}`, ""},
		{`{"contents":[{"a":1}],"contents":[{"b":1}]}`, ""},
		{`{"contents":[{"a":1}]}{}`, ""},
		{`{"contents":[1]}`, ""},
		{`[{"contents":[{"a":1}]}]`, ""},
		{`{"contents":[{"a":1}]`, ""},
	} {
		got, ok := lastContent([]byte(tt.body))
		if tt.want == "" {
			if ok {
				t.Errorf("lastContent(%s) = %q, want none", tt.body, tt.body[got.start:got.end])
			}
			continue
		}
		if !ok || tt.body[got.start:got.end] != tt.want {
			t.Errorf("lastContent(%s) = %v %v, want %s", tt.body, got, ok, tt.want)
		}
	}
}
