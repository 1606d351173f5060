package cache

import (
	"crypto/sha256"
	"unicode"
	"unicode/utf8"
)

// normalize collapses every run of white space (unicode.IsSpace) to one
// ASCII space and trims both ends, so that a transcript that re-wrapped or
// re-indented a served response still matches it.
func normalize(s string) string {
	// Fast path: already normalised text is returned without copying.
	if isNormalized(s) {
		return s
	}
	return string(appendNormalized(make([]byte, 0, len(s)), s))
}

// appendNormalized appends normalize(s) to b.
func appendNormalized(b []byte, s string) []byte {
	base := len(b)
	space := false
	for i := 0; i < len(s); {
		c := s[i]
		n := 1
		if c < utf8.RuneSelf {
			if asciiSpace[c] {
				i++
				space = len(b) > base
				continue
			}
		} else {
			var r rune
			r, n = utf8.DecodeRuneInString(s[i:])
			if unicode.IsSpace(r) {
				i += n
				space = len(b) > base
				continue
			}
		}
		if space {
			b = append(b, ' ')
			space = false
		}
		// Copy the run of ASCII bytes that stays as it is at once: non-space
		// bytes and single spaces between them. Other runes keep their
		// original bytes, so that invalid UTF-8 stays as it was on both the
		// recording and the lookup side.
		if c < utf8.RuneSelf {
			for n < len(s)-i {
				d := s[i+n]
				if d >= utf8.RuneSelf {
					break
				}
				if asciiSpace[d] {
					if d != ' ' || n+1 >= len(s)-i || s[i+n+1] >= utf8.RuneSelf || asciiSpace[s[i+n+1]] {
						break
					}
					n++ // the space, then the byte after it
				}
				n++
			}
		}
		b = append(b, s[i:i+n]...)
		i += n
	}
	return b
}

// asciiSpace marks the ASCII bytes unicode.IsSpace accepts.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// isNormalized reports whether normalize(s) == s.
func isNormalized(s string) bool {
	prev := true // a leading space is not normalised
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return isNormalizedSlow(s)
		}
		sp := c == ' '
		if c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || (sp && prev) {
			return false
		}
		prev = sp
	}
	return !prev || s == ""
}

func isNormalizedSlow(s string) bool {
	prev := true
	for _, r := range s {
		sp := unicode.IsSpace(r)
		if sp && (prev || r != ' ') {
			return false
		}
		prev = sp
	}
	return !prev || s == ""
}

// prefixCuts are the lengths, in bytes of normalised text, at which a
// served response's prefix is indexed. A query of length q looks up the
// largest cut not above q, so a long-prefix lookup is one hash lookup
// whatever the number of stored responses. Powers of four keep the index at
// most seven entries for a 1 MiB response.
var prefixCuts = [...]int{64, 256, 1024, 4096, 16384, 65536, 262144}

// cutAt returns the largest index i <= c at a rune boundary of s (i ==
// len(s) counts as a boundary). It never returns less than c-3.
func cutAt[T string | []byte](s T, c int) int {
	if c >= len(s) {
		return len(s)
	}
	for c > 0 && !utf8.RuneStart(s[c]) {
		c--
	}
	return c
}

// queryCut returns the prefix cut used to look up a query of normalised
// length q, or 0 when q is shorter than the smallest cut.
func queryCut(q int) int {
	c := 0
	for _, p := range prefixCuts {
		if p > q {
			break
		}
		c = p
	}
	return c
}

// digest is a SHA-256 of normalised text.
type digest [sha256.Size]byte
