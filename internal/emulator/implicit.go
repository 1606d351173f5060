package emulator

import (
	"crypto/sha256"
	"encoding/json"
	"github.com/gemini-proxy/gemini-proxy/internal/implicitcache"
	"time"
	"unicode"
	"unicode/utf8"
)

// implicitWindow is how long a request's prefix stays eligible for
// implicit caching; implicitPerKey and implicitKeys bound the memory.
const (
	implicitWindow = 5 * time.Minute
	implicitPerKey = 32
	implicitKeys   = 1024
)

// prefixUnit is one element of a request's prompt in the order the model
// reads it: the role marker of a content, or one of its parts.
type prefixUnit struct {
	// id identifies the unit: a hash of its kind and normalised JSON.
	id [sha256.Size]byte
	// text is the text of a part whose only member is text, for a match
	// inside it; "" for any other unit.
	text   string
	isText bool
	// cum is the tokens of the prompt up to and including this unit.
	cum modalityCounts
}

// prefixEntry is one remembered request for implicit caching: head
// identifies the model, systemInstruction, tools and toolConfig, which
// come first and cost base tokens; units follow.
type prefixEntry struct {
	head  [sha256.Size]byte
	base  modalityCounts
	units []prefixUnit
	at    time.Time
}

// prefixOf lays req's prompt out as units.
func prefixOf(req *genRequest, base modalityCounts, fileText func(string) (string, string, bool), at time.Time) prefixEntry {
	ident, _ := json.Marshal([]any{req.model, req.norm["systemInstruction"], req.norm["tools"], req.norm["toolConfig"]})
	e := prefixEntry{head: sha256.Sum256(ident), base: base, at: at}
	cum := modalityCounts{}
	cum.add(base)
	push := func(u prefixUnit, c modalityCounts) {
		next := modalityCounts{}
		next.add(cum)
		next.add(c)
		cum, u.cum = next, next
		e.units = append(e.units, u)
	}
	contents, _ := req.norm["contents"].([]any)
	for i, ct := range contents {
		m, _ := ct.(map[string]any)
		role, _ := m["role"].(string)
		push(prefixUnit{id: sha256.Sum256([]byte("role\x00" + role))}, modalityCounts{"TEXT": 1})
		parts, _ := m["parts"].([]any)
		for j, pv := range parts {
			if j >= len(req.contents[i].Parts) {
				break
			}
			p := req.contents[i].Parts[j]
			pm, _ := pv.(map[string]any)
			u := prefixUnit{}
			if t, ok := pm["text"].(string); ok && len(pm) == 1 {
				u.id = sha256.Sum256([]byte("text\x00" + t))
				u.text, u.isText = t, true
			} else {
				b, _ := json.Marshal(pm)
				u.id = sha256.Sum256(append([]byte("part\x00"), b...))
			}
			push(u, partTokens(p, fileText))
		}
	}
	return e
}

// shared returns the tokens of the longest prompt prefix e and old have in
// common: whole units, then, inside the first text part that differs, the
// tokenizer runs both texts share (the run that the difference cuts is
// left out). Nothing is shared when the model, system instruction or tools
// differ.
func (e *prefixEntry) shared(old *prefixEntry) modalityCounts {
	if e.head != old.head {
		return nil
	}
	got := old.base
	for i := 0; i < len(e.units) && i < len(old.units); i++ {
		a, b := &e.units[i], &old.units[i]
		if a.id == b.id {
			got = b.cum
			continue
		}
		if a.isText && b.isText {
			if n := sharedTokens(a.text, b.text); n > 0 {
				m := modalityCounts{}
				m.add(got)
				m["TEXT"] += n
				got = m
			}
		}
		break
	}
	return got
}

// sharedTokens is the tokens of the longest common prefix of a and b that
// ends on a run boundary of the emulator's tokenizer before the first
// difference, so that a word the difference cuts is not counted.
func sharedTokens(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	if n == len(a) && n == len(b) {
		return CountTokens(a)
	}
	if n == 0 {
		return 0
	}
	return CountTokens(a[:runStart(a, n-1)])
}

