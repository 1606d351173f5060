package emulator

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// modelAliases are the "-latest" aliases and the concrete model each
// answers as (its modelVersion). gemini-flash-latest → gemini-3.6-flash is
// recorded (shared/gemini-recordings jsonarray-flash-latest-3.6); the
// other two are assumed to follow the newest served model of their family.
var modelAliases = map[string]string{
	"gemini-flash-latest":      "gemini-3.6-flash",
	"gemini-flash-lite-latest": "gemini-3.5-flash-lite",
	"gemini-pro-latest":        "gemini-3.1-pro-preview",
}

// modelVersion is the concrete model an id answers as.
func modelVersion(model string) string {
	if v, ok := modelAliases[model]; ok {
		return v
	}
	return model
}

// thoughtSummary is the emulator's thought summary; its tokens are the
// thoughtsTokenCount of a thinking model's answer.
func thoughtSummary(model string) string {
	return fmt.Sprintf("**Considering the request**\n\nThe emulator for %s is preparing a deterministic answer.", modelVersion(model))
}

// traits are the per-model differences of the answers, as recorded.
type traits struct {
	// legacy models (Gemini 1.x, 2.0) do not think, report
	// candidatesTokensDetails, avgLogprobs on unary answers, usage without
	// candidates on all but the last stream chunk, and no serviceTier.
	legacy bool
	// thinking models report thoughtsTokenCount on every answer.
	thinking bool
	// gen3 models (Gemini 3.x) send function call and code ids, a
	// thoughtSignature on every answer, and end streams with an empty text
	// part that carries finishReason.
	gen3 bool
	// pro models cannot turn thinking off.
	pro bool
}

func traitsOf(model string) traits {
	v := modelVersion(model)
	legacy := strings.HasPrefix(v, "gemini-1.") || strings.HasPrefix(v, "gemini-2.0")
	return traits{
		legacy:   legacy,
		thinking: !legacy && strings.HasPrefix(v, "gemini-"),
		gen3:     strings.HasPrefix(v, "gemini-3"),
		pro:      strings.Contains(v, "-pro"),
	}
}

// ParseScript parses an X-Emulator-Script header value, which scripts one
// generate request as Options.Script does (the header wins):
// semicolon-separated key=value pairs among call (function names, comma
// separated: parallel calls with generated arguments), block (a
// blockReason) and finish (a finishReason), e.g. "call=read_file" or
// "block=PROHIBITED_CONTENT".
func ParseScript(h string) (Script, error) {
	var sc Script
	for _, kv := range strings.Split(h, ";") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Script{}, fmt.Errorf("script %q: missing '='", kv)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if v == "" {
			return Script{}, fmt.Errorf("script %q: empty value", kv)
		}
		switch k {
		case "call":
			for _, name := range strings.Split(v, ",") {
				if name = strings.TrimSpace(name); name != "" {
					sc.FunctionCalls = append(sc.FunctionCalls, FunctionCall{Name: name})
				}
			}
		case "block":
			sc.BlockReason = v
		case "finish":
			sc.FinishReason = v
		default:
			return Script{}, fmt.Errorf("script %q: unknown key", kv)
		}
	}
	return sc, nil
}

// funcDecl is a declared function: its name and parameter schema.
type funcDecl struct {
	name   string
	params map[string]any
}

// toolSet is what a request's tools and toolConfig ask for.
type toolSet struct {
	funcs []funcDecl
	// mode is functionCallingConfig.mode ("" when unset).
	mode                                     string
	allowed                                  []string
	search, urlContext, codeExec, fileSearch bool
	fileStores                               []string
}

func parseTools(norm map[string]any) toolSet {
	var ts toolSet
	tools, _ := norm["tools"].([]any)
	for _, tv := range tools {
		t, _ := tv.(map[string]any)
		decls, _ := t["functionDeclarations"].([]any)
		for _, dv := range decls {
			d, _ := dv.(map[string]any)
			name, _ := d["name"].(string)
			params, ok := d["parametersJsonSchema"].(map[string]any)
			if !ok {
				params, _ = d["parameters"].(map[string]any)
			}
			if name != "" {
				ts.funcs = append(ts.funcs, funcDecl{name: name, params: params})
			}
		}
		_, s1 := t["googleSearch"]
		_, s2 := t["googleSearchRetrieval"]
		ts.search = ts.search || s1 || s2
		_, u := t["urlContext"]
		ts.urlContext = ts.urlContext || u
		_, c := t["codeExecution"]
		ts.codeExec = ts.codeExec || c
		if fs, ok := t["fileSearch"].(map[string]any); ok {
			ts.fileSearch = true
			for _, k := range []string{"fileSearchStoreNames", "file_search_store_names"} {
				names, _ := fs[k].([]any)
				for _, n := range names {
					if s, ok := n.(string); ok {
						ts.fileStores = append(ts.fileStores, s)
					}
				}
			}
		}
	}
	if tc, ok := norm["toolConfig"].(map[string]any); ok {
		if fc, ok := tc["functionCallingConfig"].(map[string]any); ok {
			ts.mode, _ = fc["mode"].(string)
			names, _ := fc["allowedFunctionNames"].([]any)
			for _, n := range names {
				if s, ok := n.(string); ok {
					ts.allowed = append(ts.allowed, s)
				}
			}
		}
	}
	return ts
}

