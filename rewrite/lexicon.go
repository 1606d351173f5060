package rewrite

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// lexKind classifies a normalised label key.
type lexKind uint8

const (
	lexNone     lexKind = iota
	lexUser             // speaks for the user ("User", "用户", "Usuário")
	lexModel            // speaks for the model ("Assistant", "助手", "Trợ lý")
	lexEither           // direction decided by alternation ("You")
	lexSystem           // a system line: stays user text
	lexQuestion         // current-question marker: final user segment, kept verbatim
	lexHeader           // history header: part of the preamble
	lexField            // field cue of a side task ("Intent:", "Title:")
)

// Lexicon holds the labels and cues used to recognise flattened transcripts:
// user and model labels, system labels, history headers, current-question
// markers, field cues, side-task verbs, output constraints and few-shot
// example markers, in many languages. Keys are compared after normalisation
// (lower case, single spaces, trailing turn numbers dropped from role words).
//
// A Lexicon is immutable once built and safe for concurrent use. The zero
// value recognises nothing; start from DefaultLexicon.
type Lexicon struct {
	labels map[string]lexKind // normalised key → kind
	emoji  map[rune]lexKind   // emoji labels such as "[1] ❓"
	// taskWords are whole words (lower case) that name a side task when
	// they appear before the transcript; taskStems match word prefixes.
	taskWords map[string]bool
	taskStems []string
	// taskPhrases are matched as substrings of the lower-cased preamble
	// with runs of white space collapsed (multi-word and CJK verbs).
	taskPhrases []string
	// constraints are output constraints ("return only", "json format"),
	// matched like taskPhrases in the preamble and in the final user text.
	constraints []string
	// examples are few-shot markers that start a heading-like line.
	examples []string
	// docTags name XML-like wrappers (lower case) whose content is a
	// document: labels inside them are content.
	docTags map[string]bool
}

// DefaultLexicon returns the built-in lexicon. The value is built once and
// shared; it cannot be changed (Extend returns a changed copy).
func DefaultLexicon() *Lexicon { return defaultLexicon() }

// defaultLexicon is written once, then only read.
var defaultLexicon = sync.OnceValue(newDefaultLexicon)

