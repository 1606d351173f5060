package rewrite

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// blockKind says how a block was found.
type blockKind uint8

const (
	kindFence  blockKind = iota // fenced code block
	kindTag                     // XML-like document tag
	kindBanner                  // text banner naming a file
	kindTree                    // project tree (secondary)
	kindTabs                    // open-tab list (secondary)
	kindRun                     // unwrapped lines repeating an earlier turn
	kindImage                   // a whole inlineData part
	kindValue                   // a whole string value of a JSON text (jsontext.go)
	kindTool                    // a whole string value of a tool result (jsontext.go)
)

func (k blockKind) secondary() bool { return k == kindTree || k == kindTabs }

// block is a unit of text that may repeat. Offsets are byte offsets in the
// unescaped text of one part.
type block struct {
	start, end   int // the span a reference would replace
	cstart, cend int // the content compared for identity
	name         string
	kind         blockKind
	blob         bool // a fence holding two or more "// File:" banners
	shell        bool // a fence holding only references: not a block
	box          bool // a fenced JSON value analysed by its values (jsontext.go)
}

// lines holds the line boundaries of a text: line i is text[start[i]:end[i]]
// without its "\n"; end excludes a trailing "\r" as well when cr is set.
type lines struct {
	text string
	// nl holds the offset of each "\n", then len(text): line i ends at
	// nl[i] and starts after nl[i-1]. Texts are bounded by the body limit,
	// far below 2 GiB.
	nl []int32
}

func splitLines(text string) lines {
	l := lines{text: text, nl: make([]int32, 0, len(text)/32+1)}
	for i := 0; ; {
		j := strings.IndexByte(text[i:], '\n')
		if j < 0 {
			l.nl = append(l.nl, int32(len(text)))
			return l
		}
		l.nl = append(l.nl, int32(i+j))
		i += j + 1
	}
}

func (l *lines) n() int { return len(l.nl) }

// s returns the offset where line i starts.
func (l *lines) s(i int) int {
	if i == 0 {
		return 0
	}
	return int(l.nl[i-1]) + 1
}

// e returns the offset where line i ends, its "\n" excluded.
func (l *lines) e(i int) int { return int(l.nl[i]) }

// at returns line i without "\r\n".
func (l *lines) at(i int) string {
	s := l.text[l.s(i):l.e(i)]
	if len(s) > 0 && s[len(s)-1] == '\r' {
		s = s[:len(s)-1]
	}
	return s
}

// segmenter finds blocks in one text.
type segmenter struct {
	l    lines
	tags []string
	// noClose remembers, per fence character, that no closing fence of at
	// least n chars follows line from, so that a text full of unclosed
	// fences costs linear time.
	noClose [2]struct{ from, n int }
	// closeAt remembers, per tag, where the last search for its closing
	// tag started and what it found (-1: none), for the same reason.
	closeAt map[string][2]int
	// hz is the last line the blocks found so far depend on (see segMark);
	// marks, when set, receives a segMark after each block found.
	hz    int
	marks *[]segMark
	base  int // len(out) when this text's blocks began
	// When limited, the run ends once out holds more than stop blocks
	// (Options.MaxBlocks: the request is refused, so the blocks of the
	// rest of the text do not matter).
	limited bool
	stop    int
	// steps counts the lines the detectors visit and the bytes the closing
	// tag searches read: a measure of work that tests compare across input
	// sizes (TestPathologicalLinear), which, unlike time, does not depend
	// on the machine's load.
	steps int
	// idx, when set, holds the fence and tag steps of the texts segmented
	// before this one (index cur among them; marks then holds their
	// marks, and out their blocks, this text's marks starting at
	// markBase): a step of this text at a line where one of them found a
	// block, with the same bytes from there, copies the blocks they found
	// from there (reuseAt); copies lists each copied run as its first
	// block in out, its source's and its length.
	idx      *segIndex
	cur      int32
	markBase int
	copies   [][3]int32
}

// segIndex indexes the lines of the texts segmented so far in a request
// where a fence or tag step found a block, by the line's hash, so that a
// text that re-sends such blocks anywhere inside it (not only at its
// start, as segReuse's resume) finds them without segmenting them again
// (issue 17: the 1 MB overhead request's last turn re-sends every
// document three times inside one text). The zero value is ready to use.
type segIndex struct {
	texts []segText // the texts segmented, in order
	list  []segEntry
	tab   chainTable // line hash → 1 + the index in list of its newest entry
	// pending is the first entry of the text being segmented, indexed
	// once it is done (commit), as anchors.pending.
	pending int
	// taken counts the copies made (reuseAt) and walked the entries
	// compared, for tests.
	taken, walked int
	// arena and copies are the scan's decoding arena and the copies it
	// made there (anchors.copies), for known.
	arena  []byte
	copies []arenaCopy
}

// known returns how many bytes from cur[cs:] the scan copied from
// src[ts:], which are therefore the same: both texts must lie in the
// arena; 0 when they do not, or the scan did not copy there.
func (x *segIndex) known(cur string, cs int, src string, ts int) int {
	pc, ps := arenaOff(x.arena, cur), arenaOff(x.arena, src)
	if pc < 0 || ps < 0 || len(x.copies) == 0 {
		return 0
	}
	pc, ps = pc+cs, ps+ts
	// The last copy starting at or before pc.
	k := sort.Search(len(x.copies), func(k int) bool { return int(x.copies[k].dst) > pc }) - 1
	if k < 0 {
		return 0
	}
	c := x.copies[k]
	if off := pc - int(c.dst); off < int(c.n) && int(c.src)+off == ps {
		return int(c.n) - off
	}
	return 0
}

