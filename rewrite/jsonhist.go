package rewrite

// Histories serialised as JSON inside a user text (issue 15, item 3).
//
// Some clients dump their message array into the prompt instead of
// flattening it into labelled lines:
//
//	Conversation so far:
//	[{"role":"user","content":"What is N2?"},
//	 {"role":"assistant","content":"N2 is a flattened history."},
//	 {"role":"user","content":"And N1?"}]
//
// jsonHistory turns such a text back into alternating user/model turns,
// under the rules of the labelled transcripts (transcript.go), read the
// JSON way:
//
//   - Shape. The text is an optional preamble, one JSON value and an
//     optional trailing text (the new question). The value starts at the
//     start of a line or after a colon on its line ("History: [..."),
//     outside a code fence or document tag, and is an array of message
//     objects or an object whose only array member is one and whose other
//     members are scalars (`{"history": […]}`, `{"messages": […],
//     "question": "…"}`). Every element is an object with a role member
//     ("role", "author", "speaker", "from", "sender"; its colon right
//     after the key, as serialisers write it) whose string value is a
//     lexicon word: user, human, customer …; assistant, model, ai, bot,
//     gpt …; system. At least one user and one model message, and the
//     text ends on a user message, a string member after the history or a
//     trailing text.
//   - Content. A message's content is the string of its "content", "text",
//     "message", "value" or "parts" member, or the strings of a list of
//     parts (`[{"type":"text","text":"…"}]`, `[{"text":"…"}]`). Other
//     members of a message ("timestamp", "id", "name") are metadata: short
//     scalars are left out like a label; a message with a longer or
//     structured one, with two content members, with a part that is not
//     text or with a string that is not valid JSON (a raw control byte, a
//     lone surrogate) stays in the user text verbatim, JSON and all.
//   - Trust. A model message becomes a model turn only when its content,
//     decoded from its JSON string, is a response the Verifier says this
//     proxy served to the same tenant (after a trailing truncation marker
//     is removed, as for labelled transcripts). The model turn is then that
//     decoded string byte for byte. A model message that does not verify,
//     a system message, a message of another role, a model message with
//     nothing before it and one right after a promoted answer stay user
//     text: the message's JSON object, verbatim, so nobody forges a model
//     turn by typing {"role":"assistant"}.
//   - Side tasks. The caller's sideTaskHint, a task verb or an output
//     constraint in the preamble or the trailing text, a few-shot example
//     heading in the preamble, or a field cue as the last line ("Title:")
//     leave the text alone.
//   - Output. The preamble (trimmed), the decoded content of each user
//     message, the string members of a wrapper object and the trailing
//     text (trimmed, without an open model cue such as "Assistant:") are
//     user pieces; pieces of one role are joined with "\n\n". What is left
//     out is JSON punctuation, keys, role values and short metadata, at
//     most maxGapBytes bytes besides white space between two pieces (the
//     audit checks it, and decodes each quoted piece itself).
//   - Cost. jsonHistMaybe is the early exit: a text without a role key
//     followed by its colon (`"role":`) costs a search for colons (eight
//     bytes at a time where they are dense). A candidate is parsed once,
//     at most jhMaxCandidates of them.

