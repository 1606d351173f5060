package bench

import (
	"fmt"
	"strings"

	"google.golang.org/genai"
)

// defaultModel is the model most sessions call.
const defaultModel = "gemini-2.5-flash"

// Sessions returns the workload corpus, built from the documents in
// corpus/. The result is deterministic; callers may modify it.
func Sessions() []*Session {
	s := []*Session{
		askSession(),
		askTaggedSession(),
		editSession(),
		editProseSession(),
		secondarySession(),
		imageSession(),
		streamSession(),
		longSession(),
		flatSession("flat-en", "English", flatEN),
		flatSession("flat-zh", "Chinese", flatZH),
		flatSession("flat-pt", "Portuguese", flatPT),
		flatSession("flat-es", "Spanish", flatES),
		sideTaskSession(),
		pinnedSession(),
		functionSession(),
		statelessSession(),
	}
	s = append(s, layoutSessions()...)
	s = append(s, jsonHistSession())
	s = append(s, twoDocSessions()...)
	return append(s, structuredSessions()...)
}

// ask mode: bufio/scan.go in a named fence, re-sent in every user turn.
func askSession() *Session {
	sc := newScript("ask-go", "ask mode, bufio/scan.go (Go) re-sent in every user turn, 8 turns", KindDedup, defaultModel)
	file := fence("go", "scan.go", Document("scan.go"))
	qs := []string{
		"Explain what this file does.",
		"What does ErrFinalToken mean for a split function?",
		"Why does Scan panic after 100 empty tokens?",
		"How does Buffer change the maximum token size?",
		"Is ScanRunes correct for invalid UTF-8?",
		"What happens when the underlying reader returns an error and data together?",
		"Could ScanLines drop a final line without a newline?",
		"Summarise the contract of SplitFunc in two sentences.",
	}
	for i, q := range qs {
		sc.ask(user(txt("Here is my current code:\n\n"), doc("scan.go", file), txt("\n\n"+q)),
			txt(fmt.Sprintf("Answer %d about scan.go: %s The Scanner reads input in chunks, hands them to the split function and returns tokens one at a time; see the comments next to the relevant function.", i+1, q)))
	}
	return sc.s
}

// ask mode with several languages in XML-like file tags: C, assembly and
// JavaScript re-sent together every turn.
func askTaggedSession() *Session {
	sc := newScript("ask-c-asm-js", "ask mode, C + assembly + JavaScript in <file> tags re-sent every turn, 6 turns", KindDedup, defaultModel)
	files := []struct{ name, corpus string }{
		{"runtime/cgo/gcc_libinit.c", "gcc_libinit.c"},
		{"runtime/memmove_amd64.s", "memmove_amd64.s"},
		{"lib/wasm/wasm_exec.js", "wasm_exec.js"},
	}
	qs := []string{
		"How do these three files relate to each other?",
		"When does memmove use AVX instructions?",
		"What does x_cgo_sys_thread_create do on failure?",
		"How does wasm_exec.js pass strings to Go?",
		"Which of these files would change for a new architecture?",
		"List the exported symbols of the C file.",
	}
	for i, q := range qs {
		ps := []piece{txt("Context files:\n")}
		for _, f := range files {
			ps = append(ps, doc(f.name, "<file path=\""+f.name+"\">\n"+Document(f.corpus)+"</file>"), txt("\n"))
		}
		ps = append(ps, txt("\n"+q))
		sc.ask(user(ps...), txt(fmt.Sprintf("Reply %d. %s In short: the C file starts threads for cgo, the assembly copies memory, and the JavaScript hosts Go compiled to WebAssembly.", i+1, q)))
	}
	return sc.s
}

