package cache

// WriteJSON adds the text that raw, the inside of a JSON string literal
// (escaped), stands for, as far as it reads it in one pass: printable
// ASCII, spaces and the escapes \n \t \r \f \b \" \\ \/. It stops before a
// quote, a control byte, a byte of a multi-byte rune, a \u escape, any
// other backslash sequence, and a backslash last in raw (cut between two
// reads), and returns how many bytes of raw it read and how many bytes of
// text they stand for (used minus one a simple escape). What it read is
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
			default: // \u, or not JSON
				return i, n
			}
			i++
		default:
			return i, n
		}
		i++
		n++
	}
	return i, n
}

// jsonRun returns the end of the run that starts before j (p[j-1] is a
// word byte): word bytes and single spaces between them, as normalizeTo's
// run, and no quote or backslash. The run ends with a word byte.
func jsonRun(p []byte, j int) int {
	const (
		lsb = 0x0101010101010101
		msb = 0x8080808080808080
	)
	for {
		// As normalizeTo: sp carries a space last in the word before.
		sp := uint64(0)
		for j+8 <= len(p) {
			x := le64(p[j:])
			m := spaceMask(x)
			q, e := x^(lsb*'"'), x^(lsb*'\\')
			// No byte >= 0x80 or < ' ', no two spaces in a row, no quote,
			// no backslash.
			if (x|(x-lsb*' ')&^x|m&(m<<8|sp)|(q-lsb)&^q|(e-lsb)&^e)&msb != 0 {
				break
			}
			sp = m >> 56
			j += 8
		}
		if sp != 0 {
			j-- // a space last: the byte by byte step decides it
		}
		if j >= len(p) {
			return j
		}
		switch d := p[j]; {
		case jsonWord[d]:
			j++
		case d == ' ' && j+1 < len(p) && jsonWord[p[j+1]]:
			j += 2
		default:
			return j
		}
	}
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
