package rewrite

// Un-flattening (N2, DESIGN §3).
//
// Some clients send the whole chat history as one user text:
//
//	Previous conversation:
//	User: hi
//	Assistant: Hello! How can I help?
//	Current question: what is N2?
//	Assistant:
//
// unflatten turns such a text back into alternating user/model turns, under
// these rules:
//
//   - Shape. After an optional preamble (a history header such as "Chat
//     history:", "<chat_history>", "--- CONVERSATION HISTORY ---", a markdown
//     heading or a lead-in sentence, plus anything before it) the text must
//     hold at least two labelled segments, with both a user and a model
//     label, and end on a user segment or a current-question marker
//     ("Current question:", "Pergunta atual:", "当前问题："). An open model
//     cue at the very end ("Assistant:", "答：", "<|im_start|>assistant",
//     a persona name with nothing after it) is dropped.
//   - Labels. `Label: text` lines (ASCII or full-width colon, "User :",
//     any case), numbered and emoji labels ("User1:", "[1] ❓"),
//     bracketed and timestamped labels ("[Cliente]:", "[2025-03-15T20:30]
//     User:"), markdown-decorated labels ("**User:**", "### Assistant"), a
//     label alone on its line, XML per-turn tags (<user>, <assistant>,
//     <message role="user">, <turn>), chat-template tokens (<|user|>,
//     <|im_start|>user … <|im_end|>, <start_of_turn>model, [INST] … [/INST])
//     and Role:/Content: records. Words come from the Lexicon, in many
//     languages. Direction is decided by alternation, not by the word: "You:"
//     is the model when it alternates with a user label and the user when
//     it alternates with a model label; a repeated name outside the lexicon
//     that alternates with the labels of one role is the other role (a
//     persona such as "FRIDAY:"; a name the preamble mentions, "You are
//     FRIDAY", counts from its first label). "system:" lines stay user
//     text.
//   - Where. Labels are looked for only outside code fences (``` and ~~~,
//     also opened on a label's line: "User: ```go", "<user>```go"),
//     document tags (<file …>, <document>, <source>, <context>, …) and
//     triple-quoted documents; inside those they are content. Turns are
//     split before blocks are read: such a region is matched inside its
//     segment, never across the labels that split the transcript. One that
//     would hold label lines keeps them as content only when it is closed
//     and in step (flatregion.go); otherwise it ends at the first label
//     inside it. So a fence left open by a truncated answer, or a closing
//     fence read out of step, never swallows the exchanges after it, while
//     a program that builds a transcript keeps its "User:" lines.
//   - Trust. A model segment becomes a model turn only when the Verifier
//     says this proxy served it to the same tenant (exact, long prefix or
//     whitespace-normalised match, decided by the Verifier; a trailing
//     "... [truncated]" or "…" is removed before asking). A verified segment
//     whose continuation up to a later segment also verifies absorbs that
//     continuation (a served reply may itself contain "User:" lines). Any
//     unverified model segment stays user text, verbatim with its label, so
//     typing "Assistant:" forges nothing. If nothing verifies, or the
//     Verifier is nil, the text is left alone.
//   - Side tasks. Framing that shows a task run on the transcript disables
//     un-flattening: the caller's sideTaskHint (JSON output constraints,
//     tiny maxOutputTokens), a task verb before the transcript (summarise,
//     classify, extract, rewrite, translate, generate a title, evaluate,
//     "do not answer", 总结, resuma, resume …), an output constraint in the
//     preamble or in the final user text ("Return ONLY", "JSON format"), a
//     field cue as the last line ("Intent:", "Title:", "JSON:") instead of
//     a role cue, few-shot example headings ("Example 1:", "For example:")
//     in the preamble or right before a label, <example> tags, or a
//     transcript that ends on a model segment. When in doubt, no rewrite.
//   - Output. Turns start and end with user and alternate; adjacent
//     same-role pieces are joined with "\n\n"; no turn is empty. The
//     preamble and the first user segment form the first user turn
//     verbatim, except that a first user label glued to an opening fence
//     is removed (so the fence starts its line and reads as a block).
//     Labels and structural tokens (</user>, <|im_end|>) of promoted model
//     turns are removed, and so is the user label of a user segment that
//     directly follows a promoted model turn. A model turn is exactly one
//     served answer: a verified model segment with no user text since the
//     previous promoted one stays user text. A promoted model turn is the
//     quoted answer byte for byte: leading white space and the separator
//     before the next label are not part of it, and the answer's own
//     trailing white space is kept when the Verifier is a TrailVerifier
//     that knows it and the transcript holds it. Everything else is kept
//     verbatim and in order, so nothing the user wrote is lost.
//   - Cost. One linear pass finds labels; a text without two label-like
//     lines exits early. No regular expressions.

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TrailVerifier is a Verifier that also knows how each served response
// ended. ServedTrail reports, for text that matches a served response in
// full (not as a prefix), the white space that response ended with,
// exactly as served ("" when none); ok is false when text matches no
// served response in full (text is valid only during the call, as for
// Served). Un-flattening keeps that white space in the
// model turn when the transcript holds it right after the answer, so that
// the turn is byte for byte what the model returned (what a stateful
// client would send, and what implicit caching matches). With a plain
// Verifier a model turn ends at its last non-space character.
type TrailVerifier interface {
	Verifier
	ServedTrail(text string) (trail string, ok bool)
}

// flatTurn is one turn recovered from a flattened transcript.
type flatTurn struct {
	Role string // "user" or "model"
	Text string
}

// flatMarkKind classifies a mark found by the scanner.
type flatMarkKind uint8

const (
	fmRole     flatMarkKind = iota // a role label; removed when its turn is split out
	fmClose                        // a structural token (</user>, <|im_end|>, <turn>); removable
	fmSystem                       // a system label; content
	fmQuestion                     // a current-question marker; content
)

// flatMark is a label or token at text[start:end].
type flatMark struct {
	start, end int
	kind       flatMarkKind
	lk         lexKind // for fmRole: lexUser, lexModel, lexEither or lexNone (a name)
	key        string  // normalised label key, for alternation
	empty      bool    // nothing follows the label on its line
}

