package rewrite

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Prefix stabilisation (Options.StablePrefix, issue #8).
//
// Gemini's implicit cache matches a request's token prefix against recent
// requests (gemini-api.md §6.1: "put large common content at the start of
// the prompt"). In a multi-turn request the history already is such a
// prefix. A stateless client (NAIVE-PATTERNS N3), or a flattened transcript
// that stays one user turn, instead sends "question … document" afresh
// each time: the question changes, so nothing after it is ever cached,
// although the document is the same every time.
//
// The rule, applied to every text part of every user turn alike: when the
// part is a lead text followed by one or more blocks that run to its end,
// the part becomes two parts, the blocks first and the lead second. No
// byte of text changes; only a part boundary is added and the two pieces
// swap. The part is split only when all of these hold:
//
//   - the blocks start on a line after a lead that is not blank and holds
//     no block (the lead is what changes from request to request);
//   - only white space containing a line break follows the last block, so
//     that the blocks end a line when the lead comes after them (parts are
//     read back to back);
//   - the first block is kept in full (not replaced by a reference) and the
//     text moved, references aside, is at least stableFactor ×
//     Options.MinBlockBytes (4 KB, about 1,000 tokens, by default: the
//     smallest documented implicit-cache minimum), so that a split is made
//     only where the cache can gain;
//   - the lead holds no reference line (a block replaced in the lead,
//     which the first pass would have seen as the first block);
//   - the lead is not a caption of the blocks: its last line does not end
//     with a colon ("Here is my file:", "Explain the following code:"),
//     and it uses no word that points by position ("below", "following",
//     "next", "abaixo", "siguiente", "下面", … see pointers), so that no
//     text is left pointing at something that moved.
//
// The decision depends on the part alone (and on whether its first block
// was replaced), never on the part's position in the request, so that a
// turn split while it was the new turn is split the same way when it is
// history: the history prefix stays byte for byte the same. The relative
// order of blocks never changes (the lead holds none), so "keep once" picks
// the same copies again and ordinal references ("the second file") stay
// right; rewriting the output again splits nothing more.

// stableFactor times Options.MinBlockBytes is the least text a split moves.
const stableFactor = 8

// pointers are words and phrases that point at text by its position, in
// the languages NAIVE-PATTERNS.md surveys and a few more; a lead using one
// stays in front of its blocks ("above" pointed past the blocks, which
// would become the nearest text above it). Latin and Cyrillic entries
// match whole words (a phrase, its words in order); CJK and Hangul
// entries, written without spaces, match anywhere. The list errs on the
// side of not splitting: a lead that says "next" for another reason only
// loses the cache gain.
var pointers = []string{
	// English
	"below", "following", "beneath", "underneath", "above", "next", "after", "as follows", "attached",
	// Portuguese, Spanish, Italian
	"abaixo", "seguinte", "seguintes", "a seguir", "acima", "anexo",
	"abajo", "debajo", "siguiente", "siguientes", "a continuación", "arriba", "adjunto",
	"seguente", "seguenti", "sotto", "sopra",
	// French, German, Dutch
	"ci-dessous", "dessous", "suivant", "suivante", "suivants", "suivantes", "ci-dessus", "ci-joint",
	"unten", "folgende", "folgenden", "folgendes", "folgender", "nachfolgend", "oben", "anbei",
	"hieronder", "volgende", "hierboven",
	// Russian, Vietnamese, Indonesian, Turkish
	"ниже", "следующий", "следующая", "следующее", "следующие", "следующего", "следующем", "выше",
	"dưới đây", "sau đây", "bên dưới", "trên đây", "berikut", "di bawah", "aşağıdaki", "yukarıdaki",
	// Chinese, Japanese, Korean
	"下面", "以下", "如下", "下列", "下方", "上面", "上述", "以上", "后面", "後面", "下記", "次の", "上記",
	"아래", "다음", "위의",
}

// split is one text part to split: contents[turn].parts[part], whose
// decoded output text moves from offset at onwards to the front.
type split struct{ turn, part, at int }

// stableSplits returns the parts that the rule above splits, with the
// split offset in the output text. reps are the replacements in request
// order.
func (e *engine) stableSplits(reps []*occ) []split {
	var out []split
	minMoved := stableFactor * max(e.opts.MinBlockBytes, 1)
	r := 0
	for k := range e.parts {
		tp := &e.parts[k]
		// reps and e.parts are both in (turn, part) order.
		for r < len(reps) && (reps[r].turn < tp.turn || reps[r].turn == tp.turn && reps[r].part < tp.part) {
			r++
		}
		first := r
		for r < len(reps) && reps[r].turn == tp.turn && reps[r].part == tp.part {
			r++
		}
		in := reps[first:r]
		if tp.val != nil || hasBox(tp) {
			continue // a sub-text, or a text holding some (jsontext.go)
		}
		if at, ok := e.stableAt(tp, in, minMoved); ok {
			out = append(out, split{tp.turn, tp.part, at})
		}
	}
	return out
}

// stableAt reports where the output text of tp splits, if it does; in are
// tp's replacements in order.
func (e *engine) stableAt(tp *textPart, in []*occ, minMoved int) (int, bool) {
	if e.role(tp.turn) != "user" || len(tp.blocks) == 0 {
		return 0, false
	}
	text := tp.text
	b0, bn := tp.blocks[0], tp.blocks[len(tp.blocks)-1]
	s := tp.lines.s(lineAt(&tp.lines, b0.start))
	lead := text[:s]
	rest := text[bn.end:]
	// The moved text must end a line: its trailing blanks and tabs must
	// hold a line break, or the lead would join its last line ("\n\v"
	// after the last block is white space, but ends no line).
	if strings.TrimSpace(lead) == "" || strings.TrimSpace(rest) != "" || !strings.Contains(rest[len(strings.TrimRight(rest, " \t\r\n")):], "\n") {
		return 0, false
	}
	moved := len(text) - s
	delta := 0 // output minus input bytes before s
	for _, o := range in {
		switch {
		case o.b.start == b0.start && o.b.kind != kindRun:
			return 0, false // the first block is a reference
		case o.b.end <= s:
			delta += len(o.ref) - (o.b.end - o.b.start)
		case o.b.start >= s:
			moved -= o.b.end - o.b.start
		default:
			return 0, false // a run across the boundary (not expected)
		}
	}
	if moved < minMoved || caption(lead) {
		return 0, false
	}
	// The lead holds no block of its own: the first block is not one
	// file of a blob whose fence opens in the lead (split keeps only
	// the files as blocks), nor was anything else cut.
	if len(appendBlocks(nil, splitLines(lead), e.opts.DocumentTags)) > 0 || holdsRefLine(lead) {
		return 0, false
	}
	return s + delta, true
}

// holdsRefLine reports whether a line of lead is a reference: a block
// replaced there, by this rewrite's first pass or by the client. A lead
// holding one is not split, as when the first block is replaced, so that
// rewriting an output whose first block became a reference splits
// nothing (FuzzRequest/e10fbaa2eb2d2a49).
func holdsRefLine(lead string) bool {
	for len(lead) > 0 {
		line := lead
		if i := strings.IndexByte(lead, '\n'); i >= 0 {
			line, lead = lead[:i], lead[i+1:]
		} else {
			lead = ""
		}
		if isRefLine(line) {
			return true
		}
	}
	return false
}

// caption reports whether lead introduces what follows it: its last line
// ends with a colon, or it uses one of pointers.
func caption(lead string) bool {
	t := strings.TrimRightFunc(lead, unicode.IsSpace)
	if strings.HasSuffix(t, ":") || strings.HasSuffix(t, "：") {
		return true
	}
	low := strings.ToLower(t)
	for _, p := range pointers {
		if hasPointer(low, p) {
			return true
		}
	}
	return false
}

// hasPointer reports whether s holds p: anywhere for CJK and Hangul, else
// as whole words (not inside a longer word).
func hasPointer(s, p string) bool {
	r, _ := utf8.DecodeRuneInString(p)
	if unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul) {
		return strings.Contains(s, p)
	}
	for i := 0; ; {
		j := strings.Index(s[i:], p)
		if j < 0 {
			return false
		}
		j += i
		before, _ := utf8.DecodeLastRuneInString(s[:j])
		after, _ := utf8.DecodeRuneInString(s[j+len(p):])
		if (j == 0 || !unicode.IsLetter(before)) && (j+len(p) == len(s) || !unicode.IsLetter(after)) {
			return true
		}
		i = j + 1
	}
}