// arenaOff returns the offset of s in arena, -1 when s is not a part of it.
func arenaOff(arena []byte, s string) int {
	if len(s) == 0 || cap(arena) == 0 {
		return -1
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	b := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	if p < b || p+uintptr(len(s)) > b+uintptr(cap(arena)) {
		return -1
	}
	return int(p - b)
}

// samePrefix is commonPrefix of a[i:] and b[j:], for texts of the
// segmentation: the bytes that the scan copied (known) are not compared
// again.
func (x *segIndex) samePrefix(a string, i int, b string, j int) int {
	k := min(x.known(a, i, b, j), len(a)-i, len(b)-j)
	return k + commonPrefix(unsafe.Slice(unsafe.StringData(a[i+k:]), len(a)-i-k), unsafe.Slice(unsafe.StringData(b[j+k:]), len(b)-j-k))
}

// segEntry is one indexed step: its text (an index into segIndex.texts),
// its line and the first free line then, the index among the text's
// marks of the mark after the block it found, the entry with the same
// key indexed before it (-1: none), and the key.
type segEntry struct {
	text, line, free, mark, prev int32
	key                          uint64
}

// reset empties x for a new request.
func (x *segIndex) reset() {
	clear(x.texts) // their strings may be a request's decoded values
	if cap(x.list) > maxPooledKeys {
		x.texts, x.list = nil, nil
	}
	x.texts, x.list, x.taken, x.walked, x.pending = x.texts[:0], x.list[:0], 0, 0, 0
	x.arena, x.copies = nil, nil
	x.tab.reset()
}

// commit indexes the entries of the text just segmented.
func (x *segIndex) commit() {
	if x.pending == len(x.list) {
		return
	}
	x.tab.fit(len(x.list))
	for j := x.pending; j < len(x.list); j++ {
		e := &x.list[j]
		h := x.tab.slot(e.key)
		e.prev = x.tab.heads[h] - 1
		x.tab.keys[h], x.tab.heads[h] = e.key, int32(j+1)
	}
	x.pending = len(x.list)
}

// reuseAt looks for an earlier text whose step at a line with the bytes
// of line i (free the first free line, key the line's hash) found a
// block, and whose bytes from there are this text's from line i on, up
// to the "\n" ending the last line that a later mark of it depends on
// (segMark's hz). The steps from a mark's line
// read nothing before it but, for a fence, the line above as its name
// when that line is not taken (free < i): either neither text takes a
// name there or both have the same line above. It appends the blocks that
// text found from there up to that mark, moved to this text, and their
// marks, and returns the line of the last one; ok is false when no text
// shares a mark's worth.
func (sg *segmenter) reuseAt(out []block, i, free int, key uint64, fence bool) ([]block, int, bool) {
	x := sg.idx
	if len(x.tab.keys) == 0 {
		return out, 0, false
	}
	h := x.tab.slot(key)
	l := &sg.l
	segs := *sg.marks
	var src *segText
	var from segEntry
	best, bestK := 0, 0
	tries := 0
	for j := x.tab.heads[h] - 1; j >= 0 && tries < maxAnchorTries; j = x.list[j].prev {
		e := x.list[j]
		tries++
		x.walked++
		t := &x.texts[e.text]
		tl := &t.l
		a := int(e.line)
		if fence {
			name, tname := "", ""
			if free < i {
				name = nameLine(l.at(i - 1))
			}
			if int(e.free) < a {
				tname = nameLine(tl.at(a - 1))
			}
			if (name != "" || tname != "") && (free == i || int(e.free) == a || tl.text[tl.s(a-1):tl.s(a)] != l.text[l.s(i-1):l.s(i)]) {
				continue
			}
		}
		marks := segs[t.markOff : t.markOff+t.markCount]
		need := min(int(tl.nl[marks[len(marks)-1].hz])+1, len(tl.text))
		ts, cs := tl.s(a), l.s(i)
		if need <= ts {
			continue
		}
		c := x.samePrefix(l.text, cs, tl.text[:need], ts)
		// The last mark whose line hz ends, "\n" included, in the shared
		// bytes.
		k := sort.Search(len(marks), func(k int) bool { return int(tl.nl[marks[k].hz]) >= ts+c }) - 1
		if k < int(e.mark) || int(marks[k].line)-a <= best {
			continue
		}
		// The line ends: every line end of a text is a "\n" of it (the
		// scanner records each decoded one, splitLines finds them), so
		// the same bytes have the same line ends; the last one is
		// compared, as a check that both texts count their lines alike.
		hz := int(marks[k].hz)
		if i+hz-a >= l.n() || int(tl.nl[hz])-ts != int(l.nl[i+hz-a])-cs {
			continue
		}
		src, from, best, bestK = t, e, int(marks[k].line)-a, k
	}
	if src == nil {
		return out, 0, false
	}
	marks := segs[src.markOff : src.markOff+src.markCount]
	a := int(from.line)
	nbA := int32(0)
	if from.mark > 0 {
		nbA = marks[from.mark-1].nblocks
	}
	nbB := marks[bestK].nblocks
	delta := l.s(i) - src.l.s(a)
	nb := int32(len(out) - sg.base)
	x.taken++
	sg.copies = append(sg.copies, [3]int32{int32(len(out)), int32(src.blockOff) + nbA, nbB - nbA})
	for _, b := range out[src.blockOff+int(nbA) : src.blockOff+int(nbB)] {
		b.start, b.end, b.cstart, b.cend = b.start+delta, b.end+delta, b.cstart+delta, b.cend+delta
		out = append(out, b)
	}
	dl := int32(i - a)
	for _, m := range marks[from.mark : bestK+1] {
		sg.hz = max(sg.hz, int(m.hz+dl))
		*sg.marks = append(*sg.marks, segMark{m.line + dl, m.nblocks - nbA + nb, int32(sg.hz)})
	}
	return out, int(marks[bestK].line + dl), true
}

// segMark records the segmenter after a step that found a block, so that
// the segmentation of another text with the same first bytes can start
// there (replayable).
//
// The steps of run up to a mark read nothing past line hz: each detector
// reports the last line it looked at, and one that reached the end of the
// text (an unclosed fence, a banner or list running to the end) reports
// the last line. A text whose bytes up to and including the "\n" ending
// line hz are the same, with the same line ends (which the scanner derives
// from the raw escapes), therefore has the same lines 0..hz, at the same
// offsets, and at least one line after them, so every step up to the mark
// decides alike and finds the same blocks. The segmenter's other state,
// noClose and closeAt, only caches searches whose answers do not depend on
// it, so a run resumed with them empty finds what a full run finds.
type segMark struct {
	line    int32 // the line the next step starts at; also the first free line
	nblocks int32 // blocks of the text found up to the mark
	hz      int32
}

// touch records that the blocks found depend on line j.
func (sg *segmenter) touch(j int) {
	if j > sg.hz {
		sg.hz = j
	}
}

// touchEnd records that the blocks found depend on where the text ends.
func (sg *segmenter) touchEnd() { sg.touch(sg.l.n() - 1) }

// segment returns the blocks of text in order, which never overlap, and the
// text's lines.
func segment(text string, tags []string) ([]block, lines) {
	l := splitLines(text)
	return segmentLines(l, tags), l
}

// segmentLines is segment over a text already split into lines.
func segmentLines(l lines, tags []string) []block {
	return appendBlocks(nil, l, tags)
}

// appendBlocks appends the blocks of a text already split into lines to
// dst, so that the parts of a request can share one buffer.
func appendBlocks(dst []block, l lines, tags []string) []block {
	return appendBlocksFrom(dst, l, tags, segMark{}, nil, -1)
}

// appendBlocksFrom is appendBlocks resumed at mark from, a mark of another
// text whose blocks up to it dst already ends with (see segMark; the zero
// mark starts at the beginning). When marks is not nil, a segMark is
// appended to it after each block found. When stop is not negative, the
// segmentation ends once dst holds more than stop blocks.
func appendBlocksFrom(dst []block, l lines, tags []string, from segMark, marks *[]segMark, stop int) []block {
	out, _ := appendBlocksCounted(dst, l, tags, from, marks, stop)
	return out
}

// appendBlocksCounted is appendBlocksFrom, also returning segmenter.steps.
func appendBlocksCounted(dst []block, l lines, tags []string, from segMark, marks *[]segMark, stop int) ([]block, int) {
	if len(l.text) < 8 {
		return dst, 0
	}
	sg := segmenter{l: l, tags: tags, hz: int(from.hz), marks: marks, base: len(dst) - int(from.nblocks), limited: stop >= 0, stop: stop}
	out := sg.run(dst, int(from.line))
	return out, sg.steps
}

func (sg *segmenter) run(out []block, i int) []block {
	l := &sg.l
	free := i // first line not consumed by a block
	for i < l.n() {
		if sg.limited && len(out) > sg.stop {
			break
		}
		sg.steps++
		sg.touch(i)
		line := l.at(i)
		var b block
		var next int
		ok := false
		var key uint64
		indexed := false
		switch fence := isFenceCandidate(line); {
		case fence || strings.HasPrefix(trimIndent(line), "<"):
			if sg.idx != nil {
				key, indexed = hashLine(line), true
				var j int
				if out, j, ok = sg.reuseAt(out, i, free, key, fence); ok {
					i, free = j, j
					continue
				}
			}
			if fence {
				b, next, ok = sg.fence(i, free)
			} else {
				b, next, ok = sg.tag(i)
			}
		}
		if ok && indexed {
			x := sg.idx
			x.list = append(x.list, segEntry{text: sg.cur, line: int32(i), free: int32(free), mark: int32(len(*sg.marks) - sg.markBase), key: key})
		}
		if !ok && !plainLine(line) {
			b, next, ok = sg.banner(i)
			if !ok {
				b, next, ok = sg.secondary(i)
			}
		}
		if !ok {
			i++
			continue
		}
		if b.shell {
			// consumed, but nothing left to compare
		} else if b.blob {
			out = sg.split(out, b)
		} else {
			out = append(out, b)
		}
		i, free = next, next
		if sg.marks != nil {
			*sg.marks = append(*sg.marks, segMark{int32(next), int32(len(out) - sg.base), int32(sg.hz)})
		}
	}
	return out
}

func isFenceCandidate(line string) bool {
	t := trimSpaces(line)
	return len(line)-len(t) <= 3 && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"))
}

// fenceOpen parses a CommonMark opening fence line.
func fenceOpen(line string) (ch byte, n int, info string, ok bool) {
	t := trimSpaces(line)
	if len(line)-len(t) > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return 0, 0, "", false
	}
	ch = t[0]
	for n < len(t) && t[n] == ch {
		n++
	}
	if n < 3 {
		return 0, 0, "", false
	}
	info = strings.TrimSpace(t[n:])
	if ch == '`' && strings.IndexByte(info, '`') >= 0 {
		return 0, 0, "", false
	}
	return ch, n, info, true
}