// edit mode on sort/sort.go: the model proposes whole files; the client
// applies, discards, undoes and edits by hand, re-sending its current file
// every turn.
func editSession() *Session {
	sc := newScript("edit-go", "edit mode, sort/sort.go: model proposes whole files; apply, discard, undo, hand edit; 8 turns", KindDedup, defaultModel)
	orig := Document("sort.go")
	cur := orig
	var undo []string
	propose := func(f, note string) []piece {
		return []piece{txt("Here is the updated file:\n\n"), doc("sort.go", fence("go", "sort.go", f)), txt("\n\n" + note)}
	}
	askFile := func(q string) msg {
		return user(txt("My current file:\n\n"), doc("sort.go", fence("go", "sort.go", cur)), txt("\n\n"+q))
	}
	addDoc := func(f string, n int) string {
		return strings.Replace(f, "package sort\n", fmt.Sprintf("package sort\n\n// Edit %d: documented by the assistant.\n", n), 1)
	}
	// 1: ask for an edit; 2: client applied it and asks for another.
	p1 := addDoc(cur, 1)
	sc.ask(askFile("Add a comment that explains the package's sorting guarantees."), propose(p1, "I added a comment after the package clause.")...)
	undo, cur = append(undo, cur), p1 // applied
	p2 := strings.Replace(cur, "func Sort(data Interface) {", "// Sort is not stable.\nfunc Sort(data Interface) {", 1)
	sc.ask(askFile("Now document that Sort is not stable."), propose(p2, "Sort now says it is not stable.")...)
	// 3: the client discards that proposal and asks something else.
	p3 := strings.Replace(cur, "func Stable(data Interface) {", "// Stable keeps equal elements in order.\nfunc Stable(data Interface) {", 1)
	sc.ask(askFile("I discarded that. Document Stable instead."), propose(p3, "Stable is documented now.")...)
	undo, cur = append(undo, cur), p3 // applied
	// 4: undo: back to the previous version.
	cur = undo[len(undo)-1]
	sc.ask(askFile("I undid your last change. Why is insertionSort used for small slices?"), txt("insertionSort is faster than the general algorithm for fewer than 12 elements because it has little overhead."))
	// 5: hand edit of one line.
	cur = strings.Replace(cur, "// Len is the number of elements in the collection.", "// Len returns the number of elements in the collection.", 1)
	sc.ask(askFile("I reworded the Len comment by hand. Does the wording match the rest of the file?"), txt("Yes, \"returns\" matches the style of the other method comments."))
	// 6: apply another proposal.
	p6 := strings.Replace(cur, "func IsSorted(data Interface) bool {", "// IsSorted runs in O(n).\nfunc IsSorted(data Interface) bool {", 1)
	sc.ask(askFile("Add the complexity of IsSorted to its comment."), propose(p6, "IsSorted now states O(n).")...)
	cur = p6
	sc.ask(askFile("Which functions still lack a complexity note?"), txt("Sort, Stable and Reverse could each state their complexity; Search is in search.go."))
	sc.ask(askFile("Thanks. Summarise every change we made."), txt("We added a package note, documented IsSorted's complexity and you reworded Len; the Stable note was undone."))
	return sc.s
}

// edit mode on prose: runtime/HACKING.md inside text banners.
func editProseSession() *Session {
	sc := newScript("edit-md", "edit mode, runtime/HACKING.md (Markdown) in text banners, proposals applied, 6 turns", KindDedup, defaultModel)
	cur := Document("HACKING.md")
	banner := func(f string) string { return "--- HACKING.md ---\n" + f + "--- End of content ---" }
	edits := []struct{ q, old, new string }{
		{"Fix the heading capitalisation of the first section.", "Scheduler structures", "Scheduler Structures"},
		{"Make the sentence about g0 clearer.", "system stack", "system (g0) stack"},
		{"Spell out what the abbreviation M means the first time.", "M", "M (machine)"},
	}
	for i, e := range edits {
		sc.ask(user(txt("Document:\n"), doc("HACKING.md", banner(cur)), txt("\n"+e.q)), txt("Revised document:\n"), doc("HACKING.md", banner(strings.Replace(cur, e.old, e.new, 1))), txt(fmt.Sprintf("\nEdit %d done.", i+1)))
		cur = strings.Replace(cur, e.old, e.new, 1)
		sc.ask(user(txt("Document:\n"), doc("HACKING.md", banner(cur)), txt("\nApplied. Anything else in that section?")), txt(fmt.Sprintf("Nothing else in section %d needs changing.", i+1)))
	}
	return sc.s
}

