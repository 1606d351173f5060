package bench

import (
	"fmt"
	"strings"
)

// Flattened transcripts in the layouts real clients use (issue 13, NAIVE-
// PATTERNS.md): labels glued to the content, an opening fence on the
// label's line among them (`User: ```go`, `用户：```go`, `[USER]: ```js`,
// `Human: ```py`), Markdown headings, chat-template tokens and XML turn
// tags on their own line, in English, Chinese, Portuguese and Spanish, with
// a document in the first and third segments or in every one, and answers
// with paragraphs, lists and code, some ending in white space. Each is
// judged against the ideal client, which sends the same conversation as
// native turns, each document once.
func layoutSessions() []*Session {
	return []*Session{
		flatLayoutSession("flat-glued-fence", "flattened, `User: ```go` (fence on the label's line), English, path/path.go pasted in turns 1 and 3, 4 turns", flatGluedEN),
		flatLayoutSession("flat-glued-zh", "flattened, `用户：```go` (full-width colon, fence on the label's line), Chinese, strings/builder.go pasted in turns 1 and 3, 4 turns", flatGluedZH),
		flatLayoutSession("flat-bracketed", "flattened, `[USER]: ```js` (bracketed upper-case labels, fence on the label's line), lib/wasm/wasm_exec_node.js in every user segment, 4 turns", flatBracketed),
		flatLayoutSession("flat-headings", "flattened, Markdown headings `### Usuário` / `### Assistente`, Portuguese, encoding/csv/reader.go pasted in turns 1 and 3, 4 turns", flatHeadingsPT),
		flatLayoutSession("flat-chat-template", "flattened, chat-template tokens `<start_of_turn>user` / `<start_of_turn>model`, unicode/utf8/utf8.go in every user segment, 4 turns", flatChatTemplate),
		flatLayoutSession("flat-xml-turns", "flattened, XML turn tags `<turn><user>…</user><assistant>…</assistant></turn>`, Spanish, sync/once.go pasted in turns 1 and 3, 4 turns", flatXMLES),
		flatLayoutSession("flat-langchain", "flattened, LangChain buffer memory `Human:` / `AI:`, `Human: ```py` on the label's line, runtime/runtime-gdb.py pasted in turns 1 and 3, 4 turns", flatLangChain),
	}
}

var flatGluedEN = flatLang{
	layout: &flatLayout{header: "Previous conversation:\n", userOpen: "User: ", userClose: "\n", modelOpen: "Assistant: ", modelClose: "\n", currentOpen: "User: ", currentClose: "\nAssistant:"},
	questions: []string{
		"%s\nWhat does Clean do with \"..\" elements?",
		"Is Clean idempotent?",
		"%s\nAnd Match: what does it return for a malformed pattern?",
		"Summarise Clean in one sentence.",
	},
	answers: []string{
		"Clean applies these rules until nothing changes:\n\n1. Replace runs of slashes with one slash.\n2. Drop each `.` element.\n3. Drop each `..` element together with the element before it, unless that one is `..` too.\n4. Drop `..` elements that begin a rooted path.\n\nAn empty result becomes \".\".",
		"Yes. A cleaned path holds nothing any of the rules would change, so cleaning it again returns the same string.",
		"It returns ErrBadPattern, and it may report it only once the bad part of the pattern is reached:\n\n```go\nok, err := path.Match(\"[\", \"a\")\nfmt.Println(ok, err) // false syntax error in pattern\n```\n",
		"Clean returns the shortest path naming the same file, by lexical processing alone.",
	},
	document: "path.go", docName: "path.go", lang: "go", anon: true,
}

var flatGluedZH = flatLang{
	layout: &flatLayout{header: "对话历史：\n", userOpen: "用户：", userClose: "\n", modelOpen: "助手：", modelClose: "\n", currentOpen: "用户：", currentClose: "\n助手："},
	questions: []string{
		"%s\n这个文件里的 Builder 是做什么的？",
		"为什么复制 Builder 会出错？",
		"%s\n我又贴了一次。Reset 之后还能继续用吗？",
		"用一句话总结。",
	},
	answers: []string{
		"Builder 用来高效地拼接字符串：它在内部维护一个字节切片，String 方法直接返回这段内存，不再复制。\n\n使用时要注意：\n- 不要复制一个已经写入过的 Builder；\n- 可以用 Grow 预先分配容量。",
		"Builder 记录了指向自身的地址（addr 字段），每次写入前 copyCheck 都会比较这个地址；复制出来的值地址不同，于是触发 panic。",
		"可以。Reset 把内部切片和地址都清空，之后的写入会重新分配内存。\n\n",
		"Builder 以最少的复制拼接字符串，但写入后不能再被复制。",
	},
	document: "builder.go", docName: "builder.go", lang: "go", anon: true,
}

