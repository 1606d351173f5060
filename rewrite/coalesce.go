package rewrite

import "sort"

// Coalescing references.
//
// A document is segmented into the blocks CommonMark sees in it. A Markdown
// document that holds fenced code, pasted inside a plain ``` fence (a
// README, a design doc), is several blocks: the outer fence closes at the
// first inner bare ``` line, so the document becomes a fenced block, free
// text, another fenced block, more text. When such a document is sent again,
// each large piece becomes a reference of its own and the small pieces stay,
// although the whole region repeats one earlier copy.
//
// After the replacements are decided, coalesce merges, within one text
// part, a maximal sequence of consecutive unchanged references, and the
// text between them, into one reference when the whole span repeats, line
// for line (line endings normalised as for identity), one contiguous span
// of a single earlier part in the turn the references name. The span is
// then extended over adjacent lines while they still match (the small
// fences and text a re-sent document ends with), up to the last non-blank
// one. A
// superseded reference, a reference to another turn, a piece named as
// another file, a line that differs, or a copy another reference names
// (keptCopies) ends the sequence; an edited copy stays as it is. The merged
// reference is made only when the whole span of the earlier copy stays in
// the output (no reference inside it, and not across the point where
// prefix stabilisation may split that part) and
// when it pays (Options.MinBlockBytes, at most half the span). It names the
// document of the first reference and hashes exactly the replaced span.
//
// The cost is linear: the content of a replaced block or run is known to
// match already, so only wrapper lines, the text between references and
// the extension are compared, once each.

// coalesce returns reps, in request order, with each mergeable sequence
// replaced by one merged reference; reps is rewritten in place.
func (e *engine) coalesce(reps []*occ) []*occ {
	if len(reps) < 2 {
		return reps
	}
	kept := e.keptCopies(reps)
	w := 0
	for i := 0; i < len(reps); {
		if n, m := e.group(reps, i, reps[:w], kept); n >= 2 {
			reps[w] = m
			w++
			i += n
			continue
		}
		reps[w] = reps[i]
		w++
		i++
	}
	return reps[:w]
}

// keptSpan is a block that stays in full as the full copy a reference
// names (decide).
// maxEnd is the largest end of the spans of the same part up to this
// one in sorted order (keptIn).
type keptSpan struct{ tp, start, end, maxEnd int }

// keptCopies returns the text blocks that stay in full as the full copy
// that a reference of reps names, in request order. A merged reference's
// extension stops at them: one that took in a line of such a block (the
// opening fence line of a copy that follows the repeated span in the same
// text) left the reference naming that copy without its full text (audit
// target_missing). Other blocks that stay, small fences a re-sent
// document ends with, may still be taken in.
//
// A run of repeated lines names the lines it repeats (occ.from), not a
// block: those lines are kept too, so that neither an extension nor the
// text between two merged references takes them in (a run's copy lying
// between two references of a re-sent document was cut, the run's
// reference named nothing, and the audit failed with target_missing).
func (e *engine) keptCopies(reps []*occ) []keptSpan {
	var out []keptSpan
	for _, r := range reps {
		if r.b.kind == kindRun && r.tp >= 0 && !r.merged {
			if s, ok := e.runSource(r); ok {
				out = append(out, s)
			}
			continue
		}
		if r.b.kind == kindRun || r.b.kind == kindImage || r.tgt < 0 || int(r.tgt) >= len(e.occs) {
			continue
		}
		if t := &e.occs[r.tgt]; t.tp >= 0 && !t.replace {
			out = append(out, keptSpan{tp: t.tp, start: t.b.start, end: t.b.end})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].tp < out[j].tp || out[i].tp == out[j].tp && out[i].start < out[j].start
	})
	for k := range out {
		out[k].maxEnd = out[k].end
		if k > 0 && out[k-1].tp == out[k].tp {
			out[k].maxEnd = max(out[k].end, out[k-1].maxEnd)
		}
	}
	return out
}

// runSource returns the span, in the decoded text of part r.from.tp, of
// the lines run r repeats (as auditCuts records them).
func (e *engine) runSource(r *occ) (keptSpan, bool) {
	q := int(r.from.tp)
	if q < 0 || q >= len(e.parts) {
		return keptSpan{}, false
	}
	l, m := &e.parts[r.tp].lines, &e.parts[q].lines
	a, z := lineAt(l, r.b.start), lineAt(l, r.b.end)
	ga := int(r.from.line)
	gz := ga + z - a
	if ga < 0 || gz >= m.n() {
		return keptSpan{}, false
	}
	return keptSpan{tp: q, start: m.s(ga) + r.b.start - l.s(a), end: m.e(gz) - (l.e(z) - r.b.end)}, true
}