// fenceClose reports whether line closes a fence of n chars ch.
func fenceClose(line string, ch byte, n int) bool {
	t := trimSpaces(line)
	if len(line)-len(t) > 3 {
		return false
	}
	k := 0
	for k < len(t) && t[k] == ch {
		k++
	}
	return k >= n && strings.Trim(t[k:], " \t") == ""
}

// fence reads a fenced block opening at line i. free is the first line that
// a name line above the fence may use.
func (sg *segmenter) fence(i, free int) (block, int, bool) {
	l := &sg.l
	ch, n, info, ok := fenceOpen(l.at(i))
	if !ok {
		return block{}, 0, false
	}
	b := block{kind: kindFence, start: l.s(i), name: infoName(info)}
	if i > free {
		if name := nameLine(l.at(i - 1)); name != "" {
			if b.name == "" {
				b.name = name
			}
			b.start = l.s(i - 1)
		}
	}
	if i+1 >= l.n() {
		sg.touchEnd()
		return block{}, 0, false
	}
	b.cstart = l.s(i + 1)
	memo := &sg.noClose[0]
	if ch == '~' {
		memo = &sg.noClose[1]
	}
	banners, refs, other := 0, 0, false
	flags := func(line string) {
		t := trimIndent(line)
		switch {
		case t == "" || t == "\r":
		case strings.IndexByte("/#-;", t[0]) >= 0 && commentBanner(t) != "":
			banners++
		case t[0] == '[' && isRefLine(t):
			refs++
		default:
			other = true
		}
		b.blob = banners > 0 && banners+refs >= 2
		b.shell = !other && refs > 0
	}
	known := memo.n > 0 && i >= memo.from && n >= memo.n // known: no closing fence below
	j0 := i + 1
	for j, prev := i+1, int(l.nl[i]); j < l.n() && !known; j++ {
		// Fast path for the common code line: its first byte after the
		// indent is neither the fence character nor one that flags or a
		// blank line looks at, so it can only be "other" content.
		end := int(l.nl[j])
		k, e := skipIndent(l.text, prev+1, end)
		prev = end
		if k < e && plainCodeLine(l.text, k, e, ch) {
			other, b.shell = true, false
			continue
		}
		line := l.at(j)
		if fenceClose(line, ch, n) {
			b.end = l.e(j)
			b.cend = l.s(j)
			if b.cend > b.cstart {
				b.cend-- // the "\n" before the closing fence
			}
			sg.touch(j)
			sg.steps += j + 1 - j0
			return b, j + 1, true
		}
		flags(line)
	}
	if !known {
		sg.steps += l.n() - j0
	}
	sg.touchEnd()
	memo.from, memo.n = i, n
	// No closing fence. A naive template may have glued it to the last code
	// line ("}```"); otherwise the fence was left open by truncation.
	banners, refs, other = 0, 0, false
	b.blob, b.shell = false, false
	for j := i + 1; j < l.n(); j++ {
		// The first loop's fast path for a plain code line (flags would
		// only mark it other), and a one-byte test before the glued-close
		// test: a glued close ends in ch once its trailing blanks are
		// dropped. Most lines fail both tests, and the rest of a text
		// after an unclosed fence was read twice per line (issue 17).
		line := l.at(j)
		if k, e := skipIndent(l.text, l.s(j), l.e(j)); k < e && plainCodeLine(l.text, k, e, ch) {
			other, b.shell = true, false
		} else {
			flags(line)
		}
		k := len(line)
		for k > 0 && (line[k-1] == ' ' || line[k-1] == '\t') {
			k--
		}
		if k == 0 || line[k-1] != ch {
			continue
		}
		s := line[:k]
		for k > 0 && s[k-1] == ch {
			k--
		}
		if len(s)-k >= n && k > 0 && strings.TrimSpace(s[:k]) != "" {
			b.end = l.e(j)
			b.cend = l.s(j) + k
			sg.steps += j - i
			return b, j + 1, true
		}
	}
	sg.steps += l.n() - i - 1
	b.end = len(l.text)
	b.cend = len(l.text)
	return b, l.n(), true
}

