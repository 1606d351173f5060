package bench

import (
	"encoding/json"
	"fmt"
	"strings"
)

// jsonHistSession is a client that keeps its chat as a message array and
// sends it, JSON-encoded, inside one user text after a lead-in line, the
// new question as the array's last entry (issue 15 item 3; the 4% of
// NAIVE-PATTERNS.md's flattened histories that are a JSON dump of the
// message array). It reuses the English glued-fence conversation, so its
// figures compare with flat-glued-fence. The ideal is the same
// conversation as native turns, each document once.
func jsonHistSession() *Session {
	l := flatGluedEN
	s := &Session{Name: "flat-json-array", Kind: KindFlattened, Model: defaultModel,
		Description: "flattened as JSON: `[{\"role\":\"user\",\"content\":…},{\"role\":\"assistant\",\"content\":…},…]` (encoding/json) in one user text, the new question as the last entry, path/path.go pasted in turns 1 and 3, 4 turns"}
	d := fenceAnon(l.lang, Document(l.document))
	question := func(i int) (string, []piece) {
		parts := strings.SplitN(l.questions[i], "%s", 2)
		if len(parts) == 1 {
			return parts[0], []piece{txt(parts[0])}
		}
		return parts[0] + d + parts[1], []piece{txt(parts[0]), docRef(l.docName, refName(d), d), txt(parts[1])}
	}
	type entry struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var history []entry
	var native []msg
	for i := range l.questions {
		q, qp := question(i)
		history = append(history, entry{"user", q})
		b, err := json.Marshal(history)
		if err != nil {
			panic(fmt.Sprintf("bench: encoding the history: %v", err))
		}
		native = append(native, user(qp...))
		s.Turns = append(s.Turns, Turn{Naive: render([]msg{user(txt("Conversation so far:\n" + string(b)))}), Ideal: ideal(native), Answer: l.answers[i]})
		history = append(history, entry{"assistant", l.answers[i]})
		native = append(native, model(txt(l.answers[i])))
	}
	return s
}