// secondary context: a project tree and an open-tab list re-sent with the
// active file (genai chats.go in a banner).
func secondarySession() *Session {
	sc := newScript("secondary", "secondary context: project tree + open tabs + genai chats.go re-sent every turn, 6 turns", KindDedup, defaultModel)
	var tree strings.Builder
	tree.WriteString("genai/\n")
	for _, d := range []string{"auth", "caches", "chats", "files", "live", "models", "operations", "tokens", "tunings", "batches"} {
		fmt.Fprintf(&tree, "├── %s/\n│   ├── %s.go\n│   ├── %s_test.go\n│   └── doc.go\n", d, d, d)
	}
	tree.WriteString("└── go.mod")
	var tabs strings.Builder
	tabs.WriteString("Open tabs:\n")
	for _, f := range []string{"chats.go", "models.go", "types.go", "client.go", "api_client.go", "transformer.go", "caches.go", "files.go", "live.go", "tokens.go", "common.go", "batches.go", "tunings.go", "operations.go", "documents.go", "file_search_stores.go"} {
		fmt.Fprintf(&tabs, "- genai/%s\n", f)
	}
	tabsText := strings.TrimSuffix(tabs.String(), "\n")
	chats := "--- chats.go ---\n" + Document("chats.go") + "--- End of content ---"
	qs := []string{
		"Where is the chat history kept?",
		"Does SendMessage copy the history?",
		"How would I add a Reset method to Chat?",
		"Which file defines GenerateContentConfig?",
		"Is Chat safe for concurrent use?",
		"What does History(curated) return?",
	}
	for i, q := range qs {
		sc.ask(user(txt("Project structure:\n"), doc("project tree", tree.String()), txt("\n\n"), doc("open tabs", tabsText), txt("\n\nActive file:\n"), doc("chats.go", chats), txt("\n\n"+q)),
			txt(fmt.Sprintf("(%d) %s The Chat type in chats.go keeps a comprehensive and a curated history and appends each exchange after a successful call.", i+1, q)))
	}
	return sc.s
}

// repeated images: the same PNG screenshot attached every turn.
func imageSession() *Session {
	sc := newScript("images", "repeated image: image/testdata/video-001.png (29 KB) re-attached every turn, 5 turns", KindDedup, defaultModel)
	png := []byte(Document("video-001.png"))
	qs := []string{"What is in this picture?", "Which colours dominate?", "Describe the lower half.", "Is there any text in it?", "Suggest a caption."}
	for i, q := range qs {
		sc.ask(user(img("image/png", png), txt(q)), txt(fmt.Sprintf("Image answer %d: %s It is a frame from a test video used by Go's image decoders.", i+1, q)))
	}
	return sc.s
}

// streaming ask mode: wasm_exec.js re-sent, answers streamed over SSE.
func streamSession() *Session {
	sc := newScript("stream", "streaming (SSE) ask mode, lib/wasm/wasm_exec.js re-sent every turn, 6 turns", KindDedup, defaultModel)
	sc.s.Stream = true
	file := fence("js", "wasm_exec.js", Document("wasm_exec.js"))
	qs := []string{"What does this script set up?", "How are Go values stored in JavaScript?", "What does syscall/js.valueCall do?", "How does the exit code reach the host?", "Where are timers implemented?", "Can it run in Node.js?"}
	for i, q := range qs {
		sc.ask(user(txt("```\n// current file follows\n```\n"), doc("wasm_exec.js", file), txt("\n"+q)),
			txt(fmt.Sprintf("Streamed answer %d. %s The script defines the Go class that loads a WebAssembly module, keeps a table of JavaScript values and implements the imports the Go runtime calls. %s", i+1, q, strings.Repeat("More detail follows in this streamed paragraph. ", 6))))
	}
	return sc.s
}

