package cache

import (
	"encoding/binary"
	"math/bits"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// WriteJSON adds the text that raw, the inside of a JSON string literal
// (escaped), stands for, as far as it reads it in one pass: printable
// ASCII, valid multi-byte runes, the escapes \n \t \r \f \b \" \\ \/ and
// \u escapes but surrogates. It stops before a quote, a control byte,
// invalid UTF-8, a rune or an escape cut at the end of raw (by the read),
// a surrogate's \u escape (its pair may be cut) and anything not JSON, and
// returns how many bytes of raw it read and how many bytes of text they
// stand for. What it read is
// recorded exactly as Write of its unescaped text would record it
// (TestServedRecorderJSON); the caller unescapes what it stopped at itself
// and writes that with Write.
//
// The tap reads a long unary answer's text with it: unescaping the JSON
// string into a buffer and normalising that buffer here were two passes
// over every byte of the answer, and an eight-byte copy between them; this
// is one.
func (r *ServedRecorder) WriteJSON(raw []byte) (used, n int) {
	if r.nc > 0 {
		// A rune cut by the last Write is waiting for its end: only Write
		// can finish it.
		return 0, 0
	}
	used, n = jsonTo(r, raw)
	r.hashOn()
	return used, n
}

// jsonTo is WriteJSON's scan.
func jsonTo(r *ServedRecorder, p []byte) (used, n int) {
	i := 0
	for i < len(p) {
		c := p[i]
		switch {
		case jsonWord[c]:
			j := jsonRun(p, i+1)
			textTo(r, p[i:j])
			n += j - i
			i = j
			continue
		case c == ' ':
			whiteByte(r, ' ')
		case c == '\\':
			if i+1 == len(p) {
				return i, n
			}
			switch e := p[i+1]; e {
			case 'n':
				whiteByte(r, '\n')
			case 't':
				whiteByte(r, '\t')
			case 'r':
				whiteByte(r, '\r')
			case 'f':
				whiteByte(r, '\f')
			case 'b':
				textByte(r, '\b')
			case '"', '\\', '/':
				textByte(r, e)
			case 'u':
				k := jsonEscape(r, p[i:])
				if k == 0 {
					return i, n
				}
				i += 6
				n += k
				continue
			default: // not JSON
				return i, n
			}
			i++
		case c >= utf8.RuneSelf:
			ru, size := utf8.DecodeRune(p[i:])
			if ru == utf8.RuneError && size <= 1 {
				return i, n // invalid, or cut by the read
			}
			if unicode.IsSpace(ru) {
				whiteTo(r, p[i:i+size])
			} else {
				textTo(r, p[i:i+size])
			}
			i += size
			n += size
			continue
		default:
			return i, n
		}
		i++
		n++
	}
	return i, n
}

// jsonEscape adds the rune of the \u escape that p starts with and returns
// the bytes of text it stands for; 0, adding nothing, for a surrogate (a
// half of a pair, perhaps cut by the read), an escape cut by the read, and
// hex digits that are not.
func jsonEscape(r *ServedRecorder, p []byte) int {
	if len(p) < 6 {
		return 0
	}
	var ru rune
	for _, c := range p[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0
		}
		ru = ru<<4 | rune(c)
	}
	if utf16.IsSurrogate(ru) {
		return 0
	}
	if ru < utf8.RuneSelf {
		if c := byte(ru); asciiSpace[c] {
			whiteByte(r, c)
		} else {
			textByte(r, c)
		}
		return 1
	}
	var q [utf8.UTFMax]byte
	b := utf8.AppendRune(q[:0], ru)
	if unicode.IsSpace(ru) {
		whiteTo(r, b)
	} else {
		textTo(r, b)
	}
	return len(b)
}

// jsonRun returns the end of the run that starts before j (p[j-1] is a
// word byte): word bytes and single spaces between them, as normalizeTo's
// run, and no quote or backslash. The run ends with a word byte.
//
// Every byte the word test marks ends the run (a byte >= 0x80 or < ' ',
// a quote, a backslash, the second of two spaces), and the lowest mark of
// the subtractions is exact (a borrow only marks bytes above a true one):
// the run ends at the lowest mark, or at the space before it. Going on
// byte by byte from the word's start instead tested the word again after
// each of its bytes, up to eight times at every escape of the text.
func jsonRun(p []byte, j int) int {
	// As normalizeTo: sp carries a space last in the word before.
	sp := uint64(0)
	for j+8 <= len(p) {
		stop, m := jsonStop(binary.LittleEndian.Uint64(p[j:]), sp)
		if stop != 0 {
			return jsonRunEnd(p, j+bits.TrailingZeros64(stop)>>3)
		}
		sp = m >> 56
		j += 8
		// A run longer than a word: sixteen bytes a step, half the
		// loop's tests and bounds checks. (Most runs of prose end in
		// their first word, which this would only slow down.)
		for j+16 <= len(p) {
			w := p[j : j+16 : j+16]
			sx, mx := jsonStop(binary.LittleEndian.Uint64(w), sp)
			sy, my := jsonStop(binary.LittleEndian.Uint64(w[8:]), mx>>56)
			if sx|sy != 0 {
				if sx == 0 {
					j, sx = j+8, sy
				}
				return jsonRunEnd(p, j+bits.TrailingZeros64(sx)>>3)
			}
			sp = my >> 56
			j += 16
		}
	}
	if sp != 0 {
		j-- // a space last: the byte by byte step decides it
	}
	for j < len(p) {
		switch d := p[j]; {
		case jsonWord[d]:
			j++
		case d == ' ' && j+1 < len(p) && jsonWord[p[j+1]]:
			j += 2
		default:
			return j
		}
	}
	return j
}

// jsonStop returns the word test of jsonRun for x: 0x80 in the byte that
// ends the run (a byte >= 0x80 or < ' ', a quote, a backslash, the second
// of two spaces; sp has 0x80 in its low byte when the byte before x is a
// space) and perhaps in bytes above it, none below; and x's spaceMask.
func jsonStop(x, sp uint64) (stop, m uint64) {
	const (
		lsb = 0x0101010101010101
		msb = 0x8080808080808080
	)
	m = spaceMask(x)
	q, e := x^(lsb*'"'), x^(lsb*'\\')
	return (x | (x-lsb*' ')&^x | m&(m<<8|sp) | (q-lsb)&^q | (e-lsb)&^e) & msb, m
}

// jsonRunEnd returns the end of the run whose stop is p[s]: s, or the
// space before it, which is not between word bytes.
func jsonRunEnd(p []byte, s int) int {
	if p[s-1] == ' ' {
		return s - 1
	}
	return s
}

// jsonWord marks the bytes of a JSON string that stand for themselves and
// are not white space: printable ASCII but the space, the quote and the
// backslash (DEL included, which is not white space).
var jsonWord = func() (t [256]bool) {
	for c := '!'; c < 0x80; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = false, false
	return t
}()

// whiteByte is whiteTo of one byte.
func whiteByte(r *ServedRecorder, c byte) {
	r.space = len(r.buf) > 0
	if r.nt < maxTrail {
		r.trail[r.nt] = c
	}
	r.nt++
}

// textByte is textTo of one byte.
func textByte(r *ServedRecorder, c byte) {
	if r.space {
		r.space = false
		r.buf = append(r.buf, ' ')
	}
	r.buf = append(r.buf, c)
	r.nt = 0
}
