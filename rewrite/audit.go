package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// The audit (DESIGN §3 "Lossless, checkable"). Before a rewritten body is
// sent, Audit checks it against the original with the records the
// rewrite kept in its Report. It shares no code with segmentation or
// identity (fences, tags, banners, similarity, the lexicon): it trusts the
// records only for where things are, and re-derives from the original
// bytes everything that must hold:
//
//   - the original with each un-flattened turn rebuilt from its recorded
//     ranges, each recorded span swapped for its reference and each split
//     part split is the rewritten body, byte for byte;
//   - the ranges of an un-flattened turn are in order inside the original
//     text, and what lies between them (labels, white space) holds at most
//     maxGapBytes bytes besides white space; a promoted model turn is one
//     range of the original, byte for byte, and nothing in it is replaced;
//     for a JSON history a range may instead be the contents of a JSON
//     string, decoded by the audit's own decoder, with no message content
//     left out between ranges (audithist.go);
//   - each reference names the SHA-256 of the exact bytes it replaced,
//     hashed once per distinct content; the rewrite hashed those bytes
//     already, and records per cut which raw span of the body it hashed
//     to which hash (auditCut.sum): when that span holds the same bytes as
//     the cut and the hash is the one named, the audit takes the hash
//     from this memo instead of decoding and hashing again (issue 13: the
//     decoding and SHA-256 were 0.4–1× the rewrite's time). The memo is
//     the value of a pure function of the bytes (their JSON decoding, as
//     the scanner decoded them, and its SHA-256), never a conclusion of
//     segmentation or identity, and an entry for other bytes is no
//     evidence;
//   - the full copy an unchanged or image reference points to stays in the
//     output, uncut, with the same content (line endings normalised);
//   - a superseded reference is not in the newest user turn, which the
//     audit finds in the body itself (auditnewest.go: the last element of
//     contents whose role is "user" or absent), never from the engine's
//     index of it or the Report's Turn; nor in a promoted model turn; it
//     replaces a document block (not a run of prose lines nor a
//     coalesced span), does not cross the boundary between two pieces of
//     an un-flattened turn, and the newer version it points to stays in
//     the output in full.

// AuditReason names why an audit failed. The set is closed (AuditReasons):
// metrics use the values as label values.
type AuditReason string

const (
	// AuditStructure: the records are missing or inconsistent (a span out
	// of range or not inside a text string, spans overlapping, a count
	// that does not match the Report).
	AuditStructure AuditReason = "structure"
	// AuditRefMismatch: a reference does not name the SHA-256 of the bytes
	// it replaced, or is not the kind of reference its record says.
	AuditRefMismatch AuditReason = "ref_mismatch"
	// AuditExpandMismatch: the rewritten body with every reference
	// expanded is not the original.
	AuditExpandMismatch AuditReason = "expand_mismatch"
	// AuditUnflattenMismatch: the turns made by un-flattening do not
	// reproduce the original text with only labels and white space left
	// out.
	AuditUnflattenMismatch AuditReason = "unflatten_mismatch"
	// AuditServedAnswerAltered: a promoted model turn is not one range of
	// the original, byte for byte, or part of it was replaced.
	AuditServedAnswerAltered AuditReason = "served_answer_altered"
	// AuditTargetMissing: the full copy an unchanged or image reference
	// points to is not in the output in full, or differs.
	AuditTargetMissing AuditReason = "target_missing"
	// AuditSupersededNewestTurn: a superseded reference in the newest
	// user turn.
	AuditSupersededNewestTurn AuditReason = "superseded_newest_turn"
	// AuditSupersededNotDocument: a superseded reference that replaces
	// something other than a document block in a user turn.
	AuditSupersededNotDocument AuditReason = "superseded_not_document"
	// AuditSupersededCrossesTurn: a superseded reference whose span
	// crosses the boundary between two transcript turns.
	AuditSupersededCrossesTurn AuditReason = "superseded_crosses_turn"
	// AuditSupersededTargetMissing: the newer version a superseded
	// reference points to is not in the output in full.
	AuditSupersededTargetMissing AuditReason = "superseded_target_missing"
)