func newDefaultLexicon() *Lexicon {
	lx := &Lexicon{
		labels:    make(map[string]lexKind, 256),
		emoji:     make(map[rune]lexKind),
		taskWords: make(map[string]bool),
		docTags:   make(map[string]bool),
	}
	for _, t := range []string{
		"file", "files", "document", "documents", "doc", "source", "context",
		"currentfilecontent", "selected", "file_contents", "attachment", "code", "pre",
		"quote", "blockquote", "example", "examples", "email", "article", "snippet",
	} {
		lx.docTags[t] = true
	}
	add := func(k lexKind, keys ...string) {
		for _, key := range keys {
			lx.labels[lexNormKey(key)] = k
		}
	}
	add(lexUser,
		// English
		"user", "human", "me", "customer", "student", "client", "question", "q",
		"user message", "human message", "learner", "patient", "visitor", "guest", "player",
		// Chinese
		"用户", "问", "我", "提问", "客户", "学生", "人类", "用戶", "問", "使用者",
		// Portuguese / Spanish
		"usuário", "usuario", "utilizador", "utilizadora", "cliente", "aluno", "aluna",
		"eu", "yo", "pergunta", "pregunta", "estudiante", "alumno", "humano",
		// Vietnamese
		"người dùng", "tôi", "khách hàng", "học sinh", "hỏi", "câu hỏi",
		// others seen in the wild
		"utilisateur", "benutzer", "nutzer", "utente", "ユーザー", "사용자",
		"пользователь", "kullanıcı", "pengguna",
	)
	add(lexModel,
		// English
		"assistant", "ai", "bot", "model", "gemini", "chatbot", "agent", "support",
		"answer", "a", "ai assistant", "assistant message", "tutor", "teacher",
		"chatgpt", "gpt", "claude", "llm", "response",
		// Chinese
		"助手", "答", "机器人", "回答", "助理", "模型", "客服", "智能助手", "機器人",
		// Portuguese / Spanish
		"assistente", "asistente", "ia", "resposta", "respuesta", "modelo", "atendente",
		"agente", "tutor ia",
		// Vietnamese
		"trợ lý", "trả lời", "đáp", "trợ lý ai",
		// others seen in the wild
		"assistent", "アシスタント", "어시스턴트", "ассистент", "помощник", "asisten",
	)
	add(lexEither, "you", "você", "voce", "tú", "tu", "usted", "bạn", "你")
	add(lexSystem,
		"system", "sistema", "系统", "系統", "hệ thống", "system prompt", "system message",
		"instructions", "instruction", "instruções", "instrucciones", "指令",
	)
	add(lexQuestion,
		"current question", "current message", "current user message", "current query",
		"new question", "new message", "new user message", "latest question",
		"latest message", "latest user message", "user question", "user's question",
		"user query", "user input", "follow-up question", "follow up question",
		"question to answer", "now answer", "the user asks",
		"pergunta atual", "pergunta actual", "nova pergunta", "nova mensagem", "mensagem atual",
		"pregunta actual", "nueva pregunta", "nuevo mensaje", "mensaje actual",
		"当前问题", "新问题", "最新问题", "用户问题", "当前消息", "新消息", "當前問題",
		"câu hỏi hiện tại", "câu hỏi mới", "tin nhắn mới",
		"question actuelle", "nouvelle question", "aktuelle frage", "neue frage", "domanda attuale",
	)
	add(lexHeader,
		"previous conversation", "conversation history", "chat history", "history",
		"conversation", "transcript", "chat log", "chat transcript", "dialogue", "dialog",
		"previous messages", "recent messages", "conversation so far", "past conversation",
		"message history", "context", "conversation context",
		"histórico da conversa", "histórico", "historico da conversa", "conversa anterior",
		"historial de conversación", "historial de conversacion", "historial", "conversación anterior",
		"historial del chat", "对话历史", "历史对话", "聊天记录", "对话记录", "历史记录", "對話歷史",
		"lịch sử trò chuyện", "lịch sử hội thoại", "cuộc trò chuyện trước",
	)
	add(lexField,
		"intent", "json", "title", "summary", "tags", "tag", "category", "categories",
		"label", "labels", "output", "result", "sentiment", "classification", "keywords",
		"topic", "topics", "rewritten query", "standalone question", "search query", "queries",
		"query", "score", "rating", "grade", "language", "translation", "emoji", "feedback",
		"标题", "摘要", "总结", "分类", "意图", "标签", "关键词", "翻译",
		"título", "titulo", "resumo", "resumen", "categoria", "categoría", "intenção",
		"intención", "etiquetas", "tiêu đề", "tóm tắt", "phân loại",
	)
	for _, r := range "❓❔🙋👤🧑" {
		lx.emoji[r] = lexUser
	}
	for _, r := range "🤖💡🅰" {
		lx.emoji[r] = lexModel
	}
	for _, w := range []string{
		"summarise", "summarize", "classify", "categorize", "categorise", "extract",
		"rewrite", "rephrase", "reformulate", "paraphrase", "translate", "evaluate",
		"grade", "grading", "assess", "imitate", "mimic", "title", "titles", "tags",
		"headline",
		// Portuguese
		"resuma", "resumir", "resume", "sintetize", "reescreva", "reescrever", "classifique",
		"classificar", "extraia", "extrair", "traduza", "traduzir", "avalie", "avaliar",
		"título", "titulo",
		// Spanish
		"resumen", "reescribe", "reescribir", "clasifica", "clasificar", "extrae", "extraer",
		"traduce", "traducir", "evalúa", "evaluar", "califica",
		// French / German / Italian
		"résume", "résumer", "résumez", "traduis", "traduisez", "traduire", "classe",
		"zusammenfassen", "fasse", "übersetze", "übersetzen", "klassifiziere", "riassumi",
		"traduci",
	} {
		lx.taskWords[w] = true
	}
	lx.taskStems = []string{
		"summariz", "summaris", "classif", "categoriz", "categoris", "extracts",
		"extracting", "rewrites", "rewriting", "rephras", "reformulat", "paraphras",
		"translat", "evaluat", "assess",
	}
	lx.taskPhrases = []string{
		"do not answer", "don't answer", "do not respond to", "without answering",
		"generate a title", "generate title", "create a title", "suggest a title",
		"generate tags", "follow-up questions", "follow up questions", "search queries",
		"search query", "in the style of",
		"não responda", "nao responda", "no respondas", "no contestes", "no responda",
		"总结", "概括", "摘要", "归纳", "分类", "提取", "抽取", "翻译", "改写", "重写",
		"标题", "评估", "评分", "不要回答", "總結", "翻譯",
		"tóm tắt", "phân loại", "trích xuất", "dịch sang", "viết lại", "tiêu đề", "đánh giá",
		"要約", "要約して", "翻訳",
	}
	lx.constraints = []string{
		"return only", "respond only", "reply only", "output only", "answer only with",
		"only return", "only output", "respond with only", "reply with only",
		"respond in json", "respond with json", "reply in json", "answer in json",
		"return json", "output json", "json format", "json object", "valid json",
		"json schema", "no other text", "nothing else",
		"responda apenas", "retorne apenas", "devolva apenas", "formato json", "em json",
		"responde solo", "responde sólo", "devuelve solo", "devuelve sólo", "solo devuelve",
		"en formato json",
		"只返回", "仅返回", "只输出", "仅输出", "json格式", "json 格式", "只回答",
		"chỉ trả về", "định dạng json",
	}
	lx.examples = []string{
		"examples", "example", "for example", "for instance", "sample conversation",
		"sample dialogue", "few-shot", "few shot",
		"exemplos", "exemplo", "por exemplo", "ejemplos", "ejemplo", "por ejemplo",
		"示例", "例子", "例如", "范例", "樣例", "ví dụ", "beispiel", "exemple",
	}
	return lx
}

