package rewrite

// Protected regions of a flattened transcript are matched inside a segment.
//
// Labels are content inside code fences, document tags and triple-quoted
// documents, but such a region is read the way the transcript reads, not
// the way the whole text reads: a region that, read over the whole text,
// would contain label lines (candidate labels: lexicon labels at the start
// of a line, role tags and chat-template tokens anywhere) keeps them as
// content only when it is closed and in step:
//
//   - a fence of three characters is in step when no label line inside it
//     opens a fence of its own on the label's line ("User: ```go"), no
//     fence line with an info string of its kind ("```py", which can only
//     open a fence) lies inside it, the text before the first label
//     inside it does not end with a truncation marker ("... [truncated]"),
//     and its closing line, read inside its own segment, does not open a
//     fence that closes there (then it is that segment's fence, and the
//     fence before the labels was left open);
//     a fence of four or more characters is always in step (it is how one
//     quotes text that holds fences of three);
//   - a document tag is in step when no tag of the same name opens inside it;
//   - a triple-quoted document is in step when it is closed.
//
// Otherwise the region ends before the first label inside it, which then
// splits the transcript as any label does: a fence left open by a
// truncated answer, or a closing fence that really belongs to the next
// segment, never swallows the segments after it. A region without label
// lines inside is protected as it reads (a program that builds a
// transcript, a pasted log, keeps its "User:" lines as content).
//
// The index of candidate labels and fence lines is built once, on the first
// region, in one pass; each region then costs a few binary searches, and
// the searches for closing fences, tags and quotes remember their last
// answer, so that regions cut short one after another do not search the
// same text again.

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// flatCand is a candidate label at pos. glued reports that a fence opens on
// the label's line, after the label.
type flatCand struct {
	pos   int
	glued bool
	gch   byte // the glued fence's character and length
	gn    int
}

// flatFenceLine is a line that looks like a fence: at most three spaces, then
// n ≥ 3 characters ch. bare lines (nothing else but white space) can close
// a fence; the others only open one.
type flatFenceLine struct {
	pos, next int
	ch        byte
	n         int
	bare      bool
}

// flatIndex is the index of a text's candidate labels and fence lines.
type flatIndex struct {
	cands  []flatCand
	glued  []int32 // glued[i]: glued candidates among cands[:i]
	fences []flatFenceLine
	info   [2][]int32 // info[k][i]: non-bare fence lines of kind k among fences[:i]
	// fmemo remembers, per fence kind, that fences[from:res] hold no
	// closing line for a run of n.
	fmemo [2]struct{ from, res, n int }
	// tmemo and qmemo remember the last close found for a tag name and for
	// triple quotes: no close lies in [from, start).
	tmemo map[string][3]int
	qmemo [2]int
	// pmemo remembers the last answer of pairsLocally: fence line pmemo[0]
	// gave pmemo[1] (1 true, 0 false).
	pmemo [2]int
}

func fenceKind(ch byte) int {
	if ch == '~' {
		return 1
	}
	return 0
}

// index returns the scan's index, building it on first use.
func (s *flatScan) index() *flatIndex {
	if s.ix != nil {
		return s.ix
	}
	ix := &flatIndex{fmemo: [2]struct{ from, res, n int }{{-1, -1, 0}, {-1, -1, 0}}, qmemo: [2]int{-1, -1}, pmemo: [2]int{-1, 0}}
	t := s.text
	for pos := 0; pos < len(t); {
		eol := strings.IndexByte(t[pos:], '\n')
		next := len(t)
		if eol < 0 {
			eol = len(t)
		} else {
			eol += pos
			next = eol + 1
		}
		line := strings.TrimSuffix(t[pos:eol], "\r")
		if ch, n, ok := flatFence(line); ok {
			rest := strings.TrimLeft(line, " ")[n:]
			ix.fences = append(ix.fences, flatFenceLine{pos: pos, next: next, ch: ch, n: n, bare: strings.TrimRight(rest, " \t") == ""})
		} else if l, ok := parseFlatLabel(line, s.lx); ok && s.candLabel(l) {
			ch, n, g := flatFence(l.rest)
			ix.cands = append(ix.cands, flatCand{pos: pos, glued: g, gch: ch, gn: n})
		}
		for i := pos; i < eol; i++ {
			c := t[i]
			if c != '<' && c != '[' {
				continue
			}
			if flatTokenAt(t, i, s.lx) && (len(ix.cands) == 0 || ix.cands[len(ix.cands)-1].pos != i) {
				c := flatCand{pos: i}
				if gt := strings.IndexByte(t[i:eol], '>'); gt >= 0 {
					c.gch, c.gn, c.glued = flatFence(strings.TrimSuffix(t[i+gt+1:eol], "\r"))
				}
				ix.cands = append(ix.cands, c)
			}
		}
		pos = next
	}
	ix.glued = make([]int32, len(ix.cands)+1)
	for i, c := range ix.cands {
		ix.glued[i+1] = ix.glued[i]
		if c.glued {
			ix.glued[i+1]++
		}
	}
	for k := range ix.info {
		ix.info[k] = make([]int32, len(ix.fences)+1)
	}
	for i, f := range ix.fences {
		for k := range ix.info {
			ix.info[k][i+1] = ix.info[k][i]
		}
		if !f.bare {
			ix.info[fenceKind(f.ch)][i+1]++
		}
	}
	s.ix = ix
	return ix
}