// split keeps a fence as one block unless its content is a blob of several
// files separated by comment banners ("// File: a.ts"); those become one
// named block each, so that each file is compared on its own.
func (sg *segmenter) split(out []block, b block) []block {
	text := sg.l.text
	var subs []block
	open := false // the last sub-block still runs
	end := func(off int) {
		if open {
			last := &subs[len(subs)-1]
			last.end = trimEnd(text, last.cstart, off)
			last.cend = last.end
			open = false
		}
	}
	for off := b.cstart; off < b.cend; {
		e := strings.IndexByte(text[off:b.cend], '\n')
		lineEnd := b.cend
		if e >= 0 {
			lineEnd = off + e
		}
		line := text[off:lineEnd]
		if name := commentBanner(line); name != "" {
			end(off)
			subs = append(subs, block{kind: kindBanner, name: name, start: off, cstart: min(lineEnd+1, b.cend)})
			open = true
		} else if isRefLine(line) {
			// A file of the blob that an earlier rewrite replaced ends the
			// file before it, as its banner did.
			end(off)
		}
		off = lineEnd + 1
	}
	end(b.cend)
	if len(subs) == 0 {
		return append(out, b)
	}
	return append(out, subs...)
}

// isRefLine reports whether a line reads like a reference this package
// writes. Such lines are never part of a block or a run, so that rewriting
// an output again finds the same blocks; a user who types one only keeps
// the lines around it from being compared as one piece.
func isRefLine(line string) bool {
	t := strings.TrimSpace(line)
	if len(t) < 20 || t[0] != '[' || t[len(t)-1] != ']' {
		return false
	}
	return (strings.HasPrefix(t, "[unchanged: ") || strings.HasPrefix(t, "[superseded: ") || strings.HasPrefix(t, "[same ")) &&
		strings.Contains(t, " sha256:")
}

