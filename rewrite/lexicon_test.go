package rewrite

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLexiconKind(t *testing.T) {
	lx := DefaultLexicon()
	tests := []struct {
		name    string
		wantKey string
		want    lexKind
	}{
		{"User", "user", lexUser},
		{"USER", "user", lexUser},
		{"User1", "user", lexUser},
		{"User 2", "user", lexUser},
		{"Bot #3", "bot", lexModel},
		{"Human", "human", lexUser},
		{"Customer", "customer", lexUser},
		{"Student", "student", lexUser},
		{"Assistant", "assistant", lexModel},
		{"AI", "ai", lexModel},
		{"Gemini", "gemini", lexModel},
		{"Model", "model", lexModel},
		{"You", "you", lexEither},
		{"用户", "用户", lexUser},
		{"问", "问", lexUser},
		{"助手", "助手", lexModel},
		{"答", "答", lexModel},
		{"Usuário", "usuário", lexUser},
		{"Utilizador", "utilizador", lexUser},
		{"Assistente", "assistente", lexModel},
		{"IA", "ia", lexModel},
		{"Usuario", "usuario", lexUser},
		{"Asistente", "asistente", lexModel},
		{"Người dùng", "người dùng", lexUser},
		{"Trợ lý", "trợ lý", lexModel},
		{"system", "system", lexSystem},
		{"Current  question", "current question", lexQuestion},
		{"current_question", "current question", lexQuestion},
		{"Pergunta atual", "pergunta atual", lexQuestion},
		{"Pregunta actual", "pregunta actual", lexQuestion},
		{"当前问题", "当前问题", lexQuestion},
		{"New message", "new message", lexQuestion},
		{"Chat history", "chat history", lexHeader},
		{"Histórico da conversa", "histórico da conversa", lexHeader},
		{"HISTORIAL DE CONVERSACIÓN", "historial de conversación", lexHeader},
		{"对话历史", "对话历史", lexHeader},
		{"Intent", "intent", lexField},
		{"Title", "title", lexField},
		{"FRIDAY", "friday", lexNone},
		{"Speaker 2", "speaker 2", lexNone},
		{"Title 2", "title 2", lexNone}, // numbers are dropped from role words only
	}
	for _, tc := range tests {
		key, k := lx.kind(tc.name)
		if key != tc.wantKey || k != tc.want {
			t.Errorf("kind(%q) = %q, %d; want %q, %d", tc.name, key, k, tc.wantKey, tc.want)
		}
	}
}

func TestLexiconExtend(t *testing.T) {
	base := DefaultLexicon()
	ext := base.Extend([]string{"Paciente:", " Dr Who "}, []string{"Doctor", "Customer"})
	tests := []struct {
		lx   *Lexicon
		name string
		want lexKind
	}{
		{ext, "Paciente", lexUser},
		{ext, "dr who", lexUser},
		{ext, "Doctor", lexModel},
		{ext, "Customer", lexModel}, // configured labels override built-in ones
		{ext, "Assistant", lexModel},
		{base, "Paciente", lexNone}, // the original is not changed
		{base, "Doctor", lexNone},
		{base, "Customer", lexUser},
	}
	for _, tc := range tests {
		if _, k := tc.lx.kind(tc.name); k != tc.want {
			t.Errorf("kind(%q) = %d, want %d", tc.name, k, tc.want)
		}
	}
}

func TestLexiconSideTask(t *testing.T) {
	lx := DefaultLexicon()
	yes := []string{
		"Summarize the conversation below.",
		"please summarise this",
		"summarizing the chat",
		"Classify the user intent",
		"Extract all names",
		"Rewrite the last question as a standalone query",
		"Generate a title for the chat",
		"Translate to French",
		"Evaluate the answers",
		"Grade the tutor",
		"Do not answer the question",
		"总结以下对话",
		"请概括",
		"Resuma a conversa",
		"Reescreva a pergunta",
		"Resume la conversación",
		"Clasifica la intención",
		"Traduce al inglés",
		"Tóm tắt cuộc trò chuyện",
	}
	no := []string{
		"You are a helpful assistant.",
		"Here is our conversation so far:",
		"Previous conversation:",
		"The user resumed work yesterday.",
		"Continue the chat as FRIDAY.",
	}
	for _, s := range yes {
		if !lx.sideTask(lexCollapse(s)) {
			t.Errorf("sideTask(%q) = false, want true", s)
		}
	}
	for _, s := range no {
		if lx.sideTask(lexCollapse(s)) {
			t.Errorf("sideTask(%q) = true, want false", s)
		}
	}
}