// candLabel reports whether a parsed line label is a candidate: a lexicon
// role, system or question label, an emoji label or a Role: record.
func (s *flatScan) candLabel(l flatLabel) bool {
	if l.emoji != 0 {
		return s.lx.emoji[l.emoji] != lexNone
	}
	key, k := s.lx.kind(l.name)
	if key == "role" && l.colon {
		_, vk := s.lx.kind(strings.TrimSpace(l.rest))
		return vk == lexUser || vk == lexModel || vk == lexSystem
	}
	switch k {
	case lexUser, lexModel, lexEither:
		return !l.alone || utf8.RuneCountInString(l.name) >= 2
	case lexSystem, lexQuestion:
		return true
	}
	return false
}

// flatTokenAt reports whether a role tag or chat-template token starts at
// text[i]: <|im_start|>, <|user|>, <start_of_turn>, <user>, <assistant>,
// <message role=…>, [INST], [/INST], and the tokens that end a segment
// (<|im_end|>, <|end|>, <end_of_turn>, </assistant>).
func flatTokenAt(t string, i int, lx *Lexicon) bool {
	rest := t[i:]
	if rest[0] == '[' {
		return strings.HasPrefix(rest, "[INST]") || strings.HasPrefix(rest, "[/INST]")
	}
	if strings.HasPrefix(rest, "<|") {
		c := strings.Index(rest[2:min(len(rest), 48)], "|>")
		if c < 0 {
			return false
		}
		name := rest[2 : 2+c]
		for _, w := range []string{"im_start", "start_header_id", "im_end", "end", "eot_id", "eot", "end_of_turn"} {
			if strings.EqualFold(name, w) {
				return true
			}
		}
		return lx.roleWord(name)
	}
	if strings.HasPrefix(rest, "<start_of_turn>") || strings.HasPrefix(rest, "<end_of_turn>") {
		return true
	}
	j := 1
	if len(rest) > 1 && rest[1] == '/' {
		j = 2 // a closing role tag ends a segment too
	}
	ns := j
	for j < len(rest) && j < 40 && (isASCIILetter(rest[j]) || (j > ns && rest[j] == '_')) {
		j++
	}
	if j == ns || j >= len(rest) {
		return false
	}
	name := rest[ns:j]
	for _, w := range []string{"message", "turn", "msg", "utterance", "chat_message"} {
		if strings.EqualFold(name, w) {
			return rest[j] == ' '
		}
	}
	if rest[j] != '>' || j-ns < 2 {
		return false
	}
	return lx.roleWord(name)
}

// roleWord reports whether name (a tag or token name) is a user or model
// word. A lower-case name is looked up as it is, without allocating.
func (lx *Lexicon) roleWord(name string) bool {
	lower := true
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' || c == '_' || c == ' ' || c >= 0x80 {
			lower = false
			break
		}
	}
	if lower {
		k := lx.labels[name]
		return k == lexUser || k == lexModel
	}
	_, k := lx.kind(strings.ReplaceAll(name, "_", " "))
	return k == lexUser || k == lexModel
}

// cands returns the index range of the candidates in [a, b).
func (ix *flatIndex) candRange(a, b int) (lo, hi int) {
	lo = sort.Search(len(ix.cands), func(i int) bool { return ix.cands[i].pos >= a })
	hi = lo + sort.Search(len(ix.cands)-lo, func(i int) bool { return ix.cands[lo+i].pos >= b })
	return lo, hi
}

// fenceClose returns the index in fences of the first line at or after pos
// that closes a fence of n characters ch, or len(fences), and the index of
// the first fence line at or after pos.
func (ix *flatIndex) fenceClose(pos int, ch byte, n int) (res, from int) {
	from = sort.Search(len(ix.fences), func(i int) bool { return ix.fences[i].pos >= pos })
	m := &ix.fmemo[fenceKind(ch)]
	if m.n == n && from >= m.from && from <= m.res {
		return m.res, from
	}
	j := from
	for j < len(ix.fences) && !(ix.fences[j].bare && ix.fences[j].ch == ch && ix.fences[j].n >= n) {
		j++
	}
	m.from, m.res, m.n = from, j, n
	return j, from
}