// a long 50-turn session: two files re-sent, one edited every ten turns.
func longSession() *Session {
	sc := newScript("long-50", "long session: 50 turns, container/list/list.go + gonum plotter/barchart.go re-sent, list.go edited by hand every 10 turns", KindDedup, defaultModel)
	list := Document("list.go")
	bar := Document("barchart.go")
	for i := range 50 {
		if i > 0 && i%10 == 0 {
			list = strings.Replace(list, "package list\n", fmt.Sprintf("package list\n\n// Revision %d.\n", i/10), 1)
		}
		q := fmt.Sprintf("Question %d: how does element %d of the chart relate to the list?", i+1, i)
		sc.ask(user(txt("Files:\n\n"), doc("list.go", fence("go", "list.go", list)), txt("\n\n"), doc("barchart.go", fence("go", "barchart.go", bar)), txt("\n\n"+q)),
			txt(fmt.Sprintf("Answer %d: the bar chart draws one bar per value; the list would hold them in insertion order.", i+1)))
	}
	return sc.s
}

// flattened transcripts: the client joins its history into one user turn
// per request, quoting the model's answers, in four languages. The first
// question pastes a document; the third pastes it again.
type flatLang struct {
	header, user, model, cue, current string
	questions, answers                []string
	document, docName                 string
	// layout, when set, replaces header, user, model, cue and current
	// (layouts.go).
	layout *flatLayout
	// lang is the fence's language; anon leaves the fence without a name
	// (the document is named only in the prose around it).
	lang string
	anon bool
}

// flatLayout is how a client writes its history into one user turn:
// header, then for each past exchange userOpen, the question, userClose,
// modelOpen, the answer, modelClose, and last currentOpen, the new
// question, currentClose.
type flatLayout struct {
	header                    string
	userOpen, userClose       string
	modelOpen, modelClose     string
	currentOpen, currentClose string
}

// layoutOf returns l's layout: its own, or the label-per-line layout its
// header, user, model, cue and current describe.
func (l flatLang) layoutOf() flatLayout {
	if l.layout != nil {
		return *l.layout
	}
	lay := flatLayout{header: l.header, userOpen: l.user, userClose: "\n", modelOpen: l.model, modelClose: "\n", currentOpen: l.user}
	if l.current != "" {
		lay.currentOpen = "\n" + l.current
	}
	if l.cue != "" {
		lay.currentClose = "\n" + l.cue
	}
	return lay
}

var flatEN = flatLang{
	header: "Previous conversation:\n", user: "User: ", model: "Assistant: ", cue: "Assistant:",
	questions: []string{"Please read this licence:\n\n%s\n\nWhat does section 4 require when I redistribute?", "Does that apply to object code too?", "Here it is again:\n\n%s\n\nWhere does it talk about patents?", "Summarise the patent clause in one sentence."},
	answers: []string{
		"Section 4 requires you to give recipients a copy of the licence, mark modified files with prominent notices, keep all copyright, patent, trademark and attribution notices, and pass on the NOTICE file if there is one.",
		"Yes. The licence defines the Work to include object form, so the redistribution conditions of section 4 apply to binaries as well as to source.",
		"Section 3, the grant of patent licence, gives a licence to patents that contributors' contributions necessarily infringe, and ends it if you sue claiming the Work infringes a patent.",
		"Each contributor licenses the patents their contribution needs, and that licence ends for anyone who brings a patent lawsuit over the Work.",
	},
	document: "Apache-2.0", docName: "LICENSE",
}