type flatSpan struct{ start, end int }

// flatScan is the result of one pass over a text.
type flatScan struct {
	text       string
	lx         *Lexicon
	marks      []flatMark // in text order
	prot       []flatSpan // protected regions (fences, document tags, quotes), in order
	examples   []int      // end offsets of few-shot heading lines
	exampleTag bool       // an <example> or <examples> tag
	closeStart map[int]int
	closeEnd   map[int]int
	ix         *flatIndex // built on the first protected region (flatregion.go)
	// spans holds, after a build that succeeds, the ranges of text that
	// each turn joins (unflattenSpans).
	spans [][]flatSpan
}

// flatRole is a resolved role.
type flatRole uint8

const (
	frNone flatRole = iota
	frUser
	frModel
)

// unflatten splits one user text into real turns when it is a flattened
// transcript whose model segments are verified; ok=false means leave the
// text as it is. A nil lx means DefaultLexicon. See the file comment for
// the rules.
func unflatten(text string, lx *Lexicon, sideTaskHint bool, v Verifier) (turns []flatTurn, ok bool) {
	turns, _, ok = unflattenSpans(text, lx, sideTaskHint, v)
	return turns, ok
}

// unflattenSpans is unflatten, with the ranges of text that each turn's
// Text joins with "\n\n" (the record the audit checks, audit.go).
func unflattenSpans(text string, lx *Lexicon, sideTaskHint bool, v Verifier) (turns []flatTurn, spans [][]flatSpan, ok bool) {
	if v == nil || sideTaskHint || len(text) < 8 {
		return nil, nil, false
	}
	if lx == nil {
		lx = DefaultLexicon()
	}
	if !flatMaybe(text, lx) {
		return nil, nil, false
	}
	return unflattenScanned(text, lx, v)
}

// unflattenScanned is unflattenSpans after its early exits: lx is not nil
// and flatMaybe(text, lx) holds.
func unflattenScanned(text string, lx *Lexicon, v Verifier) (turns []flatTurn, spans [][]flatSpan, ok bool) {
	sc := flatScanText(text, lx)
	if sc.exampleTag {
		return nil, nil, false
	}
	for _, plan := range sc.plans() {
		if turns, ok := sc.build(plan, v); ok {
			return turns, sc.spans, true
		}
	}
	return nil, nil, false
}

// flatMaybe is the cheap early exit: it reports whether text has a
// chat-template token or at least two lines shaped like labels, among
// them what a transcript needs to have a model turn (plans): a model
// label, a user label and a name or "You", or four names or "You"s with
// the text ending on an open label. A text with anything else that may
// make a mark (a tag, an emoji label, a Role: record, "[/INST]") only
// needs the two lines. It looks at every line, code included, without
// allocating; it never says no where the full scan could say yes.
func flatMaybe(text string, lx *Lexicon) bool {
	if strings.Contains(text, "[INST]") {
		return true
	}
	// The tokens "<|", "<start_of_turn>", "<turn", "<message", or a
	// lower-case role tag such as <user>, </assistant>, <bot>: one pass
	// over the '<'; the map lookup with a substring does not allocate.
	// other is set by anything else that may be a tag.
	other := strings.Contains(text, "[/INST]")
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '<')
		if j < 0 {
			break
		}
		i += j + 1
		if r := text[i:]; strings.HasPrefix(r, "|") || strings.HasPrefix(r, "start_of_turn>") || strings.HasPrefix(r, "turn") || strings.HasPrefix(r, "message") {
			return true
		}
		if i < len(text) && text[i] == '/' {
			i++
		}
		if !other && flatRoleTag(text[i:], lx) {
			other = true
		}
		k := i
		for k < len(text) && k-i < 24 && text[k] >= 'a' && text[k] <= 'z' {
			k++
		}
		if k < len(text) && text[k] == '>' {
			if kd := lx.labels[text[i:k]]; kd == lexUser || kd == lexModel {
				return true
			}
		}
	}
	// n counts the label lines, user, model and names (with "You") their
	// kinds as lineLabel makes marks of them; open is set when the last
	// line that is not blank is a label with nothing after it.
	n, user, model, names := 0, 0, 0, 0
	open := false
	for pos := 0; pos < len(text); {
		eol := strings.IndexByte(text[pos:], '\n')
		if eol < 0 {
			eol = len(text)
		} else {
			eol += pos
		}
		line := strings.TrimSuffix(text[pos:eol], "\r")
		pos = eol + 1
		l, ok := parseFlatLabel(line, lx)
		if !ok || !(l.colon || l.emoji != 0 || lx.role(l.name)) {
			if strings.TrimSpace(line) != "" {
				open = false
			}
			continue
		}
		n++
		open = strings.TrimSpace(l.rest) == ""
		if l.emoji != 0 {
			other = true
		} else {
			switch k, role := lx.kindRole(l.name); {
			case role && l.colon:
				other = true // a Role: record names its role on the line
			case k == lexModel:
				model++
			case k == lexUser:
				user++
			case k == lexEither, k == lexNone && l.colon:
				names++
			}
		}
		if n >= 2 && (other || model > 0 || user > 0 && names > 0) {
			return true
		}
	}
	return n >= 2 && names >= 4 && open
}

// flatRoleTag reports whether rest, the text after a "<" (and a "/"),
// starts like a tag that flatScan.tag may make a role mark of: a user or
// model word in any case ("User", "assistant_message"), or a per-turn tag
// whose role is an attribute. Like tag it reads at most 40 bytes.
func flatRoleTag(rest string, lx *Lexicon) bool {
	j := 0
	for j < len(rest) && j < 40 && (isASCIILetter(rest[j]) || (j > 0 && (rest[j] == '_' || rest[j] == '-' || (rest[j] >= '0' && rest[j] <= '9')))) {
		j++
	}
	if j == 0 {
		return false
	}
	if j < len(rest) {
		switch rest[j] {
		case '>', ' ', '/', '\t', '\n', '\r':
		default:
			return false
		}
	}
	switch name := rest[:j]; {
	case strings.EqualFold(name, "turn"), strings.EqualFold(name, "message"), strings.EqualFold(name, "msg"), strings.EqualFold(name, "entry"),
		strings.EqualFold(name, "utterance"), strings.EqualFold(name, "chat_message"):
		return true
	default:
		k := lx.kindOf(name)
		return k == lexUser || k == lexModel
	}
}