func (ts toolSet) names() []string {
	out := make([]string, 0, len(ts.funcs))
	for _, f := range ts.funcs {
		out = append(out, f.name)
	}
	return out
}

func (ts toolSet) decl(name string) (funcDecl, bool) {
	for _, f := range ts.funcs {
		if f.name == name {
			return f, true
		}
	}
	return funcDecl{}, false
}

// calls decides the function calls of an answer: the scripted ones the
// request declares, else, when function calling is mode ANY (the model
// must call), the first allowed declared function. Otherwise none: in
// mode AUTO the real model's choice does not follow from the request, so
// the emulator answers text unless scripted.
func (ts toolSet) calls(sc Script) []FunctionCall {
	var out []FunctionCall
	for _, c := range sc.FunctionCalls {
		if d, ok := ts.decl(c.Name); ok {
			if c.Args == nil {
				c.Args = exampleArgs(d.params)
			}
			out = append(out, c)
		}
	}
	if len(out) > 0 || ts.mode != "ANY" {
		return out
	}
	for _, f := range ts.funcs {
		if len(ts.allowed) == 0 || slices.Contains(ts.allowed, f.name) {
			return []FunctionCall{{Name: f.name, Args: exampleArgs(f.params)}}
		}
	}
	return nil
}

// exampleArgs returns deterministic arguments that satisfy a parameter
// schema (OpenAPI or JSON Schema): every property with a value of its
// type (the first enum value when there is one).
func exampleArgs(schema map[string]any) map[string]any {
	out := map[string]any{}
	props, _ := schema["properties"].(map[string]any)
	for _, k := range sortedKeys(props) {
		p, _ := props[k].(map[string]any)
		out[k] = exampleValue(p, 0)
	}
	return out
}

