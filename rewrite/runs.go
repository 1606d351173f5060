package rewrite

// findRuns finds runs of consecutive lines outside any block that repeat an
// earlier turn verbatim (a pasted document with no wrapper, a repeated
// preamble) and records each run of at least MinBlockBytes as a reference to
// the earlier turn.
//
// Each line's first occurrence is indexed by a fast hash; a later line with
// the same hash is compared byte for byte and the match is grown in both
// directions over free lines. Lines already replaced are never part of a
// match, so the turn a reference names always holds the whole copy. Cost is
// linear in the text, plus at most one bounded comparison per line.
func (e *engine) findRuns() {
	minBytes := max(e.opts.MinBlockBytes, 1)
	if !e.exhaustive && !e.mayRun(minBytes) {
		return
	}
	st := e.st
	// One slab for the per-line flags of every part and one for the
	// hashes of their free lines: a few allocations per request instead of
	// a few per part.
	total := 0
	for k := range e.parts {
		total += e.parts[k].lines.n()
	}
	slab := st.flags(2 * total)
	free := st.free[:0]
	hashes := st.hashes[:0]
	hashEnd := st.hashEnd[:0]
	for k := range e.parts {
		tp := &e.parts[k]
		l := &tp.lines
		fr := slab[:l.n():l.n()]
		tp.gone = slab[l.n() : 2*l.n() : 2*l.n()]
		slab = slab[2*l.n():]
		// Lines outside every block are free, except references: the
		// gaps between blocks, found by binary search rather than by
		// visiting every line, in order.
		gap := func(from, to int) {
			for i := from; i < to; i++ {
				if s := l.at(i); !isRefLine(s) {
					fr[i] = true
					if !blank(s) {
						hashes = append(hashes, lineHash{int32(i), hashLine(s)})
					}
				}
			}
		}
		from := 0
		c := lineCursor{l: l}
		for _, b := range tp.blocks {
			gap(from, c.at(b.start))
			from = max(from, min(c.at(b.end)+1, l.n()))
		}
		gap(from, l.n())
		free = append(free, fr)
		hashEnd = append(hashEnd, len(hashes))
	}
	st.free, st.hashes, st.hashEnd = free, hashes, hashEnd
	first := st.table(len(hashes))
	for k := 0; k < len(e.parts); {
		turn := e.parts[k].turn
		start := k
		for ; k < len(e.parts) && e.parts[k].turn == turn; k++ {
			if start == 0 {
				continue // nothing earlier to repeat
			}
			tp := &e.parts[k]
			l := &tp.lines
			fr := free[k]
			after := 0 // lines before this one are consumed by a run
			for _, lh := range hashes[hashStart(hashEnd, k):hashEnd[k]] {
				i := int(lh.line)
				if i < after || tp.gone[i] {
					continue
				}
				at, ok := first.get(lh.h)
				if !ok {
					continue
				}
				q := &e.parts[at.tp]
				g := int(at.line)
				same := func(i, g int) bool {
					return i >= 0 && g >= 0 && i < l.n() && g < q.lines.n() &&
						fr[i] && free[at.tp][g] && !tp.gone[i] && !q.gone[g] && l.at(i) == q.lines.at(g)
				}
				if !same(i, g) {
					continue
				}
				i0, g0 := i, g
				for same(i0-1, g0-1) {
					i0, g0 = i0-1, g0-1
				}
				i1, g1 := i+1, g+1
				for same(i1, g1) {
					i1, g1 = i1+1, g1+1
				}
				for i0 < i1 && blank(l.at(i0)) {
					i0++
				}
				for i1 > i0 && blank(l.at(i1-1)) {
					i1--
				}
				if i1 <= i0 || l.e(i1-1)-l.s(i0) < minBytes {
					continue
				}
				b := block{kind: kindRun, start: l.s(i0), end: l.e(i1 - 1)}
				b.cstart, b.cend = b.start, b.end
				o := occ{tp: k, turn: tp.turn, part: tp.part, b: b, replace: true, rule: RuleUnchanged, target: q.turn, from: loc{at.tp, int32(g - i + i0)}}
				if b.start == 0 && tp.val == nil && (k == 0 || e.parts[k-1].turn != tp.turn) {
					o.rule = RuleSecondary // a preamble repeated at the start of a turn
				}
				if !e.reference(&o) {
					continue
				}
				e.runs = append(e.runs, o)
				for j := i0; j < i1; j++ {
					tp.gone[j] = true
				}
				after = i1
			}
		}
		for j := start; j < k; j++ {
			gone := e.parts[j].gone
			for _, lh := range hashes[hashStart(hashEnd, j):hashEnd[j]] {
				if !gone[lh.line] {
					first.add(lh.h, loc{int32(j), lh.line})
				}
			}
		}
	}
}