// Extend returns a copy of lx with extra user and model labels (config keys
// rewrite.labels.user and rewrite.labels.model). A trailing colon is
// ignored. A configured label overrides a built-in one of the other role.
func (lx *Lexicon) Extend(user, model []string) *Lexicon {
	c := &Lexicon{
		labels:      make(map[string]lexKind, len(lx.labels)+len(user)+len(model)),
		emoji:       make(map[rune]lexKind, len(lx.emoji)),
		taskWords:   make(map[string]bool, len(lx.taskWords)),
		docTags:     make(map[string]bool, len(lx.docTags)),
		taskStems:   append([]string(nil), lx.taskStems...),
		taskPhrases: append([]string(nil), lx.taskPhrases...),
		constraints: append([]string(nil), lx.constraints...),
		examples:    append([]string(nil), lx.examples...),
	}
	for k, v := range lx.labels {
		c.labels[k] = v
	}
	for k, v := range lx.emoji {
		c.emoji[k] = v
	}
	for k, v := range lx.taskWords {
		c.taskWords[k] = v
	}
	for k, v := range lx.docTags {
		c.docTags[k] = v
	}
	set := func(k lexKind, keys []string) {
		for _, key := range keys {
			key = strings.TrimRight(strings.TrimSpace(key), ":：")
			if n := lexNormKey(key); n != "" {
				c.labels[n] = k
			}
		}
	}
	set(lexUser, user)
	set(lexModel, model)
	return c
}

// kind returns the kind of a raw label name. A role word followed by a turn
// number ("User1", "User 2", "Bot #3") is the role word.
func (lx *Lexicon) kind(name string) (key string, k lexKind) {
	key = lexNormKey(name)
	if k, ok := lx.labels[key]; ok {
		return key, k
	}
	base := strings.TrimRight(key, "0123456789")
	base = strings.TrimRight(base, " #-_")
	if base != key && base != "" {
		if k, ok := lx.labels[base]; ok && (k == lexUser || k == lexModel || k == lexEither) {
			return base, k
		}
	}
	return key, lexNone
}

// role reports whether name is a role, system or question label word.
func (lx *Lexicon) role(name string) bool {
	k := lx.kindOf(name)
	return k == lexUser || k == lexModel || k == lexEither || k == lexSystem || k == lexQuestion
}

// kindOf is kind without the key, and without allocating for a name of up
// to a few dozen bytes: it normalises into a buffer on the stack (issue
// 17: the un-flattening pre-check asked this of every label-like line).
func (lx *Lexicon) kindOf(name string) lexKind {
	k, _ := lx.kindRole(name)
	return k
}

// kindRole is kindOf, also reporting whether the key of name is "role"
// (a Role: record, see lineLabel).
func (lx *Lexicon) kindRole(name string) (lexKind, bool) {
	var buf [128]byte
	key, ok := lexNormAppend(buf[:0], name)
	if !ok {
		key, k := lx.kind(name)
		return k, key == "role"
	}
	role := string(key) == "role"
	if k, ok := lx.labels[string(key)]; ok {
		return k, role
	}
	// As kind: without the trailing digits, then " #-_" (by hand:
	// bytes.TrimRight builds its set on every call).
	n := len(key)
	for n > 0 && key[n-1] >= '0' && key[n-1] <= '9' {
		n--
	}
	for n > 0 && (key[n-1] == ' ' || key[n-1] == '#' || key[n-1] == '-' || key[n-1] == '_') {
		n--
	}
	if base := key[:n]; n != len(key) && n > 0 {
		if k, ok := lx.labels[string(base)]; ok && (k == lexUser || k == lexModel || k == lexEither) {
			return k, role
		}
	}
	return lexNone, role
}

