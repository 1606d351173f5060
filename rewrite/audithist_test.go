package rewrite

import (
	"bytes"
	"testing"
)

// TestAuditFailsJSONHistory tampers with good un-flattenings of JSON
// histories, their outputs or their records, and checks that the audit
// fails each with the right reason: it decodes the quoted ranges itself
// and knows what may be left out between them.
func TestAuditFailsJSONHistory(t *testing.T) {
	const esc = "jsonhist-escapes-unicode.txtar" // user, model (escaped in the text), user
	const forged = "jsonhist-forged.txtar"       // user, model, user + forged message + user
	tests := []struct {
		name   string
		golden string
		tamper func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report)
		want   AuditReason
	}{
		{"model turn sent still JSON-encoded", esc, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The engine forgot to decode the served answer: the model
			// turn holds the JSON string's contents as they are.
			u := rep.aud.uf
			text := unescape(in[u.str.start:u.str.end])
			p := u.turns[1].pieces[0]
			decoded := appendEscaped(nil, unescape([]byte(text[p.start:p.end])))
			encoded := appendEscaped(nil, text[p.start:p.end])
			if bytes.Equal(decoded, encoded) || !bytes.Contains(out, decoded) {
				t.Fatal("the golden's answer has no escape")
			}
			return in, bytes.Replace(out, decoded, encoded, 1), rep
		}, AuditServedAnswerAltered},
		{"record says the model range is raw", esc, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// Then its quotes are left out around it, which only a
			// range inside a JSON string does.
			rep.aud.uf.turns[1].quoted[0] = false
			return in, out, rep
		}, AuditUnflattenMismatch},
		{"model range starts inside its string", esc, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			rep.aud.uf.turns[1].pieces[0].start++
			return in, out, rep
		}, AuditServedAnswerAltered},
		{"user range ends inside its string", esc, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			p := &rep.aud.uf.turns[2].pieces[0]
			p.end--
			return in, out, rep
		}, AuditUnflattenMismatch},
		{"quoted flags missing", esc, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			rep.aud.uf.turns[2].quoted = []bool{true, true}
			return in, out, rep
		}, AuditStructure},
		{"a forged message left out", forged, func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// The last user turn holds the question, the forged message
			// verbatim and the new question; drop the forged message
			// from the record and from the output, consistently.
			last := &rep.aud.uf.turns[len(rep.aud.uf.turns)-1]
			if len(last.pieces) != 3 || last.quoted[1] {
				t.Fatalf("the last turn has pieces %v quoted %v", last.pieces, last.quoted)
			}
			u := rep.aud.uf
			text := unescape(in[u.str.start:u.str.end])
			p := last.pieces[1]
			drop := append([]byte(`\n\n`), appendEscaped(nil, text[p.start:p.end])...)
			if !bytes.Contains(out, drop) {
				t.Fatal("forged message not in the output")
			}
			last.pieces = append(last.pieces[:1:1], last.pieces[2])
			last.quoted = []bool{true, true}
			return in, bytes.Replace(out, drop, nil, 1), rep
		}, AuditUnflattenMismatch},
		{"a user message left out", "jsonhist-author-text.txtar", func(t *testing.T, in, out []byte, rep *Report) ([]byte, []byte, *Report) {
			// Claim the last user turn is the text after the history:
			// the question between them would be lost.
			u := rep.aud.uf
			last := &u.turns[len(u.turns)-1]
			text := unescape(in[u.str.start:u.str.end])
			i := bytes.LastIndexByte([]byte(text), '}')
			*last = auditTurn{pieces: []flatSpan{{i, i + 1}}}
			return in, out, rep
		}, AuditUnflattenMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, out, rep := goldenCase(t, tt.golden)
			rc := copyReport(rep)
			for i := range rc.aud.uf.turns {
				rc.aud.uf.turns[i].quoted = append([]bool(nil), rc.aud.uf.turns[i].quoted...)
			}
			in, out, rc = tt.tamper(t, in, out, rc)
			err := Audit(in, out, rc)
			ae, ok := err.(*AuditError)
			if !ok || ae.Reason != tt.want {
				t.Fatalf("Audit = %v, want reason %s", err, tt.want)
			}
			t.Log(err)
		})
	}
}

func TestAuditJSONString(t *testing.T) {
	for s, want := range map[string]bool{
		``: true, `plain`: true, `a\"b\\c\/d\n\t\r\b\f`: true, `\u00e9\ud83d\ude00`: true, "é 😀": true,
		`a"b`: false, "a\nb": false, `\x`: false, `\u12`: false, `\u12g4`: false, `\`: false,
		`\ud83d`: false, `\ude00`: false, `\ud83d\u0041`: false, "\xff": false,
	} {
		if got := auditJSONString(s); got != want {
			t.Errorf("auditJSONString(%q) = %v, want %v", s, got, want)
		}
	}
}
