package rewrite

import (
	"strings"
	"unicode/utf8"
)

// The audit of a JSON history's un-flattening (jsonhist.go). A turn made
// from a JSON history holds, for some of its ranges, the decoding of a
// JSON string of the original text instead of the range itself: the
// audit checks, with its own decoder, that such a range is the whole
// contents of a valid JSON string (a quote on either side, no unescaped
// quote or control byte inside, valid escapes and paired surrogates), and
// rebuilds the turn from the decoding. A promoted model turn of a JSON
// history is then the decoded string, byte for byte.

// auditQuoted checks piece k of turn t (turn index i) when it is quoted.
func auditQuoted(text string, t auditTurn, k, i int) error {
	if t.quoted == nil || !t.quoted[k] {
		return nil
	}
	p := t.pieces[k]
	if p.start < 1 || p.end >= len(text) || text[p.start-1] != '"' || text[p.end] != '"' || !auditJSONString(text[p.start:p.end]) {
		if t.model {
			return auditFail(AuditServedAnswerAltered, -1, "model turn %d: range %d..%d is not a JSON string", i, p.start, p.end)
		}
		return auditFail(AuditUnflattenMismatch, -1, "turn %d: range %d..%d is not a JSON string", i, p.start, p.end)
	}
	return nil
}

// auditJSONString reports whether s is the valid contents of a JSON
// string.
func auditJSONString(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c < 0x20:
			return false
		case c != '\\':
			i++
			continue
		}
		if i+1 >= len(s) {
			return false
		}
		if s[i+1] != 'u' {
			if escByte[s[i+1]] == 0 {
				return false
			}
			i += 2
			continue
		}
		r, ok := auditHex4(s[i+2:])
		if !ok {
			return false
		}
		i += 6
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return false
		case r >= 0xd800 && r <= 0xdbff:
			lo, ok := auditHex4(s[min(i+2, len(s)):])
			if !ok || s[i] != '\\' || s[i+1] != 'u' || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		}
	}
	return utf8.ValidString(s)
}

func auditHex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// appendPiece appends piece k of turn t, escaped as JSON string contents:
// the range of text itself, or its decoding when it is quoted.
func appendPiece(b []byte, text string, t auditTurn, k int) []byte {
	p := t.pieces[k]
	if t.quoted == nil || !t.quoted[k] {
		return appendEscaped(b, text[p.start:p.end])
	}
	dec, _ := decodeRaw(nil, []byte(text[p.start:p.end]))
	return appendEscaped(b, bytesString(dec))
}

// auditMaxValue bounds a string value that un-flattening of a JSON
// history may leave out between two ranges (a role, a timestamp, an id).
const auditMaxValue = 64

// auditJSONGaps checks, for the record of a JSON history (one with a
// quoted range), what lies between its ranges: JSON punctuation, keys and
// short values only. A non-empty string that is the value of a content
// member ("content", "text", "message", "value", "parts", or a string
// element of an array that is one) is a message left out; a value longer
// than auditMaxValue bytes is more than metadata.
func auditJSONGaps(text string, u *auditUnflat) error {
	has := false
	for _, t := range u.turns {
		for _, q := range t.quoted {
			has = has || q
		}
	}
	if !has {
		return nil
	}
	prev, prevQ := 0, false
	for _, t := range u.turns {
		for k, p := range t.pieces {
			q := t.quoted != nil && t.quoted[k]
			if err := auditJSONGap(text, prev, p.start, prevQ, q); err != nil {
				return err
			}
			prev, prevQ = p.end, q
		}
	}
	return auditJSONGap(text, prev, len(text), prevQ, false)
}

// auditJSONGap checks text[a:b], the gap after a range (quoted: its
// closing quote starts the gap) and before the next (quoted: its opening
// quote ends it).
func auditJSONGap(text string, a, b int, afterQuoted, beforeQuoted bool) error {
	if afterQuoted && a < b && text[a] == '"' {
		a++
	}
	if beforeQuoted && b > a && text[b-1] == '"' {
		b--
	}
	g := text[a:b]
	key, depth, arr := "", 0, -1
	for i := 0; i < len(g); i++ {
		switch g[i] {
		case '{':
			depth++
			key = ""
		case '[':
			depth++
			if auditContentKey(key) {
				arr = depth
			}
			key = ""
		case '}', ']':
			depth--
			if depth < arr {
				arr = -1
			}
		case '"':
			j := i + 1
			for j < len(g) && g[j] != '"' {
				if g[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(g) {
				return auditFail(AuditUnflattenMismatch, -1, "an unterminated string left out at offset %d", a+i)
			}
			s := g[i+1 : j]
			n := j + 1
			for n < len(g) && isWS(g[n]) {
				n++
			}
			i = j
			if n < len(g) && g[n] == ':' {
				key = s
				continue
			}
			if len(s) > auditMaxValue {
				return auditFail(AuditUnflattenMismatch, -1, "a value of %d bytes left out at offset %d", len(s), a+i)
			}
			if s != "" && (auditContentKey(key) || depth == arr) {
				return auditFail(AuditUnflattenMismatch, -1, "a message's content left out at offset %d", a+i)
			}
			key = ""
		}
	}
	return nil
}

// auditContentKey reports whether key names a message's content.
func auditContentKey(key string) bool {
	switch strings.ToLower(key) {
	case "content", "text", "message", "value", "parts":
		return true
	}
	return false
}
