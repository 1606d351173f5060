package bench

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/genai"
)

// The JSON-history session sends, per request, one user text: a lead-in
// line and the message array as encoding/json writes it, the new question
// its last entry, every earlier answer quoted as a JSON string; its ideal
// is the native conversation.
func TestJSONHistSession(t *testing.T) {
	needCorpus(t)
	s := jsonHistSession()
	if s.Kind != KindFlattened || len(s.Turns) != 4 {
		t.Fatalf("%s: kind %s, %d turns, want flattened with 4", s.Name, s.Kind, len(s.Turns))
	}
	for i, turn := range s.Turns {
		if len(turn.Naive) != 1 || turn.Naive[0].Role != genai.RoleUser {
			t.Fatalf("request %d: %d contents, want one user turn", i+1, len(turn.Naive))
		}
		if got, want := len(turn.Ideal), 2*i+1; got != want {
			t.Errorf("request %d: ideal has %d turns, want %d", i+1, got, want)
		}
		text, ok := strings.CutPrefix(contentsText(turn.Naive), "Conversation so far:\n")
		if !ok {
			t.Fatalf("request %d: no lead-in line", i+1)
		}
		var msgs []struct{ Role, Content string }
		if err := json.Unmarshal([]byte(text), &msgs); err != nil {
			t.Fatalf("request %d: the history is not a JSON array: %v", i+1, err)
		}
		if len(msgs) != 2*i+1 || msgs[len(msgs)-1].Role != "user" {
			t.Fatalf("request %d: %d messages, want %d ending on the question", i+1, len(msgs), 2*i+1)
		}
		for j := range i {
			if msgs[2*j+1].Role != "assistant" || msgs[2*j+1].Content != s.Turns[j].Answer {
				t.Errorf("request %d: message %d does not quote answer %d verbatim", i+1, 2*j+1, j+1)
			}
		}
	}
}