// flatLabel is a label parsed at the start of a line.
type flatLabel struct {
	n       int    // bytes of the line taken by the label and following spaces
	name    string // raw name; empty for an emoji label
	emoji   rune   // the emoji of an emoji label
	colon   bool   // separated by ':' or '：'
	bracket bool   // written as [Name]
	alone   bool   // nothing but the label on the line
	rest    string // the text after the label on the same line
}

// parseFlatLabel parses a label at the start of line (without its line
// break). It looks at most at a few dozen bytes, so it is cheap on prose.
func parseFlatLabel(line string, lx *Lexicon) (flatLabel, bool) {
	var l flatLabel
	i := 0
	for i < len(line) && i < 4 && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	// Most lines of prose and code fail here, before any decoding: a
	// label starts with a decoration, an emoji, a bracket or a letter.
	if i < len(line) {
		if c := line[i]; c < 0x80 && !isASCIILetter(c) && c != '*' && c != '_' && c != '#' && c != '[' && c != '(' {
			return l, false
		}
	}
	// Decorations: bold, headings, numeric or timestamp brackets.
	for range 4 {
		switch {
		case strings.HasPrefix(line[i:], "**") || strings.HasPrefix(line[i:], "__"):
			i += 2
			continue
		case i < len(line) && line[i] == '#':
			j := i
			for j < len(line) && line[j] == '#' {
				j++
			}
			if j-i > 6 || j >= len(line) || line[j] != ' ' {
				return l, false
			}
			i = j + 1
			continue
		case i < len(line) && (line[i] == '[' || line[i] == '('):
			if j := flatStampEnd(line[i:]); j > 0 {
				i += j
				for i < len(line) && line[i] == ' ' {
					i++
				}
				continue
			}
		}
		break
	}
	// Emoji label, or an emoji in front of a word label.
	if i < len(line) && line[i] >= utf8.RuneSelf { // emoji are not ASCII
		r, sz := utf8.DecodeRuneInString(line[i:])
		if k, ok := lx.emoji[r]; ok && k != lexNone {
			j := i + sz
			if strings.HasPrefix(line[j:], "\ufe0f") {
				j += 3
			}
			k := j
			for k < len(line) && line[k] == ' ' {
				k++
			}
			if w, ok := parseFlatLabel(line[k:], lx); ok && w.colon && w.emoji == 0 {
				w.n += k
				return w, true
			}
			switch {
			case j == len(line):
				l.alone = true
			case line[j] == ':' || line[j] == ' ':
				j++
			default:
				return l, false
			}
			for j < len(line) && line[j] == ' ' {
				j++
			}
			l.emoji, l.n, l.rest = r, j, line[j:]
			return l, true
		}
	}
	if strings.HasPrefix(line[i:], "【") {
		l.bracket = true
		i += len("【")
	} else if i < len(line) && line[i] == '[' {
		l.bracket = true
		i++
	}
	start := i
	words := 1
	for i < len(line) && i-start <= 40 {
		if c := line[i]; c < utf8.RuneSelf {
			// ASCII without decoding: the same classes as below.
			if c == ' ' {
				if i > start && line[i-1] != ' ' {
					if words++; words > 4 {
						return l, false
					}
				}
			} else if !isASCIILetter(c) && !(c >= '0' && c <= '9') && c != '\'' && c != '-' && c != '_' {
				break
			}
			i++
			continue
		}
		r, sz := utf8.DecodeRuneInString(line[i:])
		if !(unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || r == '’') {
			break
		}
		i += sz
	}
	name := strings.TrimRight(line[start:i], " ")
	if name == "" || words > 4 || i-start > 40 {
		return l, false
	}
	if r, _ := utf8.DecodeRuneInString(name); !unicode.IsLetter(r) {
		return l, false
	}
	if l.bracket {
		switch {
		case strings.HasPrefix(line[i:], "】"):
			i += len("】")
		case i < len(line) && line[i] == ']':
			i++
		default:
			return l, false
		}
	}
	if strings.HasPrefix(line[i:], "**") || strings.HasPrefix(line[i:], "__") {
		i += 2
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if i < len(line) && (line[i] == '(' || line[i] == '[') {
		if j := flatStampEnd(line[i:]); j > 0 {
			i += j
			for i < len(line) && line[i] == ' ' {
				i++
			}
		}
	}
	switch {
	case i < len(line) && line[i] == ':':
		i++
		l.colon = true
		if i < len(line) && line[i] != ' ' && line[i] != '\t' && !strings.HasPrefix(line[i:], "**") {
			// "User:hi" only for a lexicon word of two or more letters,
			// so "a:b", "http://x" and "12:30" are not labels.
			if k := lx.kindOf(name); k == lexNone || utf8.RuneCountInString(name) < 2 {
				return l, false
			}
		}
	case strings.HasPrefix(line[i:], "："):
		i += len("：")
		l.colon = true
	case i == len(line):
		l.alone = true
	case l.bracket:
	default:
		return l, false
	}
	if strings.HasPrefix(line[i:], "**") || strings.HasPrefix(line[i:], "__") {
		i += 2
	}
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	l.n, l.name, l.rest = i, name, line[i:]
	if l.rest == "" {
		l.alone = l.alone || !l.colon
	}
	return l, true
}

// flatStampEnd returns the length of a leading "[…]" or "(…)" that holds a
// turn number or timestamp ("[1]", "[2025-03-15T20:30]", "(12:01 PM)"), or 0.
func flatStampEnd(s string) int {
	closer := byte(']')
	if s[0] == '(' {
		closer = ')'
	}
	end := strings.IndexByte(s, closer)
	if end < 2 || end > 40 || !strings.ContainsAny(s[1:end], "0123456789") {
		return 0 // too long, or no digit: the loop below would find none
	}
	digits, letters := 0, 0
	for _, r := range s[1:end] {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case unicode.IsLetter(r):
			letters++
		}
	}
	if digits == 0 || letters > 3 {
		return 0
	}
	return end + 1
}