// stabilise applies the splits to out, the emitted body, and returns the
// new body and the number of parts split. Each split part
// {"text":"LEAD BLOCKS"} becomes {"text":"BLOCKS"},{"text":"LEAD"}; the
// string bytes keep their escaping. On anything unexpected it returns out
// unchanged. It also returns the audit's record of the splits.
func (e *engine) stabilise(out []byte, reps []*occ) ([]byte, int, []auditSplit) {
	splits := e.stableSplits(reps)
	if len(splits) == 0 {
		return out, 0, nil
	}
	req, err := scan(out)
	if err != nil {
		return out, 0, nil
	}
	type cut struct {
		obj span
		raw []byte
		at  int // raw offset of the split
	}
	cuts := make([]cut, 0, len(splits))
	rec := make([]auditSplit, 0, len(splits))
	for _, sp := range splits {
		if sp.turn >= len(req.contents) || sp.part >= len(req.contents[sp.turn].parts) {
			return out, 0, nil
		}
		p := &req.contents[sp.turn].parts[sp.part]
		text := p.dec.text
		if p.kind != partText || sp.at <= 0 || sp.at >= len(text) || text[sp.at-1] != '\n' {
			return out, 0, nil
		}
		raw := out[p.str.start:p.str.end]
		at := sp.at
		if p.esc {
			// rawOffsets reads past its last offset unless that offset
			// ends the text or precedes an escape: end with len(text).
			offs := []int{at, len(text)}
			rawOffsets(raw, offs, p.dec.marks)
			at = offs[0]
		}
		cuts = append(cuts, cut{p.obj, raw, at})
		rec = append(rec, auditSplit{obj: p.obj, str: p.str, at: at})
	}
	const open, mid, end = `{"text":"`, `"},{"text":"`, `"}`
	n := len(out)
	for _, c := range cuts {
		n += len(open) + len(mid) + len(end) + len(c.raw) - (c.obj.end - c.obj.start)
	}
	res := e.output(n)
	prev := 0
	for _, c := range cuts {
		res = append(res, out[prev:c.obj.start]...)
		res = append(res, open...)
		res = append(res, c.raw[c.at:]...)
		res = append(res, mid...)
		res = append(res, c.raw[:c.at]...)
		res = append(res, end...)
		prev = c.obj.end
	}
	return append(res, out[prev:]...), len(cuts), rec
}
