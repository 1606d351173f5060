package rewrite

// A generator of flattened transcripts in the layouts real clients use
// (NAIVE-PATTERNS.md, issue 13): label styles × label placement ×
// languages × documents per user segment × trailing white space of the
// answers × side-task framing, plus negatives (side tasks, unverified
// answers, a transcript quoted inside code). TestUnflattenLayouts runs a
// deterministic table of generated cases; FuzzUnflattenLayouts starts from
// the same generator and also mutates the texts.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// ServedTrail makes goldenServed a TrailVerifier, like the proxy's cache.
func (s goldenServed) ServedTrail(text string) (string, bool) {
	return servedSet(s).ServedTrail(text)
}

// ServedTrail forwards to the wrapped Verifier, as a Verifier that is also
// a Memo must (the output may not depend on the memo).
func (v memoVerifier) ServedTrail(text string) (string, bool) {
	if tv, ok := v.Verifier.(TrailVerifier); ok {
		return tv.ServedTrail(text)
	}
	return "", false
}

// genLang is the wording of one language.
type genLang struct {
	name            string
	user, model     string   // label words
	header          string   // a history header line
	questions       []string // one per exchange, the last is the current question
	paras, list     []string // answer material
	code            string   // lead-in of an answer with code
	sideTask, field string   // side-task framing: a task line before, a field cue after
	constraint      string   // an output constraint
	example         string   // a few-shot heading
}

var genLangs = []genLang{
	{name: "en", user: "User", model: "Assistant", header: "Chat history:",
		questions: []string{"What does this function do?", "Can you make it faster?", "How should it handle errors?", "Thanks, one last check: is it safe for concurrent use?"},
		paras:     []string{"It reads the table and returns the value for the key.", "The loop is linear in the size of the input, so it stays fast."},
		list:      []string{"Cache the lookups", "Avoid the extra allocation", "Return early on a miss"},
		code:      "Here is a faster version:",
		sideTask:  "Summarize the following conversation in one sentence.", field: "Title:",
		constraint: "Return ONLY a JSON object with the user's intent.", example: "For example:"},
	{name: "zh", user: "用户", model: "助手", header: "对话历史：",
		questions: []string{"这个函数是做什么的？", "能让它更快吗？", "错误应该怎么处理？", "谢谢，最后一个问题：它可以并发使用吗？"},
		paras:     []string{"它读取表格并返回键对应的值。", "循环的时间与输入大小成线性关系，所以依然很快。"},
		list:      []string{"缓存查找结果", "避免多余的内存分配", "未命中时提前返回"},
		code:      "这是更快的版本：",
		sideTask:  "总结以下对话。", field: "标题：",
		constraint: "只返回JSON格式的意图。", example: "示例："},
	{name: "pt", user: "Usuário", model: "Assistente", header: "Histórico da conversa:",
		questions: []string{"O que esta função faz?", "Você consegue deixá-la mais rápida?", "Como ela deve tratar erros?", "Obrigado, última dúvida: ela é segura para uso concorrente?"},
		paras:     []string{"Ela lê a tabela e devolve o valor da chave.", "O laço é linear no tamanho da entrada, então continua rápido."},
		list:      []string{"Guardar as consultas em cache", "Evitar a alocação extra", "Retornar cedo quando não encontrar"},
		code:      "Aqui está uma versão mais rápida:",
		sideTask:  "Resuma a conversa abaixo em uma frase.", field: "Título:",
		constraint: "Responda apenas com um objeto JSON.", example: "Por exemplo:"},
	{name: "es", user: "Usuario", model: "Asistente", header: "Historial de conversación:",
		questions: []string{"¿Qué hace esta función?", "¿Puedes hacerla más rápida?", "¿Cómo debería manejar los errores?", "Gracias, una última duda: ¿es segura para uso concurrente?"},
		paras:     []string{"Lee la tabla y devuelve el valor de la clave.", "El bucle es lineal en el tamaño de la entrada, así que sigue siendo rápido."},
		list:      []string{"Guardar las búsquedas en caché", "Evitar la asignación extra", "Volver pronto cuando no se encuentra"},
		code:      "Aquí tienes una versión más rápida:",
		sideTask:  "Resume la conversación siguiente en una frase.", field: "Título:",
		constraint: "Responde solo con un objeto JSON.", example: "Por ejemplo:"},
}