// flatScanText finds the marks and protected regions of text in one pass.
func flatScanText(text string, lx *Lexicon) *flatScan {
	s := &flatScan{text: text, lx: lx}
	pos, bol := 0, true
	for pos < len(text) {
		eol := strings.IndexByte(text[pos:], '\n')
		if eol < 0 {
			eol = len(text)
		} else {
			eol += pos
		}
		next := min(eol+1, len(text))
		line := strings.TrimSuffix(text[pos:eol], "\r")
		from := pos
		if bol {
			if ch, n, ok := flatFence(line); ok {
				pos = s.fence(pos, next, ch, n)
				bol = pos == 0 || text[pos-1] == '\n'
				continue
			}
			if lx.exampleLine(line) {
				s.examples = append(s.examples, eol)
			}
			if r := s.lineLabel(pos, line, next); r > eol {
				// A Role:/Content: record: a fence may open after
				// "Content:".
				ce := strings.IndexByte(text[r:], '\n')
				if ce < 0 {
					ce = len(text) - r
				}
				if ch, n, ok := flatFence(strings.TrimSuffix(text[r:r+ce], "\r")); ok {
					pos = s.fence(r, min(r+ce+1, len(text)), ch, n)
					bol = pos == 0 || text[pos-1] == '\n'
					continue
				}
				pos, bol = r, false
				continue
			} else if r >= 0 {
				// A fence may open on the label's line ("User: ```go").
				if ch, n, ok := flatFence(text[r : pos+len(line)]); ok {
					pos = s.fence(r, next, ch, n)
					bol = pos == 0 || text[pos-1] == '\n'
					continue
				}
				from = r
			}
		}
		if stop := s.inline(from, pos+len(line)); stop >= 0 {
			pos, bol = stop, stop == 0 || text[stop-1] == '\n'
			continue
		}
		pos, bol = next, true
		if next == eol { // last line without a break
			break
		}
	}
	s.closeStart = make(map[int]int)
	s.closeEnd = make(map[int]int)
	for _, m := range s.marks {
		if m.kind == fmClose {
			s.closeStart[m.start] = m.end
			s.closeEnd[m.end] = m.start
		}
	}
	return s
}

// flatFence reports whether line opens a CommonMark code fence.
func flatFence(line string) (ch byte, n int, ok bool) {
	i := 0
	for i < 3 && i < len(line) && line[i] == ' ' {
		i++
	}
	if i >= len(line) || (line[i] != '`' && line[i] != '~') {
		return 0, 0, false
	}
	ch = line[i]
	j := i
	for j < len(line) && line[j] == ch {
		j++
	}
	if j-i < 3 || (ch == '`' && strings.IndexByte(line[j:], '`') >= 0) {
		return 0, 0, false
	}
	return ch, j - i, true
}

// lineLabel records a label at the start of the line at pos and returns the
// offset where inline scanning resumes: past the label, or -1 when the line
// holds no label. A Role:/Content: record may end on the next line.
func (s *flatScan) lineLabel(pos int, line string, next int) int {
	l, ok := parseFlatLabel(line, s.lx)
	if !ok {
		return -1
	}
	end := pos + l.n
	if l.emoji != 0 {
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmRole, lk: s.lx.emoji[l.emoji], key: string(l.emoji), empty: l.rest == ""})
		return end
	}
	key, k := s.lx.kind(l.name)
	if key == "role" && l.colon {
		return s.roleRecord(pos, line, next, l)
	}
	switch k {
	case lexUser, lexModel, lexEither:
		if l.alone && utf8.RuneCountInString(l.name) < 2 {
			return -1
		}
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmRole, lk: k, key: key, empty: l.rest == ""})
	case lexSystem:
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmSystem, key: key})
	case lexQuestion:
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmQuestion, key: key})
	case lexNone:
		// A name: a persona candidate, kept only if it alternates.
		if !l.colon || len(key) > 32 || strings.Count(key, " ") > 2 || strings.HasPrefix(l.rest, "//") {
			return -1
		}
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmRole, lk: lexNone, key: key, empty: l.rest == ""})
	default:
		return -1
	}
	return end
}

// roleRecord handles "Role: user" followed by an optional "Content:" line.
func (s *flatScan) roleRecord(pos int, line string, next int, l flatLabel) int {
	val := strings.TrimSpace(l.rest)
	key, k := s.lx.kind(val)
	if val == "" || (k != lexUser && k != lexModel && k != lexSystem) {
		return -1
	}
	end := pos + len(line)
	if next < len(s.text) {
		nl := s.text[next:]
		if i := strings.IndexByte(nl, '\n'); i >= 0 {
			nl = nl[:i]
		}
		for _, c := range []string{"content:", "message:", "text:", "conteúdo:", "contenido:", "内容：", "内容:"} {
			if len(nl) >= len(c) && strings.EqualFold(nl[:len(c)], c) {
				end = next + len(c)
				for end < len(s.text) && (s.text[end] == ' ' || s.text[end] == '\t') {
					end++
				}
				break
			}
		}
	}
	if k == lexSystem {
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmSystem, key: key})
	} else {
		s.marks = append(s.marks, flatMark{start: pos, end: end, kind: fmRole, lk: k, key: key})
	}
	return end
}

// inline looks for chat-template tokens, role tags, document tags and
// triple-quoted documents in text[from:end] (one line). When a protected
// region starts, it records it and returns the offset where it ends;
// otherwise it returns -1.
func (s *flatScan) inline(from, end int) int {
	t := s.text
	for i := from; i < end; {
		for i < end && t[i] != '<' && t[i] != '[' && t[i] != '"' {
			i++
		}
		if i == end {
			return -1
		}
		switch t[i] {
		case '<':
			n := len(s.marks)
			adv, stop := s.tag(i)
			if stop >= 0 {
				return stop
			}
			// A fence may open right after a role tag ("<user>```go").
			if len(s.marks) > n && s.marks[n].kind == fmRole {
				if ch, fn, ok := flatFence(t[adv:end]); ok {
					next := end
					if next < len(t) && t[next] == '\r' {
						next++
					}
					return s.fence(adv, min(next+1, len(t)), ch, fn)
				}
			}
			i = adv
		case '[':
			switch {
			case strings.HasPrefix(t[i:], "[INST]"):
				s.marks = append(s.marks, flatMark{start: i, end: i + 6, kind: fmRole, lk: lexUser, key: "user"})
				i += 6
			case strings.HasPrefix(t[i:], "[/INST]"):
				s.marks = append(s.marks, flatMark{start: i, end: i + 7, kind: fmRole, lk: lexModel, key: "model"})
				i += 7
			default:
				i++
			}
		case '"':
			if !strings.HasPrefix(t[i:], `"""`) {
				i++
				continue
			}
			return s.quoted(i)
		}
	}
	return -1
}

