package rewrite

import (
	"iter"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Identity and "keep once" (DESIGN §3). A block belongs to a document:
//
//   - A named block (file name, tag path, banner) belongs to the document of
//     that name, whatever its caption ("Here is my file:", "I discarded
//     that, here is my file:"): the name is the caption that counts.
//   - An unnamed block that repeats an earlier block exactly belongs to the
//     same document, unless their captions differ.
//   - Otherwise an unnamed block continues an earlier document only across
//     turns, never one that already has a block in the same turn, and only
//     on positive evidence beyond line similarity (evidence): in a user
//     turn with a lead-in line, the same lead-in as one of the document's
//     user-turn occurrences in a turn that holds no copy, when the block's
//     own turn holds no copy either and the lead-in never stands above two
//     blocks of one turn (a turn holds a copy when it has a reference line,
//     a run, a block whose content is repeated elsewhere in the request,
//     or the full copy a reference line names); in a model turn or
//     without a lead-in, the document's last occurrence being the one
//     block of the turn right before, of the other role, and the block the
//     one block of its own turn (a model's proposal for the file the user just sent, or the
//     user's copy of the model's proposal). An unnamed tag needs the same
//     opening tag as well. The block must then resemble the document's
//     latest version (line-set similarity ≥ Options.Similarity), and no
//     other document may have the same evidence: when two documents could
//     be the one continued, the block is a document of its own. Being the
//     only block in two turns further apart is not evidence, nor is the
//     same tag with the same attributes alone: two environments' configs
//     are often sent one per turn, in the same wrapper, and tell
//     themselves apart only in prose.
//   - Blocks whose captions (lead-in lines in user turns, opening tags of
//     unnamed tags) differ are never one document.
//
// Each test asks only for what the input and its rewritten output both
// show, so that rewriting the output again, where copies became
// references, finds no evidence the first rewrite did not (idempotence,
// doc.go). A copy is marked the same way on both sides: the two
// occurrences of a repeated content in the input are, in the output, the
// reference line and the copy it names ("in turn N"), whichever of them
// kept the full text; a lead-in above a copy may, in the output, stand
// above a reference line that belongs to no document, so it is no
// evidence. One difference is left, in the safe direction: a superseded
// reference marks its turn in the output, where the older version it
// replaced did not, so the output may refuse evidence the input found
// (two documents, both kept); no sweep found it changing an output.
// TestIdentityMixes checks it on 6,000 random
// conversations of three seeds in every run, and on the three that used
// to fail; with GEMINI_PROXY_MIXES=40000, 120,000 pass (and 120,000 of six
// other seeds did).
//
// When in doubt, two documents: a missed saving costs cents, a lost
// document costs the user's trust.

// leadIn returns the lead-in line of block j of tp: the last non-blank line
// above it, with at most two blank lines between, that lies after the
// block before it and is neither a reference nor part of a replaced run;
// trimmed, or "" when there is none. A caption or a sentence such as "This
// is our staging config:" tells two similar documents apart.
func leadIn(tp *textPart, j int) string {
	l := &tp.lines
	b := tp.blocks[j]
	lo := 0
	if j > 0 {
		lo = lineAt(l, tp.blocks[j-1].end) + 1
	}
	blanks := 0
	for k := lineAt(l, b.start) - 1; k >= lo; k-- {
		if k < len(tp.gone) && tp.gone[k] {
			return ""
		}
		s := strings.TrimSpace(l.at(k))
		if s == "" {
			if blanks++; blanks > 2 {
				return ""
			}
			continue
		}
		if isRefLine(s) || len(s) > 240 {
			return ""
		}
		return s
	}
	return ""
}

// remember adds s to the distinct captions in list, or sets over when the
// list is full.
func remember(list []string, s string, over *bool) []string {
	if slices.Contains(list, s) {
		return list
	}
	if len(list) == maxLeads {
		*over = true
		return list
	}
	return append(list, s)
}

// conflict reports whether o, an exact repeat of a block of d, is told
// apart from d by its caption: o's lead-in line in a user turn differs
// from every lead-in d had in user turns, or o, an unnamed tag, opens
// differently from every tag of d.
func (e *engine) conflict(o *occ, d *doc) bool {
	if o.b.name == "" && o.open != "" && (len(d.opens) > 0 || d.overOpens) && !slices.Contains(d.opens, o.open) {
		return true
	}
	return o.lead != "" && e.role(o.turn) == "user" && (len(d.leads) > 0 || d.overLeads) && !slices.Contains(d.leads, o.lead)
}

// evidence reports whether an unnamed block o, not an exact repeat, may
// continue d, an earlier document without a block in o's turn, on
// evidence beyond line similarity, and whether that evidence is a shared
// lead-in:
//
//   - o, in a user turn with a lead-in line, continues only a document
//     that had the same lead-in in a user turn holding no copy (the
//     template of a client that re-sends its file each turn), and only
//     when o's turn holds no copy (turnCensus.copies: once rewritten, a
//     reference there may stand for another copy of that document, which
//     makes o a second document of the turn) and the lead-in stands above
//     no two blocks or references of one turn ("Here is the config:"
//     above two configs names neither);
//   - o, in a model turn or without a lead-in, continues only the
//     document whose last occurrence is in the turn right before, of the
//     other role, when each of the two turns holds that one block and no
//     other block or reference (a model's proposal for the file the user
//     just sent, or the user's copy of the model's proposal);
//   - an unnamed tag continues only a document opened by the same tag.
func (e *engine) evidence(o *occ, d *doc) (ok, lead bool) {
	if o.b.name == "" && o.open != "" && !slices.Contains(d.opens, o.open) {
		return false, false
	}
	if o.lead != "" && e.role(o.turn) == "user" {
		c := e.census()
		ok = (!c.copies[o.turn] || e.soleValue(o)) && slices.Contains(d.evLeads, o.lead) && !c.ambiguous[o.lead]
		return ok, ok
	}
	t := int(e.occs[d.last].turn)
	return t == o.turn-1 && e.role(t) != e.role(o.turn) && e.alone(t) && e.alone(o.turn), false
}

// alone reports whether turn t holds exactly one block or reference.
func (e *engine) alone(t int) bool { return e.census().blocks[t] == 1 }

// turnCensus counts what each turn holds, for the identity tests.
type turnCensus struct {
	// blocks counts a turn's blocks, the inlineData parts among them, the
	// runs found in it and the reference lines of its texts; past 1, the
	// reference lines may not be counted once every user turn holds a copy
	// (census).
	blocks []int32
	// copies marks the turns that hold a copy of something present
	// elsewhere in the request, as the input and its rewritten output both
	// show it (see census): there, once rewritten, a reference may stand for
	// a copy of any document. It is exact for user turns, the only ones
	// read.
	copies []bool
	// ambiguous holds the lead-in lines that stand above two blocks or
	// references of one user turn: they name neither.
	ambiguous map[string]bool
}

// census returns the turn census, made once per request.
func (e *engine) census() *turnCensus {
	c := &e.turns
	if c.blocks != nil {
		return c
	}
	c.blocks = make([]int32, len(e.req.contents))
	c.copies = make([]bool, len(e.req.contents))
	for k := range e.parts {
		tp := &e.parts[k]
		c.blocks[tp.turn] += int32(len(tp.blocks))
	}
	for _, r := range e.runs {
		c.blocks[r.turn]++
		c.copies[r.turn] = true
		c.copies[e.parts[r.from.tp].turn] = true
	}
	for ti := range e.req.contents {
		for pi := range e.req.contents[ti].parts {
			if e.req.contents[ti].parts[pi].kind == partInline {
				c.blocks[ti]++
			}
		}
	}
	c.ambiguous = e.ambiguousLeads()
	// Both copies of a repeated content mark their turns: once rewritten,
	// one of them is a reference line and the other the copy it names.
	first := make([]int32, len(e.ids))
	for i := range e.occs {
		o := &e.occs[i]
		if f := first[o.cid]; f > 0 {
			c.copies[o.turn] = true
			c.copies[e.occs[f-1].turn] = true
		} else {
			first[o.cid] = int32(i + 1)
		}
	}
	// The reference lines, last: once every user turn holds a copy (copies
	// is read only for user turns, and a reference line marks its own turn
	// and the one it names), a text's reference lines can change no answer
	// of the census unless its turn has fewer than two blocks (alone asks
	// for one; counts and marks only grow), so the other texts are not
	// searched. Issue 17: every text of the 1 MB overhead request is one of
	// them, and the search read all of its 970 KB for '['. The exhaustive
	// path searches every text.
	without := e.usersWithoutCopy(c) // user turns whose copies is false
	mark := func(t int) {
		if !c.copies[t] {
			c.copies[t] = true
			if e.role(t) == "user" {
				without--
			}
		}
	}
	for k := range e.parts {
		tp := &e.parts[k]
		if without == 0 && !e.exhaustive && c.blocks[tp.turn] >= 2 {
			continue
		}
		for s := range refLines(&tp.lines) {
			c.blocks[tp.turn]++
			mark(tp.turn)
			if t := refTarget(s, tp.turn); t >= 0 && t < len(c.copies) {
				mark(t)
			}
		}
	}
	return c
}

// usersWithoutCopy returns the number of user turns of c that hold no
// copy.
func (e *engine) usersWithoutCopy(c *turnCensus) int {
	n := 0
	for t, ok := range c.copies {
		if !ok && e.role(t) == "user" {
			n++
		}
	}
	return n
}

// refLines yields the lines of l that are reference lines (isRefLine), in
// order. Only a line holding '[' may be one: they are found with one
// vectorised search of the text, not a test per line (a test per line was
// a tenth of the rewrite of a 1 MB request of source code, issue 17).
func refLines(l *lines) iter.Seq[string] {
	return func(yield func(string) bool) {
		text := l.text
		for from := 0; from < len(text); {
			j := strings.IndexByte(text[from:], '[')
			if j < 0 {
				return
			}
			p := from + j
			if p > 0 {
				// A reference line's first '[' follows only white space
				// on its line (strings.TrimSpace's: ASCII, or a Unicode
				// space, whose bytes are all non-ASCII): a '[' after any
				// other byte is not the first of a reference line.
				switch c := text[p-1]; {
				case c == '\n', c == ' ', c == '\t', c == '\r', c == '\v', c == '\f', c >= utf8.RuneSelf:
				default:
					from = p + 1
					continue
				}
			}
			// A reference line's first '[' is the first '[' the search
			// meets on its line (only white space comes before it), so
			// it is p, and p opens one of the prefixes isRefLine wants.
			// Most brackets of source code fail this test on their
			// second byte; the line around them is never looked for (a
			// backward byte loop and a search for the line end per
			// bracket were 9% of the rewrite of the 1 MB bench request).
			// A later '[' on the same line gets the same test and fails
			// the same way: that line is no reference.
			if !refPrefix(text[p:]) {
				from = p + 1
				continue
			}
			// The line around p, as l.at gives it (l.nl holds every
			// "\n"), without a search of the line ends.
			start := strings.LastIndexByte(text[:p], '\n') + 1
			end := len(text)
			if k := strings.IndexByte(text[p:], '\n'); k >= 0 {
				end = p + k
			}
			s := text[start:end]
			if len(s) > 0 && s[len(s)-1] == '\r' {
				s = s[:len(s)-1]
			}
			if isRefLine(s) && !yield(s) {
				return
			}
			from = end + 1
		}
	}
}

// refPrefix reports whether t starts with the opening of a reference line
// (isRefLine's prefixes).
func refPrefix(t string) bool {
	if len(t) < 6 {
		return false
	}
	switch t[1] {
	case 'u':
		return strings.HasPrefix(t, "[unchanged: ")
	case 's':
		return strings.HasPrefix(t, "[superseded: ") || strings.HasPrefix(t, "[same ")
	}
	return false
}

// refTarget returns the turn that reference line s, in turn t, names as
// holding the full copy of an unchanged content ("in turn N", "in your
// previous reply", "earlier/later in this turn"), or -1 for a superseded
// reference or none.
func refTarget(s string, t int) int {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[unchanged: ") && !strings.HasPrefix(s, "[same ") {
		return -1
	}
	s = strings.TrimSuffix(s, "]")
	switch {
	case strings.HasSuffix(s, " in this turn"):
		return t
	case strings.HasSuffix(s, " in your previous reply"):
		return t - 1
	}
	k := strings.LastIndex(s, " in turn ")
	if k < 0 {
		return -1
	}
	n, err := strconv.Atoi(s[k+len(" in turn "):])
	if err != nil || n < 1 {
		return -1
	}
	return n - 1
}

// ambiguousLeads returns the lead-in lines that stand above two blocks or
// reference lines of one user turn (see leadIn), or nil. Reference lines
// count as the blocks they replaced, so that the output, rewritten again,
// finds the same.
func (e *engine) ambiguousLeads() map[string]bool {
	var out map[string]bool
	var count map[string]int
	for k := 0; k < len(e.parts); k++ {
		tp := &e.parts[k]
		if e.role(tp.turn) != "user" {
			continue
		}
		if k == 0 || e.parts[k-1].turn != tp.turn {
			clear(count)
		}
		see := func(lead string) {
			if lead == "" {
				return
			}
			if count == nil {
				count = map[string]int{}
			}
			if count[lead]++; count[lead] == 2 {
				if out == nil {
					out = map[string]bool{}
				}
				out[lead] = true
			}
		}
		l := &tp.lines
		last, blanks := "", 0
		j := 0 // the next block
		for i := 0; i < l.n(); i++ {
			if j < len(tp.blocks) && l.s(i) <= tp.blocks[j].start && tp.blocks[j].start <= l.e(i) {
				see(leadIn(tp, j))
				i = lineAt(l, tp.blocks[j].end)
				j++
				last, blanks = "", 0
				continue
			}
			line := strings.TrimSpace(l.at(i))
			switch {
			case i < len(tp.gone) && tp.gone[i]:
				last, blanks = "", 0
			case line == "":
				if blanks++; blanks > 2 {
					last = ""
				}
			case isRefLine(line):
				see(last)
				last, blanks = "", 0
			case len(line) > 240:
				last, blanks = "", 0
			default:
				last, blanks = line, 0
			}
		}
	}
	return out
}

func (e *engine) identify(o *occ) int {
	switch k := o.b.kind; {
	case k == kindImage:
		key := "\x00image\x00" + o.content
		if d, ok := e.byName[key]; ok {
			return d
		}
		d := e.newDoc(o.b.name, k)
		e.byName[key] = d
		return d
	case k == kindTool:
		return e.toolDoc(o)
	case k.secondary():
		key := "\x00" + o.b.name
		if d, ok := e.byName[key]; ok {
			return d
		}
		d := e.newDoc(o.b.name, k)
		e.byName[key] = d
		return d
	}
	if o.b.name != "" {
		key := cleanName(o.b.name)
		d, ok := e.byName[key]
		if !ok {
			d = e.newDoc(o.b.name, o.b.kind)
			e.byName[key] = d
			return d
		}
		if _, same := e.versions[verKey{int32(d), o.cid}]; same {
			return d
		}
		if td := e.byText[o.cid]; td >= 0 && cleanName(e.docs[td].name) == key {
			return int(td) // a repeat of a retrieval chunk of this file
		}
		latest := e.docs[d].latest
		if len(o.content)*2 < len(latest) {
			// Testing a small block against a large latest version scans
			// the latest, which need not be sent again: many small blocks
			// named as one huge file would cost their number times its
			// size. Past a budget linear in the body, such a block is a
			// document of its own, as a retrieval chunk is: it is then
			// never taken as a newer version, so nothing is superseded.
			if e.chunkScan < len(latest) {
				e.chunkedAgainst(d)
				return e.newDoc(o.b.name, o.b.kind)
			}
			e.chunkScan -= len(latest)
		}
		switch e.chunk(latest, o.content) {
		case -1: // a retrieval chunk of the file: a document of its own
			e.chunkedAgainst(d)
			return e.newDoc(o.b.name, o.b.kind)
		case 1: // the earlier copy was a chunk of this one
			d = e.newDoc(o.b.name, o.b.kind)
			e.byName[key] = d
		}
		return d
	}
	if d := e.byText[o.cid]; d >= 0 && !e.conflict(o, e.docs[d]) {
		return int(d)
	}
	var set []uint64
	best, bestSim, bestLead, tie := -1, 0.0, false, false
	// Compare with the most recent documents only, and only those whose
	// size allows the similarity (Jaccard ≤ min/max), so that a request
	// with many distinct blocks stays near linear.
	for i := len(e.docs) - 1; i >= 0 && i >= len(e.docs)-maxCandidates; i-- {
		d := e.docs[i]
		if d.kind == kindImage || d.kind.secondary() || d.kind == kindTool {
			continue
		}
		if int(e.occs[d.last].turn) == o.turn {
			continue // two blocks in one turn are two documents
		}
		if lo, hi := min(len(d.latest), len(o.content)), max(len(d.latest), len(o.content)); float64(lo) < e.opts.Similarity*float64(hi)/4 {
			continue
		}
		ok, lead := e.evidence(o, d)
		if !ok {
			continue
		}
		if set == nil {
			set = lineSet(o.content)
			e.st.scanned += len(o.content)
		}
		if !d.hasSet {
			d.set, d.hasSet = lineSet(d.latest), true
			e.st.scanned += len(d.latest)
		}
		sim := similarity(set, d.set)
		e.st.scanned += 8 * (len(set) + len(d.set))
		if sim < e.opts.Similarity || e.chunk(d.latest, o.content) != 0 {
			continue
		}
		switch {
		case best < 0 || lead && !bestLead:
			best, bestSim, bestLead, tie = i, sim, lead, false
		case lead == bestLead:
			tie = true // two documents could be the one continued
			if sim > bestSim {
				best, bestSim = i, sim
			}
		}
	}
	if best >= 0 && !tie {
		return best
	}
	return e.newDoc(firstLine(o.content), o.b.kind)
}

// chunkedAgainst marks the latest version of named document d as one that
// a block of the same name was taken as a retrieval chunk of (or, past the
// scan budget, as a document of its own because of its size): that
// version is never superseded (decide). Superseded, it would be gone from
// the output, and a second rewrite would test that block against whatever
// version of the name comes before it, or none: two chunks of the file
// would become two versions of one document, the older superseded
// (FuzzSession, testdata identity_chunk_superseded).
func (e *engine) chunkedAgainst(d int) {
	if i, ok := e.versions[verKey{int32(d), e.docs[d].latestID}]; ok {
		e.occs[i].chunked = true
	}
}

// decide applies "keep once" (DESIGN §3). The active versions are the
// latest version of each document, every version with an occurrence in
// the newest user turn (what the user asks about now reaches the model
// whole), and, when Options.CompactSuperseded is off, every version. The
// full text of each active content is kept once, whatever document holds
// it; every other copy of it becomes an unchanged reference. Any other
// occurrence is an older version of a document block outside the newest
// user turn, and becomes a superseded reference to its document's latest
// version, which is kept in full.
//
// A content is kept at its first occurrence as an active version, except
// that a document whose newest user turn holds an older version (two
// versions compared, an undo) keeps each version of that turn in full
// there, and that the latest version's full copy comes after every block
// of another version that stays in the output (settleLatest): the output
// then holds, of each document, either one version or only versions in
// the newest user turn, and its last block is its latest version, so that
// rewriting it again finds the same latest version and no older version
// to supersede.
func (e *engine) decide() { e.decideWith(e.opts.CompactSuperseded) }

// decideWith is decide with compaction on or off (compaction.go weighs
// both).
func (e *engine) decideWith(compact bool) {
	for i := range e.occs {
		if o := &e.occs[i]; o.turn == e.newest && o.cid != e.docs[o.doc].latestID {
			e.docs[o.doc].split = true
		}
	}
	for i := range e.occs {
		o := &e.occs[i]
		d := e.docs[o.doc]
		switch {
		case !compact, o.turn == e.newest && !d.split:
			e.occs[e.versions[verKey{d.id, o.cid}]].active = true
		case o.turn == e.newest:
			// Pinned: the first occurrence in the newest user turn.
			if k := (verKey{-4 - d.id, o.cid}); e.versions[k] == 0 {
				e.versions[k] = i + 1
				o.active, o.pinned = true, true
			}
		case o.cid != d.latestID && o.b.kind != kindImage && e.holdsLabel(o):
			// Never superseded: it may hold turns of a transcript.
			e.occs[e.versions[verKey{d.id, o.cid}]].active = true
		case o.cid != d.latestID && e.occs[e.versions[verKey{d.id, o.cid}]].chunked:
			// Never superseded: a later block was taken as a chunk of it
			// (chunkedAgainst).
			e.occs[e.versions[verKey{d.id, o.cid}]].active = true
		}
	}
	for _, d := range e.docs {
		e.occs[e.versions[verKey{d.id, d.latestID}]].active = true
	}
	// The full copy of a content is its first pinned occurrence, else its
	// first active one, whatever document holds it. It is recorded in
	// e.versions under a negative document number (fullKey), plus one, by
	// class of block, so that an image and a text of the same bytes stay
	// apart.
	for _, pinned := range []bool{true, false} {
		for i := range e.occs {
			if o := &e.occs[i]; o.active && o.pinned == pinned {
				if k := fullKey(o, o.cid); e.versions[k] == 0 {
					e.versions[k] = i + 1
				}
			}
		}
	}
	e.refer(false)
	// Bounded: each round moves a full copy to a later occurrence.
	for n := 0; compact && n < len(e.occs) && e.settleLatest(); n++ {
		e.refer(true)
	}
}

// refer makes every occurrence that is not the full copy of its content a
// reference to the full copy (unchanged) or, for an older version, to its
// document's latest version (superseded). With reset it first clears the
// decision of an occurrence that has become a full copy (settleLatest).
func (e *engine) refer(reset bool) {
	for i := range e.occs {
		o := &e.occs[i]
		full := e.versions[fullKey(o, o.cid)] - 1
		if full == i {
			if reset {
				o.replace, o.rule, o.target, o.tgt, o.later, o.super = false, "", 0, 0, false, false
				o.ref, o.refEsc, o.refName, o.refBytes = "", false, "", 0
			}
			continue
		}
		if full < 0 {
			o.super = true
			full = e.versions[fullKey(o, e.docs[o.doc].latestID)] - 1
		}
		o.target = e.occs[full].turn
		o.tgt = int32(full)
		o.later = full > i
		o.rule = RuleUnchanged
		switch {
		case o.b.kind == kindImage:
			o.rule = RuleImage
		case o.b.kind.secondary():
			o.rule = RuleSecondary
		case o.super:
			o.rule = RuleSuperseded
		}
		o.replace = !e.keepTool(o) && e.reference(o)
	}
}

// settleLatest keeps the output's last block of each document its latest
// version, which a second rewrite takes as the latest: when a block of
// another version stays in the output after the latest version's full
// copy (a version pinned in the newest user turn before a trailing model
// turn, one that holds a transcript label, an older version whose
// superseded reference would be too long to replace), the full copy moves
// to the first occurrence of the latest version after that block. Else
// the second rewrite would take that block's version as the latest and
// supersede the full copy. A full copy in the newest user turn, or one
// that holds a label, stays: it is never superseded. It reports whether
// it moved any.
func (e *engine) settleLatest() bool {
	moved := false
	for _, d := range e.docs {
		if d.first < 0 || d.kind == kindImage {
			continue
		}
		lo := &e.occs[d.last]
		k := fullKey(lo, d.latestID)
		full := e.versions[k] - 1
		if full < 0 || e.occs[full].turn == e.newest {
			continue
		}
		last := -1 // the last block of another version that stays
		for i := d.first; i >= 0; i = e.occs[i].next {
			o := &e.occs[i]
			if o.cid != d.latestID && (!o.replace || e.versions[fullKey(o, o.cid)]-1 == int(i)) {
				last = int(i)
			}
		}
		if last < full || e.holdsLabel(&e.occs[full]) {
			continue
		}
		for j := e.occs[last].next; j >= 0; j = e.occs[j].next {
			if e.occs[j].cid == d.latestID {
				e.versions[k] = int(j) + 1
				e.occs[j].active = true
				moved = true
				break
			}
		}
	}
	return moved
}

// holdsLabel reports whether the text of o, a block, has a line that
// reads as a turn label of a flattened transcript ("User:", "Assistant：",
// "<|user|>", "<start_of_turn>model", "<assistant>", "### Human:"): such a
// block may be a span that fence parsing carried across turns, holding a
// question or a served answer, and is never superseded (DESIGN §3). Real
// code that builds a transcript only loses a saving. The test is its own,
// not the un-flattener's, and looks at a few bytes of each line.
//
// Only a block of a text that has such a line outside its blocks is read
// (the first label of a transcript, "User: ```go" when a fence is glued
// to it, is outside every block): a text whose labels are all inside one
// block quotes a transcript and is a document like any other. The answers
// are cached, by part and by content.
func (e *engine) holdsLabel(o *occ) bool {
	if e.labels == nil {
		e.labels = make([]int8, len(e.ids)+len(e.parts))
	}
	known := func(k int, f func() bool) bool {
		if v := e.labels[k]; v != 0 {
			return v > 0
		}
		e.labels[k] = -1
		if f() {
			e.labels[k] = 1
		}
		return e.labels[k] > 0
	}
	tp := &e.parts[o.tp]
	return known(len(e.ids)+o.tp, func() bool { return freeLabel(tp) }) &&
		known(int(o.cid), func() bool { return textHoldsLabel(tp.text[o.b.cstart:o.b.cend]) })
}

// freeLabel reports whether a line of tp outside its blocks starts with a
// turn label.
func freeLabel(tp *textPart) bool {
	l := &tp.lines
	from := 0
	for _, b := range tp.blocks {
		// Bounds found once per block: in the loop condition they were a
		// binary search per line.
		for i, end := from, min(lineAt(l, b.start)+1, l.n()); i < end; i++ {
			if turnLabel(l.at(i)) {
				return true
			}
		}
		from = max(from, min(lineAt(l, b.end)+1, l.n()))
	}
	for i := from; i < l.n(); i++ {
		if turnLabel(l.at(i)) {
			return true
		}
	}
	return false
}

// textHoldsLabel reports whether a line of text starts with a turn label.
func textHoldsLabel(text string) bool {
	for text != "" {
		line := text
		if k := strings.IndexByte(text, '\n'); k >= 0 {
			line, text = text[:k], text[k+1:]
		} else {
			text = ""
		}
		if turnLabel(line) {
			return true
		}
	}
	return false
}

// labelWords are the role words of turn labels, lower case.
var labelWords = []string{"user", "assistant", "human", "ai", "model", "bot", "system", "gpt", "claude", "gemini", "chatgpt",
	"usuario", "usuário", "asistente", "assistente", "modelo", "utilisateur", "用户", "助手", "人类", "模型", "ユーザー", "アシスタント"}

// turnTokens are the chat-template tokens and XML tags that open a turn.
var turnTokens = []string{"<|user|>", "<|assistant|>", "<|system|>", "<|im_start|>", "<start_of_turn>", "<user>", "<assistant>", "<human>", "<model>", "<turn>"}

// turnLabel reports whether line starts with a turn label: a role word
// followed by a colon (also after "#", "*", "[" or "_" decorations), or a
// chat-template token. Most lines are rejected by their first bytes: a
// label word ends at a colon within the first few dozen bytes.
func turnLabel(line string) bool {
	t := strings.TrimLeft(line, " \t")
	if len(line)-len(t) > 3 || t == "" {
		return false
	}
	switch t[0] {
	case '<':
		for _, p := range turnTokens {
			if len(t) >= len(p) && strings.EqualFold(t[:len(p)], p) {
				return true
			}
		}
		return false
	case '#', '*', '[', '_':
		t = strings.TrimLeft(t, "#*[_ ")
	}
	head := t[:min(len(t), 32)]
	k := strings.IndexByte(head, ':')
	if w := strings.Index(head, "："); w >= 0 && (k < 0 || w < k) {
		k = w
	}
	if k <= 0 {
		return false
	}
	w := strings.TrimRight(t[:k], "]*_")
	for _, lw := range labelWords {
		if len(lw) == len(w) && strings.EqualFold(lw, w) {
			return true
		}
	}
	return false
}

// fullKey is the key in engine.versions of the full copy of content cid in
// o's class of blocks (text, secondary context, image).
func fullKey(o *occ, cid int32) verKey {
	switch {
	case o.b.kind == kindImage:
		return verKey{-3, cid}
	case o.b.kind.secondary():
		return verKey{-2, cid}
	}
	return verKey{-1, cid}
}