// genStyle is a way of writing the labels of a transcript.
type genStyle struct {
	name string
	// open writes the start of a segment of role "user" or "model" with the
	// language's label words; glued puts the content on the label's line.
	open func(b *strings.Builder, l genLang, role string, glued bool)
	// close writes what ends a segment (a closing tag or token), or nothing.
	close func(b *strings.Builder, role string)
	// cue is the open model cue at the end, or "" when the style has none.
	cue func(l genLang) string
	// gluable reports whether the content can sit on the label's line.
	gluable bool
	// preamble is written first (a persona's description).
	preamble string
}

func lineStyle(name string, label func(l genLang, role string) string, gluable bool) genStyle {
	return genStyle{
		name: name,
		open: func(b *strings.Builder, l genLang, role string, glued bool) {
			b.WriteString(label(l, role))
			if glued {
				b.WriteString(" ")
			} else {
				b.WriteString("\n")
			}
		},
		close:   func(*strings.Builder, string) {},
		cue:     func(l genLang) string { return strings.TrimSpace(label(l, "model")) },
		gluable: gluable,
	}
}

func roleWord(l genLang, role string) string {
	if role == "user" {
		return l.user
	}
	return l.model
}

func tokenStyle(name, userOpen, modelOpen, closer string) genStyle {
	return genStyle{
		name: name,
		open: func(b *strings.Builder, _ genLang, role string, glued bool) {
			if role == "user" {
				b.WriteString(userOpen)
			} else {
				b.WriteString(modelOpen)
			}
			if !glued {
				b.WriteString("\n")
			}
		},
		close: func(b *strings.Builder, _ string) { b.WriteString(closer) },
		cue:   func(genLang) string { return modelOpen },
	}
}

var genStyles = []genStyle{
	lineStyle("colon", func(l genLang, r string) string { return roleWord(l, r) + ":" }, true),
	lineStyle("full-width colon", func(l genLang, r string) string { return roleWord(l, r) + "：" }, true),
	lineStyle("bracketed", func(l genLang, r string) string { return "[" + roleWord(l, r) + "]:" }, true),
	lineStyle("upper case", func(l genLang, r string) string { return strings.ToUpper(roleWord(l, r)) + ":" }, true),
	lineStyle("bold", func(l genLang, r string) string { return "**" + roleWord(l, r) + ":**" }, true),
	lineStyle("heading", func(l genLang, r string) string { return "### " + roleWord(l, r) }, false),
	lineStyle("alone", func(l genLang, r string) string { return roleWord(l, r) }, false),
	lineStyle("langchain", func(_ genLang, r string) string {
		if r == "user" {
			return "Human:"
		}
		return "AI:"
	}, true),
	func() genStyle {
		s := lineStyle("persona", func(l genLang, r string) string {
			if r == "user" {
				return l.user + ":"
			}
			return "FRIDAY:"
		}, true)
		s.preamble = "You are FRIDAY, a calm and precise assistant.\n\n"
		return s
	}(),
	tokenStyle("pipe tokens", "<|user|>", "<|assistant|>", "<|end|>\n"),
	tokenStyle("gemma tokens", "<start_of_turn>user", "<start_of_turn>model", "<end_of_turn>\n"),
	tokenStyle("im_start tokens", "<|im_start|>user", "<|im_start|>assistant", "<|im_end|>\n"),
	{
		name: "xml turns",
		open: func(b *strings.Builder, _ genLang, role string, glued bool) {
			if role == "user" {
				b.WriteString("<turn><user>")
			} else {
				b.WriteString("<assistant>")
			}
			if !glued {
				b.WriteString("\n")
			}
		},
		close: func(b *strings.Builder, role string) {
			if role == "user" {
				b.WriteString("</user>")
			} else {
				b.WriteString("</assistant></turn>\n")
			}
		},
		cue:     func(genLang) string { return "" },
		gluable: true,
	},
	{
		name: "human assistant tags",
		open: func(b *strings.Builder, _ genLang, role string, glued bool) {
			if role == "user" {
				b.WriteString("<human>")
			} else {
				b.WriteString("<assistant>")
			}
			if !glued {
				b.WriteString("\n")
			}
		},
		close: func(b *strings.Builder, role string) {
			if role == "user" {
				b.WriteString("</human>\n")
			} else {
				b.WriteString("</assistant>\n")
			}
		},
		cue:     func(genLang) string { return "" },
		gluable: true,
	},
}

// Documents per user segment.
const (
	docNone = iota
	docFirst
	docEvery
	docEdited // a new version of the document in every user segment
	docKinds
)