// tag handles a '<' at i. It returns the offset to continue from, and the
// end of a protected region when a document tag opens one (else -1).
func (s *flatScan) tag(i int) (adv, stop int) {
	t := s.text
	rest := t[i:]
	if strings.HasPrefix(rest, "<|") {
		c := strings.Index(rest[2:min(len(rest), 48)], "|>")
		if c < 0 || strings.IndexByte(rest[2:2+c], '\n') >= 0 {
			return i + 2, -1 // a token ends on its own line, as a tag does
		}
		c += 2
		name := strings.ToLower(rest[2:c])
		end := i + c + 2
		switch name {
		case "im_start", "start_header_id":
			return s.tokenRole(i, end, name == "start_header_id"), -1
		case "im_end", "end", "eot_id", "endoftext", "end_of_text", "begin_of_text", "im_sep", "eot", "end_of_turn", "end_header_id":
			s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmClose})
			return end, -1
		}
		s.role(i, end, name)
		return end, -1
	}
	switch {
	case strings.HasPrefix(rest, "<start_of_turn>"):
		return s.tokenRole(i, i+len("<start_of_turn>"), false), -1
	case strings.HasPrefix(rest, "<end_of_turn>"), strings.HasPrefix(rest, "</s>"), strings.HasPrefix(rest, "<s>"):
		n := strings.IndexByte(rest, '>') + 1
		s.marks = append(s.marks, flatMark{start: i, end: i + n, kind: fmClose})
		return i + n, -1
	}
	// An XML-like tag: <name attrs>, </name>.
	j := 1
	closing := false
	if j < len(rest) && rest[j] == '/' {
		closing = true
		j++
	}
	ns := j
	for j < len(rest) && j-ns < 40 && (isASCIILetter(rest[j]) || (j > ns && (rest[j] == '_' || rest[j] == '-' || (rest[j] >= '0' && rest[j] <= '9')))) {
		j++
	}
	if j == ns || j >= len(rest) || (rest[j] != '>' && rest[j] != ' ' && rest[j] != '/' && rest[j] != '\t' && rest[j] != '\n' && rest[j] != '\r') {
		return i + 1, -1
	}
	gt := strings.IndexByte(rest[:min(len(rest), 512)], '>')
	if nl := strings.IndexByte(rest[:min(len(rest), 512)], '\n'); nl >= 0 && nl < gt {
		gt = -1 // a tag ends on its own line
	}
	if gt < 0 {
		return i + 1, -1
	}
	name := strings.ToLower(rest[ns:j])
	attrs := rest[j:gt]
	end := i + gt + 1
	selfClosing := strings.HasSuffix(attrs, "/")
	if !closing && !selfClosing && s.lx.docTags[name] {
		if name == "example" || name == "examples" {
			s.exampleTag = true
		}
		stop := s.docTag(i, end, name)
		return stop, stop
	}
	if selfClosing {
		return end, -1
	}
	switch name {
	case "turn", "message", "msg", "entry", "utterance", "chat_message":
		if !closing {
			if r := flatAttr(attrs); r != "" {
				if _, k := s.lx.kind(r); k == lexUser || k == lexModel || k == lexSystem {
					s.role(i, end, r)
					return end, -1
				}
			}
		}
		s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmClose})
		return end, -1
	}
	_, k := s.lx.kind(name)
	switch {
	case len(name) < 2: // <a>, <q>, <b> are HTML
	case k != lexUser && k != lexModel && k != lexSystem && k != lexQuestion:
	case closing && k != lexUser && k != lexModel: // </system> is content like <system>
	case closing:
		s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmClose})
	default:
		s.role(i, end, strings.ReplaceAll(name, "_", " "))
	}
	return end, -1
}

// role records a token or tag at [i, end) that names a role word.
func (s *flatScan) role(i, end int, word string) {
	key, k := s.lx.kind(word)
	switch k {
	case lexUser, lexModel:
		s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmRole, lk: k, key: key})
	case lexSystem:
		s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmSystem, key: key})
	case lexQuestion:
		s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmQuestion, key: key})
	}
}

// tokenRole handles "<|im_start|>user", "<start_of_turn>model" and
// "<|start_header_id|>user<|end_header_id|>": the role word follows the
// token at end. It returns the offset after the whole label.
func (s *flatScan) tokenRole(i, end int, header bool) int {
	j := end
	for j < len(s.text) && isASCIILetter(s.text[j]) {
		j++
	}
	word := s.text[end:j]
	if header && strings.HasPrefix(s.text[j:], "<|end_header_id|>") {
		j += len("<|end_header_id|>")
	}
	if _, k := s.lx.kind(word); word == "" || (k != lexUser && k != lexModel && k != lexSystem) {
		s.marks = append(s.marks, flatMark{start: i, end: end, kind: fmClose})
		return end
	}
	s.role(i, j, word)
	return j
}

// flatCloseTag returns the start of the first "</name>" (any case) at or
// after pos and the offset after it, or -1 and len(text) when the tag is
// never closed.
func flatCloseTag(text string, pos int, name string) (start, end int) {
	for pos < len(text) {
		c := strings.Index(text[pos:], "</")
		if c < 0 {
			return -1, len(text)
		}
		c += pos
		e := c + 2 + len(name)
		if e < len(text) && strings.EqualFold(text[c+2:e], name) && (text[e] == '>' || text[e] == ' ') {
			if gt := strings.IndexByte(text[e:], '>'); gt >= 0 {
				return c, e + gt + 1
			}
			return -1, len(text)
		}
		pos = c + 2
	}
	return -1, len(text)
}

