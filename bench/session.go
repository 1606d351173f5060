package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/genai"
)

// Kind says what the proxy is expected to do with a session.
type Kind string

const (
	// KindDedup sessions re-send documents, context or images: the proxy
	// should replace the repeats by references.
	KindDedup Kind = "dedup"
	// KindFlattened sessions flatten their history into one user turn; the
	// proxy can un-flatten them only with a Verifier of served responses.
	KindFlattened Kind = "flattened"
	// KindControl sessions are already well written or must not be touched:
	// the proxy must forward them byte for byte.
	KindControl Kind = "control"
	// KindTwoDoc sessions hold two different documents that look alike
	// (two versions compared in one turn, two environments' configurations):
	// both are current, so the proxy may replace only exact repeats; the
	// ideal client keeps both in full.
	KindTwoDoc Kind = "two-doc"
	// KindStateless sessions send no history (each request is one user
	// turn): the proxy removes nothing, and must not add prompt tokens;
	// rewrite.stable_prefix reorders them for the implicit cache.
	KindStateless Kind = "stateless"
	// KindJSON sessions send their turns as JSON texts whose string
	// values hold the documents (issue 15): the proxy should replace the
	// repeats inside the values; the ideal client is the guide's builder
	// (SEED-BUILDER.md).
	KindJSON Kind = "json"
	// KindToolResult sessions return the same file from a tool more than
	// once (issue 15): each repeated read must cost the proxy at most a
	// reference.
	KindToolResult Kind = "tool-result"
)

// Session is one scripted client conversation.
type Session struct {
	// Name is a short identifier, Description a sentence for the tables.
	Name, Description string
	Kind              Kind
	// Model is the model id the client calls.
	Model string
	// Stream selects streamGenerateContent (SSE) instead of generateContent.
	Stream bool
	// Config is sent with every request (tools, generation settings); nil
	// sends none.
	Config *genai.GenerateContentConfig
	// Turns are the client's requests in order.
	Turns []Turn
}

// Turn is one request of a session.
type Turn struct {
	// Naive is what the naive client sends, Ideal what a perfectly written
	// stateful client sends for the same step.
	Naive, Ideal []*genai.Content
	// Answer is the scripted model answer to this request.
	Answer string
}

// Answers returns the scripted answers of s in request order.
func (s *Session) Answers() []string {
	out := make([]string, len(s.Turns))
	for i, t := range s.Turns {
		out[i] = t.Answer
	}
	return out
}

// piece is one element of a message: text, a document occurrence, an image
// or a part passed as is.
type piece struct {
	text string
	doc  *docOcc
	img  []byte
	mime string
	raw  *genai.Part
	brk  bool
}

// docOcc is one copy of a document inside a text.
type docOcc struct {
	// name identifies the document ("project tree" and "open tabs" for
	// secondary context).
	name string
	// ref is the name a reference to it shows (rewrite/doc.go NAME); empty
	// means name.
	ref string
	// body is the exact text the proxy replaces (wrapper lines included).
	body string
}

// refName is the NAME of a reference to a copy of the document.
func (d *docOcc) refName() string {
	if d.ref != "" {
		return d.ref
	}
	return d.name
}

// msg is one turn of a conversation before rendering.
type msg struct {
	role   string
	pieces []piece
}

// txt, doc, docRef, img and brk build pieces.
func txt(s string) piece          { return piece{text: s} }
func doc(name, body string) piece { return piece{doc: &docOcc{name: name, body: body}} }

// docRef is a document whose references show ref, not its name.
func docRef(name, ref, body string) piece {
	if ref == name {
		ref = ""
	}
	return piece{doc: &docOcc{name: name, ref: ref, body: body}}
}
func img(mime string, data []byte) piece { return piece{img: data, mime: mime} }

// brk ends the current text part: the next piece starts a new part of the
// same turn.
func brk() piece { return piece{brk: true} }

func user(ps ...piece) msg  { return msg{role: genai.RoleUser, pieces: ps} }
func model(ps ...piece) msg { return msg{role: genai.RoleModel, pieces: ps} }

// fence wraps a file in a Markdown fence with language and name.
func fence(lang, name, content string) string {
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	return "```" + lang + " " + name + "\n" + content + "```"
}

// fenceAnon wraps a file in a Markdown fence with a language and no name.
func fenceAnon(lang, content string) string {
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	return "```" + lang + "\n" + content + "```"
}

// refName is the NAME the proxy gives a block without a file name: its
// first line (rewrite/doc.go "Reference format").
func refName(block string) string {
	first, _, _ := strings.Cut(block, "\n")
	if strings.HasPrefix(first, "```") && strings.Contains(strings.TrimSpace(first), " ") {
		return "" // a named fence: the name
	}
	return first
}

// render turns msgs into contents as the naive client sends them: text and
// documents of one message join into one text part, images become
// inlineData parts.
func render(msgs []msg) []*genai.Content {
	return renderWith(msgs, nil)
}