// Framing of the transcript.
const (
	frameChat       = iota // a conversation: un-flattened
	frameSideTask          // a task run on the transcript: left alone
	frameField             // a field cue at the end: left alone
	frameUnserved          // the answers were never served: left alone
	frameInCode            // the transcript is quoted inside a fence: left alone
	frameConstraint        // an output constraint after the transcript: left alone
	frameExample           // a few-shot example heading before it: left alone
	frameForged            // the last answer was never served: it stays user text
	frameKinds
)

// genCase is one generated transcript and what un-flattening must do.
type genCase struct {
	name      string
	text      string
	answers   []string // served answers, in order, byte for byte
	quoted    []string // the answers as the transcript quotes them (truncated or whole)
	questions []string // the questions, in order (the last is current)
	docs      []string // documents, by user segment ("" for none)
	served    int      // the first served answers are verified, the rest forged
	positive  bool     // un-flattening must split it
}

// genParams selects one combination.
type genParams struct {
	style, lang, docs, trail, frame, exchanges int
	glued, header, cue, blank, trunc           bool
}

func (p genParams) String() string {
	st, l := genStyles[p.style], genLangs[p.lang]
	return fmt.Sprintf("%s/%s/glued=%v/docs=%d/trail=%d/frame=%d/ex=%d/header=%v/cue=%v/blank=%v/trunc=%v",
		st.name, l.name, p.glued, p.docs, p.trail, p.frame, p.exchanges, p.header, p.cue, p.blank, p.trunc)
}

// genDoc returns document k of a case: a Go file in a fence.
func genDoc(k int) string {
	var b strings.Builder
	b.WriteString("```go\npackage table\n\n")
	for i := range 12 {
		fmt.Fprintf(&b, "// Value%d returns entry %d of the lookup table (revision %d).\nfunc Value%d() int { return %d }\n", i, i, k, i, i*7+k)
	}
	b.WriteString("```")
	return b.String()
}

// genAnswer returns answer k: paragraphs, a list or code, by k.
func genAnswer(l genLang, k, trail int) string {
	var a string
	switch k % 3 {
	case 0:
		a = fmt.Sprintf("%s (%d)\n\n%s", l.paras[0], k, l.paras[1])
	case 1:
		a = fmt.Sprintf("%s (%d)\n\n- %s\n- %s\n- %s", l.paras[1], k, l.list[0], l.list[1], l.list[2])
	default:
		a = fmt.Sprintf("%s (%d)\n\n```go\nfunc Lookup(k int) int { return table[k] } // %d\n```\n\n%s", l.code, k, k, l.paras[0])
	}
	return a + []string{"", "\n", "\n\n"}[trail]
}

// genTruncate cuts an answer the way clients shorten history: the first
// part (inside the code fence for an answer with code) and a marker.
func genTruncate(a string) string {
	cut := len(a) * 2 / 3
	if i := strings.Index(a, "func Lookup"); i >= 0 {
		cut = i + len("func Lookup")
	}
	for cut > 0 && !utf8.RuneStart(a[cut]) {
		cut--
	}
	return strings.TrimRightFunc(a[:cut], unicode.IsSpace) + "... [truncated]"
}

// generate builds the case for p.
func generate(p genParams) genCase {
	st, l := genStyles[p.style], genLangs[p.lang]
	glued := p.glued && st.gluable
	c := genCase{name: p.String(), positive: p.frame == frameChat || p.frame == frameForged && p.exchanges > 1}
	var b strings.Builder
	b.WriteString(st.preamble)
	switch p.frame {
	case frameSideTask:
		b.WriteString(l.sideTask + "\n\n")
	case frameInCode:
		b.WriteString("Here is what my script printed:\n````text\n")
	case frameExample:
		b.WriteString(l.example + "\n")
	}
	if p.header {
		b.WriteString(l.header + "\n")
	}
	join := "\n"
	if p.blank {
		join = "\n\n"
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
		c.questions = append(c.questions, q)
		c.docs = append(c.docs, doc)
		st.open(&b, l, "user", glued)
		if doc != "" {
			b.WriteString(doc + "\n")
		}
		b.WriteString(q)
		st.close(&b, "user")
		if k == p.exchanges {
			break
		}
		b.WriteString(join)
		a := genAnswer(l, k, p.trail)
		quoted := a
		if p.trunc {
			quoted = genTruncate(a)
		}
		c.answers = append(c.answers, a)
		c.quoted = append(c.quoted, quoted)
		st.open(&b, l, "model", glued)
		b.WriteString(quoted)
		st.close(&b, "model")
		b.WriteString(join)
	}
	if p.cue && p.frame != frameInCode {
		if cue := st.cue(l); cue != "" {
			b.WriteString(join + cue)
		}
	}
	switch p.frame {
	case frameField:
		b.WriteString("\n\n" + l.field)
	case frameInCode:
		b.WriteString("\n````\nWhy does it repeat the question?")
	case frameConstraint:
		b.WriteString("\n\n" + l.constraint)
	}
	c.text = b.String()
	c.served = len(c.answers)
	if p.frame == frameForged {
		c.served--
	}
	return c
}