// trimEnd returns end moved back over trailing whitespace, not before start.
func trimEnd(text string, start, end int) int {
	for end > start {
		switch text[end-1] {
		case '\n', '\r', ' ', '\t':
			end--
			continue
		}
		break
	}
	return end
}

// commentBanner returns the file named by a comment banner line such as
// "// File: a.ts" or "# file: a.py".
func commentBanner(line string) string {
	t := trimIndent(line)
	if t == "" || strings.IndexByte("/#-;", t[0]) < 0 {
		return ""
	}
	// Cheap test first: after the comment marker comes "file" or "path".
	k := 0
	for k < len(t) && strings.IndexByte("/#-;* \t", t[k]) >= 0 {
		k++
	}
	if k == len(t) || (t[k]|0x20 != 'f' && t[k]|0x20 != 'p') {
		return ""
	}
	t = strings.TrimSpace(t)
	for _, p := range []string{"//", "#", "--", "/*", ";"} {
		if strings.HasPrefix(t, p) {
			t = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t[len(p):]), "*/"))
			k := strings.IndexByte(t, ':')
			if k < 0 {
				return ""
			}
			switch strings.ToLower(t[:k]) {
			case "file", "filename", "path", "file path":
				if name := strings.TrimSpace(t[k+1:]); pathish(name) {
					return name
				}
			}
			return ""
		}
	}
	return ""
}

// infoName extracts a file name from a fence info string: ```ts app.ts,
// ```ts title="app.ts", ```go:main.go, ```main.go.
func infoName(info string) string {
	if info == "" {
		return ""
	}
	// A quoted title may contain spaces: title="my file.ts".
	for _, key := range []string{`title="`, `file="`, `filename="`, `path="`} {
		if k := strings.Index(info, key); k >= 0 {
			rest := info[k+len(key):]
			if e := strings.IndexByte(rest, '"'); e > 0 {
				return rest[:e]
			}
		}
	}
	// The fields of strings.Fields, without allocating them.
	var first, second string
	n := 0
	for rest := info; ; n++ {
		var f string
		if f, rest = nextField(rest); f == "" {
			break
		}
		switch n {
		case 0:
			first = f
		case 1:
			second = f
		}
		if k := strings.IndexByte(f, '='); k > 0 {
			switch strings.ToLower(f[:k]) {
			case "title", "file", "filename", "path", "name":
				if v := strings.Trim(f[k+1:], `"'`); v != "" {
					return v
				}
			}
		}
	}
	if k := strings.IndexByte(first, ':'); k > 0 && pathish(first[k+1:]) {
		return first[k+1:]
	}
	if n > 1 && pathish(second) {
		return second
	}
	if pathish(first) && strings.ContainsAny(first, "./") {
		return first
	}
	return ""
}

// nextField returns the first field of s as strings.Fields splits it
// (around Unicode white space) and what follows it; "" when none is left.
func nextField(s string) (field, rest string) {
	i := 0
	for i < len(s) {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if !unicode.IsSpace(r) {
			break
		}
		i += size
	}
	j := i
	for j < len(s) {
		r, size := rune(s[j]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[j:])
		}
		if unicode.IsSpace(r) {
			break
		}
		j += size
	}
	return s[i:j], s[j:]
}

// pathish reports whether s looks like a file path: one token with an
// extension or a directory separator.
func pathish(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if notInPath[s[i]] {
			return false
		}
	}
	if strings.Contains(s, "://") || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "/") {
		return false
	}
	if dot := strings.LastIndexByte(s, '.'); dot >= 0 && dot < len(s)-1 {
		ext := s[dot+1:]
		if len(ext) <= 10 && alnum(ext) && (dot > 0 || len(s) > 2) {
			return true
		}
	}
	return strings.Contains(s, "/") && alnumAny(s)
}

// notInPath marks the bytes a path never holds (all ASCII, so a byte test
// is the same as a rune test).
var notInPath = [256]bool{' ': true, '\t': true, '"': true, '\'': true, '<': true, '>': true, '|': true, '*': true, '?': true, '`': true}

func alnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func alnumAny(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return true
		}
	}
	return false
}

