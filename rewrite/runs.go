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
	type loc struct{ tp, line int32 }
	minBytes := max(e.opts.MinBlockBytes, 1)
	var first map[uint64]loc
	type lineHash struct {
		line int32
		h    uint64
	}
	free := make([][]bool, len(e.parts))
	hashes := make([][]lineHash, len(e.parts)) // free, non-blank lines only
	// One slab for the per-line flags of every part: two allocations per
	// request instead of two per part.
	total := 0
	for k := range e.parts {
		total += e.parts[k].lines.n()
	}
	slab := make([]bool, 2*total)
	for k := 0; k < len(e.parts); {
		turn := e.parts[k].turn
		start := k
		for ; k < len(e.parts) && e.parts[k].turn == turn; k++ {
			tp := &e.parts[k]
			l := &tp.lines
			fr := slab[:l.n():l.n()]
			tp.gone = slab[l.n() : 2*l.n() : 2*l.n()]
			slab = slab[2*l.n():]
			var hs []lineHash
			bi := 0
			for i := range fr {
				for bi < len(tp.blocks) && tp.blocks[bi].end < l.s(i) {
					bi++
				}
				fr[i] = bi >= len(tp.blocks) || tp.blocks[bi].start > l.e(i)
				if fr[i] {
					if s := l.at(i); isRefLine(s) {
						fr[i] = false
					} else if !blank(s) {
						hs = append(hs, lineHash{int32(i), hashLine(s)})
					}
				}
			}
			free[k], hashes[k] = fr, hs
			if first == nil {
				continue
			}
			after := 0 // lines before this one are consumed by a run
			for _, lh := range hs {
				i := int(lh.line)
				if i < after || tp.gone[i] {
					continue
				}
				at, ok := first[lh.h]
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
				o := occ{tp: k, turn: tp.turn, part: tp.part, b: b, replace: true, rule: RuleUnchanged, target: q.turn}
				if b.start == 0 && (k == 0 || e.parts[k-1].turn != tp.turn) {
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
		if first == nil {
			first = make(map[uint64]loc)
		}
		for j := start; j < k; j++ {
			for _, lh := range hashes[j] {
				if e.parts[j].gone[lh.line] {
					continue
				}
				if _, ok := first[lh.h]; !ok {
					first[lh.h] = loc{int32(j), lh.line}
				}
			}
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