// mayRun reports whether a run of minBytes may be found: a part after the
// first turn has lines outside its blocks that span minBytes in one gap
// between blocks, where a run lies (most requests have only a sentence or
// two around their blocks).
func (e *engine) mayRun(minBytes int) bool {
	for k := range e.parts {
		tp := &e.parts[k]
		if tp.turn == e.parts[0].turn {
			continue // nothing earlier to repeat
		}
		l := &tp.lines
		from := 0
		c := lineCursor{l: l}
		for _, b := range tp.blocks {
			if first := c.at(b.start); first > from && l.e(first-1)-l.s(from) >= minBytes {
				return true
			}
			from = max(from, min(c.at(b.end)+1, l.n()))
		}
		if from < l.n() && l.e(l.n()-1)-l.s(from) >= minBytes {
			return true
		}
	}
	return false
}

// lineHash is the hash of one free, non-blank line.
type lineHash struct {
	line int32
	h    uint64
}

// loc locates a line: part index and line index.
type loc struct{ tp, line int32 }

func hashStart(ends []int, k int) int {
	if k == 0 {
		return 0
	}
	return ends[k-1]
}

// lineAt returns the index of the line holding offset off (the line whose
// end, its "\n", is the first at or after off).
func lineAt(l *lines, off int) int {
	lo, hi := 0, len(l.nl)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(l.nl[m]) < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// lineCursor answers lineAt for offsets asked mostly in ascending order
// (the starts and ends of a text's blocks): an offset at or after the
// last one asked is searched for from the last answer, in steps that
// double, so that a text's blocks cost a few comparisons each instead
// of a binary search of all its lines (issue 17: the binary searches of
// mayRun were 2% of a 1 MB rewrite). An earlier offset is searched for
// over all lines. Answers are lineAt's.
type lineCursor struct {
	l         *lines
	off, line int // the last offset asked and its line (0, 0 at first)
}

func (c *lineCursor) at(off int) int {
	nl := c.l.nl
	lo := 0
	if off >= c.off {
		// Every line before c.line ends before c.off, so before off.
		lo = c.line
	}
	hi, step := lo, 1
	for hi < len(nl) && int(nl[hi]) < off {
		lo = hi + 1
		hi = lo + step
		step <<= 1
	}
	hi = min(hi, len(nl))
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(nl[m]) < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	c.off, c.line = off, lo
	return lo
}

// lineTable maps a line hash to the first free line with that hash: open
// addressing over a power-of-two table that the state keeps between
// requests. Keys are the hashes themselves; a slot is empty when its tp is
// zero (tp is stored plus one).
type lineTable struct {
	keys []uint64
	vals []loc
	mask uint64
}

func (t *lineTable) get(h uint64) (loc, bool) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.vals[i]
		if v.tp == 0 {
			return loc{}, false
		}
		if t.keys[i] == h {
			return loc{v.tp - 1, v.line}, true
		}
	}
}

// add records at for h unless h is already present.
func (t *lineTable) add(h uint64, at loc) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.vals[i]
		if v.tp == 0 {
			t.keys[i], t.vals[i] = h, loc{at.tp + 1, at.line}
			return
		}
		if t.keys[i] == h {
			return
		}
	}
}

func blank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\r':
		default:
			return false
		}
	}
	return true
}