// flatAttr returns the value of a role-like attribute (role, speaker, from,
// author) in attrs, or "".
func flatAttr(attrs string) string {
	for _, a := range []string{"role=", "speaker=", "from=", "author="} {
		i := strings.Index(strings.ToLower(attrs), a)
		if i < 0 {
			continue
		}
		v := attrs[i+len(a):]
		if v == "" {
			continue
		}
		q := v[0]
		if q != '"' && q != '\'' {
			continue
		}
		if e := strings.IndexByte(v[1:], q); e >= 0 {
			return v[1 : e+1]
		}
	}
	return ""
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// flatPlan maps the keys of name labels (personas, "You") to roles for one
// attempt; names not in the plan are content.
type flatPlan map[string]flatRole

// plans returns the role assignments to try, in order. Known labels need
// no plan; names and "You" are given the role opposite the known labels
// they alternate with. When no label is known, the two most frequent names
// that strictly alternate count only when the text ends on an open cue of
// one of them, which is then the model.
func (s *flatScan) plans() []flatPlan {
	var user, model int
	type cand struct {
		key    string
		n      int
		first  int
		either bool
	}
	var cands []*cand
	byKey := map[string]*cand{}
	for idx, m := range s.marks {
		if m.kind != fmRole {
			continue
		}
		switch m.lk {
		case lexUser:
			user++
		case lexModel:
			model++
		default:
			c := byKey[m.key]
			if c == nil {
				c = &cand{key: m.key, first: idx, either: m.lk == lexEither}
				byKey[m.key] = c
				cands = append(cands, c)
			}
			c.n++
		}
	}
	if user > 0 && model > 0 {
		return []flatPlan{{}}
	}
	slices.SortStableFunc(cands, func(a, b *cand) int {
		if a.either != b.either {
			if a.either {
				return -1
			}
			return 1
		}
		if a.n != b.n {
			return b.n - a.n
		}
		return a.first - b.first
	})
	var plans []flatPlan
	switch {
	case user > 0 || model > 0:
		known, other := lexUser, frModel
		if model > 0 {
			known, other = lexModel, frUser
		}
		for _, c := range cands {
			if len(plans) == 3 {
				break
			}
			if (c.n >= 2 || c.either || s.introduced(c.key)) && s.alternates(c.key, known, "") {
				plans = append(plans, flatPlan{c.key: other})
			}
		}
	default:
		var two []*cand
		for _, c := range cands {
			if c.n >= 2 {
				two = append(two, c)
			}
			if len(two) == 2 {
				break
			}
		}
		if len(two) < 2 || !s.alternates(two[0].key, lexNone, two[1].key) {
			return nil
		}
		var last flatMark
		for _, m := range s.marks {
			if m.kind == fmRole && (m.key == two[0].key || m.key == two[1].key) {
				last = m
			}
		}
		// Two names and no known label are a chat only when the text
		// ends on an open cue: that name is the model.
		a, b := two[0].key, two[1].key
		if last.key != a {
			a, b = b, a
		}
		if last.empty && strings.TrimSpace(s.text[last.end:]) == "" {
			plans = append(plans, flatPlan{a: frModel, b: frUser})
		}
	}
	return plans
}

// introduced reports whether the name key is a word of the preamble, the
// text before the first mark ("You are FRIDAY, …"): a persona named there
// counts from its first label.
func (s *flatScan) introduced(key string) bool {
	if len(s.marks) == 0 || key == "" {
		return false
	}
	pre := lexCollapse(s.text[:s.marks[0].start])
	for i := 0; ; {
		j := strings.Index(pre[i:], key)
		if j < 0 {
			return false
		}
		j += i
		before, _ := utf8.DecodeLastRuneInString(pre[:j])
		after, _ := utf8.DecodeRuneInString(pre[j+len(key):])
		if j == 0 || !lexWordRune(before) {
			if j+len(key) == len(pre) || !lexWordRune(after) {
				return true
			}
		}
		i = j + 1
	}
}

func lexWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

// alternates reports whether the name key never follows itself among the
// marks of the known kind (or of the name other) and key.
func (s *flatScan) alternates(key string, known lexKind, other string) bool {
	prev := ""
	for _, m := range s.marks {
		if m.kind != fmRole {
			continue
		}
		var k string
		switch {
		case m.key == key:
			k = key
		case other != "" && m.key == other:
			k = other
		case known != lexNone && m.lk == known:
			k = "\x00known"
		default:
			continue
		}
		if k == prev && k != "\x00known" {
			return false
		}
		prev = k
	}
	return true
}

// flatSeg is a segment: a boundary mark and the text up to the next one.
type flatSeg struct {
	start, end int // the mark
	next       int // start of the next segment, or the end of the transcript
	kind       flatMarkKind
	role       flatRole // for fmRole
}

// build applies one plan: it finds the segments, checks the shape and the
// side-task signals, verifies model segments and assembles the turns.
func (s *flatScan) build(plan flatPlan, v Verifier) ([]flatTurn, bool) {
	t := s.text
	var segs []flatSeg
	for _, m := range s.marks {
		g := flatSeg{start: m.start, end: m.end, kind: m.kind}
		switch m.kind {
		case fmClose:
			continue
		case fmRole:
			switch m.lk {
			case lexUser:
				g.role = frUser
			case lexModel:
				g.role = frModel
			default:
				g.role = plan[m.key]
			}
			if g.role == frNone {
				continue
			}
		}
		segs = append(segs, g)
	}
	if len(segs) < 2 {
		return nil, false
	}
	textEnd := len(t)
	for i := range segs {
		segs[i].next = textEnd
		if i+1 < len(segs) {
			segs[i].next = segs[i+1].start
		}
	}
	// Drop an open model cue at the end.
	if last := segs[len(segs)-1]; last.kind == fmRole && last.role == frModel && s.stripLead(last.end, textEnd) == textEnd {
		textEnd = last.start
		segs = segs[:len(segs)-1]
		if len(segs) > 0 {
			segs[len(segs)-1].next = textEnd
		}
	}
	// Shape: both roles, and a user segment after the last model segment.
	lastModel, lastUser, users := -1, -1, 0
	for i, g := range segs {
		switch {
		case g.kind == fmRole && g.role == frModel:
			lastModel = i
		case g.kind == fmQuestion || (g.kind == fmRole && g.role == frUser):
			lastUser = i
			if g.kind == fmRole {
				users++
			}
		}
	}
	if lastModel < 0 || lastUser < lastModel || users == 0 {
		return nil, false
	}
	if s.sideTask(segs, plan, lastModel, textEnd) {
		return nil, false
	}
	// Verify model segments; a verified one may absorb later segments.
	type prom struct{ i, ext int }
	var proms []prom
	for i := 0; i < len(segs); i++ {
		g := segs[i]
		if g.kind != fmRole || g.role != frModel {
			continue
		}
		ext := -1
		if s.served(v, segs, i, i) {
			ext = i
		} else if s.bodyEnd(segs, i)-g.end < 200 {
			for j := i + 1; j <= i+2 && s.absorbable(segs, j, lastUser); j++ {
				if s.served(v, segs, i, j) {
					ext = j
					break
				}
			}
		}
		if ext < 0 {
			continue
		}
		for j := ext + 1; j <= i+6 && s.absorbable(segs, j, lastUser); j++ {
			if !s.served(v, segs, i, j) {
				break
			}
			ext = j
		}
		proms = append(proms, prom{i, ext})
		i = ext
	}
	// The first turn is user text: a model segment with nothing before it
	// (a greeting) stays user text.
	for len(proms) > 0 && strings.TrimSpace(t[:s.stripTrail(0, segs[proms[0].i].start)]) == "" {
		proms = proms[1:]
	}
	if len(proms) == 0 {
		return nil, false
	}
	// Consecutive segments of one role join into one turn; their texts are
	// joined once at the end, since appending each to the last would copy
	// the turn again for every segment (quadratic in a long run of them).
	var turns []flatTurn
	var pieces [][]string
	var spans [][]flatSpan
	// add adds t[a:b] without its surrounding white space, or exactly
	// t[a:b] when exact (a model turn, the served answer byte for byte).
	add := func(role string, a, b int, exact bool) {
		text := t[a:b]
		if !exact {
			text = strings.TrimSpace(text)
		}
		if text == "" {
			return
		}
		if !exact {
			a += len(t[a:b]) - len(strings.TrimLeftFunc(t[a:b], unicode.IsSpace))
		}
		sp := flatSpan{a, a + len(text)}
		if n := len(turns); n > 0 && turns[n-1].Role == role {
			pieces[n-1] = append(pieces[n-1], text)
			spans[n-1] = append(spans[n-1], sp)
			return
		}
		turns = append(turns, flatTurn{Role: role})
		pieces = append(pieces, []string{text})
		spans = append(spans, []flatSpan{sp})
	}
	cur, first, k := 0, true, 0
	userAt := func(pos int) int {
		for k < len(segs) && segs[k].start < pos {
			k++
		}
		if k < len(segs) && segs[k].start == pos && segs[k].kind == fmRole && segs[k].role == frUser {
			return segs[k].end
		}
		return pos
	}
	tv, _ := v.(TrailVerifier)
	for _, p := range proms {
		g := segs[p.i]
		us, ue := cur, s.stripTrail(cur, g.start)
		if !first {
			us = userAt(s.stripLead(cur, ue))
		} else if f := s.gluedFirst(segs, g.start); f >= 0 {
			// The first user label is glued to a fence ("User: ```go"):
			// it is dropped like the labels of later user segments, so
			// that the fence starts its line and reads as a block.
			add("user", 0, s.stripTrail(0, segs[f].start), false)
			us = segs[f].end
		}
		if !first && (us >= ue || strings.TrimSpace(t[us:ue]) == "") {
			// No user text since the previous promoted turn: joining the
			// two would make one model turn of two served answers, and a
			// user turn between them would be forged. This one stays user
			// text, verbatim with its label, in the next user turn.
			continue
		}
		if us < ue {
			add("user", us, ue, false)
		}
		be := s.bodyEnd(segs, p.ext)
		ms := be - len(strings.TrimLeftFunc(t[g.end:be], unicode.IsSpace))
		// The served answer's own trailing white space, when the Verifier
		// knows it and the transcript has it, stays: the turn is then byte
		// for byte what the model returned.
		me := be
		if tv != nil {
			if trail, ok := tv.ServedTrail(t[ms:be]); ok && trail != "" && be+len(trail) <= segs[p.ext].next && t[be:be+len(trail)] == trail {
				me = be + len(trail)
			}
		}
		add("model", ms, me, true)
		cur, first = me, false
	}
	us := userAt(s.stripLead(cur, textEnd))
	ue := s.stripTrail(us, textEnd)
	if us >= ue || strings.TrimSpace(t[us:ue]) == "" {
		return nil, false
	}
	add("user", us, ue, false)
	if len(turns) < 3 || turns[0].Role != "user" || turns[len(turns)-1].Role != "user" {
		return nil, false
	}
	for i := range turns {
		turns[i].Text = strings.Join(pieces[i], "\n\n")
	}
	s.spans = spans
	return turns, true
}

// gluedFirst returns the index of the first segment when it is a user
// segment, before pos, whose label is followed on its line by an opening
// fence, or -1.
func (s *flatScan) gluedFirst(segs []flatSeg, pos int) int {
	if len(segs) == 0 {
		return -1
	}
	g := segs[0]
	if g.start >= pos || g.kind != fmRole || g.role != frUser {
		return -1
	}
	eol := strings.IndexByte(s.text[g.end:], '\n')
	if eol < 0 {
		eol = len(s.text) - g.end
	}
	if _, _, ok := flatFence(strings.TrimSuffix(s.text[g.end:g.end+eol], "\r")); ok {
		return 0
	}
	return -1
}

// absorbable reports whether segment j may be absorbed into a verified
// model segment before it: a role or system segment before the last user
// segment.
func (s *flatScan) absorbable(segs []flatSeg, j, lastUser int) bool {
	return j < lastUser && segs[j].kind != fmQuestion
}

// served asks the Verifier about the text from the body of segment i to the
// end of the body of segment j, without a trailing truncation marker.
func (s *flatScan) served(v Verifier, segs []flatSeg, i, j int) bool {
	body := flatUntruncate(s.text[segs[i].end:s.bodyEnd(segs, j)])
	return body != "" && v.Served(body)
}

// bodyEnd returns the end of the body of segment j: before trailing white
// space, structural tokens and closing lines of the history wrapper
// ("</chat_history>", "--- END ---"), which belong to the next user text.
func (s *flatScan) bodyEnd(segs []flatSeg, j int) int {
	t := s.text
	lo, e := segs[j].end, segs[j].next
	for e > lo {
		e = s.stripTrail(lo, e)
		nl := strings.LastIndexByte(t[lo:e], '\n')
		if nl < 0 {
			break
		}
		ls := lo + nl + 1
		if !s.closerLine(t[ls:e]) {
			break
		}
		e = ls
	}
	return e
}

// closerLine reports whether line ends a history wrapper: a closing tag, a
// rule or banner, or an "end of …" note.
func (s *flatScan) closerLine(line string) bool {
	l := strings.TrimSpace(line)
	if l == "" || len(l) > 120 {
		return false
	}
	if strings.HasPrefix(l, "</") {
		_, k := s.lx.kind(strings.Trim(l, "</> "))
		low := strings.ToLower(l)
		return k == lexHeader || strings.Contains(low, "history") || strings.Contains(low, "conversation") ||
			strings.Contains(low, "chat") || strings.Contains(low, "messages") || strings.Contains(low, "transcript") || strings.Contains(low, "dialog")
	}
	for _, p := range []string{"---", "===", "***", "___", "###", "[end", "(end", "end of", "fim d", "fin d", "结束", "<!--"} {
		if len(l) >= len(p) && strings.EqualFold(l[:len(p)], p) {
			return true
		}
	}
	if lb, ok := parseFlatLabel(l, s.lx); ok && lb.rest == "" {
		if _, k := s.lx.kind(lb.name); k == lexHeader {
			return true
		}
	}
	return false
}

// stripLead skips white space and structural tokens from a towards b.
func (s *flatScan) stripLead(a, b int) int {
	for a < b {
		r, sz := utf8.DecodeRuneInString(s.text[a:b])
		if unicode.IsSpace(r) {
			a += sz
			continue
		}
		if e, ok := s.closeStart[a]; ok && e <= b {
			a = e
			continue
		}
		break
	}
	return a
}

// stripTrail drops white space and structural tokens from b back towards a.
func (s *flatScan) stripTrail(a, b int) int {
	for b > a {
		r, sz := utf8.DecodeLastRuneInString(s.text[a:b])
		if unicode.IsSpace(r) {
			b -= sz
			continue
		}
		if st, ok := s.closeEnd[b]; ok && st >= a {
			b = st
			continue
		}
		break
	}
	return b
}

// sideTask reports whether the framing shows a task run on the transcript.
func (s *flatScan) sideTask(segs []flatSeg, plan flatPlan, lastModel, textEnd int) bool {
	lx := s.lx
	// The preamble runs up to the first role segment: system lines
	// before the transcript are framing too.
	first := segs[0].start
	for _, g := range segs {
		if g.kind == fmRole {
			first = g.start
			break
		}
	}
	pre := lexCollapse(s.unprotected(0, first))
	if lx.sideTask(pre) || lx.constrained(pre) {
		return true
	}
	if lx.constrained(lexCollapse(s.unprotected(segs[lastModel].next, textEnd))) {
		return true
	}
	if s.fieldCue(plan) {
		return true
	}
	for _, e := range s.examples {
		if e < first {
			return true
		}
		// A heading followed directly by a label.
		n := e
		for n < len(s.text) && unicode.IsSpace(rune(s.text[n])) {
			n++
		}
		if i, ok := slices.BinarySearchFunc(s.marks, n, func(m flatMark, n int) int { return m.start - n }); ok && s.marks[i].kind == fmRole {
			return true
		}
	}
	return false
}

// fieldCue reports whether the last line of the text is a field cue
// ("Intent:", "Title:", "JSON:"): a label with nothing after it that is not
// a role of this transcript.
func (s *flatScan) fieldCue(plan flatPlan) bool {
	t := strings.TrimRightFunc(s.text, unicode.IsSpace)
	ls := strings.LastIndexByte(t, '\n') + 1
	for _, p := range s.prot {
		if ls >= p.start && ls < p.end {
			return false
		}
	}
	l, ok := parseFlatLabel(t[ls:], s.lx)
	if !ok || l.rest != "" || !(l.colon || l.bracket) || l.emoji != 0 {
		return false
	}
	key, k := s.lx.kind(l.name)
	switch k {
	case lexUser, lexModel, lexQuestion, lexSystem:
		return false
	case lexEither, lexNone:
		return plan[key] == frNone
	}
	return true
}

// unprotected returns text[a:b] without the protected regions.
func (s *flatScan) unprotected(a, b int) string {
	if a >= b {
		return ""
	}
	var sb strings.Builder
	for _, p := range s.prot {
		if p.end <= a || p.start >= b {
			continue
		}
		if p.start > a {
			sb.WriteString(s.text[a:p.start])
			sb.WriteByte('\n')
		}
		a = max(a, p.end)
	}
	if a < b {
		sb.WriteString(s.text[a:b])
	}
	return sb.String()
}

// flatUntruncate trims white space and a trailing truncation marker
// ("... [truncated]", "…", "[...]") that clients append to shortened
// model lines.
func flatUntruncate(s string) string {
	s = strings.TrimSpace(s)
	for range 3 {
		before := s
		for _, suf := range []string{"[truncated]", "(truncated)", "<truncated>", "truncated", "[...]", "(...)", "[…]", "...", "…"} {
			if len(s) >= len(suf) && strings.EqualFold(s[len(s)-len(suf):], suf) {
				s = strings.TrimSpace(s[:len(s)-len(suf)])
				break
			}
		}
		if s == before {
			break
		}
	}
	return s
}