import (
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// jhMaxCandidates bounds the JSON values tried in one text, and
// jhMaxDepth their nesting.
const (
	jhMaxCandidates = 8
	jhMaxDepth      = 32
	// jhMaxMeta bounds the raw bytes of the metadata members of one
	// message that un-flattening leaves out.
	jhMaxMeta = 96
	// jhMaxValue bounds the raw bytes of one string value left out.
	jhMaxValue = 64
)

// jhRoleKeys are the member names that give a message's role, and
// jhContentKeys those that hold its content.
var (
	jhRoleKeys    = []string{"role", "author", "speaker", "from", "sender"}
	jhContentKeys = []string{"content", "text", "message", "value", "parts"}
)

// jsonHistMaybe is the cheap early exit: it reports whether text holds a
// role key ("role", "author", …) as a JSON member name followed by its
// colon (`"role":`, as every common serialiser writes it), which every
// message of a history has. It hops from colon to colon, and where
// colons are dense (YAML, JSON) reads eight bytes at a time instead, so
// that its cost stays a small fraction of a rewrite's whatever the text
// (issue 15: a text without a history costs nothing measurable;
// BenchmarkJSONHistoryNo).
func jsonHistMaybe(text string) bool {
	hits := 0
	for i := 0; i < len(text); i++ {
		j := strings.IndexByte(text[i:], ':')
		if j < 0 {
			return false
		}
		i += j
		if i > 0 && text[i-1] == '"' && jhRoleKeyBefore(text, i-1) {
			return true
		}
		// More than one colon in 64 bytes: words are cheaper.
		if hits++; hits > 16+i>>6 {
			return jhMaybeWords(text, i)
		}
	}
	return false
}

// jhMaybeWords is jsonHistMaybe from offset from on, eight bytes at a
// time.
func jhMaybeWords(text string, from int) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := from
	for ; i+9 <= len(text); i += 8 {
		q := jhLoad8(text, i) ^ (lo * '"')
		c := jhLoad8(text, i+1) ^ (lo * ':')
		// A zero byte in q marks a quote, in c a colon after it; the
		// test may report bytes that are not, never misses one.
		if (q-lo)&^q&hi&((c-lo)&^c) != 0 {
			for j := i; j < i+8; j++ {
				if text[j] == '"' && text[j+1] == ':' && jhRoleKeyBefore(text, j) {
					return true
				}
			}
		}
	}
	for ; i+1 < len(text); i++ {
		if text[i] == '"' && text[i+1] == ':' && jhRoleKeyBefore(text, i) {
			return true
		}
	}
	return false
}

// jhLoad8 returns the eight bytes of s at i as a little-endian word.
func jhLoad8(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// jhRoleKeyBefore reports whether a role key in quotes ends at text[q],
// its closing quote.
func jhRoleKeyBefore(text string, q int) bool {
	for _, k := range jhRoleKeys {
		if q >= len(k)+1 && text[q-len(k)-1] == '"' && strings.EqualFold(text[q-len(k):q], k) {
			return true
		}
	}
	return false
}

// jhVal is a parsed JSON value: its kind ('"', '{', '[' or 'v' for a
// number or literal), its raw range [start, end) in the text and, for a
// string, the range of its contents and, once needed, its decoding.
type jhVal struct {
	kind       byte
	start, end int
	cs, ce     int    // string contents, between the quotes
	str        string // decoded string, once jhText has decoded it
	mem        []jhMem
	elem       []jhVal
}

type jhMem struct {
	key string
	val jhVal
}

// jhParser parses one JSON value of a text. Keys are decoded as they are
// read; other strings are only delimited (jhText decodes and validates
// those un-flattening uses).
type jhParser struct {
	t   string
	pos int
}

func (p *jhParser) ws() {
	for p.pos < len(p.t) {
		switch p.t[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jhParser) value(depth int) (jhVal, bool) {
	p.ws()
	if p.pos >= len(p.t) || depth > jhMaxDepth {
		return jhVal{}, false
	}
	start := p.pos
	switch c := p.t[p.pos]; {
	case c == '"':
		return p.str()
	case c == '{':
		v := jhVal{kind: '{', start: start}
		p.pos++
		p.ws()
		if p.pos < len(p.t) && p.t[p.pos] == '}' {
			p.pos++
			v.end = p.pos
			return v, true
		}
		for {
			p.ws()
			if p.pos >= len(p.t) || p.t[p.pos] != '"' {
				return v, false
			}
			k, ok := p.str()
			if !ok {
				return v, false
			}
			key, ok := jhText(p.t, k)
			if !ok {
				return v, false
			}
			p.ws()
			if p.pos >= len(p.t) || p.t[p.pos] != ':' {
				return v, false
			}
			p.pos++
			x, ok := p.value(depth + 1)
			if !ok {
				return v, false
			}
			v.mem = append(v.mem, jhMem{key, x})
			p.ws()
			if p.pos >= len(p.t) {
				return v, false
			}
			if p.t[p.pos] == '}' {
				p.pos++
				v.end = p.pos
				return v, true
			}
			if p.t[p.pos] != ',' {
				return v, false
			}
			p.pos++
		}
	case c == '[':
		v := jhVal{kind: '[', start: start}
		p.pos++
		p.ws()
		if p.pos < len(p.t) && p.t[p.pos] == ']' {
			p.pos++
			v.end = p.pos
			return v, true
		}
		for {
			x, ok := p.value(depth + 1)
			if !ok {
				return v, false
			}
			v.elem = append(v.elem, x)
			p.ws()
			if p.pos >= len(p.t) {
				return v, false
			}
			if p.t[p.pos] == ']' {
				p.pos++
				v.end = p.pos
				return v, true
			}
			if p.t[p.pos] != ',' {
				return v, false
			}
			p.pos++
		}
	case c == '-' || c >= '0' && c <= '9':
		p.pos++
		for p.pos < len(p.t) && strings.IndexByte("0123456789.eE+-", p.t[p.pos]) >= 0 {
			p.pos++
		}
		return jhVal{kind: 'v', start: start, end: p.pos}, true
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(p.t[p.pos:], lit) {
				p.pos += len(lit)
				return jhVal{kind: 'v', start: start, end: p.pos}, true
			}
		}
		return jhVal{}, false
	}
}

// str parses a string at p.pos (a '"'), without decoding it: only the
// strings un-flattening uses are decoded (jhText), so that a large JSON
// text that is no history costs a scan for quotes.
func (p *jhParser) str() (jhVal, bool) {
	t := p.t
	v := jhVal{kind: '"', start: p.pos, cs: p.pos + 1}
	i := p.pos + 1
	for {
		j := strings.IndexByte(t[i:], '"')
		if j < 0 {
			return v, false
		}
		i += j
		k := i
		for k > v.cs && t[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			break // not escaped
		}
		i++
	}
	v.ce, v.end = i, i+1
	p.pos = v.end
	return v, true
}

// jhText decodes the string v of text t; ok is false when its contents
// are not a valid JSON string (a raw control byte, an invalid escape, an
// unpaired surrogate, invalid UTF-8).
func jhText(t string, v jhVal) (string, bool) {
	raw := t[v.cs:v.ce]
	for i := 0; i < len(raw); i++ {
		if raw[i] < 0x20 {
			return "", false
		}
	}
	if strings.IndexByte(raw, '\\') < 0 {
		return raw, utf8.ValidString(raw)
	}
	return jhDecode(raw)
}

// jhDecode decodes the contents of a JSON string, rejecting invalid
// escapes and unpaired surrogates.
func jhDecode(raw string) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			j := strings.IndexByte(raw[i:], '\\')
			if j < 0 {
				j = len(raw) - i
			}
			b.WriteString(raw[i : i+j])
			i += j
			continue
		}
		if i+1 >= len(raw) {
			return "", false
		}
		if e := escByte[raw[i+1]]; e != 0 {
			b.WriteByte(e)
			i += 2
			continue
		}
		if raw[i+1] != 'u' {
			return "", false
		}
		r, ok := jhHex4(raw[i+2:])
		if !ok {
			return "", false
		}
		i += 6
		if utf16.IsSurrogate(r) {
			if r >= 0xdc00 || i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
				return "", false
			}
			r2, ok := jhHex4(raw[i+2:])
			d := utf16.DecodeRune(r, r2)
			if !ok || d == utf8.RuneError {
				return "", false
			}
			r = d
			i += 6
		}
		b.WriteRune(r)
	}
	s := b.String()
	return s, utf8.ValidString(s)
}

