package proxy

import (
	"unicode"
	"unicode/utf8"
)

// textTokens counts the tokens of text by the runs a tokenizer splits it
// into, the model the ledger prices what it cannot measure with (a
// reference, what un-flattening removed): a word (letters, '_', and an
// apostrophe between letters) of n runes one token up to 6 runes and one
// more per started 4 beyond; each digit one token (the Gemma tokenizer
// Gemini uses splits digits one by one); a run of ASCII punctuation and
// symbols one token per 2 bytes; a single space nothing (it belongs to
// the next word), any other run of white space one token; each Han, kana
// or Hangul rune, and any other rune, one token. The emulator's tokenizer
// (internal/emulator CountTokens) counts by the same runs
// (TestTextTokensMatchesEmulator), so the bench cannot say how close it is
// on Gemini, whose vocabulary merges common sequences (`":"`, `\n\t`)
// that the model counts as two tokens or more.
func textTokens(text string) int {
	n := 0
	for i := 0; i < len(text); {
		c := text[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(text[i:])
			switch slowClassOf(r) {
			case classWord:
				i = wordEnd(text, i+size, 1, &n)
			case classSpace:
				i = spaceEnd(text, i+size, 1, false, &n)
			default:
				n++
				i += size
			}
			continue
		}
		switch asciiClass[c] {
		case classWord:
			j := i + 1
			for j < len(text) && asciiClass[text[j]] == classWord {
				j++
			}
			if j < len(text) && (text[j] == '\'' || text[j] >= utf8.RuneSelf) {
				i = wordEnd(text, j, j-i, &n)
				continue
			}
			n += wordTokens(j - i)
			i = j
		case classSpace:
			j := i + 1
			for j < len(text) && asciiClass[text[j]] == classSpace {
				j++
			}
			if j < len(text) && text[j] >= utf8.RuneSelf {
				i = spaceEnd(text, j, j-i, c == ' ', &n)
				continue
			}
			if j-i > 1 || c != ' ' {
				n++
			}
			i = j
		case classPunct:
			j := i + 1
			// '_' starts a word but goes on a run of punctuation.
			for j < len(text) && (asciiClass[text[j]] == classPunct || text[j] == '_') {
				j++
			}
			n += (j - i + 1) / 2
			i = j
		default: // a digit or a control byte
			n++
			i++
		}
	}
	return n
}

// wordEnd returns the end of the word that goes on at text[j] after runes
// runes, and adds its tokens to n. An apostrophe between letters is part
// of the word.
func wordEnd(text string, j, runes int, n *int) int {
	for j < len(text) {
		c := text[j]
		if c < utf8.RuneSelf {
			if asciiClass[c] == classWord {
				runes++
				j++
				continue
			}
			if c != '\'' || j+1 >= len(text) {
				break
			}
			if r, _ := runeAt(text, j+1); classOf(r) != classWord {
				break
			}
			runes++
			j++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[j:])
		if slowClassOf(r) != classWord {
			break
		}
		runes++
		j += size
	}
	*n += wordTokens(runes)
	return j
}

// spaceEnd returns the end of the white space that goes on at text[j]
// after runes runes (one space alone when single), and adds its token to
// n: none for a single space.
func spaceEnd(text string, j, runes int, single bool, n *int) int {
	for j < len(text) {
		if c := asciiClass[text[j]]; c != classMulti {
			if c != classSpace {
				break
			}
			runes++
			j++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[j:])
		if classOf(r) != classSpace {
			break
		}
		runes++
		j += size
	}
	if runes > 1 || !single {
		*n++
	}
	return j
}

// Rune classes of textTokens.
const (
	classOther = iota
	classWord
	classDigit
	classSpace
	classPunct // ASCII punctuation and symbols
	classMulti // a byte of a multi-byte rune (asciiClass)
)

// asciiClass is classOf of each ASCII byte, and classMulti of the bytes
// of a multi-byte rune.
var asciiClass = func() (t [256]uint8) {
	for c := range 256 {
		t[c] = classMulti
		if c < utf8.RuneSelf {
			t[c] = slowClassOf(rune(c))
		}
	}
	return t
}()

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return slowClassOf(r)
}

func slowClassOf(r rune) uint8 {
	switch {
	case r == '_' || unicode.IsLetter(r) && !unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul):
		return classWord
	case unicode.IsDigit(r):
		return classDigit
	case unicode.IsSpace(r):
		return classSpace
	case r < utf8.RuneSelf && (unicode.IsPunct(r) || unicode.IsSymbol(r)):
		return classPunct
	}
	return classOther
}

// runeAt decodes the rune at text[i]: an invalid byte is one rune of its
// own (utf8.RuneError), as a conversion to []rune makes it.
func runeAt(text string, i int) (rune, int) {
	if c := text[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(text[i:])
}

// wordTokens is the tokens of a word of n runes.
func wordTokens(n int) int {
	if n <= 6 {
		return 1
	}
	return 1 + (n-6+3)/4
}