// nameLine returns the file named by a caption, banner or path line directly
// above a block ("File: a.go", "--- a.go ---", "**a.go**", "a.go:",
// "// File: a.go", "[CONTEXT FILE] a.go"), or "".
func nameLine(line string) string {
	t := strings.TrimSpace(line)
	if t == "" || len(t) > 240 {
		return ""
	}
	if name := commentBanner(t); name != "" {
		return name
	}
	if name := dashBanner(t); name != "" {
		return name
	}
	if strings.HasPrefix(t, "[CONTEXT FILE]") {
		if name := strings.TrimSpace(t[len("[CONTEXT FILE]"):]); pathish(name) {
			return name
		}
	}
	if k := strings.IndexByte(t, ':'); k > 0 && k < len(t)-1 {
		switch strings.ToLower(strings.Trim(t[:k], "*#_ ")) {
		case "file", "filename", "path", "file path", "file name", "source":
			if name := strings.Trim(strings.TrimSpace(t[k+1:]), "`*_"); pathish(name) {
				return name
			}
			return ""
		}
	}
	t = strings.TrimLeft(t, "#")
	t = strings.TrimSpace(strings.TrimSuffix(t, ":"))
	t = strings.Trim(t, "`*_")
	t = strings.TrimSuffix(t, ":")
	if pathish(t) {
		return t
	}
	return ""
}

// dashBanner parses "--- a.go ---" and "--- FILENAME: a.go ---".
func dashBanner(t string) string {
	if !strings.HasPrefix(t, "---") || !strings.HasSuffix(t, "---") || len(t) < 8 {
		return ""
	}
	mid := strings.TrimSpace(strings.Trim(t, "-"))
	if k := strings.IndexByte(mid, ':'); k > 0 {
		switch strings.ToLower(strings.TrimSpace(mid[:k])) {
		case "file", "filename", "path", "file path":
			mid = strings.TrimSpace(mid[k+1:])
		}
	}
	if pathish(mid) {
		return mid
	}
	return ""
}

// endBanner reports whether t is an end banner such as "--- End of content ---"
// or "--- END a.go ---".
func endBanner(t string) bool {
	t = strings.TrimSpace(t)
	if !strings.HasPrefix(t, "---") {
		return false
	}
	mid := strings.ToLower(strings.TrimSpace(strings.Trim(t, "-")))
	return strings.HasPrefix(mid, "end")
}

func isRule(t string) bool {
	t = strings.TrimSpace(t)
	return len(t) >= 5 && t[0] == '=' && strings.Trim(t, "=") == ""
}

// banner reads a text banner block starting at line i: "--- path ---" …
// ["--- End of content ---"], "FILE: path" between "=====" rules,
// "[CONTEXT FILE] path", and comment banners ("// File: a.ts").
func (sg *segmenter) banner(i int) (block, int, bool) {
	l := &sg.l
	t := strings.TrimSpace(l.at(i))
	if t == "" {
		return block{}, 0, false
	}
	var name string
	first := i + 1 // first content line
	start := i     // first line of the span
	var stop func(t string) bool
	rule := isRule(t)
	if rule {
		sg.touch(min(i+2, l.n()-1))
	}
	switch {
	case rule && i+2 < l.n() && isRule(l.at(i+2)):
		u := strings.TrimSpace(l.at(i + 1))
		if k := strings.IndexByte(u, ':'); k > 0 && strings.EqualFold(u[:k], "file") {
			name = strings.TrimSpace(u[k+1:])
		}
		first = i + 3
		stop = isRule
	case strings.HasPrefix(t, "---"):
		name = dashBanner(t)
		stop = func(t string) bool { return endBanner(t) || dashBanner(t) != "" }
	case strings.HasPrefix(t, "[CONTEXT FILE]"):
		name = strings.TrimSpace(t[len("[CONTEXT FILE]"):])
		stop = func(t string) bool { return strings.HasPrefix(t, "[CONTEXT FILE]") }
	default:
		name = commentBanner(t)
		stop = func(t string) bool { return commentBanner(t) != "" || isFenceCandidate(t) }
	}
	if name == "" || !pathish(name) {
		return block{}, 0, false
	}
	sg.touch(min(first, l.n()-1))
	if first >= l.n() || isFenceCandidate(l.at(first)) {
		// A banner right above a fence names the fence; fence() takes it.
		return block{}, 0, false
	}
	b := block{kind: kindBanner, name: name, start: l.s(start), cstart: l.s(first)}
	j := first
	for ; j < l.n(); j++ {
		if u := strings.TrimSpace(l.at(j)); stop(u) || isRefLine(u) {
			break
		}
	}
	sg.steps += j - first
	sg.touch(min(j+2, l.n()-1))
	next := j
	last := j - 1 // last content line
	if j < l.n() {
		u := strings.TrimSpace(l.at(j))
		closing := endBanner(u) || (isRule(u) && !(j+2 < l.n() && isRule(l.at(j+2)) && strings.Contains(strings.ToUpper(l.at(j+1)), "FILE:")))
		if closing {
			b.end = l.e(j)
			next = j + 1
		}
	} else {
		last = trimProse(l, first, last)
	}
	for last >= first && strings.TrimSpace(l.at(last)) == "" {
		last--
	}
	if last < first {
		return block{}, 0, false
	}
	b.cend = l.e(last)
	if b.end == 0 {
		b.end = b.cend
		next = last + 1
	}
	return b, next, true
}

// trimProse drops a trailing paragraph of prose (the question that follows a
// file with no end marker) from the content lines [first, last].
func trimProse(l *lines, first, last int) int {
	k := last
	for k > first && strings.TrimSpace(l.at(k)) != "" {
		k--
	}
	if k == first || k == last {
		return last
	}
	for j := k + 1; j <= last; j++ {
		if !prose(l.at(j)) {
			return last
		}
	}
	return k - 1
}

