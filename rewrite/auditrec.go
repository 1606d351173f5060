package rewrite

// The records the audit checks (audit.go). The engine writes down where
// every reference, full copy, split and un-flattened turn is, in raw byte
// offsets of the bodies it worked on; the audit re-derives from the
// original body and these records what the output must be, and checks it
// byte for byte. The records hold offsets only, never prompt text.

// auditRec is what Request did, in raw byte offsets.
type auditRec struct {
	// uf describes the un-flattening, nil when none was done. Cut offsets
	// are in the body after it (the original body when uf is nil): the
	// audit rebuilds that body from the original and uf.
	uf *auditUnflat
	// cuts holds one entry per Report.Replacements, in the same order.
	cuts []auditCut
	// splits are the parts split by Options.StablePrefix, in offsets of
	// the body before the splits (the un-flattened body with cuts made).
	splits []auditSplit
	// body is the body the rewrite hashed, whose spans auditCut.sum name:
	// the original, or the body after un-flattening.
	body []byte
}

// auditCut is one replaced span and the full copy it refers to.
type auditCut struct {
	// start and end are the replaced raw span: inside a text string, or an
	// inlineData part object. str is the text string's contents, or the
	// data string of the inlineData part.
	start, end int
	str        span
	// cs and ce are the raw span of the content compared for identity
	// (wrapper lines excluded), inside start..end.
	cs, ce int
	// tstr is the target's string (as str); ts and te its content (as cs
	// and ce), and tfull the target's whole block, which must stay in
	// the output.
	tstr   span
	ts, te int
	tfull  span
	kind   blockKind
	super  bool
	merged bool // a coalesced reference
	user   bool // the cut is in a user turn
	// session says that the full copy is not in the body but earlier in
	// the session (Elide, Replacement.Target -1): there is no target
	// span, and the audit checks the hash against the session's sent set.
	session bool
	// x and tx say that the cut, or its full copy, is in a string value
	// of a JSON text or a tool result (auditjson.go); nil in a text.
	x, tx *auditSub
	// sum and sumSHA are the audit's memo of the hash: the rewrite hashed
	// the decoding of auditRec.body[sum.start:sum.end] once, to the hex
	// SHA-256 sumSHA. The audit uses it only for exactly those bytes
	// (audit.go, contents); sumSHA is "" when there is none.
	sum    span
	sumSHA string
}

// auditSplit is one part split by Options.StablePrefix: the part object
// obj, its text string str, and the raw offset at, inside str, where the
// moved text starts.
type auditSplit struct {
	obj, str span
	at       int
}

// auditUnflat is one un-flattened content: its object obj in the
// original body, its only text string str, and the turns that replaced
// it.
type auditUnflat struct {
	obj, str span
	esc      bool
	turns    []auditTurn
}

// auditTurn is one turn made by un-flattening: its role and the ranges
// of the original decoded text that its text joins with "\n\n".
type auditTurn struct {
	model  bool
	pieces []flatSpan
	// quoted[k] reports that pieces[k] is the contents of a JSON string
	// in the text (a JSON history, jsonhist.go) and the turn holds its
	// decoding; nil when no piece is.
	quoted []bool
}

// auditCuts records reps, the final replacements in request order.
func (e *engine) auditCuts(reps []*occ) []auditCut {
	if len(reps) == 0 {
		return nil
	}
	out := make([]auditCut, len(reps))
	var offs [4]int
	for i, o := range reps {
		c := &out[i]
		c.kind, c.super, c.merged = o.b.kind, o.super, o.merged
		c.user = e.role(o.turn) == "user"
		// No memo of the hash for a session reference: the audit hashes
		// its bytes itself.
		c.session = o.target < 0
		if o.sha != "" && o.sumRaw.end > o.sumRaw.start && !c.session {
			c.sum, c.sumSHA = o.sumRaw, o.sha
		}
		if o.b.kind == kindImage {
			c.start, c.end, c.str = o.img.obj.start, o.img.obj.end, o.img.str
			c.cs, c.ce = o.img.str.start, o.img.str.end
			if !c.session {
				t := &e.occs[o.tgt]
				c.tstr, c.ts, c.te, c.tfull = t.img.str, t.img.str.start, t.img.str.end, t.img.obj
			}
			continue
		}
		tp := &e.parts[o.tp]
		offs = e.rawBlock(o)
		c.start, c.cs, c.ce, c.end, c.str = offs[0], offs[1], offs[2], offs[3], tp.p.str
		c.x = e.auditSubOf(tp)
		if c.session {
			continue
		}
		var q *textPart
		var ts, te, fs, fe int
		if o.b.kind == kindRun || o.merged {
			// A run or coalesced span repeats the lines of part from.tp
			// starting at line from.line.
			q = &e.parts[o.from.tp]
			l, m := &tp.lines, &q.lines
			a, z := lineAt(l, o.b.start), lineAt(l, o.b.end)
			ga := int(o.from.line)
			gz := ga + z - a
			if ga < 0 || gz >= m.n() {
				c.tstr = span{-1, -1} // the audit fails it
				continue
			}
			ts, te = m.s(ga)+o.b.start-l.s(a), m.e(gz)-(l.e(z)-o.b.end)
			fs, fe = ts, te
			offs = [4]int{fs, ts, te, fe}
			e.rawOf(q, offs[:])
		} else {
			// The full copy of many references: its offsets are mapped
			// once.
			t := &e.occs[o.tgt]
			q = &e.parts[t.tp]
			offs = e.rawBlock(t)
		}
		c.tfull, c.ts, c.te, c.tstr = span{offs[0], offs[3]}, offs[1], offs[2], q.p.str
		c.tx = e.auditSubOf(q)
	}
	return out
}

// rawBlock returns the raw offsets in the body of the start, content
// start, content end and end of o's block (rawOf), mapped once per block
// and kept in the state until the request ends: a block is mapped for its reference's hash, for the
// output and for the audit's record, and a full copy for every reference
// to it.
func (e *engine) rawBlock(o *occ) [4]int {
	want := [4]int{o.b.start, o.b.cstart, o.b.cend, o.b.end}
	st := e.st
	if m, ok := st.rawMemo[o]; ok && m.of == want {
		return m.raw
	}
	raw := want
	e.rawOf(&e.parts[o.tp], raw[:])
	if st.rawMemo == nil {
		st.rawMemo = make(map[*occ]rawMapped)
	}
	st.rawMemo[o] = rawMapped{of: want, raw: raw}
	return raw
}

// rawMapped is what rawBlock mapped for an occurrence: the raw offsets of
// the decoded offsets of.
type rawMapped struct{ of, raw [4]int }

// rawOf maps offsets (ascending) in tp's decoded text to raw offsets in
// the body, in place.
func (e *engine) rawOf(tp *textPart, offs []int) {
	e.subOffsets(tp, offs)
	if tp.p.esc {
		rawOffsets(e.body[tp.p.str.start:tp.p.str.end], offs, tp.marks)
	}
	for k := range offs {
		offs[k] += tp.p.str.start
	}
}