// keptIn reports whether a kept span of part tp (kept is sorted) overlaps
// [lo, hi).
func keptIn(kept []keptSpan, tp, lo, hi int) bool {
	k := sort.Search(len(kept), func(k int) bool {
		return kept[k].tp > tp || kept[k].tp == tp && kept[k].start >= hi
	})
	return lo < hi && k > 0 && kept[k-1].tp == tp && kept[k-1].maxEnd > lo
}

// mergeable reports whether o may be part of a merged reference: a text
// reference to an identical earlier copy.
func mergeable(o *occ) bool {
	return o.tp >= 0 && !o.super && !o.later && o.b.kind != kindImage &&
		(o.rule == RuleUnchanged || o.rule == RuleSecondary && o.b.kind == kindRun)
}

// joins reports whether r may follow o in a merged reference: a piece
// with a file name of its own joins only a sequence that starts with the
// same name, so that a reference never hides a file it does not name.
func joins(o, r *occ) bool {
	return r.tp == o.tp && r.target == o.target && mergeable(r) &&
		(r.b.name == "" || r.b.kind == kindRun || o.b.kind != kindRun && cleanName(r.b.name) == cleanName(o.b.name))
}

// source returns the earlier part holding o's copy and the line offset
// from o's lines to that copy's.
func (e *engine) source(o *occ) (q, delta int, ok bool) {
	l := &e.parts[o.tp].lines
	if o.b.kind == kindRun {
		q, delta = int(o.from.tp), int(o.from.line)-lineAt(l, o.b.start)
	} else {
		t := &e.occs[e.versions[fullKey(o, o.cid)]-1] // the full copy (decide)
		if t.tp < 0 {
			return 0, 0, false
		}
		m := &e.parts[t.tp].lines
		ca, ga := lineAt(l, o.b.cstart), lineAt(m, t.b.cstart)
		if o.b.cstart-l.s(ca) != t.b.cstart-m.s(ga) {
			return 0, 0, false
		}
		q, delta = t.tp, ga-ca
	}
	return q, delta, q < o.tp && e.parts[q].turn == o.target
}