// fence handles a fence opened at o with n characters ch on the line that
// ends before next. It records the protected region and returns the offset
// where scanning resumes.
func (s *flatScan) fence(o, next int, ch byte, n int) int {
	ix := s.index()
	ci, from := ix.fenceClose(next, ch, n)
	cpos, end := len(s.text), len(s.text)
	if ci < len(ix.fences) {
		cpos, end = ix.fences[ci].pos, ix.fences[ci].next
	}
	lo, hi := ix.candRange(next, cpos)
	if lo < hi {
		first := ix.cands[lo].pos
		k := fenceKind(ch)
		// A fence of four or more characters is taken as written: it
		// is how one quotes text that holds fences of three.
		inStep := ci < len(ix.fences) && (n > 3 ||
			ix.glued[hi] == ix.glued[lo] &&
				ix.info[k][ci] == ix.info[k][from] &&
				flatUntruncate(s.text[o:first]) == strings.TrimSpace(s.text[o:first]) &&
				!ix.pairsLocally(ci, hi-1, len(s.text)))
		if !inStep {
			end = first
		}
	}
	s.prot = append(s.prot, flatSpan{o, end})
	return end
}

// pairsLocally reports whether fence line ci, read inside its own segment
// (from candidate c to the next candidate, or to textEnd), opens a fence
// that also closes there: then it belongs to that segment and cannot close
// a fence opened before the label.
func (ix *flatIndex) pairsLocally(ci, c, textEnd int) bool {
	if ix.pmemo[0] == ci {
		return ix.pmemo[1] == 1
	}
	end := textEnd
	if c+1 < len(ix.cands) {
		end = ix.cands[c+1].pos
	}
	seg := ix.cands[c]
	var ch byte
	n := 0 // the open local fence, n == 0 when none
	if seg.glued {
		ch, n = seg.gch, seg.gn
	}
	j := sort.Search(len(ix.fences), func(i int) bool { return ix.fences[i].pos > seg.pos })
	res := false
	for ; j < len(ix.fences) && ix.fences[j].pos < end; j++ {
		f := ix.fences[j]
		switch {
		case n == 0:
			ch, n = f.ch, f.n
		case f.bare && f.ch == ch && f.n >= n:
			n = 0
			if j > ci {
				res = true
			}
		}
		if j == ci && n == 0 {
			break // ci closes a fence opened in its segment
		}
		if j > ci && res {
			break
		}
	}
	ix.pmemo = [2]int{ci, 0}
	if res {
		ix.pmemo[1] = 1
	}
	return res
}

// docTag handles a document tag named name that opens at i and whose
// opening tag ends at end. It records the protected region and returns its
// end, where scanning resumes.
func (s *flatScan) docTag(i, end int, name string) int {
	t := s.text
	ix := s.index()
	if ix.tmemo == nil {
		ix.tmemo = make(map[string][3]int)
	}
	var cs, ce int
	if m, ok := ix.tmemo[name]; ok && end >= m[0] && (m[1] < 0 || end <= m[1]) {
		cs, ce = m[1], m[2]
	} else {
		cs, ce = flatCloseTag(t, end, name)
		ix.tmemo[name] = [3]int{end, cs, ce}
	}
	closeAt := cs
	if cs < 0 {
		closeAt = len(t)
	}
	lo, hi := ix.candRange(end, closeAt)
	if lo < hi {
		first := ix.cands[lo].pos
		if cs < 0 || flatOpenTag(t[end:cs], name) {
			ce = first
		}
	}
	s.prot = append(s.prot, flatSpan{i, ce})
	return ce
}

// flatOpenTag reports whether s holds an opening tag <name (any case).
func flatOpenTag(s, name string) bool {
	for i := 0; ; {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			return false
		}
		i += j + 1
		if e := i + len(name); e <= len(s) && strings.EqualFold(s[i:e], name) && (e == len(s) || s[e] == '>' || s[e] == ' ' || s[e] == '\t' || s[e] == '\n' || s[e] == '\r' || s[e] == '/') {
			return true
		}
	}
}

// quoted handles a triple-quoted document that opens at i. It records the
// protected region and returns its end, where scanning resumes.
func (s *flatScan) quoted(i int) int {
	t := s.text
	ix := s.index()
	c := -1
	if m := ix.qmemo; m[0] >= 0 && i+3 >= m[0] && (m[1] < 0 || i+3 <= m[1]) {
		c = m[1]
	} else {
		if k := strings.Index(t[i+3:], `"""`); k >= 0 {
			c = i + 3 + k
		}
		ix.qmemo = [2]int{i + 3, c}
	}
	stop, closeAt := len(t), len(t)
	if c >= 0 {
		stop, closeAt = c+3, c
	}
	if lo, hi := ix.candRange(i+3, closeAt); lo < hi && c < 0 {
		stop = ix.cands[lo].pos
	}
	s.prot = append(s.prot, flatSpan{i, stop})
	return stop
}