var flatZH = flatLang{
	header: "对话历史：\n", user: "用户：", model: "助手：", current: "当前问题：",
	questions: []string{"请阅读这份许可证：\n\n%s\n\n第三条关于什么？", "这对修改后的文件有什么要求？", "我再贴一次：\n\n%s\n\n它在哪里提到专利？", "请用一句话总结。"},
	answers: []string{
		"第三条是关于“受保护软件”的分发：以源代码形式分发时必须遵守本许可证，并告知接收者如何获得源代码。",
		"修改后的文件仍然属于受保护软件，必须以本许可证提供其源代码，并保留原有的版权和许可声明。",
		"专利相关内容在第二条许可授予中，以及第五条终止条款中：如果您提起专利诉讼，您获得的权利将被终止。",
		"这份许可证允许自由使用和修改，但修改后的文件必须继续以同一许可证开放源代码。",
	},
	document: "MPL-2.0", docName: "LICENSE",
}

var flatPT = flatLang{
	header: "Histórico da conversa:\n", user: "Usuário: ", model: "Assistente: ", cue: "Assistente:",
	questions: []string{"Leia este documento:\n\n%s\n\nO que é o scheduler do Go?", "O que significa a letra P?", "Aqui está de novo:\n\n%s\n\nO que o documento diz sobre a pilha do sistema?", "Resuma em uma frase."},
	answers: []string{
		"O scheduler do Go distribui as goroutines (G) entre as threads do sistema operacional (M) usando os recursos de execução (P), de modo que o código Go rode em paralelo sem uma thread por goroutine.",
		"P é o recurso necessário para executar código Go do usuário; existem exatamente GOMAXPROCS Ps, e uma M precisa de uma P para executar goroutines.",
		"Cada M tem uma pilha do sistema, a goroutine g0; o código que não pode crescer a pilha roda nela, e systemstack troca para ela.",
		"O runtime multiplexa goroutines em threads por meio de Ps, e o código sensível roda na pilha do sistema de cada M.",
	},
	document: "HACKING.md", docName: "HACKING.md",
}

var flatES = flatLang{
	header: "HISTORIAL DE CONVERSACIÓN:\n", user: "Usuario: ", model: "Asistente: ", cue: "Asistente:",
	questions: []string{"Lee este archivo:\n\n%s\n\n¿Qué hace Scanner?", "¿Cuál es el tamaño máximo de un token?", "Aquí lo tienes otra vez:\n\n%s\n\n¿Cómo funciona ScanWords?", "Resúmelo en una frase."},
	answers: []string{
		"Scanner ofrece una interfaz cómoda para leer datos como líneas o palabras: llama repetidamente a Scan, que avanza al siguiente token usando una función de división.",
		"Por defecto MaxScanTokenSize es 64 KiB; con Buffer puedes dar un búfer inicial y un tamaño máximo distinto.",
		"ScanWords omite los espacios iniciales y devuelve cada palabra separada por espacios, usando isSpace para reconocer los espacios Unicode.",
		"Scanner divide una entrada en tokens con una función de división configurable y un búfer limitado.",
	},
	document: "scan.go", docName: "scan.go",
}

func flatSession(name, lang string, l flatLang) *Session {
	return flatLayoutSession(name, fmt.Sprintf("flattened transcript (%s): history joined into one user turn, document pasted twice, %d turns", lang, len(l.questions)), l)
}

