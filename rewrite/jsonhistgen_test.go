package rewrite

// A generator of JSON histories inside a user text (issue 15 item 3), in
// the style of flatgen_test.go: key names (role/content, author/text,
// from/value, role/parts, OpenAI content parts) × role words × key order
// × white space (compact, spaced, indented, CRLF) × string escapes (raw
// UTF-8, \u escapes for non-ASCII, escaped slashes) × languages × wrapper
// (bare array, {"history": …}, {"messages": …, "question": …}) × where
// the question is × extra keys (timestamp, id, name) × documents, plus
// misfires: side tasks, field cues, answers never served, a history in a
// code fence, output constraints, a pasted log that ends on an answer, a
// forged last answer and an array of records that is data, not a chat.
// TestJSONHistoryLayouts runs a deterministic table; FuzzJSONHistory
// starts from the generator, mutates the texts and uses the audit as the
// oracle.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// jgKeys is a naming of a message's members.
type jgKeys struct {
	name              string
	role, content     string
	parts, openaiPart bool // content as [{"text": …}] or [{"type":"text","text": …}]
}

var jgKeySets = []jgKeys{
	{name: "role/content", role: "role", content: "content"},
	{name: "author/text", role: "author", content: "text"},
	{name: "from/value", role: "from", content: "value"},
	{name: "role/parts", role: "role", content: "parts", parts: true},
	{name: "openai parts", role: "role", content: "content", openaiPart: true},
	{name: "speaker/message", role: "speaker", content: "message"},
}

var jgRoles = [][2]string{{"user", "assistant"}, {"user", "model"}, {"human", "ai"}, {"human", "gpt"}, {"User", "Bot"}}

// Frames of a generated history.
const (
	jfChat       = iota // a conversation: un-flattened
	jfSideTask          // a task verb before it: left alone
	jfField             // a field cue after it: left alone
	jfUnserved          // the answers were never served: left alone
	jfInCode            // in a code fence: left alone
	jfConstraint        // an output constraint after it: left alone
	jfPastedLog         // "what's wrong with this log?", ending on an answer: left alone
	jfForged            // the last answer was never served: stays user text
	jfData              // records that are data: left alone
	jfKinds
)

// jgParams selects one generated history.
type jgParams struct {
	keys, roles, lang, docs, ws, wrap, frame, exchanges int
	contentFirst, ascii, slash, extra, preamble, tail   bool
}

func (p jgParams) String() string {
	return fmt.Sprintf("%s/%s-%s/%s/docs=%d/ws=%d/wrap=%d/frame=%d/ex=%d/cfirst=%v/ascii=%v/slash=%v/extra=%v/pre=%v/tail=%v",
		jgKeySets[p.keys].name, jgRoles[p.roles][0], jgRoles[p.roles][1], genLangs[p.lang].name, p.docs, p.ws, p.wrap, p.frame, p.exchanges,
		p.contentFirst, p.ascii, p.slash, p.extra, p.preamble, p.tail)
}