func exampleValue(p map[string]any, depth int) any {
	if e, ok := p["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ, _ := p["type"].(string)
	switch strings.ToLower(typ) {
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "array":
		if depth > 3 {
			return []any{}
		}
		it, _ := p["items"].(map[string]any)
		return []any{exampleValue(it, depth+1)}
	case "object":
		if depth > 3 {
			return map[string]any{}
		}
		return exampleArgs(p)
	}
	return "example"
}

// callID is the id of a generated function call or code execution: eight
// lower-case letters and digits, like the API's.
func callID(seed string) string {
	sum := sha256.Sum256([]byte("emulator-call/" + seed))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	for i := range b {
		b[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(b)
}

// signature is a deterministic stand-in for a thought signature: "emu1"
// and 12 bytes of SHA-256 over the model and what it signs.
func signature(model, what string) string {
	sum := sha256.Sum256([]byte("emulator-signature/" + model + "/" + what))
	return base64.StdEncoding.EncodeToString(append([]byte("emu1"), sum[:12]...))
}

// base64URLID is a responseId: 23 characters of unpadded base64url, mixed
// case like the API's.
func base64URLID(seed string) string {
	sum := sha256.Sum256([]byte("emulator-response/" + seed))
	return base64.RawURLEncoding.EncodeToString(sum[:17])[:23]
}

// avgLogprobs is a deterministic, small negative average log-probability.
func avgLogprobs(text string) float64 {
	sum := sha256.Sum256([]byte(text))
	return -float64(binary.BigEndian.Uint16(sum[:2])%9000+1000) * 1e-8
}

var urlPattern = regexp.MustCompile(`https?://[^\s"'<>)\]]+`)

// promptURLs returns the URLs in the last user text, trailing punctuation
// trimmed, in order and without repeats.
func promptURLs(text string) []string {
	var out []string
	for _, u := range urlPattern.FindAllString(text, -1) {
		u = strings.TrimRight(u, ".,;:!?")
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// Grounding and URL-context metadata, in the API's field order.
type groundingJSON struct {
	SearchEntryPoint  *searchEntryPoint `json:"searchEntryPoint,omitempty"`
	GroundingChunks   []groundingChunk  `json:"groundingChunks,omitempty"`
	GroundingSupports []groundingSupp   `json:"groundingSupports,omitempty"`
	WebSearchQueries  []string          `json:"webSearchQueries,omitempty"`
}

type searchEntryPoint struct {
	RenderedContent string `json:"renderedContent"`
}

type groundingChunk struct {
	Web              *webChunk       `json:"web,omitempty"`
	RetrievedContext *retrievedChunk `json:"retrievedContext,omitempty"`
}

type webChunk struct {
	URI   string `json:"uri"`
	Title string `json:"title"`
}

type retrievedChunk struct {
	Text            string `json:"text"`
	FileSearchStore string `json:"fileSearchStore"`
}

type groundingSupp struct {
	Segment               segment `json:"segment"`
	GroundingChunkIndices []int   `json:"groundingChunkIndices"`
}

type segment struct {
	StartIndex int    `json:"startIndex,omitempty"`
	EndIndex   int    `json:"endIndex"`
	Text       string `json:"text"`
}

type urlContextJSON struct {
	URLMetadata []urlMetadata `json:"urlMetadata"`
}

type urlMetadata struct {
	RetrievedURL       string `json:"retrievedUrl"`
	URLRetrievalStatus string `json:"urlRetrievalStatus"`
}

// grounding builds the metadata of a grounded answer: one chunk per
// source (search results on example.com for googleSearch, the prompt's
// URLs for urlContext, the stores for fileSearch) supporting the whole
// text. The content is invented; only the shape is the API's.
func (ts toolSet) grounding(query, text string) (*groundingJSON, *urlContextJSON) {
	if !ts.search && !ts.urlContext && !ts.fileSearch {
		return nil, nil
	}
	g := &groundingJSON{}
	var uc *urlContextJSON
	if ts.search {
		q := strings.TrimSpace(query)
		if len(q) > 80 {
			q = q[:80]
		}
		g.WebSearchQueries = []string{q}
		g.SearchEntryPoint = &searchEntryPoint{RenderedContent: `<div class="emulator-search">` + htmlEscape(q) + `</div>`}
		g.GroundingChunks = append(g.GroundingChunks, groundingChunk{Web: &webChunk{
			URI: "https://example.com/search?q=" + url.QueryEscape(q), Title: "example.com"}})
	}
	if ts.urlContext {
		uc = &urlContextJSON{URLMetadata: []urlMetadata{}}
		for _, u := range promptURLs(query) {
			uc.URLMetadata = append(uc.URLMetadata, urlMetadata{RetrievedURL: u, URLRetrievalStatus: "URL_RETRIEVAL_STATUS_SUCCESS"})
			host := u
			if pu, err := url.Parse(u); err == nil && pu.Host != "" {
				host = pu.Host
			}
			g.GroundingChunks = append(g.GroundingChunks, groundingChunk{Web: &webChunk{URI: u, Title: host}})
		}
	}
	if ts.fileSearch {
		stores := ts.fileStores
		if len(stores) == 0 {
			stores = []string{"fileSearchStores/emulator"}
		}
		for _, s := range stores {
			g.GroundingChunks = append(g.GroundingChunks, groundingChunk{RetrievedContext: &retrievedChunk{
				Text: "Emulated passage retrieved for: " + strings.TrimSpace(query), FileSearchStore: s}})
		}
	}
	// One support per sentence (at most four), each citing a chunk in
	// turn; offsets are bytes of the text, as the API's.
	for start, k := 0, 0; len(g.GroundingChunks) > 0 && start < len(text) && k < 4; k++ {
		end := len(text)
		if i := strings.Index(text[start:], ". "); i >= 0 {
			end = start + i + 1
		}
		g.GroundingSupports = append(g.GroundingSupports, groundingSupp{
			Segment:               segment{StartIndex: start, EndIndex: end, Text: text[start:end]},
			GroundingChunkIndices: []int{k % len(g.GroundingChunks)}})
		start = end
		for start < len(text) && text[start] == ' ' {
			start++
		}
	}
	return g, uc
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// codeRun is an emulated code execution: the program and what it printed.
type codeRun struct {
	id, code, output string
	// noResult marks a server-side tool's own code (fileSearch), which the
	// API shows without a codeExecutionResult.
	noResult bool
}

// fileSearchCode is the executableCode part the API shows before a
// fileSearch answer (recording sse-2.5-pro-file-search).
func fileSearchCode(model, prompt string, t traits) codeRun {
	r := codeRun{code: fmt.Sprintf("print(file_search.query(query=%q))", truncateTokens(prompt, 15)), noResult: true}
	if t.gen3 {
		r.id = callID(model + "/file-search/" + prompt)
	}
	return r
}

// codeExecution returns the code the emulator "runs" for a prompt with
// the codeExecution tool: a program printing the prompt's length.
func codeExecution(model, prompt string, t traits) codeRun {
	out := fmt.Sprintf("%d\n", len([]rune(prompt)))
	r := codeRun{code: fmt.Sprintf("prompt = %q\nprint(len(prompt))\n", truncateTokens(prompt, 15)), output: out}
	if t.gen3 {
		r.id = callID(model + "/code/" + prompt)
	}
	return r
}