// flatLayoutSession builds the flattened session l describes: request i is
// one user turn holding the first i exchanges and question i in l's layout;
// its ideal is the same conversation as native turns.
func flatLayoutSession(name, desc string, l flatLang) *Session {
	s := &Session{Name: name, Kind: KindFlattened, Model: defaultModel, Description: desc}
	body := Document(l.document)
	d := fence(l.lang, l.docName, body)
	if l.anon {
		d = fenceAnon(l.lang, body)
	}
	lay := l.layoutOf()
	// question i as pieces, with the document where %s stands.
	q := func(i int) []piece {
		parts := strings.SplitN(l.questions[i], "%s", 2)
		if len(parts) == 1 {
			return []piece{txt(parts[0])}
		}
		return []piece{txt(parts[0]), docRef(l.docName, refName(d), d), txt(parts[1])}
	}
	var native []msg
	for i := range l.questions {
		flat := []piece{txt(lay.header)}
		for j := range i {
			flat = append(flat, txt(lay.userOpen))
			flat = append(flat, q(j)...)
			flat = append(flat, txt(lay.userClose+lay.modelOpen+l.answers[j]+lay.modelClose))
		}
		flat = append(flat, txt(lay.currentOpen))
		flat = append(flat, q(i)...)
		flat = append(flat, txt(lay.currentClose))
		native = append(native, user(q(i)...))
		s.Turns = append(s.Turns, Turn{Naive: render([]msg{user(flat...)}), Ideal: ideal(native), Answer: l.answers[i]})
		native = append(native, model(txt(l.answers[i])))
	}
	return s
}

// control: a native chat whose client, after every answer, asks for a
// title over the flattened transcript (a side task that must never be
// un-flattened; its model lines match what was served).
func sideTaskSession() *Session {
	s := &Session{Name: "ctl-side-task", Kind: KindControl, Model: defaultModel,
		Description: "control: native chat + title generation over the flattened transcript after every answer, 8 requests"}
	qs := []string{"How do I reverse a singly linked list in place?", "What is its time complexity?", "Can you do it recursively?", "Which version would you pick for a million nodes?"}
	as := []string{
		"Walk the list once with three pointers, prev, cur and next: save cur.next, point cur.next at prev, then advance prev and cur until cur is nil; prev is the new head.",
		"It is O(n) time, since each node is visited once, and O(1) extra space for the three pointers.",
		"Yes: reverse the rest of the list recursively, then make the second node point back at the first and set the first node's next to nil; it uses O(n) stack space.",
		"The iterative one: a million nested calls could overflow the stack, and the loop is just as clear.",
	}
	var native []msg
	var transcript strings.Builder
	for i, q := range qs {
		native = append(native, user(txt(q)))
		r := render(native)
		s.Turns = append(s.Turns, Turn{Naive: r, Ideal: r, Answer: as[i]})
		native = append(native, model(txt(as[i])))
		fmt.Fprintf(&transcript, "User: %s\nAssistant: %s\n", q, as[i])
		title := render([]msg{user(txt("Generate a concise title (3-6 words) for the following conversation. Return ONLY the title, no quotes.\n\n" + transcript.String() + "\nTitle:"))})
		s.Turns = append(s.Turns, Turn{Naive: title, Ideal: title, Answer: fmt.Sprintf("Reversing a Linked List %d", i+1)})
	}
	return s
}

// control: context pinned as the first turn and acknowledged, then
// questions without re-sending it; already the ideal shape.
func pinnedSession() *Session {
	sc := newScript("ctl-pinned", "control: files pinned once in the first turn with an acknowledgement, 5 questions", KindControl, defaultModel)
	sc.history = []msg{
		user(txt("Here is the context for this conversation:\n\n"), doc("list.go", fence("go", "list.go", Document("list.go"))), txt("\n\n"), doc("sort.go", fence("go", "sort.go", Document("sort.go")))),
		model(txt("Got it. Thanks for the context!")),
	}
	for i, q := range []string{"Could Sort use a List?", "What does MoveToFront cost?", "Is heapSort used by Sort?", "How would you sort a List?", "Which file has more exported functions?"} {
		sc.ask(user(txt(q)), txt(fmt.Sprintf("Pinned answer %d: %s Both files are in the context you gave me.", i+1, q)))
	}
	return sc.s
}