func TestLexiconConstrained(t *testing.T) {
	lx := DefaultLexicon()
	for s, want := range map[string]bool{
		"Return ONLY the title.":             true,
		"Respond in JSON.":                   true,
		"Output in JSON   format":            true,
		"Responda apenas com o título":       true,
		"只返回JSON":                            true,
		"What is the JSON spec?":             false,
		"Answer the question in detail.":     false,
		"Please only respond when you know.": false,
	} {
		if got := lx.constrained(lexCollapse(s)); got != want {
			t.Errorf("constrained(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestLexiconExampleLine(t *testing.T) {
	lx := DefaultLexicon()
	for s, want := range map[string]bool{
		"For example:":                         true,
		"Example 1:":                           true,
		"Examples:":                            true,
		"### Example":                          true,
		"**Example 2**":                        true,
		"Example conversation:":                true,
		"Exemplo:":                             true,
		"Ejemplo 3:":                           true,
		"示例：":                                  true,
		"Ví dụ:":                               true,
		"For example, goroutines are cheap.":   false,
		"For example: use a channel here.":     false,
		"Exampled text":                        false,
		"Sample code below":                    false,
		"Everything works except the example.": false,
	} {
		if got := lx.exampleLine(s); got != want {
			t.Errorf("exampleLine(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestParseFlatLabel(t *testing.T) {
	lx := DefaultLexicon()
	type res struct {
		Name  string
		Emoji rune
		Colon bool
		Alone bool
		Rest  string
	}
	ok := map[string]res{
		"User: hi":                          {Name: "User", Colon: true, Rest: "hi"},
		"User:hi":                           {Name: "User", Colon: true, Rest: "hi"},
		"User : hi":                         {Name: "User", Colon: true, Rest: "hi"},
		"  USER: hi":                        {Name: "USER", Colon: true, Rest: "hi"},
		"用户：你好":                             {Name: "用户", Colon: true, Rest: "你好"},
		"[Cliente]: oi":                     {Name: "Cliente", Colon: true, Rest: "oi"},
		"[Cliente] oi":                      {Name: "Cliente", Rest: "oi"},
		"【用户】你好":                            {Name: "用户", Rest: "你好"},
		"[2025-03-15T20:30] User: hi":       {Name: "User", Colon: true, Rest: "hi"},
		"User (12:01 PM): hi":               {Name: "User", Colon: true, Rest: "hi"},
		"**User:** hi":                      {Name: "User", Colon: true, Rest: "hi"},
		"**Assistant**: hi":                 {Name: "Assistant", Colon: true, Rest: "hi"},
		"### Assistant":                     {Name: "Assistant", Alone: true},
		"Assistant":                         {Name: "Assistant", Alone: true},
		"FRIDAY:":                           {Name: "FRIDAY", Colon: true, Alone: false},
		"[1] ❓ hi":                          {Emoji: '❓', Rest: "hi"},
		"🤖: hello":                          {Emoji: '🤖', Rest: "hello"},
		"👤 User: hi":                        {Name: "User", Colon: true, Rest: "hi"},
		"Người dùng: Xin chào":              {Name: "Người dùng", Colon: true, Rest: "Xin chào"},
		"Current question: what":            {Name: "Current question", Colon: true, Rest: "what"},
		"Speaker 2: hi":                     {Name: "Speaker 2", Colon: true, Rest: "hi"},
		"Role: user":                        {Name: "Role", Colon: true, Rest: "user"},
		"Ai: x":                             {Name: "Ai", Colon: true, Rest: "x"},
		"Bot #1: hi":                        {Name: "Bot", Colon: false, Rest: ""},
		"History of the world, part one: x": {Name: "History of the world, part one", Colon: true},
	}
	delete(ok, "Bot #1: hi")                        // '#' ends the name: not a label
	delete(ok, "History of the world, part one: x") // ',' ends the name: not a label
	for line, want := range ok {
		l, found := parseFlatLabel(line, lx)
		if !found {
			t.Errorf("parseFlatLabel(%q) found no label", line)
			continue
		}
		got := res{Name: l.name, Emoji: l.emoji, Colon: l.colon, Alone: l.alone, Rest: l.rest}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("parseFlatLabel(%q) (-want +got):\n%s", line, diff)
		}
	}
	for _, line := range []string{
		"",
		"12:30 meeting",
		"http://example.com",
		"a:b testing",
		"Note:important", // a name outside the lexicon needs a space after ':'
		"#hashtag: x",
		"This is a very long sentence with many words: x",
		"- User: hi",
		"> User: hi",
		"Bot #1: hi",
		"History of the world, part one: x",
	} {
		if l, found := parseFlatLabel(line, lx); found {
			t.Errorf("parseFlatLabel(%q) = %+v, want no label", line, l)
		}
	}
}

func TestFlatUntruncate(t *testing.T) {
	for in, want := range map[string]string{
		"abc... [truncated]":  "abc",
		"abc …":               "abc",
		"abc [...]":           "abc",
		"abc (truncated)":     "abc",
		"abc...[TRUNCATED]  ": "abc",
		"abc":                 "abc",
		"  abc\n":             "abc",
		"...":                 "",
	} {
		if got := flatUntruncate(in); got != want {
			t.Errorf("flatUntruncate(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestKindOf checks that kindOf, which does not allocate, agrees with
// kind on every lexicon key and on variants of them (case, spacing,
// underscores, turn numbers, non-ASCII letters, long names).
func TestKindOf(t *testing.T) {
	lx := DefaultLexicon().Extend([]string{"Cliente Final"}, []string{"FRIDAY"})
	var names []string
	for k := range lx.labels {
		names = append(names, k, strings.ToUpper(k), strings.ReplaceAll(k, " ", "_"), " "+k+"  ", k+"2", k+" #3", strings.ToUpper(k[:1])+k[1:]+"_-1")
	}
	names = append(names, "", " ", "İSTANBUL", "ẞ user", "User\u00a0Name", "\xff\xfeuser", strings.Repeat("Ⱥ", 60), strings.Repeat("ab ", 50), "Usuário", "助手", "AI 2")
	for _, n := range names {
		_, want := lx.kind(n)
		if got := lx.kindOf(n); got != want {
			t.Errorf("kindOf(%q) = %d, kind = %d", n, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { lx.kindOf("Assistant 2") }); n != 0 {
		t.Errorf("kindOf allocates %v times", n)
	}
}