// AuditReasons lists every AuditReason, in a stable order.
var AuditReasons = []AuditReason{
	AuditStructure, AuditRefMismatch, AuditExpandMismatch, AuditUnflattenMismatch,
	AuditServedAnswerAltered, AuditTargetMissing, AuditSupersededNewestTurn,
	AuditSupersededNotDocument, AuditSupersededCrossesTurn, AuditSupersededTargetMissing,
	AuditJSONStructure,
}

// AuditError is the error Audit returns. It never holds prompt text.
type AuditError struct {
	Reason AuditReason
	// Replacement is the index into Report.Replacements of the reference
	// that failed, -1 when the failure is not about one.
	Replacement int
	// Detail says what failed, in offsets and counts.
	Detail string
}

func (e *AuditError) Error() string {
	if e.Replacement >= 0 {
		return fmt.Sprintf("rewrite audit: %s: replacement %d: %s", e.Reason, e.Replacement, e.Detail)
	}
	return fmt.Sprintf("rewrite audit: %s: %s", e.Reason, e.Detail)
}

func auditFail(r AuditReason, i int, format string, args ...any) *AuditError {
	return &AuditError{Reason: r, Replacement: i, Detail: fmt.Sprintf(format, args...)}
}

// maxGapBytes bounds what un-flattening may leave out between two
// consecutive ranges of a transcript, besides white space: a role label
// and structural tokens ("</assistant>\n</turn>\n<turn>\n<user>").
const maxGapBytes = 160

// Audit checks that rewritten is what Request made of original according
// to rep (see the list above). It returns nil or an *AuditError. A caller
// that gets an error forwards the original body. original is the body
// given to Request, unmodified since (rep's memo of hashes views it).
func Audit(original, rewritten []byte, rep *Report) error {
	return audit(original, rewritten, rep, true)
}

// audit is Audit; memo false turns off its shortcuts (the rewrite's memo
// of hashes and the newest-turn walk's passes over spans it found clear),
// so that tests can check they change no verdict.
func audit(original, rewritten []byte, rep *Report, memo bool) error {
	return auditWith(original, rewritten, rep, memo, memo)
}