// lexNormAppend appends lexNormKey(s) to dst, which it does not grow: ok is
// false when the key does not fit.
func lexNormAppend(dst []byte, s string) (key []byte, ok bool) {
	space := false
	ascii := true
	for i := 0; i < len(s) && ascii; i++ {
		ascii = s[i] < utf8.RuneSelf
	}
	if ascii && len(s) <= cap(dst)-len(dst) {
		// The same without decoding: ASCII white space is what
		// unicode.IsSpace reports below 0x80.
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == ' ' || c == '_' || c >= '\t' && c <= '\r':
				space = len(dst) > 0
				continue
			case space:
				dst = append(dst, ' ')
				space = false
			}
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		}
		return dst, true
	}
	for _, r := range s {
		if unicode.IsSpace(r) || r == '_' {
			space = len(dst) > 0
			continue
		}
		if space {
			if len(dst) == cap(dst) {
				return nil, false
			}
			dst = append(dst, ' ')
			space = false
		}
		r = unicode.ToLower(r) // a valid rune: range yields RuneError for bad bytes
		if cap(dst)-len(dst) < utf8.RuneLen(r) {
			return nil, false
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst, true
}

// lexNormKey lower-cases s and collapses white space and underscores
// between words to one space.
func lexNormKey(s string) string {
	// Fast path: s is already normalised (lower-case ASCII, single inner
	// spaces), as most labels and tag names are; no allocation.
	norm := s != "" && s[0] != ' ' && s[len(s)-1] != ' '
	for i := 0; norm && i < len(s); i++ {
		c := s[i]
		norm = c < 0x80 && !(c >= 'A' && c <= 'Z') && c != '_' && (c > ' ' || c == ' ' && s[i-1] != ' ')
	}
	if norm {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || r == '_' {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// sideTask reports whether s (lower-cased, white space collapsed) names a
// side task: a task verb or phrase. It looks at whole words only, so
// "resume" matches but "resumed" does not.
func (lx *Lexicon) sideTask(s string) bool {
	for _, p := range lx.taskPhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	for w := range strings.FieldsFuncSeq(s, lexNotWord) {
		if lx.taskWords[w] {
			return true
		}
		for _, st := range lx.taskStems {
			if strings.HasPrefix(w, st) {
				return true
			}
		}
	}
	return false
}

// constrained reports whether s (lower-cased, white space collapsed) states
// an output constraint such as "Return ONLY" or "JSON format".
func (lx *Lexicon) constrained(s string) bool {
	for _, p := range lx.constraints {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// exampleLine reports whether line is a few-shot heading: it starts with an
// example marker and ends with a colon, or is only the marker and a number
// ("Example 1", "### Examples").
func (lx *Lexicon) exampleLine(line string) bool {
	t := strings.TrimLeft(line, "#*_-[( \t>")
	if t == "" || len(t) > 120 {
		return false
	}
	if c := t[0] | 0x20; t[0] < 0x80 && c != 'e' && c != 'f' && c != 's' && c != 'p' && c != 'b' && c != 'v' {
		return false // cheap reject: no ASCII marker starts with another letter
	}
	t = strings.TrimSpace(t)
	low := strings.ToLower(t)
	for _, m := range lx.examples {
		if !strings.HasPrefix(low, m) {
			continue
		}
		rest := low[len(m):]
		if rest != "" {
			r := []rune(rest)[0]
			if unicode.IsLetter(r) && m[len(m)-1] < 0x80 {
				continue // "examples" vs "exampled", "example" vs "examples"
			}
		}
		rest = strings.TrimRight(rest, " \t*_)]")
		if strings.HasSuffix(rest, ":") || strings.HasSuffix(rest, "：") {
			return true
		}
		if strings.Trim(rest, " #.0123456789") == "" {
			return true
		}
	}
	return false
}

func lexNotWord(r rune) bool {
	return !(unicode.IsLetter(r) || unicode.IsMark(r) || r == '\'' || r == '-')
}

// lexCollapse lower-cases s and collapses runs of white space to one space.
func lexCollapse(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(s)), " ")
}