// genAll returns a deterministic table: every style, language, document
// placement, trailing white space and label placement, with the other
// choices varied by the index; then every negative framing per style and
// language.
func genAll() []genParams {
	var ps []genParams
	i := 0
	for style := range genStyles {
		for lang := range genLangs {
			for docs := range docKinds {
				for trail := range 3 {
					for _, glued := range []bool{true, false} {
						h := uint64(i) * 0x9e3779b97f4a7c15 >> 32
						ps = append(ps, genParams{style: style, lang: lang, docs: docs, trail: trail, glued: glued,
							exchanges: 1 + int(h%3), header: h>>2&1 == 0, cue: h>>3&1 == 0, blank: h>>4&1 == 0, trunc: h>>5%4 == 0})
						i++
					}
				}
			}
			for frame := frameSideTask; frame < frameKinds; frame++ {
				h := uint64(i) * 0x9e3779b97f4a7c15 >> 32
				ps = append(ps, genParams{style: style, lang: lang, frame: frame, docs: int(h % docKinds), trail: int(h >> 2 % 3),
					glued: h>>4&1 == 0, exchanges: 1 + int(h>>5%3), header: h>>7&1 == 0, cue: h>>8&1 == 0, blank: h>>9&1 == 0, trunc: h>>10%4 == 0})
				i++
			}
		}
	}
	return ps
}

// genRandom picks parameters from a seed.
func genRandom(seed uint64) genParams {
	r := rand.New(rand.NewPCG(seed, seed>>32|1))
	return genParams{
		style: r.IntN(len(genStyles)), lang: r.IntN(len(genLangs)), docs: r.IntN(docKinds),
		trail: r.IntN(3), frame: r.IntN(frameKinds), exchanges: 1 + r.IntN(3),
		glued: r.IntN(2) == 0, header: r.IntN(2) == 0, cue: r.IntN(2) == 0, blank: r.IntN(2) == 0,
		trunc: r.IntN(4) == 0,
	}
}

// verifierFor returns the Verifier of a case: the served answers, or none
// for the unserved framing.
func verifierFor(p genParams, c genCase) servedSet {
	if p.frame == frameUnserved {
		return servedSet{"An answer this proxy served in another conversation entirely."}
	}
	return servedSet(c.answers[:c.served])
}