// prose reports whether a line reads as a sentence rather than code.
func prose(s string) bool {
	t := strings.TrimSpace(s)
	if strings.Count(t, " ") < 2 || strings.ContainsAny(t, "{}();=<>[]") {
		return false
	}
	for _, p := range []string{"//", "#", "--", "*", "/*"} {
		if strings.HasPrefix(t, p) {
			return false
		}
	}
	return true
}

// tag reads an XML-like document element starting at line i.
func (sg *segmenter) tag(i int) (block, int, bool) {
	l := &sg.l
	line := l.at(i)
	off := l.s(i) + len(line) - len(trimIndent(line))
	rest := l.text[off+1:]
	var name string
	long := 0
	for _, tg := range sg.tags {
		long = max(long, len(tg))
	}
	// The name test reads up to the byte after the longest tag.
	sg.touch(lineAt(l, min(off+1+long, len(l.text))))
	for _, tg := range sg.tags {
		if len(rest) > len(tg) && strings.EqualFold(rest[:len(tg)], tg) {
			if c := rest[len(tg)]; c == ' ' || c == '>' || c == '\t' {
				name = rest[:len(tg)]
				break
			}
		}
	}
	if name == "" {
		return block{}, 0, false
	}
	gt := strings.IndexByte(rest, '>')
	nl := strings.IndexByte(rest, '\n')
	if gt < 0 || (nl >= 0 && gt > nl) || rest[gt-1] == '/' {
		return block{}, 0, false
	}
	attrs := rest[len(name):gt]
	b := block{kind: kindTag, start: off, cstart: off + 1 + gt + 1, name: attrName(attrs)}
	body := l.text[b.cstart:]
	closeTag := "</" + name + ">"
	k := sg.closing(name, closeTag, b.cstart)
	if k >= 0 {
		k -= b.cstart
	}
	if b.name == "" {
		b.name = childName(body, k)
	}
	if k < 0 {
		sg.touchEnd()
		if b.name == "" {
			return block{}, 0, false
		}
		k = len(body)
		b.end = len(l.text)
	} else {
		b.end = b.cstart + k + len(closeTag)
	}
	b.cend = b.cstart + k
	// Content without the newlines that frame it inside the tags.
	if b.cstart < b.cend && l.text[b.cstart] == '\n' {
		b.cstart++
	}
	if b.cend > b.cstart && l.text[b.cend-1] == '\n' {
		b.cend--
	}
	sg.touch(lineAt(l, b.end))
	next := lineAfter(l, b.end)
	return b, next, true
}

// closing returns the offset of the first closeTag at or after from, or -1.
func (sg *segmenter) closing(name, closeTag string, from int) int {
	if m, ok := sg.closeAt[name]; ok && from >= m[0] && (m[1] < 0 || m[1] >= from) {
		return m[1]
	}
	k := strings.Index(sg.l.text[from:], closeTag)
	if k >= 0 {
		k += from
		sg.steps += k - from
	} else {
		sg.steps += len(sg.l.text) - from
	}
	if sg.closeAt == nil {
		sg.closeAt = make(map[string][2]int)
	}
	sg.closeAt[name] = [2]int{from, k}
	return k
}

// lineAfter returns the index of the first line starting at or after off,
// where off ends a block; the rest of a line after a closing tag stays text
// of the same line, so the next block search starts on the following line.
func lineAfter(l *lines, off int) int {
	return sort.Search(l.n(), func(j int) bool { return l.s(j) >= off })
}

var pathAttrs = []string{"path", "file_path", "filepath", "filename", "file", "name", "title", "src", "source"}

// attrName returns the value of the first path-like attribute.
func attrName(attrs string) string {
	for _, a := range pathAttrs {
		for from := 0; ; {
			k := strings.Index(attrs[from:], a+"=")
			if k < 0 {
				break
			}
			k += from
			from = k + len(a) + 1
			if k > 0 && attrs[k-1] != ' ' && attrs[k-1] != '\t' {
				continue
			}
			v := attrs[from:]
			if v == "" {
				break
			}
			if q := v[0]; q == '"' || q == '\'' {
				if e := strings.IndexByte(v[1:], q); e >= 0 {
					return v[1 : 1+e]
				}
				break
			}
			if e := strings.IndexAny(v, " \t"); e >= 0 {
				v = v[:e]
			}
			return v
		}
	}
	return ""
}

// childName finds <file_path>…</file_path> (or path, filename, source) near
// the start of a tag's body; limit is the body's length or -1.
func childName(body string, limit int) string {
	if limit < 0 {
		// No closing tag: look at the next few lines only.
		limit = 0
		for n := 0; n < 3 && limit < len(body); n++ {
			k := strings.IndexByte(body[limit:], '\n')
			if k < 0 {
				limit = len(body)
				break
			}
			limit += k + 1
		}
	}
	limit = min(limit, 400)
	head := body[:limit]
	for _, c := range []string{"file_path", "path", "filename", "source"} {
		o := "<" + c + ">"
		k := strings.Index(head, o)
		if k < 0 {
			continue
		}
		v := head[k+len(o):]
		if e := strings.Index(v, "</"+c+">"); e > 0 {
			if name := strings.TrimSpace(v[:e]); name != "" && len(name) <= 200 {
				return name
			}
		}
	}
	return ""
}