var flatBracketed = flatLang{
	layout: &flatLayout{header: "CHAT LOG\n", userOpen: "[USER]: ", userClose: "\n", modelOpen: "[ASSISTANT]: ", modelClose: "\n", currentOpen: "[USER]: ", currentClose: "\n[ASSISTANT]:"},
	questions: []string{
		"%s\nWhat does this Node.js script do?",
		"%s\nWhy does it assign globalThis.require?",
		"%s\nWhat happens when the wasm file does not exist?",
		"%s\nWhat exit code does it return when the Go program panics?",
	},
	answers: []string{
		"It runs a Go program compiled to WebAssembly under Node.js:\n\n- it checks that a wasm file was given on the command line;\n- it puts Node's modules (fs, path, crypto, TextEncoder) where wasm_exec.js expects browser globals;\n- it loads wasm_exec.js, instantiates the module and calls go.run with the remaining arguments.",
		"wasm_exec.js is written for browsers and looks everything up on globalThis; assigning require there lets it load Node's fs module without knowing it runs in Node.js.",
		"The read of the file fails, the promise is rejected and the catch handler prints the error and exits with status 1.   ",
		"The Go runtime prints the panic and calls its exit import with status 2, so the process exits with 2.",
	},
	document: "wasm_exec_node.js", docName: "wasm_exec_node.js", lang: "js", anon: true,
}

var flatHeadingsPT = flatLang{
	layout: &flatLayout{header: "Histórico da conversa:\n\n", userOpen: "### Usuário\n\n", userClose: "\n\n", modelOpen: "### Assistente\n\n", modelClose: "\n\n", currentOpen: "### Usuário\n\n", currentClose: "\n\n### Assistente\n"},
	questions: []string{
		"Leia este arquivo:\n\n%s\n\nO que faz o Reader?",
		"O que acontece com aspas dentro de um campo?",
		"Aqui está de novo:\n\n%s\n\nPara que serve LazyQuotes?",
		"Resuma em uma frase.",
	},
	answers: []string{
		"O Reader lê registros de um arquivo CSV (RFC 4180).\n\nCada chamada de Read devolve um registro como uma fatia de campos; ReadAll lê todos os registros restantes. Os campos de Comma e Comment escolhem o separador e o caractere de comentário.",
		"Um campo entre aspas pode conter vírgulas e quebras de linha; duas aspas seguidas dentro dele representam uma aspa literal. Uma aspa solta num campo sem aspas é um erro, ErrBareQuote.",
		"Com LazyQuotes, uma aspa pode aparecer num campo sem aspas, e uma aspa sozinha num campo entre aspas é aceita como literal, em vez de gerar um erro:\n\n```go\nr := csv.NewReader(f)\nr.LazyQuotes = true\n```\n",
		"O Reader transforma texto CSV em registros, com regras configuráveis para separadores, comentários e aspas.",
	},
	document: "reader.go", docName: "reader.go", lang: "go",
}

var flatChatTemplate = flatLang{
	layout: &flatLayout{userOpen: "<start_of_turn>user\n", userClose: "<end_of_turn>\n", modelOpen: "<start_of_turn>model\n", modelClose: "<end_of_turn>\n", currentOpen: "<start_of_turn>user\n", currentClose: "<end_of_turn>\n<start_of_turn>model\n"},
	questions: []string{
		"Here is utf8.go:\n\n%s\n\nWhat does DecodeRune return for invalid input?",
		"Here is utf8.go:\n\n%s\n\nHow does ValidString check its input quickly?",
		"Here is utf8.go:\n\n%s\n\nWhen is RuneLen -1?",
		"Here is utf8.go:\n\n%s\n\nWhich functions allocate?",
	},
	answers: []string{
		"It returns (RuneError, 1) for an invalid encoding, and (RuneError, 0) for empty input, so a caller can always make progress by the returned width.",
		"It first checks eight bytes at a time for ASCII with a mask, and only walks the remaining bytes through the first-byte table and the accept ranges.",
		"RuneLen returns -1 when the rune is not a valid value to encode: negative, above MaxRune, or a surrogate half.\n",
		"None of them: every function works on the slice or string it is given; AppendRune may grow the slice it appends to, like append.",
	},
	document: "utf8.go", docName: "utf8.go", lang: "go",
}