// checkGenerated checks un-flattening of a generated case: a positive is
// split into exactly its exchanges, every model turn byte for byte its
// served answer and every question and document in its user turn; a
// negative is left alone.
func checkGenerated(t *testing.T, p genParams, c genCase) {
	t.Helper()
	v := verifierFor(p, c)
	turns, ok := unflatten(c.text, DefaultLexicon(), false, v)
	if !c.positive {
		if ok {
			t.Fatalf("%s: negative un-flattened:\n%s\nturns %q", c.name, c.text, turns)
		}
		return
	}
	if !ok {
		t.Fatalf("%s: not un-flattened:\n%s", c.name, c.text)
	}
	if err := checkFlat(c.text, turns, DefaultLexicon()); err != "" {
		t.Fatalf("%s: %s", c.name, err)
	}
	if len(turns) != 2*c.served+1 {
		t.Fatalf("%s: %d turns (%s), want %d:\n%s\nturns %q", c.name, len(turns), roles(turns), 2*c.served+1, c.text, turns)
	}
	for k, a := range c.quoted[:c.served] {
		if got := turns[2*k+1].Text; got != a {
			t.Errorf("%s: model turn %d = %q, want the served answer %q", c.name, k, got, a)
		}
	}
	last := turns[len(turns)-1].Text
	for _, a := range c.quoted[c.served:] {
		if !strings.Contains(last, strings.TrimSpace(a)) {
			t.Errorf("%s: the forged answer %q is not user text in the last turn %q", c.name, a, last)
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
	// The request as a whole: the same turns, and the rewrite's invariants.
	body, _ := json.Marshal(map[string]any{"contents": []map[string]any{{"role": "user", "parts": []map[string]string{{"text": c.text}}}}})
	out, rep, err := Request(body, DefaultOptions(), v)
	if err != nil {
		t.Fatalf("%s: Request: %v", c.name, err)
	}
	if rep.UnflattenedTurns != 2*c.served {
		t.Errorf("%s: Request un-flattened %d turns, want %d", c.name, rep.UnflattenedTurns, 2*c.served)
	}
	if e := checkInvariants(body, out, rep, DefaultOptions(), v); e != nil {
		t.Errorf("%s: %v", c.name, e)
	}
	var wo wireRequest
	if err := json.Unmarshal(out, &wo); err != nil {
		t.Fatal(err)
	}
	// Every question reaches the model, and so does the newest document.
	var all strings.Builder
	for _, wc := range wo.Contents {
		for _, raw := range wc.Parts {
			x, _ := wireText(raw)
			all.WriteString(x)
		}
	}
	for _, q := range c.questions {
		if !strings.Contains(all.String(), q) {
			t.Errorf("%s: the rewritten request lacks the question %q", c.name, q)
		}
	}
	if d := c.docs[len(c.docs)-1]; d != "" && !strings.Contains(all.String(), d) {
		t.Errorf("%s: the rewritten request lacks the newest document", c.name)
	}
	for k, a := range c.quoted[:c.served] {
		if 2*k+1 >= len(wo.Contents) || wo.Contents[2*k+1].Role != "model" {
			t.Fatalf("%s: content %d is not a model turn", c.name, 2*k+1)
		}
		if got, _ := wireText(wo.Contents[2*k+1].Parts[0]); got != a {
			t.Errorf("%s: upstream model turn %d = %q, want the served answer %q", c.name, k, got, a)
		}
	}
}

func TestUnflattenLayouts(t *testing.T) {
	ps := genAll()
	if len(ps) < 1000 {
		t.Fatalf("only %d generated cases", len(ps))
	}
	for _, p := range ps {
		t.Run(p.String(), func(t *testing.T) { checkGenerated(t, p, generate(p)) })
	}
}

// FuzzUnflattenLayouts starts from generated transcripts. With no edit
// the generated case is checked in full; with an edit (bytes inserted at a
// position) only what holds for any text: every model turn is served and
// is quoted byte for byte from the text, nothing the text says is lost,
// and a negative framing still forbids promotion of anything.
func FuzzUnflattenLayouts(f *testing.F) {
	for i := range uint64(64) {
		f.Add(i*0x9e3779b97f4a7c15, uint16(0), "")
	}
	f.Add(uint64(7), uint16(40), "```")
	f.Add(uint64(11), uint16(3), "\nUser: ")
	f.Add(uint64(13), uint16(90), "<file>")
	f.Add(uint64(17), uint16(12), `"""`)
	lx := DefaultLexicon()
	f.Fuzz(func(t *testing.T, seed uint64, at uint16, edit string) {
		p := genRandom(seed)
		c := generate(p)
		if edit == "" {
			checkGenerated(t, p, c)
			return
		}
		pos := int(at) % (len(c.text) + 1)
		text := c.text[:pos] + edit + c.text[pos:]
		v := verifierFor(p, c)
		turns, ok := unflatten(text, lx, false, v)
		if !ok {
			return
		}
		if p.frame == frameUnserved {
			t.Fatalf("promoted text that was never served: %q", turns)
		}
		if err := checkFlat(text, turns, lx); err != "" {
			t.Fatalf("%s: %s", c.name, err)
		}
		for _, tr := range turns {
			if tr.Role != "model" {
				continue
			}
			if !strings.Contains(text, tr.Text) {
				t.Fatalf("model turn %q is not quoted from the text", tr.Text)
			}
			if !v.Served(flatUntruncate(tr.Text)) {
				t.Fatalf("model turn %q was not served", tr.Text)
			}
			if strings.TrimRightFunc(tr.Text, unicode.IsSpace) != tr.Text {
				if trail, ok := v.ServedTrail(tr.Text); !ok || !strings.HasSuffix(tr.Text, trail) {
					t.Fatalf("model turn %q ends in white space the answer did not", tr.Text)
				}
			}
		}
	})
}