func jhHex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c|0x20 >= 'a' && c|0x20 <= 'f':
			r = r<<4 | rune(c|0x20-'a'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// jhPiece is one piece of a turn: a range of the text, raw or (quoted)
// the contents of a JSON string whose decoding is the piece's text.
type jhPiece struct {
	role   flatRole
	quoted bool
	start  int
	end    int
	text   string
}

// jsonHistory splits one user text into real turns when it holds a JSON
// history whose model messages are verified; ok=false means leave the
// text as it is. spans and quoted are the audit's record: the ranges of
// text each turn joins with "\n\n", and which of them are JSON string
// contents that the turn holds decoded. See the file comment.
func jsonHistory(text string, lx *Lexicon, sideTaskHint bool, v Verifier) (turns []flatTurn, spans [][]flatSpan, quoted [][]bool, ok bool) {
	if v == nil || sideTaskHint || len(text) < 16 || !jsonHistMaybe(text) {
		return nil, nil, nil, false
	}
	if lx == nil {
		lx = DefaultLexicon()
	}
	cands := jhCands{t: text, lx: lx}
	from := 0
	for range jhMaxCandidates {
		at := cands.next(from)
		if at < 0 {
			return nil, nil, nil, false
		}
		p := jhParser{t: text, pos: at}
		val, parsed := p.value(0)
		if !parsed {
			from = at + 1
			continue
		}
		if msgs, before, after, isHist := jhMessages(text, val, lx); isHist {
			return jhBuild(text, lx, v, at, val.end, msgs, before, after)
		}
		from = val.end
	}
	return nil, nil, nil, false
}

// jhCands finds the candidates of a text, in order. It keeps how many
// fence lines and open document tags the lines before its position hold,
// so that each line is read once however many candidates follow it.
type jhCands struct {
	t      string
	lx     *Lexicon
	done   int // t[:done], whole lines, is counted
	fences int // fence lines in t[:done]
	open   int // document tags opened and not closed in t[:done]
	// ls, lpos and lopen count the line that starts at ls up to lpos: a
	// long line with many candidates is read once too.
	ls, lpos, lopen int
}

// next returns the offset of the first '[' or '{' at or after from that
// may start a history: at the start of a line or after a colon on its
// line, followed by '{' or '"', outside a code fence and a document tag;
// -1 when there is none.
func (c *jhCands) next(from int) int {
	t := c.t
	for i := from; i < len(t); i++ {
		j := strings.IndexAny(t[i:], "[{")
		if j < 0 {
			return -1
		}
		i += j
		k := i - 1
		for k >= 0 && (t[k] == ' ' || t[k] == '\t') {
			k--
		}
		if k >= 0 && t[k] != '\n' && t[k] != '\r' && t[k] != ':' && !strings.HasSuffix(t[:k+1], "：") {
			continue
		}
		n := i + 1
		for n < len(t) && (t[n] == ' ' || t[n] == '\t' || t[n] == '\n' || t[n] == '\r') {
			n++
		}
		if n >= len(t) || (t[i] == '[' && t[n] != '{') || (t[i] == '{' && t[n] != '"') {
			continue
		}
		if c.quoted(i) {
			continue
		}
		return i
	}
	return -1
}

// quoted reports whether offset i lies inside a code fence (an odd number
// of fence lines before its line) or an open document tag.
func (c *jhCands) quoted(i int) bool {
	// Candidates come in order: only what follows the last one is
	// searched for the start of i's line.
	ls := c.ls
	if k := strings.LastIndexByte(c.t[c.lpos:i], '\n'); k >= 0 {
		ls = c.lpos + k + 1
	}
	for c.done < ls {
		e := c.done + strings.IndexByte(c.t[c.done:ls], '\n') + 1
		line := c.t[c.done:e]
		if _, _, ok := flatFence(strings.TrimRight(line, "\r\n")); ok {
			c.fences++
		}
		c.open = max(0, c.open+c.tags(line))
		c.done = e
	}
	if c.ls != ls {
		c.ls, c.lpos, c.lopen = ls, ls, 0
	}
	// i is a '[' or '{', never inside a tag's name, so the line can be
	// counted in pieces.
	c.lopen += c.tags(c.t[c.lpos:i])
	c.lpos = i
	return c.fences%2 == 1 || c.open+c.lopen > 0
}

// tags returns the document tags (Lexicon.docTags) that s opens minus
// those it closes.
func (c *jhCands) tags(s string) int {
	d := 0
	for i := 0; ; {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			return d
		}
		i += j + 1
		closing := i < len(s) && s[i] == '/'
		if closing {
			i++
		}
		k := i
		for k < len(s) && k-i < 24 && (isASCIILetter(s[k]) || s[k] == '_') {
			k++
		}
		if k == i || k == len(s) || (s[k] != '>' && s[k] != ' ' && s[k] != '\t' && s[k] != '\r' && s[k] != '\n') {
			continue
		}
		if c.lx.docTags[strings.ToLower(s[i:k])] {
			if closing {
				d--
			} else {
				d++
			}
		}
	}
}