// group tries to merge the references starting at reps[i]; done holds the
// final references before it. It returns how many references the merged
// one replaces (fewer than 2: none) and the merged reference.
func (e *engine) group(reps []*occ, i int, done []*occ, kept []keptSpan) (int, *occ) {
	o := reps[i]
	if i+1 == len(reps) || !mergeable(o) || !joins(o, reps[i+1]) {
		return 0, nil
	}
	q, delta, ok := e.source(o)
	if !ok {
		return 0, nil
	}
	tp, tq := &e.parts[o.tp], &e.parts[q]
	l, m := &tp.lines, &tq.lines
	treps := textReps(partReps(done, tq.turn, tq.part), q)
	// floor is the first line of the earlier part the span may start at:
	// prefix stabilisation may move the blocks of a user part in front of
	// its lead, so a copy must not cross that boundary. The rule holds
	// whether or not Options.StablePrefix is set, so that the option never
	// changes the replacements.
	floor := 0
	if e.role(tq.turn) == "user" && len(tq.blocks) > 0 {
		floor = lineAt(m, tq.blocks[0].start)
	}
	// match reports whether lines lo..hi of o's part repeat the earlier
	// part's lines at delta, and that none of those is replaced there.
	match := func(lo, hi int) bool {
		if hi < lo {
			return true
		}
		if lo+delta < 0 || hi+delta >= m.n() {
			return false
		}
		for k := lo; k <= hi; k++ {
			if l.at(k) != m.at(k+delta) {
				return false
			}
		}
		return !overlaps(treps, m.s(lo+delta), m.e(hi+delta))
	}
	// fits checks r's own lines, skipping what is known to match.
	fits := func(r *occ) bool {
		a, z := lineAt(l, r.b.start), lineAt(l, r.b.end)
		if r.b.kind == kindRun {
			if int(r.from.tp) == q && int(r.from.line) == a+delta {
				return !overlaps(treps, m.s(a+delta), m.e(min(z+delta, m.n()-1)))
			}
			return match(a, z)
		}
		t := &e.occs[e.versions[fullKey(r, r.cid)]-1]
		ca, ce := lineAt(l, r.b.cstart), lineAt(l, r.b.cend)
		if t.tp != q || ca+delta >= m.n() || ce+delta >= m.n() || ca+delta < 0 ||
			lineAt(m, t.b.cstart) != ca+delta || lineAt(m, t.b.cend) != ce+delta ||
			r.b.cstart-l.s(ca) != t.b.cstart-m.s(ca+delta) {
			return match(a, z)
		}
		// The lines strictly between ca and ce hold identical content
		// (the same content id): compare only the lines around them.
		if !match(a, ca) || !match(max(ce, ca+1), z) {
			return false
		}
		return !overlaps(treps, m.s(a+delta), m.e(z+delta))
	}
	if !fits(o) {
		return 0, nil
	}
	a, z := lineAt(l, o.b.start), lineAt(l, o.b.end)
	start, end := o.b.start, o.b.end
	n := 1
	for j := i + 1; j < len(reps) && joins(o, reps[j]); j++ {
		r := reps[j]
		ra := lineAt(l, r.b.start)
		if !match(z+1, ra-1) || !fits(r) || keptIn(kept, o.tp, end, r.b.start) {
			break
		}
		z, end = max(z, lineAt(l, r.b.end)), r.b.end
		n++
	}
	if n < 2 || a+delta < floor {
		return 0, nil
	}
	// Extend over adjacent lines that still match, up to the last
	// non-blank one.
	// The kept full copies of o's part just before start and from end on
	// (keptCopies) bound the extension as references do.
	k := sort.Search(len(kept), func(k int) bool {
		return kept[k].tp > o.tp || kept[k].tp == o.tp && kept[k].start >= end
	})
	if start == l.s(a) {
		prevEnd := 0
		if len(done) > 0 && done[len(done)-1].tp == o.tp {
			prevEnd = done[len(done)-1].b.end
		}
		for j := k - 1; j >= 0 && kept[j].tp == o.tp; j-- {
			if kept[j].end <= start {
				prevEnd = max(prevEnd, kept[j].end)
				break
			}
		}
		for k := a; k > 0 && k-1+delta >= floor && l.s(k-1) >= prevEnd && match(k-1, k-1); {
			if k--; !blank(l.at(k)) {
				a, start = k, l.s(k)
			}
		}
	}
	if rest := l.text[end:l.e(z)]; rest == "" || rest == "\r" {
		next := len(l.text)
		if i+n < len(reps) && reps[i+n].tp == o.tp {
			next = reps[i+n].b.start
		}
		if k < len(kept) && kept[k].tp == o.tp {
			next = min(next, kept[k].start)
		}
		for k := z; k+1 < l.n() && l.e(k+1) <= next && match(k+1, k+1); {
			if k++; !blank(l.at(k)) {
				z, end = k, l.e(k)
			}
		}
	}
	name := e.name(o)
	if name == "" {
		name = "block"
	}
	rule := RuleSecondary
	for _, r := range reps[i : i+n] {
		if r.rule == RuleUnchanged {
			rule = RuleUnchanged
		}
	}
	mo := &occ{tp: o.tp, turn: o.turn, part: o.part, doc: o.doc, next: -1, replace: true, rule: rule, target: o.target,
		b:    block{kind: kindTag, name: name, start: start, end: end, cstart: start, cend: end},
		from: loc{int32(q), int32(a + delta)}, merged: true}
	if !e.reference(mo) {
		return 0, nil
	}
	return n, mo
}

// partReps returns the references of contents[turn].parts[part] in done,
// which is in request order.
func partReps(done []*occ, turn, part int) []*occ {
	before := func(o *occ) bool { return o.turn < turn || o.turn == turn && o.part < part }
	lo := sort.Search(len(done), func(k int) bool { return !before(done[k]) })
	hi := lo + sort.Search(len(done)-lo, func(k int) bool {
		o := done[lo+k]
		return o.turn > turn || o.part > part
	})
	return done[lo:hi]
}

// overlaps reports whether a reference in reps (one part's, in order)
// replaces text inside [lo, hi).
func overlaps(reps []*occ, lo, hi int) bool {
	k := sort.Search(len(reps), func(k int) bool { return reps[k].b.end > lo })
	return k < len(reps) && reps[k].b.start < hi
}