// treeLine reports whether a line is part of a drawn project tree.
func treeLine(s string) bool {
	t := trimIndent(s)
	// '├', '└' and '│' all start with the byte 0xE2.
	if strings.IndexByte(t, 0xE2) >= 0 && (strings.Contains(t, "├") || strings.Contains(t, "└") || strings.HasPrefix(t, "│")) {
		return true
	}
	return strings.HasPrefix(t, "|--") || strings.HasPrefix(t, "+--") || strings.HasPrefix(t, "`--") || strings.HasPrefix(t, "|   ")
}

// tabsHeader reports whether a line introduces a list of open tabs or files.
func tabsHeader(s string) bool {
	// Cheap test first: the first byte after the indent is a trimmed
	// marker or the first letter of a header.
	if u := trimIndent(s); u == "" || !tabsFirst[u[0]] {
		return false
	}
	t := strings.TrimSpace(strings.Trim(strings.TrimSpace(s), "#*:"))
	if len(t) < 9 || len(t) > 21 || !strings.ContainsRune("oOcCvV", rune(t[0])) {
		return false
	}
	t = strings.ToLower(t)
	switch t {
	case "open tabs", "open files", "open editors", "other open files", "currently open files",
		"opened files", "visible files", "other open tabs", "open documents":
		return true
	}
	return false
}

// tabsFirst marks the bytes a tabs header may start with after its indent.
var tabsFirst = [256]bool{'#': true, '*': true, ':': true, 'o': true, 'O': true, 'c': true, 'C': true, 'v': true, 'V': true,
	'\v': true, '\f': true, '\r': true, 0x85: true, 0xA0: true, 0xC2: true, 0xE1: true, 0xE2: true, 0xE3: true}

func listItem(s string) bool {
	t := strings.TrimSpace(s)
	for _, p := range []string{"- ", "* ", "• "} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return pathish(t)
}

// secondary reads a project tree or an open-tab list starting at line i.
func (sg *segmenter) secondary(i int) (block, int, bool) {
	l := &sg.l
	line := l.at(i)
	if tabsHeader(line) {
		j := i + 1
		for j < l.n() && listItem(l.at(j)) {
			j++
		}
		sg.steps += j - i
		sg.touch(min(j, l.n()-1))
		if j == i+1 {
			return block{}, 0, false
		}
		return block{kind: kindTabs, name: "open tabs", start: l.s(i), end: l.e(j - 1), cstart: l.s(i), cend: l.e(j - 1)}, j, true
	}
	// A tree: an optional root line, then at least three tree lines.
	j := i
	root := strings.TrimSpace(line)
	if !treeLine(line) && (strings.HasSuffix(root, "/") || root == ".") && !strings.Contains(root, " ") {
		j++
	}
	k := j
	for k < l.n() && treeLine(l.at(k)) {
		k++
	}
	sg.steps += k - j
	sg.touch(min(k, l.n()-1))
	if k-j < 3 {
		return block{}, 0, false
	}
	return block{kind: kindTree, name: "project tree", start: l.s(i), end: l.e(k - 1), cstart: l.s(i), cend: l.e(k - 1)}, k, true
}

// plainLine reports, from its first and last bytes, that neither banner
// nor secondary finds a block at a line (as most lines of prose): a
// banner starts with "=", "-", "[" or a comment marker, a tab list with a
// byte of tabsFirst, a tree with "|", "+", "`", "." or a line holding a
// box-drawing character or ending with "/". Any byte above 0x7F at
// either end may be Unicode white space that strings.TrimSpace drops, so
// it leaves the decision to them.
func plainLine(line string) bool {
	u := trimIndent(line)
	if u == "" {
		return true
	}
	if c := u[0]; c >= 0x80 || blockFirst[c] || strings.IndexByte(u, 0xE2) >= 0 {
		return false
	}
	e := len(u)
	for e > 0 && (u[e-1] == ' ' || u[e-1] == '\t' || u[e-1] == '\r' || u[e-1] == '\v' || u[e-1] == '\f') {
		e--
	}
	return e > 0 && u[e-1] != '/' && u[e-1] < 0x80
}

// blockFirst marks the bytes after the indent that may start a banner or
// secondary block (see plainLine): tabsFirst and more.
var blockFirst = func() (t [256]bool) {
	t = tabsFirst
	for _, c := range []byte("=-[/#;|+`.") {
		t[c] = true
	}
	return t
}()

// commentByte marks the bytes commentBanner skips after the indent.
var commentByte = [256]bool{'/': true, '#': true, '-': true, ';': true, '*': true, ' ': true, '\t': true}

// plainCodeLine reports, from the line's bytes text[k:e] after its indent,
// that the fence scan would only count it as other content: it cannot
// close a fence of ch, is not blank, and is neither a comment banner (after
// the comment marker comes "file" or "path") nor a reference.
func plainCodeLine(text string, k, e int, ch byte) bool {
	c := text[k]
	if c == ch || c == '[' || c == '\r' {
		return false
	}
	if c != '/' && c != '#' && c != '-' && c != ';' {
		return true
	}
	for k < e && commentByte[text[k]] {
		k++
	}
	return k == e || (text[k]|0x20 != 'f' && text[k]|0x20 != 'p')
}

// skipIndent returns the offset of the first byte of text[s:e] that is not
// a space or a tab, and e.
func skipIndent(text string, s, e int) (int, int) {
	for s < e && (text[s] == ' ' || text[s] == '\t') {
		s++
	}
	return s, e
}

// trimIndent drops leading spaces and tabs.
func trimIndent(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return s
}

// trimSpaces drops leading spaces.
func trimSpaces(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	return s
}