// renderWith renders msgs, replacing the document occurrences and images
// named in refs (keyed by message and piece index) by reference text.
func renderWith(msgs []msg, refs map[[2]int]string) []*genai.Content {
	out := make([]*genai.Content, 0, len(msgs))
	for i, m := range msgs {
		c := &genai.Content{Role: m.role}
		var b strings.Builder
		flush := func() {
			if b.Len() > 0 {
				c.Parts = append(c.Parts, &genai.Part{Text: b.String()})
				b.Reset()
			}
		}
		for j, p := range m.pieces {
			ref, isRef := refs[[2]int{i, j}]
			switch {
			case p.brk:
				flush()
			case p.raw != nil:
				flush()
				c.Parts = append(c.Parts, p.raw)
			case p.img != nil && isRef:
				flush()
				c.Parts = append(c.Parts, &genai.Part{Text: ref})
			case p.img != nil:
				flush()
				c.Parts = append(c.Parts, &genai.Part{InlineData: &genai.Blob{MIMEType: p.mime, Data: p.img}})
			case p.doc != nil && isRef:
				b.WriteString(ref)
			case p.doc != nil:
				b.WriteString(p.doc.body)
			default:
				b.WriteString(p.text)
			}
		}
		flush()
		out = append(out, c)
	}
	return out
}

// minBlockBytes mirrors rewrite.DefaultOptions().MinBlockBytes: the ideal
// client, like the proxy, keeps blocks smaller than this.
const minBlockBytes = 512

// ideal renders msgs as a perfectly written stateful client would: the
// active version of each document (its latest content) appears once, at
// its first occurrence; every other copy of a document, and every repeat of
// an image, becomes a reference in the proxy's format (rewrite/doc.go
// "Reference format"), so that the ideal and the proxy pay the same for a
// reference.
func ideal(msgs []msg) []*genai.Content {
	type at struct{ m, p int }
	active := map[string]string{}
	for _, m := range msgs {
		for _, p := range m.pieces {
			if p.doc != nil {
				active[p.doc.name] = p.doc.body
			}
		}
	}
	kept := map[string]at{}
	for i, m := range msgs {
		for j, p := range m.pieces {
			if p.doc != nil && p.doc.body == active[p.doc.name] {
				if _, ok := kept[p.doc.name]; !ok {
					kept[p.doc.name] = at{i, j}
				}
			}
		}
	}
	refs := map[[2]int]string{}
	images := map[string]at{}
	for i, m := range msgs {
		for j, p := range m.pieces {
			switch {
			case p.img != nil:
				sum := sha256.Sum256(p.img)
				h := hex.EncodeToString(sum[:])
				first, ok := images[h]
				if !ok {
					images[h] = at{i, j}
					continue
				}
				refs[[2]int{i, j}] = fmt.Sprintf("[same %s sha256:%s as %s]", p.mime, h[:12], where(msgs, i, first.m, first.p < j))
			case p.doc != nil:
				k := kept[p.doc.name]
				if k == (at{i, j}) {
					continue
				}
				sum := sha256.Sum256([]byte(p.doc.body))
				h := hex.EncodeToString(sum[:12])[:12]
				var ref string
				if p.doc.body == active[p.doc.name] {
					ref = fmt.Sprintf("[unchanged: %s sha256:%s, identical to the copy %s]", p.doc.refName(), h, where(msgs, i, k.m, k.p < j))
				} else {
					ref = fmt.Sprintf("[superseded: %s sha256:%s, replaced by the version %s]", p.doc.refName(), h, where(msgs, i, k.m, k.p < j))
				}
				if len(p.doc.body) >= minBlockBytes && 2*len(ref) <= len(p.doc.body) {
					refs[[2]int{i, j}] = ref
				}
			}
		}
	}
	return renderWith(msgs, refs)
}

// where formats the location of the full copy in turn target as seen from
// turn cur (rewrite/doc.go: WHERE).
func where(msgs []msg, cur, target int, earlier bool) string {
	switch {
	case target == cur && earlier:
		return "earlier in this turn"
	case target == cur:
		return "later in this turn"
	case target == cur-1 && msgs[target].role == genai.RoleModel && msgs[cur].role == genai.RoleUser:
		return "in your previous reply"
	}
	return fmt.Sprintf("in turn %d", target+1)
}

// script accumulates a native conversation: each ask appends a user
// message and a model answer, and records a Turn whose naive request is the
// history so far and whose ideal request is its deduplicated rendering.
type script struct {
	s       *Session
	history []msg
	// control sessions are their own ideal.
	control bool
}

func newScript(name, desc string, kind Kind, modelID string) *script {
	return &script{s: &Session{Name: name, Description: desc, Kind: kind, Model: modelID}, control: kind == KindControl}
}

// ask sends u after the history and appends the answer (text and
// documents the model proposes) as the model's reply.
func (sc *script) ask(u msg, answer ...piece) {
	sc.history = append(sc.history, u)
	req := append([]msg(nil), sc.history...)
	t := Turn{Naive: render(req), Answer: plain(answer)}
	if sc.control {
		t.Ideal = t.Naive
	} else {
		t.Ideal = ideal(req)
	}
	sc.s.Turns = append(sc.s.Turns, t)
	sc.history = append(sc.history, model(answer...))
}

// plain joins the text of pieces as a text part would hold it.
func plain(ps []piece) string {
	var b strings.Builder
	for _, p := range ps {
		if p.doc != nil {
			b.WriteString(p.doc.body)
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}