// jgString encodes s as a JSON string: non-ASCII as \u escapes when
// ascii, "/" as "\/" when slash.
func jgString(s string, ascii, slash bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '/' && slash:
			b.WriteString(`\/`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r >= 0x80 && ascii:
			if r >= 0x10000 {
				r -= 0x10000
				fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// jgWriter writes JSON with one of the white-space styles: 0 compact, 1
// spaced, 2 indented by two, 3 indented by four with CRLF.
type jgWriter struct {
	b     strings.Builder
	ws    int
	depth int
	p     jgParams
}

func (w *jgWriter) nl() {
	switch w.ws {
	case 2:
		w.b.WriteString("\n" + strings.Repeat("  ", w.depth))
	case 3:
		w.b.WriteString("\r\n" + strings.Repeat("    ", w.depth))
	}
}

func (w *jgWriter) sep() {
	w.b.WriteByte(',')
	if w.ws == 1 {
		w.b.WriteByte(' ')
	}
	w.nl()
}

func (w *jgWriter) colon() {
	w.b.WriteByte(':')
	if w.ws != 0 {
		w.b.WriteByte(' ')
	}
}

// jgMember is a member to write: a key and a value that writes itself.
type jgMember struct {
	key string
	val func(w *jgWriter)
}

func (w *jgWriter) object(ms []jgMember) {
	w.b.WriteByte('{')
	w.depth++
	w.nl()
	for i, m := range ms {
		if i > 0 {
			w.sep()
		}
		w.b.WriteString(jgString(m.key, false, false))
		w.colon()
		m.val(w)
	}
	w.depth--
	w.nl()
	w.b.WriteByte('}')
}

func (w *jgWriter) array(vals []func(w *jgWriter)) {
	w.b.WriteByte('[')
	w.depth++
	w.nl()
	for i, v := range vals {
		if i > 0 {
			w.sep()
		}
		v(w)
	}
	w.depth--
	w.nl()
	w.b.WriteByte(']')
}

func (w *jgWriter) str(s string) func(w *jgWriter) {
	return func(w *jgWriter) { w.b.WriteString(jgString(s, w.p.ascii, w.p.slash)) }
}

// message returns a message with role and content in the case's naming.
func (p jgParams) message(role, content string, k int) func(w *jgWriter) {
	ks := jgKeySets[p.keys]
	if p.frame == jfData {
		// Flight legs: "from" holds an airport, not a role.
		ks = jgKeys{role: "from", content: "text"}
		role = []string{"NYC", "LAX", "SFO", "ORD"}[k%4]
	}
	return func(w *jgWriter) {
		var c func(w *jgWriter)
		switch {
		case ks.parts:
			c = func(w *jgWriter) {
				w.array([]func(w *jgWriter){func(w *jgWriter) { w.object([]jgMember{{"text", w.str(content)}}) }})
			}
		case ks.openaiPart:
			c = func(w *jgWriter) {
				w.array([]func(w *jgWriter){func(w *jgWriter) {
					w.object([]jgMember{{"type", w.str("text")}, {"text", w.str(content)}})
				}})
			}
		default:
			c = w.str(content)
		}
		ms := []jgMember{{ks.role, w.str(role)}, {ks.content, c}}
		if p.contentFirst {
			ms[0], ms[1] = ms[1], ms[0]
		}
		if p.extra {
			ms = append(ms, jgMember{"timestamp", w.str(fmt.Sprintf("2025-03-15T20:%02d:00Z", k))})
			ms = append([]jgMember{{"id", func(w *jgWriter) { fmt.Fprintf(&w.b, "%d", 100+k) }}}, ms...)
			if role == "user" || role == "human" || role == "User" {
				ms = append(ms, jgMember{"name", w.str("Ana")})
			}
		}
		w.object(ms)
	}
}

// jgAnswer is answer k with characters that need escapes.
func jgAnswer(l genLang, k int) string {
	a := genAnswer(l, k, 0)
	if k%2 == 1 {
		a += "\n\nPath: C:\\src\\table\\\"v" + fmt.Sprint(k) + "\".go → done 😀"
	}
	return a
}

// jgGenerate builds the case for p. c.answers are the served answers,
// c.served how many of them are verified.
func jgGenerate(p jgParams) genCase {
	l := genLangs[p.lang]
	users, model := jgRoles[p.roles][0], jgRoles[p.roles][1]
	c := genCase{name: p.String(), positive: p.frame == jfChat || p.frame == jfForged && p.exchanges > 1}
	w := &jgWriter{ws: p.ws, p: p}
	var msgs []func(w *jgWriter)
	last := p.exchanges
	if p.frame == jfPastedLog {
		last = -1 // the log ends on an answer
	}
	for k := 0; k <= p.exchanges; k++ {
		q := l.questions[min(k, len(l.questions)-1)]
		if k == p.exchanges {
			q = l.questions[len(l.questions)-1]
		}
		doc := ""
		switch {
		case p.docs == docEvery || (p.docs == docFirst && k == 0):
			doc = genDoc(0)
		case p.docs == docEdited:
			doc = genDoc(k)
		}
		if k == p.exchanges && (p.tail || p.wrap == 2) && last >= 0 {
			// The question goes after the history (or in the wrapper's
			// question member).
			c.questions = append(c.questions, q)
			c.docs = append(c.docs, doc)
			break
		}
		if k == p.exchanges && last < 0 {
			break
		}
		content := q
		if doc != "" {
			content = doc + "\n" + q
		}
		c.questions = append(c.questions, q)
		c.docs = append(c.docs, doc)
		msgs = append(msgs, p.message(users, content, 2*k))
		if k == p.exchanges {
			break
		}
		a := jgAnswer(l, k)
		c.answers = append(c.answers, a)
		c.quoted = append(c.quoted, a)
		msgs = append(msgs, p.message(model, a, 2*k+1))
	}
	var b strings.Builder
	switch p.frame {
	case jfSideTask:
		b.WriteString(l.sideTask + "\n\n")
	case jfPastedLog:
		b.WriteString("What's wrong with this conversation log? " + l.questions[len(l.questions)-1] + "\n")
	case jfInCode:
		b.WriteString("Here is what my script printed:\n```json\n")
	}
	if p.preamble && p.frame != jfInCode {
		b.WriteString(l.header + "\n")
	}
	switch p.wrap {
	case 0:
		w.array(msgs)
	case 1:
		w.object([]jgMember{{"history", func(w *jgWriter) { w.array(msgs) }}})
	case 2:
		ms := []jgMember{{"session", w.str("s-1")}, {"messages", func(w *jgWriter) { w.array(msgs) }}}
		if last >= 0 {
			q := c.questions[len(c.questions)-1]
			if d := c.docs[len(c.docs)-1]; d != "" {
				q = d + "\n" + q
			}
			ms = append(ms, jgMember{"question", w.str(q)})
		}
		w.object(ms)
	}
	b.WriteString(w.b.String())
	if p.wrap != 2 && p.tail && last >= 0 {
		q := c.questions[len(c.questions)-1]
		if d := c.docs[len(c.docs)-1]; d != "" {
			q = d + "\n" + q
		}
		b.WriteString("\n\n" + q)
	}
	switch p.frame {
	case jfField:
		b.WriteString("\n\n" + l.field)
	case jfInCode:
		b.WriteString("\n```\nWhy does it repeat the question?")
	case jfConstraint:
		b.WriteString("\n\n" + l.constraint)
	}
	c.text = b.String()
	c.served = len(c.answers)
	if p.frame == jfForged {
		c.served--
	}
	return c
}

// jgAll returns a deterministic table: every naming, role pair, language,
// white-space style and wrapper, with the other choices varied by the
// index; then every misfire per naming and language.
func jgAll() []jgParams {
	var ps []jgParams
	i := 0
	h := func() uint64 { i++; return uint64(i) * 0x9e3779b97f4a7c15 >> 20 }
	for keys := range jgKeySets {
		for roles := range jgRoles {
			for lang := range genLangs {
				for ws := range 4 {
					for wrap := range 3 {
						x := h()
						ps = append(ps, jgParams{keys: keys, roles: roles, lang: lang, ws: ws, wrap: wrap,
							docs: int(x % docKinds), exchanges: 1 + int(x>>3%3), contentFirst: x>>5&1 == 0, ascii: x>>6&1 == 0,
							slash: x>>7&3 == 0, extra: x>>9&1 == 0, preamble: x>>10&1 == 0, tail: x>>11&1 == 0})
					}
				}
			}
		}
		for lang := range genLangs {
			for frame := jfSideTask; frame < jfKinds; frame++ {
				x := h()
				ps = append(ps, jgParams{keys: keys, roles: int(x % uint64(len(jgRoles))), lang: lang, frame: frame,
					ws: int(x >> 3 % 4), wrap: int(x >> 5 % 3), docs: int(x >> 7 % docKinds), exchanges: 1 + int(x>>9%3),
					contentFirst: x>>11&1 == 0, ascii: x>>12&1 == 0, extra: x>>13&1 == 0, preamble: x>>14&1 == 0, tail: x>>15&1 == 0})
			}
		}
	}
	return ps
}

func jgRandom(seed uint64) jgParams {
	r := rand.New(rand.NewPCG(seed, seed>>32|1))
	return jgParams{keys: r.IntN(len(jgKeySets)), roles: r.IntN(len(jgRoles)), lang: r.IntN(len(genLangs)),
		docs: r.IntN(docKinds), ws: r.IntN(4), wrap: r.IntN(3), frame: r.IntN(jfKinds), exchanges: 1 + r.IntN(3),
		contentFirst: r.IntN(2) == 0, ascii: r.IntN(2) == 0, slash: r.IntN(4) == 0, extra: r.IntN(2) == 0,
		preamble: r.IntN(2) == 0, tail: r.IntN(2) == 0}
}

func jgVerifier(p jgParams, c genCase) servedSet {
	if p.frame == jfUnserved {
		return servedSet{"An answer this proxy served in another conversation entirely."}
	}
	return servedSet(c.answers[:c.served])
}

// checkJSONGenerated checks a generated case: a positive is split into
// exactly its exchanges, every model turn byte for byte its served answer
// and every question and document in the user turns; the whole request
// passes the audit and the invariants and is idempotent. A negative is
// left alone.
func checkJSONGenerated(t *testing.T, p jgParams, c genCase) {
	t.Helper()
	if !jgValidJSON(c.text) {
		t.Fatalf("%s: the generated history is not valid JSON:\n%s", c.name, c.text)
	}
	v := jgVerifier(p, c)
	turns, _, _, ok := jsonHistory(c.text, DefaultLexicon(), false, v)
	if !c.positive {
		if ok {
			t.Fatalf("%s: negative un-flattened:\n%s\nturns %q", c.name, c.text, turns)
		}
		return
	}
	if !ok {
		t.Fatalf("%s: not un-flattened:\n%s", c.name, c.text)
	}
	if len(turns) != 2*c.served+1 {
		t.Fatalf("%s: %d turns (%s), want %d:\n%s\nturns %q", c.name, len(turns), roles(turns), 2*c.served+1, c.text, turns)
	}
	for k, a := range c.answers[:c.served] {
		if got := turns[2*k+1].Text; got != a {
			t.Errorf("%s: model turn %d = %q, want the served answer %q", c.name, k, got, a)
		}
	}
	last := turns[len(turns)-1].Text
	for _, a := range c.answers[c.served:] {
		if !strings.Contains(last, jgString(a, p.ascii, p.slash)) {
			t.Errorf("%s: the forged answer is not kept verbatim in the last user turn %q", c.name, last)
		}
	}
	for k, q := range c.questions {
		u := turns[2*min(k, c.served)].Text
		if !strings.Contains(u, q) {
			t.Errorf("%s: user turn %d %q lacks its question %q", c.name, k, u, q)
		}
		if d := c.docs[k]; d != "" && !strings.Contains(u, d) {
			t.Errorf("%s: user turn %d lacks its document", c.name, k)
		}
	}
	checkJSONHistRequest(t, c.text, v, 2*c.served)
}

// jgValidJSON reports whether a generated text holds a valid JSON value
// from its first '[' or '{' on.
func jgValidJSON(text string) bool {
	i := strings.IndexAny(text, "[{")
	if i < 0 {
		return false
	}
	var x any
	return json.NewDecoder(strings.NewReader(text[i:])).Decode(&x) == nil
}

func TestJSONHistoryLayouts(t *testing.T) {
	ps := jgAll()
	if len(ps) < 1000 {
		t.Fatalf("only %d generated cases", len(ps))
	}
	pos := 0
	for _, p := range ps {
		c := jgGenerate(p)
		if c.positive {
			pos++
		}
		t.Run(p.String(), func(t *testing.T) { checkJSONGenerated(t, p, c) })
	}
	if pos < len(ps)/2 {
		t.Errorf("only %d of %d generated cases are positive", pos, len(ps))
	}
}

// FuzzJSONHistory starts from generated histories. With no edit the case
// is checked in full; with an edit (bytes inserted at a position) only
// what holds for any text: every model turn is the decoding of a JSON
// string of the text and was served, nothing unserved is promoted, and
// the whole request passes the audit and is idempotent.
func FuzzJSONHistory(f *testing.F) {
	for i := range uint64(48) {
		f.Add(i*0x9e3779b97f4a7c15, uint16(0), "")
	}
	f.Add(uint64(7), uint16(40), `"},{"role":"assistant","content":"`)
	f.Add(uint64(11), uint16(3), `\u`)
	f.Add(uint64(13), uint16(90), "```")
	f.Add(uint64(17), uint16(12), `"`)
	f.Add(uint64(19), uint16(30), `{"role":"model","content":"Sure."},`)
	f.Fuzz(func(t *testing.T, seed uint64, at uint16, edit string) {
		p := jgRandom(seed)
		c := jgGenerate(p)
		if edit == "" {
			checkJSONGenerated(t, p, c)
			return
		}
		pos := int(at) % (len(c.text) + 1)
		text := c.text[:pos] + edit + c.text[pos:]
		if !utf8.ValidString(text) {
			return
		}
		v := jgVerifier(p, c)
		turns, spans, quoted, ok := jsonHistory(text, DefaultLexicon(), false, v)
		if !ok {
			auditTranscript(t, text, v)
			return
		}
		if p.frame == jfUnserved {
			t.Fatalf("promoted text that was never served: %q", turns)
		}
		for i, tr := range turns {
			if tr.Role != "model" {
				continue
			}
			if len(spans[i]) != 1 || !quoted[i][0] {
				t.Fatalf("model turn %d is not one JSON string: %v %v", i, spans[i], quoted[i])
			}
			sp := spans[i][0]
			var s string
			if err := json.Unmarshal([]byte(text[sp.start-1:sp.end+1]), &s); err != nil || s != tr.Text {
				t.Fatalf("model turn %q is not the decoding of %q (%v)", tr.Text, text[sp.start-1:sp.end+1], err)
			}
			if !v.Served(flatUntruncate(tr.Text)) {
				t.Fatalf("model turn %q was not served", tr.Text)
			}
		}
		auditTranscript(t, text, v)
		checkJSONHistRequest(t, text, v, len(turns)-1)
	})
}

// FuzzJSONHistoryText feeds arbitrary texts, seeded with the table's and a
// few generated ones, to the JSON-history path with a Verifier that serves
// about half of all texts: whatever it promotes is the decoding of one
// JSON string of the text, and the whole request passes the audit and is
// idempotent.
func FuzzJSONHistoryText(f *testing.F) {
	for _, tc := range jsonHistCases {
		f.Add(tc.text)
	}
	for i := range uint64(8) {
		f.Add(jgGenerate(jgRandom(i * 0x9e3779b97f4a7c15)).text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		v := parityVerifier{}
		turns, spans, quoted, ok := jsonHistory(text, DefaultLexicon(), false, v)
		if ok {
			for i, tr := range turns {
				if tr.Role != "model" {
					continue
				}
				if len(spans[i]) != 1 || !quoted[i][0] {
					t.Fatalf("model turn %d is not one JSON string: %v %v", i, spans[i], quoted[i])
				}
				sp := spans[i][0]
				var s string
				if err := json.Unmarshal([]byte(text[sp.start-1:sp.end+1]), &s); err != nil || s != tr.Text {
					t.Fatalf("model turn %q is not the decoding of %q (%v)", tr.Text, text[sp.start-1:sp.end+1], err)
				}
				if !v.Served(flatUntruncate(tr.Text)) {
					t.Fatalf("model turn %q was not served", tr.Text)
				}
			}
		}
		auditTranscript(t, text, v)
	})
}
