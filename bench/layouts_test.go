package bench

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/genai"
)

// contentsText joins the text of every part of cs.
func contentsText(cs []*genai.Content) string {
	var b strings.Builder
	for _, c := range cs {
		for _, p := range c.Parts {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// The layout sessions are flattened (one user turn per request) in the
// layouts they name, with the label glued to an opening fence where they
// say so, and an ideal that saves on the documents they re-paste.
func TestLayoutSessions(t *testing.T) {
	needCorpus(t)
	// Each layout's user label and, where the layout glues it, what follows
	// it on the label's line when the segment opens with its document.
	want := map[string]struct{ label, glued string }{
		"flat-glued-fence":   {"User: ", "User: ```go\n"},
		"flat-glued-zh":      {"用户：", "用户：```go\n"},
		"flat-bracketed":     {"[USER]: ", "[USER]: ```js\n"},
		"flat-headings":      {"### Usuário\n\n", ""},
		"flat-chat-template": {"<start_of_turn>user\n", ""},
		"flat-xml-turns":     {"<turn><user>", ""},
		"flat-langchain":     {"Human: ", "Human: ```py\n"},
	}
	seen := 0
	for _, s := range layoutSessions() {
		w, ok := want[s.Name]
		if !ok {
			t.Errorf("unexpected layout session %s", s.Name)
			continue
		}
		seen++
		if s.Kind != KindFlattened || len(s.Turns) != 4 {
			t.Errorf("%s: kind %s, %d turns, want flattened with 4", s.Name, s.Kind, len(s.Turns))
		}
		for i, turn := range s.Turns {
			if len(turn.Naive) != 1 || turn.Naive[0].Role != genai.RoleUser {
				t.Fatalf("%s request %d: %d contents, want one user turn", s.Name, i+1, len(turn.Naive))
			}
			if got, wantTurns := len(turn.Ideal), 2*i+1; got != wantTurns {
				t.Errorf("%s request %d: ideal has %d turns, want %d", s.Name, i+1, got, wantTurns)
			}
			naive := contentsText(turn.Naive)
			if n := strings.Count(naive, w.label); n != i+1 {
				t.Errorf("%s request %d: %q occurs %d times, want once per user segment (%d)", s.Name, i+1, w.label, n, i+1)
			}
			if w.glued != "" && !strings.Contains(naive, w.glued) {
				t.Errorf("%s request %d: no %q", s.Name, i+1, w.glued)
			}
			for j := range i {
				if !strings.Contains(naive, s.Turns[j].Answer) {
					t.Errorf("%s request %d: the transcript does not quote answer %d verbatim", s.Name, i+1, j+1)
				}
			}
		}
		last := s.Turns[len(s.Turns)-1]
		if n, id := len(contentsText(last.Naive)), len(contentsText(last.Ideal)); 10*id > 9*n {
			t.Errorf("%s: the ideal's last request is %d bytes of text against %d naive, want at least 10%% less", s.Name, id, n)
		}
	}
	if seen < 6 {
		t.Errorf("%d layout sessions, want at least six", seen)
	}
}

// The ideal of a two-document session keeps both documents in full from
// the turn each first appears in, and replaces only exact repeats.
func TestTwoDocSessionsIdeal(t *testing.T) {
	needCorpus(t)
	for _, s := range twoDocSessions() {
		if s.Kind != KindTwoDoc {
			t.Errorf("%s: kind %s", s.Name, s.Kind)
		}
		var docs []string
		for i, turn := range s.Turns {
			for _, d := range fencedBlocks(contentsText(turn.Naive[len(turn.Naive)-1:])) {
				if !slices.Contains(docs, d) {
					docs = append(docs, d)
				}
			}
			ideal := contentsText(turn.Ideal)
			for _, d := range docs {
				if n := strings.Count(ideal, d); n != 1 {
					t.Errorf("%s request %d: a document occurs %d times in the ideal, want exactly once", s.Name, i+1, n)
				}
			}
			if strings.Contains(ideal, "[superseded:") {
				t.Errorf("%s request %d: the ideal supersedes a document", s.Name, i+1)
			}
		}
		if len(docs) != 2 {
			t.Errorf("%s: %d distinct documents, want 2", s.Name, len(docs))
		}
	}
}

// fencedBlocks returns the Markdown fences of text that open at the start
// of a line with a language ("```go\n" … "\n```").
func fencedBlocks(text string) []string {
	var out []string
	for rest := text; ; {
		i := strings.Index(rest, "```")
		if i < 0 {
			return out
		}
		if i > 0 && rest[i-1] != '\n' || strings.HasPrefix(rest[i+3:], "\n") {
			rest = rest[i+3:]
			continue
		}
		end := strings.Index(rest[i:], "\n```")
		if end < 0 {
			return out
		}
		out = append(out, rest[i:i+end+4])
		rest = rest[i+end+4:]
	}
}