var flatXMLES = flatLang{
	layout: &flatLayout{userOpen: "<turn><user>", userClose: "</user>", modelOpen: "<assistant>", modelClose: "</assistant></turn>\n", currentOpen: "<turn><user>", currentClose: "</user></turn>"},
	questions: []string{
		"Lee este archivo:\n%s\n¿Para qué sirve Once?",
		"¿Qué pasa si f entra en pánico?",
		"Otra vez el archivo:\n%s\n¿Por qué Do no usa solo una operación atómica?",
		"Resúmelo en una frase.",
	},
	answers: []string{
		"Once ejecuta una acción exactamente una vez, aunque muchas goroutines llamen a Do al mismo tiempo. Sirve para inicializaciones perezosas:\n\n```go\nvar once sync.Once\nonce.Do(cargarConfiguracion)\n```",
		"Do considera que f ya se ejecutó: las llamadas siguientes a Do no vuelven a llamar a f.",
		"Porque Do debe esperar a que f termine antes de devolver; con solo un CompareAndSwap, la segunda goroutine volvería enseguida y vería una inicialización a medias. Por eso el camino lento usa un mutex.  \n",
		"Once garantiza una sola ejecución y que todos esperan a que termine.",
	},
	document: "once.go", docName: "once.go", lang: "go", anon: true,
}

var flatLangChain = flatLang{
	layout: &flatLayout{
		header:   "A friendly conversation between a human and an AI that answers from the context it is given.\n\nCurrent conversation:\n",
		userOpen: "Human: ", userClose: "\n", modelOpen: "AI: ", modelClose: "\n", currentOpen: "Human: ", currentClose: "\nAI:",
	},
	questions: []string{
		"%s\nWhat does this GDB script add?",
		"How do I load it?",
		"%s\nSame script again. Does it work for goroutines that are blocked?",
		"Thanks. Which command lists goroutines?",
	},
	answers: []string{
		"It teaches GDB about Go's runtime types:\n\n1. pretty printers for strings, slices, maps and channels;\n2. the functions `$len()` and `$cap()`;\n3. the commands `info goroutines` and `goroutine N cmd`.",
		"GDB loads it itself when the binary names it in its .debug_gdb_scripts section; otherwise run `source $GOROOT/src/runtime/runtime-gdb.py`.\n\n",
		"Yes: it reads each goroutine's saved registers from its g structure, so blocked goroutines show their stacks too.",
		"`info goroutines` lists them, with a `*` before the ones running on a thread.",
	},
	document: "runtime-gdb.py", docName: "runtime-gdb.py", lang: "py", anon: true,
}

// Two documents that look alike but are both current (issue 13): two
// versions compared in one turn, two environments' configurations. The
// ideal client keeps both documents in full and replaces only exact
// repeats; a proxy that saves more than it has lost one of them.
func twoDocSessions() []*Session {
	return []*Session{diffSession(), envSession()}
}

// a diff question: container/ring/ring.go and an edited version in
// unnamed fences in one turn, asked what changed, both re-sent later.
func diffSession() *Session {
	sc := newScript("two-doc-diff", "two documents: old and new container/ring/ring.go in unnamed fences in one turn (\"what changed?\"), both re-sent in turn 3, 4 turns", KindTwoDoc, defaultModel)
	oldV := Document("ring.go")
	newV := strings.Replace(oldV, "package ring\n", "package ring\n\n// Edited: rings can be reversed in place.\n", 1) +
		"\n// Reverse reverses the direction of the ring r in place and returns r.\n// It runs in O(n), n the number of elements.\nfunc (r *Ring) Reverse() *Ring {\n\tif r.next == nil {\n\t\treturn r.init()\n\t}\n\tp := r\n\tfor {\n\t\tp.next, p.prev = p.prev, p.next\n\t\tp = p.prev\n\t\tif p == r {\n\t\t\treturn r\n\t\t}\n\t}\n}\n"
	o, n := fenceAnon("go", oldV), fenceAnon("go", newV)
	both := func(lead, q string) msg {
		return user(txt(lead+"Old version:\n\n"), docRef("ring.go old", refName(o), o), txt("\n\nNew version:\n\n"), docRef("ring.go new", refName(n), n), txt("\n\n"+q))
	}
	sc.ask(both("", "What changed between the two versions?"), txt("The new version adds a method, Reverse, which swaps next and prev of every element, and a line to the package comment. Everything else is identical."))
	sc.ask(user(txt("Does Reverse keep r pointing at the same element?")), txt("Yes: it walks the ring once, swapping each element's links, and returns r itself, now with its neighbours exchanged."))
	sc.ask(both("Here are both versions again.\n\n", "Would code written against the old version still compile with the new one?"), txt("Yes. The new version only adds a method; every old function and method keeps its signature."))
	sc.ask(user(txt("Thanks. Which version should I ship?")), txt("The new one, once Reverse has a test for the empty and the one-element ring."))
	return sc.s
}