// auditWith is audit with each shortcut on or off: memo for the memo of
// hashes, pass for the walk's passes over clear spans (auditnewest.go).
func auditWith(original, rewritten []byte, rep *Report, memo, pass bool) error {
	if rep == nil {
		return auditFail(AuditStructure, -1, "no report")
	}
	a := rep.aud
	if a == nil {
		if rep.Changed() || !bytes.Equal(original, rewritten) {
			return auditFail(AuditStructure, -1, "a changed body without records")
		}
		return nil
	}
	if len(a.cuts) != len(rep.Replacements) {
		return auditFail(AuditStructure, -1, "%d records for %d replacements", len(a.cuts), len(rep.Replacements))
	}
	au := auditor{rep: rep, a: a, b1: original, memo: memo, pass: pass}
	if a.uf != nil {
		if err := au.unflat(original); err != nil {
			return err
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

// auditor holds one audit's state.
type auditor struct {
	rep *Report
	a   *auditRec
	// b1 is the body the cuts refer to: the original, or the original
	// with the un-flattened turns rebuilt.
	b1 []byte
	// ufStart and ufEnd bound the rebuilt turns in b1; ufTurns holds
	// their text strings and pieces in b1 offsets.
	ufStart, ufEnd int
	ufTurns        []ufSpans
	// buf is scratch space for decoding.
	buf []byte
	// boxes holds the JSON values that hold spans (auditjson.go).
	boxes map[span]*subBox
	// memo enables the rewrite's memo of hashes (memoed).
	memo bool
	// pass lets the newest-turn walk pass over the spans of cuts and full
	// copies it finds clear (walker.known).
	pass bool
	// sent is the session's set of blocks the upstream holds (Elide); nil
	// for Request, where a session reference always fails.
	sent func(sha256 string) bool
	// last is the span of the last content, which auditSession finds in
	// the body itself.
	last span
	// newest is the span in b1 of the newest user turn ({-1, -1}: none),
	// found by the audit itself (newestTurn) when newestFound.
	newest      span
	newestFound bool
}

// ufSpans is one rebuilt turn: its text string and the raw spans of its
// pieces, in b1.
type ufSpans struct {
	model  bool
	str    span
	pieces []span
}

// unflat checks the un-flattening record and rebuilds the body the cuts
// refer to.
func (au *auditor) unflat(original []byte) error {
	u := au.a.uf
	if u.obj.start < 0 || u.obj.end > len(original) || u.str.start < u.obj.start || u.str.end > u.obj.end || u.str.start > u.str.end {
		return auditFail(AuditStructure, -1, "un-flattened content out of range")
	}
	raw := original[u.str.start:u.str.end]
	dec, ok := decodeRaw(nil, raw)
	if !ok {
		return auditFail(AuditStructure, -1, "un-flattened text does not decode")
	}
	text := bytesString(dec)
	n := len(u.turns)
	if n < 3 || u.turns[0].model || u.turns[n-1].model {
		return auditFail(AuditUnflattenMismatch, -1, "%d turns, not user … user", n)
	}
	prev := 0
	for i, t := range u.turns {
		if i > 0 && t.model == u.turns[i-1].model {
			return auditFail(AuditUnflattenMismatch, -1, "turns %d and %d have one role", i-1, i)
		}
		if len(t.pieces) == 0 {
			return auditFail(AuditUnflattenMismatch, -1, "turn %d is empty", i)
		}
		if t.model && len(t.pieces) != 1 {
			return auditFail(AuditServedAnswerAltered, -1, "model turn %d joins %d ranges", i, len(t.pieces))
		}
		if t.quoted != nil && len(t.quoted) != len(t.pieces) {
			return auditFail(AuditStructure, -1, "turn %d: %d quoted flags for %d ranges", i, len(t.quoted), len(t.pieces))
		}
		for k, p := range t.pieces {
			if p.start < prev || p.end <= p.start || p.end > len(text) {
				return auditFail(AuditUnflattenMismatch, -1, "turn %d: range %d..%d out of order", i, p.start, p.end)
			}
			if err := auditQuoted(text, t, k, i); err != nil {
				return err
			}
			if g := nonSpace(text[prev:p.start]); g > maxGapBytes {
				return auditFail(AuditUnflattenMismatch, -1, "%d bytes left out before offset %d", g, p.start)
			}
			prev = p.end
		}
	}
	if g := nonSpace(text[prev:]); g > maxGapBytes {
		return auditFail(AuditUnflattenMismatch, -1, "%d bytes left out at the end", g)
	}
	if err := auditJSONGaps(text, u); err != nil {
		return err
	}
	// Rebuild the turns as un-flattening writes them.
	b := make([]byte, 0, len(original)+64*n)
	b = append(b, original[:u.obj.start]...)
	au.ufStart = len(b)
	au.ufTurns = make([]ufSpans, n)
	for i, t := range u.turns {
		if i > 0 {
			b = append(b, ',')
		}
		role := "user"
		if t.model {
			role = "model"
		}
		b = append(b, `{"role":"`...)
		b = append(b, role...)
		b = append(b, `","parts":[{"text":"`...)
		us := &au.ufTurns[i]
		us.model, us.str.start = t.model, len(b)
		us.pieces = make([]span, len(t.pieces))
		for k := range t.pieces {
			if k > 0 {
				b = append(b, `\n\n`...)
			}
			s := len(b)
			b = appendPiece(b, text, t, k)
			us.pieces[k] = span{s, len(b)}
		}
		us.str.end = len(b)
		b = append(b, `"}]}`...)
	}
	au.ufEnd = len(b)
	au.b1 = append(b, original[u.obj.end:]...)
	return nil
}

// nonSpace counts the bytes of s that are not ASCII white space.
func nonSpace(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
		default:
			n++
		}
	}
	return n
}

// spans checks that every cut lies inside a text string (or is a whole
// inlineData part), in order and without overlap, and that every full
// copy lies inside a string and outside every cut.
func (au *auditor) spans() error {
	b := au.b1
	if err := au.subBoxes(); err != nil {
		return err
	}
	prev := 0
	for i := range au.a.cuts {
		c := &au.a.cuts[i]
		if c.start < prev || c.end < c.start || c.end > len(b) {
			return auditFail(AuditStructure, i, "span %d..%d out of order", c.start, c.end)
		}
		prev = c.end
		if c.x != nil {
			if err := au.subSpan(i, c); err != nil {
				return err
			}
			continue
		}
		if c.kind == kindImage {
			if c.end-c.start < 2 || b[c.start] != '{' || b[c.end-1] != '}' || !insideSpan(span{c.start, c.end}, c.str.start, c.str.end) ||
				!isStringOf(b, c.str, "data") {
				return auditFail(AuditStructure, i, "not an inlineData part")
			}
			continue
		}
		if !insideSpan(c.str, c.start, c.end) || !isStringOf(b, c.str, "text") || !insideSpan(span{c.start, c.end}, c.cs, c.ce) || c.cs > c.ce {
			return auditFail(AuditStructure, i, "span not inside a text string")
		}
		if !escBoundary(b, c.str.start, c.start) || !escBoundary(b, c.str.start, c.end) {
			return auditFail(AuditStructure, i, "span splits an escape")
		}
	}
	for i := range au.a.cuts {
		c := &au.a.cuts[i]
		if c.session {
			continue // no full copy in the body (sessionCut)
		}
		r := AuditTargetMissing
		if c.super {
			r = AuditSupersededTargetMissing
		}
		t := c.tfull
		var ok bool
		if c.tx != nil {
			ok = au.subTarget(i, c)
		} else if c.kind == kindImage {
			ok = insideSpan(t, c.tstr.start, c.tstr.end) && t.end-t.start >= 2 && b[t.start] == '{' && b[t.end-1] == '}' &&
				c.ts == c.tstr.start && c.te == c.tstr.end && isStringOf(b, c.tstr, "data")
		} else {
			ok = insideSpan(c.tstr, t.start, t.end) && insideSpan(t, c.ts, c.te) && isStringOf(b, c.tstr, "text") &&
				escBoundary(b, c.tstr.start, t.start) && escBoundary(b, c.tstr.start, t.end) &&
				escBoundary(b, c.tstr.start, c.ts) && escBoundary(b, c.tstr.start, c.te)
		}
		if !ok {
			return auditFail(r, i, "full copy %d..%d not inside a string", t.start, t.end)
		}
		if au.cutIn(t.start, t.end) {
			return auditFail(r, i, "full copy %d..%d is replaced in the output", t.start, t.end)
		}
	}
	return nil
}

// cutIn reports whether a cut overlaps b1[lo:hi].
func (au *auditor) cutIn(lo, hi int) bool {
	cuts := au.a.cuts
	k := sort.Search(len(cuts), func(k int) bool { return cuts[k].end > lo })
	return k < len(cuts) && cuts[k].start < hi
}

func insideSpan(s span, lo, hi int) bool { return s.start <= lo && hi <= s.end && lo <= hi }

// isStringOf reports whether b[s.start:s.end] is the contents of a JSON
// string that is the value of member key: a quote on either side, and
// `"key"` and a colon before it.
func isStringOf(b []byte, s span, key string) bool {
	if s.start < 1 || s.end >= len(b) || s.start > s.end || b[s.start-1] != '"' || b[s.end] != '"' {
		return false
	}
	return followsKey(b, s.start-2, key)
}

// followsKey reports whether b[:i+1] ends with `"key"`, a colon and white
// space: the member name of the value that starts after b[i].
func followsKey(b []byte, i int, key string) bool {
	for i >= 0 && isWS(b[i]) {
		i--
	}
	if i < 0 || b[i] != ':' {
		return false
	}
	i--
	for i >= 0 && isWS(b[i]) {
		i--
	}
	k := len(key) + 2
	return i+1 >= k && string(b[i+1-k:i+1]) == `"`+key+`"` && (i+1-k == 0 || b[i-k] != '\\')
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// escBoundary reports whether raw offset off, inside a string whose
// contents start at from, falls between two characters, not inside an
// escape sequence.
func escBoundary(b []byte, from, off int) bool {
	// An escape covering off starts at most 5 bytes before it (\uXXXX);
	// the nearest backslash that starts an escape decides.
	for j := off - 1; j >= max(from, off-5); j-- {
		if b[j] != '\\' {
			continue
		}
		k := j
		for k > from && b[k-1] == '\\' {
			k--
		}
		if (j-k)%2 != 0 {
			continue // an escaped backslash, not the start of an escape
		}
		n := 2
		if j+1 < len(b) && b[j+1] == 'u' {
			n = 6
		}
		return j+n <= off
	}
	return true
}

// decodeRaw returns the decoded contents of a raw JSON string range: the
// bytes themselves when they hold no escape, else their decoding written
// over buf. A decoding is never longer than its raw form.
func decodeRaw(buf, raw []byte) ([]byte, bool) {
	i := bytes.IndexByte(raw, '\\')
	if i < 0 {
		return raw, true
	}
	if cap(buf) < len(raw) {
		buf = make([]byte, len(raw))
	}
	buf = buf[:len(raw)]
	w := copy(buf, raw[:i])
	for i < len(raw) {
		c := raw[i]
		if c != '\\' {
			buf[w] = c
			w++
			i++
			continue
		}
		if i+1 >= len(raw) {
			return nil, false
		}
		if e := escByte[raw[i+1]]; e != 0 {
			buf[w] = e
			w++
			i += 2
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			return nil, false
		}
		r, n := decodeEscape(raw[i:])
		w += utf8.EncodeRune(buf[w:], r)
		i += n
	}
	return buf[:w], true
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// contents checks each reference against the bytes it replaced and the
// full copy it points to, and the rules of superseded references.
func (au *auditor) contents() error {
	b := au.b1
	// hashes maps a hex SHA-256 to content verified to have it, so that
	// each distinct content is hashed once.
	hashes := make(map[string][]byte, len(au.a.cuts))
	for i := range au.a.cuts {
		c := &au.a.cuts[i]
		r := &au.rep.Replacements[i]
		if len(r.SHA256) != 2*sha256.Size || !strings.Contains(r.Reference, "sha256:"+r.SHA256[:12]) {
			return auditFail(AuditRefMismatch, i, "reference does not name the recorded hash")
		}
		var prefix string
		switch {
		case c.kind == kindImage:
			prefix = "[same "
		case c.super:
			prefix = "[superseded: "
		default:
			prefix = "[unchanged: "
		}
		if !strings.HasPrefix(r.Reference, prefix) {
			return auditFail(AuditRefMismatch, i, "reference is not of the recorded kind")
		}
		if c.x != nil || c.tx != nil {
			if err := au.subCut(i, c, r); err != nil {
				return err
			}
			continue
		}
		// Each distinct content is hashed once; a later span with the
		// same hash must hold the same bytes (or decode to them).
		raw := b[c.start:c.end]
		if c.kind == kindImage {
			raw = b[c.str.start:c.str.end]
		}
		if au.memoed(c, r, raw) {
			// The rewrite hashed exactly these bytes to the named hash.
		} else if prev, seen := hashes[r.SHA256]; seen {
			if !bytes.Equal(prev, raw) && !au.sameDecoded(c.kind, prev, raw) {
				return auditFail(AuditRefMismatch, i, "two contents under one hash")
			}
		} else {
			var content []byte
			var ok bool
			if c.kind == kindImage {
				var s string
				s, ok = decodeBase64(raw, bytes.IndexByte(raw, '\\') >= 0)
				content = unsafe.Slice(unsafe.StringData(s), len(s))
			} else if content, ok = decodeRaw(au.buf, raw); ok && cap(content) > cap(au.buf) && unsafe.SliceData(content) != unsafe.SliceData(raw) {
				// Keep a decoding as scratch, never raw itself: raw views
				// the original body, which a later decoding would
				// overwrite.
				au.buf = content
			}
			if !ok {
				return auditFail(AuditStructure, i, "replaced span does not decode")
			}
			sum := sha256.Sum256(content)
			var h [2 * sha256.Size]byte
			hex.Encode(h[:], sum[:])
			if string(h[:]) != r.SHA256 {
				return auditFail(AuditRefMismatch, i, "replaced bytes do not have the recorded hash")
			}
			hashes[r.SHA256] = raw
		}
		if c.session {
			if err := au.sessionCut(i, c, r); err != nil {
				return err
			}
			continue
		}
		if c.super {
			if err := au.superseded(i, c); err != nil {
				return err
			}
			continue
		}
		if !au.sameContent(c) {
			return auditFail(AuditTargetMissing, i, "full copy %d..%d differs", c.ts, c.te)
		}
		if au.inModel(c.start) {
			return auditFail(AuditServedAnswerAltered, i, "a reference inside a promoted model turn")
		}
	}
	return nil
}

// memoed reports whether the rewrite's memo says that raw, the bytes cut
// c replaced, decode to content of the hash r names: the memo entry holds
// that hash, and its span of the hashed body holds the same bytes as raw.
// The memo is the value of a pure function (the SHA-256 of the JSON
// decoding of a raw span), computed once per distinct content while
// rewriting; it is read only for the exact bytes it was computed over, so
// an entry that does not fit the cut (other bytes, another hash) is not
// evidence, and the audit computes the hash itself.
func (au *auditor) memoed(c *auditCut, r *Replacement, raw []byte) bool {
	b := au.a.body
	return au.memo && c.sumSHA != "" && c.sumSHA == r.SHA256 && c.sum.start >= 0 && c.sum.start <= c.sum.end && c.sum.end <= len(b) &&
		bytes.Equal(b[c.sum.start:c.sum.end], raw)
}

// sameContent reports whether the content of cut c equals that of its
// full copy, line endings normalised.
func (au *auditor) sameContent(c *auditCut) bool {
	x, y := au.b1[c.cs:c.ce], au.b1[c.ts:c.te]
	return bytes.Equal(x, y) || au.sameDecoded(c.kind, x, y)
}

// sameDecoded reports whether the raw strings x and y decode to the same
// content: the same bytes for an image, the same text with line endings
// normalised otherwise.
func (au *auditor) sameDecoded(k blockKind, x, y []byte) bool {
	if k == kindImage {
		dx, ok1 := decodeBase64(x, bytes.IndexByte(x, '\\') >= 0)
		dy, ok2 := decodeBase64(y, bytes.IndexByte(y, '\\') >= 0)
		return ok1 && ok2 && dx == dy
	}
	sx, ok1 := decodeRaw(nil, x)
	sy, ok2 := decodeRaw(nil, y)
	return ok1 && ok2 && lf(string(sx)) == lf(string(sy))
}

// lf returns s with CRLF line endings, and a final CR, turned into LF.
func lf(s string) string {
	if strings.IndexByte(s, '\r') < 0 {
		return s
	}
	return strings.TrimSuffix(strings.ReplaceAll(s, "\r\n", "\n"), "\r")
}

// superseded checks the rules of a superseded reference.
func (au *auditor) superseded(i int, c *auditCut) error {
	if !au.newestFound {
		if err := au.findNewest(i); err != nil {
			return err
		}
	}
	if n := au.newest; n.start <= c.start && c.start < n.end {
		return auditFail(AuditSupersededNewestTurn, i, "superseded in the newest user turn (offsets %d..%d)", n.start, n.end)
	}
	switch c.kind {
	case kindFence, kindTag, kindBanner, kindImage, kindTree, kindTabs:
	case kindValue:
		if c.x == nil {
			return auditFail(AuditSupersededNotDocument, i, "a value block outside a value")
		}
	default:
		return auditFail(AuditSupersededNotDocument, i, "superseded span is not a document block")
	}
	if c.merged {
		return auditFail(AuditSupersededNotDocument, i, "superseded span is a coalesced span")
	}
	for _, t := range au.ufTurns {
		if !insideSpan(t.str, c.start, c.end) {
			continue
		}
		if t.model {
			return auditFail(AuditServedAnswerAltered, i, "a reference inside a promoted model turn")
		}
		k := sort.Search(len(t.pieces), func(k int) bool { return t.pieces[k].end >= c.end })
		if k == len(t.pieces) || c.start < t.pieces[k].start {
			return auditFail(AuditSupersededCrossesTurn, i, "superseded span crosses a transcript turn boundary")
		}
	}
	return nil
}

// inModel reports whether b1 offset off lies in a promoted model turn.
func (au *auditor) inModel(off int) bool {
	for _, t := range au.ufTurns {
		if t.model && t.str.start <= off && off < t.str.end {
			return true
		}
	}
	return false
}

// output checks that rewritten is b1 with every cut replaced by its
// reference and every split made.
func (au *auditor) output(rewritten []byte) error {
	if len(au.a.splits) == 0 {
		return au.compare(rewritten)
	}
	b2 := au.expected()
	// Each split part {"text":"LEAD BLOCKS"} is {"text":"BLOCKS"},{"text":"LEAD"}.
	const open, mid, end = `{"text":"`, `"},{"text":"`, `"}`
	w, prev := 0, 0
	expect := func(x []byte) bool {
		if w+len(x) > len(rewritten) || !bytes.Equal(rewritten[w:w+len(x)], x) {
			return false
		}
		w += len(x)
		return true
	}
	for k, s := range au.a.splits {
		if s.obj.start < prev || s.obj.end > len(b2) || !insideSpan(s.obj, s.str.start, s.str.end) || s.at < 0 || s.str.start+s.at > s.str.end ||
			!isStringOf(b2, s.str, "text") {
			return auditFail(AuditStructure, -1, "split %d out of range", k)
		}
		raw := b2[s.str.start:s.str.end]
		if !expect(b2[prev:s.obj.start]) || !expect([]byte(open)) || !expect(raw[s.at:]) || !expect([]byte(mid)) ||
			!expect(raw[:s.at]) || !expect([]byte(end)) {
			return auditFail(AuditExpandMismatch, -1, "split part %d differs at output offset %d", k, w)
		}
		prev = s.obj.end
	}
	if !expect(b2[prev:]) || w != len(rewritten) {
		return auditFail(AuditExpandMismatch, -1, "output differs at offset %d", w)
	}
	return nil
}

const textOpen, textClose = `{"text":"`, `"}`

// refBytes returns the bytes that replace cut i in the output: the
// reference escaped as JSON string contents, wrapped as a text part for
// an inlineData part. scratch may be used to build them.
func (au *auditor) refBytes(i int, scratch []byte) []byte {
	ref := au.rep.Replacements[i].Reference
	if x := au.a.cuts[i].x; x != nil && x.nested && needsEscape(ref) {
		return subRefBytes(ref, scratch)
	}
	img := au.a.cuts[i].kind == kindImage
	if !img && !needsEscape(ref) {
		return unsafe.Slice(unsafe.StringData(ref), len(ref))
	}
	b := scratch[:0]
	if img {
		b = append(b, textOpen...)
	}
	b = appendEscaped(b, ref)
	if img {
		b = append(b, textClose...)
	}
	return b
}

// compare checks, piece by piece, that rewritten is b1 with every cut
// replaced by its reference (no split).
func (au *auditor) compare(rewritten []byte) error {
	b := au.b1
	w, prev := 0, 0
	var scratch []byte
	for i := range au.a.cuts {
		c := &au.a.cuts[i]
		if w+c.start-prev > len(rewritten) || !bytes.Equal(rewritten[w:w+c.start-prev], b[prev:c.start]) {
			return au.mismatch(rewritten)
		}
		w += c.start - prev
		want := au.refBytes(i, scratch)
		if w+len(want) > len(rewritten) || !bytes.Equal(rewritten[w:w+len(want)], want) {
			return auditFail(AuditRefMismatch, i, "reference differs in the output")
		}
		w += len(want)
		prev = c.end
	}
	if !bytes.Equal(rewritten[w:], b[prev:]) {
		return au.mismatch(rewritten)
	}
	return nil
}

// expected returns b1 with every cut replaced by its reference: the
// output before any split.
func (au *auditor) expected() []byte {
	b := au.b1
	if len(au.a.cuts) == 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	prev := 0
	var scratch []byte
	for i := range au.a.cuts {
		c := &au.a.cuts[i]
		out = append(out, b[prev:c.start]...)
		out = append(out, au.refBytes(i, scratch)...)
		prev = c.end
	}
	return append(out, b[prev:]...)
}

// mismatch says where rewritten first differs from the expected output,
// when no part was split.
func (au *auditor) mismatch(rewritten []byte) error {
	b2 := au.expected()
	k := 0
	for k < len(b2) && k < len(rewritten) && b2[k] == rewritten[k] {
		k++
	}
	// Map k back to b1: walk the cuts.
	cuts := au.a.cuts
	shift := 0 // b2 offset minus b1 offset before the current cut
	for i := range cuts {
		c := &cuts[i]
		refLen := len(au.refBytes(i, nil))
		if k < c.start+shift {
			break
		}
		if k < c.start+shift+refLen {
			return auditFail(AuditRefMismatch, i, "reference differs in the output")
		}
		shift += refLen - (c.end - c.start)
	}
	if off := k - shift; au.a.uf != nil && off >= au.ufStart && off < au.ufEnd {
		if au.inModel(off) {
			return auditFail(AuditServedAnswerAltered, -1, "promoted model turn differs at offset %d", off)
		}
		return auditFail(AuditUnflattenMismatch, -1, "un-flattened turns differ at offset %d", off)
	}
	return auditFail(AuditExpandMismatch, -1, "output differs at offset %d", k)
}