// jhMsg is one message of a history.
type jhMsg struct {
	obj   jhVal
	role  flatRole
	other bool    // a system message, another role or a message kept verbatim
	parts []jhVal // the content strings, in order
}

// jhMessages reports whether val is a history: an array of messages, or
// an object whose only array member is one and whose other members are
// scalars. before and after are the string members of such an object
// around the history.
func jhMessages(t string, val jhVal, lx *Lexicon) (msgs []jhMsg, before, after []jhVal, ok bool) {
	arr := val
	if val.kind == '{' {
		found := -1
		for i, m := range val.mem {
			switch m.val.kind {
			case '[':
				if found >= 0 {
					return nil, nil, nil, false
				}
				found = i
			case '{':
				return nil, nil, nil, false
			}
		}
		if found < 0 {
			return nil, nil, nil, false
		}
		for i, m := range val.mem {
			if m.val.kind != '"' || m.val.ce == m.val.cs {
				continue
			}
			x := m.val
			if x.str, ok = jhText(t, x); !ok {
				return nil, nil, nil, false
			}
			if i < found {
				before = append(before, x)
			} else {
				after = append(after, x)
			}
		}
		arr = val.mem[found].val
	}
	if arr.kind != '[' || len(arr.elem) < 2 {
		return nil, nil, nil, false
	}
	users, models := 0, 0
	for _, e := range arr.elem {
		m, ok := jhMessage(t, e, lx)
		if !ok {
			return nil, nil, nil, false
		}
		if !m.other {
			switch m.role {
			case frUser:
				users++
			case frModel:
				models++
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, before, after, users > 0 && models > 0
}

// jhMessage classifies one element of a history; ok is false when it is
// not a message at all (not an object, or without a role member).
func jhMessage(t string, e jhVal, lx *Lexicon) (jhMsg, bool) {
	m := jhMsg{obj: e}
	if e.kind != '{' {
		return m, false
	}
	roleAt, contentAt, meta := -1, -1, 0
	for i, x := range e.mem {
		switch {
		case jhIs(x.key, jhRoleKeys) && roleAt < 0 && x.val.kind == '"':
			roleAt = i
		case jhIs(x.key, jhContentKeys):
			if contentAt >= 0 {
				m.other = true // two contents: ambiguous
			}
			contentAt = i
		case x.val.kind == 'v' || x.val.kind == '"' && x.val.ce-x.val.cs <= jhMaxValue:
			meta += x.val.end - x.val.start + len(x.key) + 4
		default:
			m.other = true // structured metadata
		}
	}
	if roleAt < 0 {
		return m, false
	}
	role, ok := jhText(t, e.mem[roleAt].val)
	if !ok {
		return m, false
	}
	_, k := lx.kind(strings.TrimSpace(role))
	switch k {
	case lexUser:
		m.role = frUser
	case lexModel:
		m.role = frModel
	default:
		m.other = true
	}
	if contentAt < 0 || meta > jhMaxMeta {
		m.other = true
		return m, true
	}
	c := e.mem[contentAt].val
	switch c.kind {
	case '"':
		m.parts = []jhVal{c}
	case '[':
		for _, p := range c.elem {
			switch p.kind {
			case '"':
				m.parts = append(m.parts, p)
				continue
			case '{':
				if s, ok := jhTextPart(t, p); ok {
					m.parts = append(m.parts, s)
					continue
				}
			}
			m.other = true // a part that is not text
		}
	default:
		m.other = true
	}
	if m.role == frModel && len(m.parts) != 1 {
		m.other = true // a model turn is one served string
	}
	for i := range m.parts {
		str, ok := jhText(t, m.parts[i])
		if !ok {
			m.other = true // a string that does not decode: kept verbatim
			break
		}
		m.parts[i].str = str
	}
	return m, true
}

// jhTextPart returns the text of a part object {"text": "…"} with at most
// a "type": "text" member besides.
func jhTextPart(t string, p jhVal) (jhVal, bool) {
	var s jhVal
	found := false
	for _, x := range p.mem {
		switch {
		case x.key == "text" && x.val.kind == '"' && !found:
			s, found = x.val, true
		case x.key == "type" && x.val.kind == '"' && jhTypeText(t[x.val.cs:x.val.ce]):
		default:
			return s, false
		}
	}
	return s, found
}

func jhTypeText(s string) bool { return s == "text" || s == "input_text" || s == "output_text" }

func jhIs(key string, set []string) bool {
	for _, k := range set {
		if strings.EqualFold(key, k) {
			return true
		}
	}
	return false
}

// jhBuild assembles the turns of a history found at text[at:end].
func jhBuild(text string, lx *Lexicon, v Verifier, at, end int, msgs []jhMsg, before, after []jhVal) ([]flatTurn, [][]flatSpan, [][]bool, bool) {
	pre := text[:at]
	tail, cueCut := jhTail(text, end, lx)
	if cueCut < 0 {
		return nil, nil, nil, false // a field cue: a side task
	}
	pc, tc := lexCollapse(pre), lexCollapse(tail)
	if lx.sideTask(pc) || lx.constrained(pc) || lx.sideTask(tc) || lx.constrained(tc) {
		return nil, nil, nil, false
	}
	for line := range strings.Lines(pre) {
		if lx.exampleLine(strings.TrimRight(line, "\r\n")) {
			return nil, nil, nil, false
		}
	}
	// The text must end on a user message, a string member after the
	// history or a trailing text.
	if last := msgs[len(msgs)-1]; last.role != frUser && len(after) == 0 && strings.TrimSpace(tail) == "" {
		return nil, nil, nil, false
	}
	var ps []jhPiece
	raw := func(a, b int) {
		s := text[a:b]
		t := strings.TrimSpace(s)
		if t == "" {
			return
		}
		a += len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
		ps = append(ps, jhPiece{role: frUser, start: a, end: a + len(t), text: t})
	}
	quote := func(role flatRole, s jhVal) {
		if s.str == "" {
			return
		}
		ps = append(ps, jhPiece{role: role, quoted: true, start: s.cs, end: s.ce, text: s.str})
	}
	raw(0, at)
	for _, s := range before {
		quote(frUser, s)
	}
	promoted := 0
	for _, m := range msgs {
		switch {
		case m.other || m.role != frUser && m.role != frModel:
			raw(m.obj.start, m.obj.end)
		case m.role == frUser:
			for _, s := range m.parts {
				quote(frUser, s)
			}
		case len(ps) > 0 && ps[len(ps)-1].role == frUser && jhServed(v, m.parts[0].str):
			quote(frModel, m.parts[0])
			promoted++
		default:
			// Unverified, nothing before it, or right after a promoted
			// answer: a model turn is one served string.
			raw(m.obj.start, m.obj.end)
		}
	}
	for _, s := range after {
		quote(frUser, s)
	}
	raw(end, end+cueCut)
	if promoted == 0 || len(ps) == 0 || ps[len(ps)-1].role != frUser {
		return nil, nil, nil, false
	}
	// What is left out between two pieces is bounded as the audit checks.
	prev := 0
	for _, p := range ps {
		if nonSpace(text[prev:p.start]) > maxGapBytes {
			return nil, nil, nil, false
		}
		prev = p.end
	}
	if nonSpace(text[prev:]) > maxGapBytes {
		return nil, nil, nil, false
	}
	var turns []flatTurn
	var spans [][]flatSpan
	var quoted [][]bool
	var texts [][]string
	for _, p := range ps {
		role := "user"
		if p.role == frModel {
			role = "model"
		}
		sp := flatSpan{p.start, p.end}
		if n := len(turns); n > 0 && turns[n-1].Role == role {
			texts[n-1] = append(texts[n-1], p.text)
			spans[n-1] = append(spans[n-1], sp)
			quoted[n-1] = append(quoted[n-1], p.quoted)
			continue
		}
		turns = append(turns, flatTurn{Role: role})
		texts = append(texts, []string{p.text})
		spans = append(spans, []flatSpan{sp})
		quoted = append(quoted, []bool{p.quoted})
	}
	if len(turns) < 3 || turns[0].Role != "user" {
		return nil, nil, nil, false
	}
	for i := range turns {
		turns[i].Text = strings.Join(texts[i], "\n\n")
	}
	return turns, spans, quoted, true
}

// jhServed asks the Verifier about a model message's decoded content.
func jhServed(v Verifier, s string) bool {
	body := flatUntruncate(s)
	return body != "" && v.Served(body)
}

// jhTail returns the trailing text after the history at end, and the
// length of it to keep: without an open model cue on its last line
// ("Assistant:"). The length is -1 when the last line is a field cue
// ("Title:", "Intent:"), which marks a side task.
func jhTail(text string, end int, lx *Lexicon) (string, int) {
	tail := text[end:]
	t := strings.TrimRightFunc(tail, unicode.IsSpace)
	ls := strings.LastIndexByte(t, '\n') + 1
	l, ok := parseFlatLabel(t[ls:], lx)
	if !ok || l.rest != "" || l.emoji != 0 || !(l.colon || l.bracket || l.alone) {
		return tail, len(tail)
	}
	switch _, k := lx.kind(l.name); k {
	case lexModel:
		return tail[:ls], ls
	case lexUser, lexQuestion, lexSystem, lexEither, lexHeader:
		return tail, len(tail)
	default:
		if l.colon || l.bracket {
			return tail, -1
		}
		return tail, len(tail)
	}
}