// runStart returns the byte offset where the tokenizer run holding byte
// pos of text starts (CountTokens documents the runs). Runs never look
// back, so CountTokens(text[:k]) + CountTokens(text[k:]) ==
// CountTokens(text) for the offset k it returns.
func runStart(text string, pos int) int {
	for i := 0; i < len(text); {
		end := runEnd(text, i)
		if pos < end {
			return i
		}
		i = end
	}
	return len(text)
}

// runEnd returns the end of the tokenizer run starting at byte i.
func runEnd(text string, i int) int {
	c, size := utf8.DecodeRuneInString(text[i:])
	j := i + size
	switch {
	case isWordRune(c):
		for j < len(text) {
			r, sz := utf8.DecodeRuneInString(text[j:])
			if isWordRune(r) {
				j += sz
				continue
			}
			if r == '\'' && j+sz < len(text) {
				if n, _ := utf8.DecodeRuneInString(text[j+sz:]); isWordRune(n) {
					j += sz
					continue
				}
			}
			break
		}
	case unicode.IsSpace(c):
		for j < len(text) {
			r, sz := utf8.DecodeRuneInString(text[j:])
			if !unicode.IsSpace(r) {
				break
			}
			j += sz
		}
	case c < 128 && (unicode.IsPunct(c) || unicode.IsSymbol(c)):
		for j < len(text) {
			r := rune(text[j])
			if r >= 128 || !(unicode.IsPunct(r) || unicode.IsSymbol(r)) {
				break
			}
			j++
		}
	}
	return j
}

// DefaultImplicitCacheMinTokens are the per-model minimum shared prefixes,
// in tokens, that implicit caching reports when Options set none, by
// model id prefix (the longest matching prefix wins; ids are resolved
// from their aliases first). They are implicitcache.MinTokens, which
// says which figure is documented and which recorded; the proxy's ledger
// reads the same table.
var DefaultImplicitCacheMinTokens = implicitcache.MinTokens

// implicitMin is the minimum shared prefix implicit caching reports for
// model; 0 means off.
func (s *Server) implicitMin(model string) int {
	if s.opts.ImplicitCacheMinTokens > 0 {
		return s.opts.ImplicitCacheMinTokens
	}
	v := modelVersion(model)
	if n, ok := s.opts.ImplicitCacheMinTokensByModel[v]; ok {
		return max(n, 0)
	}
	return implicitcache.Min(v)
}

// implicitHit reports the cached tokens of req's longest prompt prefix
// shared with a request of the same key in the last implicitWindow (see
// prefixEntry.shared), if it reaches the minimum, and remembers req.
func (s *Server) implicitHit(keyID string, req *genRequest, base modalityCounts, fileText func(string) (string, string, bool)) modalityCounts {
	e := prefixOf(req, base, fileText, s.now())
	min := s.implicitMin(req.model)
	s.mu.Lock()
	defer s.mu.Unlock()
	var best modalityCounts
	kept := s.implicit[keyID][:0:0]
	for i := range s.implicit[keyID] {
		old := &s.implicit[keyID][i]
		if e.at.Sub(old.at) > implicitWindow || e.at.Before(old.at.Add(-implicitWindow)) {
			continue
		}
		kept = append(kept, *old)
		if got := e.shared(old); min > 0 && got.total() >= min && got.total() > best.total() {
			best = got
		}
	}
	kept = append(kept, e)
	if len(kept) > implicitPerKey {
		kept = kept[len(kept)-implicitPerKey:]
	}
	if _, seen := s.implicit[keyID]; !seen {
		s.implicitKeys = append(s.implicitKeys, keyID)
		if len(s.implicitKeys) > implicitKeys {
			delete(s.implicit, s.implicitKeys[0])
			s.implicitKeys = s.implicitKeys[1:]
		}
	}
	s.implicit[keyID] = kept
	return best
}