// control: function calling with thought signatures (Gemini 3). The
// client reads two files through a tool; signed function calls are never
// rewritten, and tool results are replaced only when they repeat content
// (issue 15; agent-read-file reads one file three times).
func functionSession() *Session {
	s := &Session{Name: "ctl-functions", Kind: KindControl, Model: "gemini-3-flash-preview",
		Description: "control: function calling with thought signatures, two files returned by a tool, 4 requests"}
	s.Config = &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
		Name: "read_file", Description: "Reads a file of the workspace.",
		Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"path": {Type: genai.TypeString}}, Required: []string{"path"}},
	}}}}}
	list, ring := Document("list.go"), Document("ring.go")
	var hist []*genai.Content
	add := func(role string, parts ...*genai.Part) { hist = append(hist, &genai.Content{Role: role, Parts: parts}) }
	turn := func(answer string) {
		c := append([]*genai.Content(nil), hist...)
		s.Turns = append(s.Turns, Turn{Naive: c, Ideal: c, Answer: answer})
	}
	call := func(path, sig string) *genai.Part {
		return &genai.Part{FunctionCall: &genai.FunctionCall{Name: "read_file", Args: map[string]any{"path": path}}, ThoughtSignature: []byte(sig)}
	}
	resp := func(content string) *genai.Part {
		return &genai.Part{FunctionResponse: &genai.FunctionResponse{Name: "read_file", Response: map[string]any{"content": content}}}
	}
	add(genai.RoleUser, &genai.Part{Text: "Open container/list/list.go and explain Remove."})
	turn("I will read the file first.")
	add(genai.RoleModel, call("container/list/list.go", "signature-one-for-the-first-call"))
	add(genai.RoleUser, resp(list))
	turn("Remove unlinks the element if it belongs to the list and returns its value.")
	add(genai.RoleModel, &genai.Part{Text: "Remove unlinks the element if it belongs to the list and returns its value."})
	add(genai.RoleUser, &genai.Part{Text: "Now read container/ring/ring.go: does Link check membership as InsertBefore does?"})
	turn("Reading ring.go.")
	add(genai.RoleModel, call("container/ring/ring.go", "signature-two-for-the-second-call"))
	add(genai.RoleUser, resp(ring))
	turn("No: Link joins any two rings, while InsertBefore returns nil when mark is not an element of the list.")
	return s
}

// stateless (NAIVE-PATTERNS N3): a client that keeps no history and sends
// every request as one user turn, the question first and then the whole
// file in a named fence ("{question}\n\n```go {path}\n{file}```\n", the
// shape of command-line helpers that pipe a file after a prompt). The proxy
// removes nothing; with rewrite.stable_prefix it puts the file first, so
// that Gemini's implicit cache can match it from one request to the next.
// The ideal client sends the file first and the question after it.
func statelessSession() *Session {
	s := &Session{Name: "stateless-go", Kind: KindStateless, Model: defaultModel,
		Description: "stateless (N3): question first, then net/http/httputil/reverseproxy.go in a fence, no history, 6 requests"}
	file := fence("go", "reverseproxy.go", Document("reverseproxy.go"))
	qs := []string{
		"Why does ReverseProxy remove hop-by-hop headers before forwarding?",
		"When is FlushInterval ignored for a response?",
		"What does Rewrite do that Director cannot?",
		"How are HTTP trailers forwarded to the client?",
		"Why is X-Forwarded-For appended to rather than replaced?",
		"What happens when the backend closes the connection in the middle of a stream?",
	}
	for i, q := range qs {
		naive := user(txt(q+"\n\n"), doc("reverseproxy.go", file), txt("\n"))
		ideal := user(doc("reverseproxy.go", file), txt("\n\n"+q+"\n"))
		s.Turns = append(s.Turns, Turn{Naive: render([]msg{naive}), Ideal: render([]msg{ideal}),
			Answer: fmt.Sprintf("Stateless answer %d. %s The answer is in the comments of reverseproxy.go next to the code that handles it.", i+1, q)})
	}
	return s
}