// two environments: staging and production YAML configurations, named
// only in the prose before their unnamed fences; staging in turn 1,
// production in turn 2, then both in one part, then both in two parts of
// one turn.
func envSession() *Session {
	sc := newScript("two-doc-envs", "two documents: staging and production YAML configs named only in prose, in turns 1 and 2, then both in one part and in two parts of one turn, 5 turns", KindTwoDoc, defaultModel)
	st, pr := fenceAnon("yaml", envConfig(stagingEnv)), fenceAnon("yaml", envConfig(productionEnv))
	stg := func() piece { return docRef("staging config", refName(st), st) }
	prd := func() piece { return docRef("production config", refName(pr), pr) }
	sc.ask(user(txt("This is our staging config:\n\n"), stg(), txt("\n\nDoes anything in it look wrong?")),
		txt("Nothing is wrong for staging. Two things to watch: the database pool of 10 is small if you load-test, and debug logging will be noisy."))
	sc.ask(user(txt("And this is production:\n\n"), prd(), txt("\n\nWhy would production time out where staging does not?")),
		txt("Production's upstream timeout is 5s against 30s in staging, while its retry budget is the same; under load the slower replica answers after 5s and the request fails."))
	sc.ask(user(txt("Staging:\n\n"), stg(), txt("\n\nProduction:\n\n"), prd(), txt("\n\nWhich settings differ between the two?")),
		txt("Replicas, resources, the database host and pool, the upstream timeout, the log level and two feature flags; the rest is identical."))
	sc.ask(user(txt("Staging again:\n\n"), stg(), brk(), txt("Production again:\n\n"), prd(), txt("\n\nIf I copy the production timeouts to staging, what else must change?")),
		txt("Nothing else is required, but lower staging's retry budget too, or staging will retry longer than production ever does."))
	sc.ask(user(txt("Thanks, that's all for now.")), txt("You're welcome."))
	return sc.s
}

// envValues are the settings that differ between the two environments.
type envValues struct {
	name, host, dbHost, logLevel, timeout string
	replicas, cpu, memory, pool           int
	newCheckout, betaSearch               bool
}

var (
	stagingEnv    = envValues{name: "staging", host: "shop.staging.internal", dbHost: "db-staging.internal", logLevel: "debug", timeout: "30s", replicas: 2, cpu: 500, memory: 512, pool: 10, newCheckout: true, betaSearch: true}
	productionEnv = envValues{name: "production", host: "shop.example.com", dbHost: "db-primary.prod.internal", logLevel: "info", timeout: "5s", replicas: 12, cpu: 2000, memory: 4096, pool: 80, newCheckout: false, betaSearch: false}
)

// envConfig writes the deployment configuration of one environment (a
// service configuration written for the bench).
func envConfig(e envValues) string {
	var b strings.Builder
	fmt.Fprintf(&b, "service:\n  name: shop-api\n  environment: %s\n  host: %s\n  port: 8443\n  replicas: %d\n", e.name, e.host, e.replicas)
	fmt.Fprintf(&b, "  resources:\n    requests:\n      cpu: %dm\n      memory: %dMi\n    limits:\n      cpu: %dm\n      memory: %dMi\n", e.cpu/2, e.memory/2, e.cpu, e.memory)
	fmt.Fprintf(&b, "database:\n  host: %s\n  port: 5432\n  name: shop\n  user: shop_api\n  password_secret: shop-api-db\n  pool_size: %d\n  max_idle: %d\n  statement_timeout: 15s\n  ssl_mode: verify-full\n", e.dbHost, e.pool, e.pool/2)
	b.WriteString("cache:\n  backend: redis\n  url: redis://cache:6379/0\n  ttl: 10m\n  max_entries: 50000\n")
	fmt.Fprintf(&b, "upstreams:\n  payments:\n    url: https://payments.internal/v2\n    timeout: %s\n    retries: 3\n    retry_backoff: 200ms\n  inventory:\n    url: https://inventory.internal/v1\n    timeout: %s\n    retries: 3\n    retry_backoff: 200ms\n", e.timeout, e.timeout)
	fmt.Fprintf(&b, "logging:\n  level: %s\n  format: json\n  sample_rate: 1.0\n  redact:\n    - authorization\n    - cookie\n    - card_number\n", e.logLevel)
	fmt.Fprintf(&b, "features:\n  new_checkout: %v\n  beta_search: %v\n  gift_cards: true\n  wishlist: true\n", e.newCheckout, e.betaSearch)
	b.WriteString("observability:\n  metrics_path: /metrics\n  tracing:\n    enabled: true\n    sample_ratio: 0.1\n    exporter: otlp\n    endpoint: otel-collector:4317\n")
	b.WriteString("security:\n  cors_origins:\n    - https://shop.example.com\n    - https://admin.example.com\n  rate_limit:\n    requests_per_minute: 600\n    burst: 100\n")
	return b.String()
}
