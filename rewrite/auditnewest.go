package rewrite

import (
	"encoding/binary"
	"math/bits"
)

// The newest user turn, found by the audit itself. A superseded reference
// must not lie in the newest user turn (DESIGN §3 "Never superseded"), and
// which turn that is must not be taken from the engine (the index it
// kept, the Report's Turn): newestTurn walks the body the cuts refer to
// (the original, or the original with the un-flattened turns the audit
// rebuilt) with a walker of its own, which shares no code with the
// scanner. Only a request with a superseded reference pays for it.
//
// The walk is one pass that decodes only member names and the role
// strings; the texts it skips with bytes.IndexByte over their quotes, so
// that a body of mostly text costs little more than a memchr over it.
// It follows the JSON grammar for everything that says where a value
// starts and ends (strings with their escapes, nesting), and fails on a
// body that is not one object, on "contents" given twice or not an
// array, on a content that is not an object or gives "role" twice or as
// anything but a string. It does not validate what it skips (numbers,
// literals, the characters of a string): a body that is not JSON was
// never rewritten, and the upstream rejects it either way.

// findNewest sets au.newest, once per audit, for the superseded cuts
// (cut i is the first): the newest user turn's span in b1, or {-1, -1}
// when the audit has seen a user turn start after the last superseded
// cut, so that none is in the newest one. It reads the shorter side of
// that cut first: the body up to the first user turn after it
// (walkContents), or, after a text cut, the body from the cut's string to
// its end (laterUserTurn); when that cannot tell, the whole body
// (newestTurn; walkContents reads it whole when no user turn starts
// after the cut, and is not run twice).
func (au *auditor) findNewest(i int) error {
	b := au.b1
	au.newestFound = true
	au.newest = span{-1, -1}
	var last *auditCut
	for k := range au.a.cuts {
		if c := &au.a.cuts[k]; c.super && !c.session {
			last = c
		}
	}
	if last == nil {
		return nil
	}
	var s span
	var later, ok bool
	if 2*last.start < len(b) || last.kind == kindImage {
		// Read whole when no user turn starts after the cut: s is then
		// the newest user turn.
		s, later, ok = walkContents(b, last.start)
	} else if laterUserTurn(b, last.str) {
		return nil
	} else {
		s, ok = newestTurn(b)
	}
	if !ok {
		return auditFail(AuditStructure, i, "no contents array found in the body")
	}
	if !later {
		au.newest = s
	}
	return nil
}

// newestTurn returns the raw span in b of the newest user turn: the last
// element of the top-level "contents" array whose "role" is "user" or
// "", or that has none. The span is {-1, -1} when no content is a user
// turn; ok is false when b is not one object of that form.
func newestTurn(b []byte) (s span, ok bool) {
	s, _, ok = walkContents(b, -1)
	return s, ok
}

// walkContents is newestTurn; with after >= 0 it stops at the first user
// turn that starts after offset after, and reports it with later (s is
// then that turn, and what follows it is not read).
func walkContents(b []byte, after int) (s span, later, ok bool) {
	s = span{-1, -1}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return s, false, false
	}
	seen := false
	i, ok = members(b, i, func(key []byte, v int) (int, bool) {
		if string(key) != "contents" {
			return skipJSON(b, v)
		}
		if seen || b[v] != '[' {
			return 0, false
		}
		seen = true
		return elements(b, v, func(e int) (int, bool) {
			end, user, ok := auditContent(b, e)
			if ok && user {
				s = span{e, end}
				if after >= 0 && e > after {
					// A user turn starts after offset after (read whole:
					// a second "role" would fail it): the rest of the
					// body is not read.
					later = true
					return 0, false
				}
			}
			return end, ok
		})
	})
	if later {
		return s, true, true
	}
	if !ok || skipWS(b, i) != len(b) {
		return span{-1, -1}, false, false
	}
	return s, false, true
}

// auditContent reads the content object that starts at b[e]: it returns
// the offset after it and whether it is a user turn (its "role" is
// "user", "" or absent).
func auditContent(b []byte, e int) (end int, user, ok bool) {
	if b[e] != '{' {
		return 0, false, false
	}
	user, roleSeen := true, false
	end, ok = members(b, e, func(key []byte, v int) (int, bool) {
		if string(key) != "role" {
			return skipJSON(b, v)
		}
		if roleSeen || b[v] != '"' {
			return 0, false
		}
		roleSeen = true
		z, ok := skipString(b, v)
		if !ok {
			return 0, false
		}
		role, ok := decodeRaw(nil, b[v+1:z-1])
		if !ok {
			return 0, false
		}
		user = len(role) == 0 || string(role) == "user"
		return z, true
	})
	return end, user, ok
}

// laterUserTurn reports whether a user turn starts after the text string
// str, read from the end of str to the end of b only: b, from right after
// str, closes exactly a part object, a parts array, a content object, an
// array whose later elements are contents, one of them a user turn, and
// the top object, in which no "contents" member follows. str must be a
// "text" string with no unescaped quote inside, so that the walk starts
// outside any string. If str is in a content, that content is then not
// the newest user turn; if it is not, no content holds it. false means
// only that this walk cannot tell.
func laterUserTurn(b []byte, str span) bool {
	if !isStringOf(b, str, "text") {
		return false
	}
	if z, ok := skipString(b, str.start-1); !ok || z != str.end+1 {
		return false
	}
	i, ok := objRest(b, str.end+1, nil) // the part
	if ok {
		i, ok = arrRest(b, i, nil) // the parts
	}
	if ok {
		i, ok = objRest(b, i, nil) // the content
	}
	later := false
	if ok {
		i, ok = arrRest(b, i, func(e int) (int, bool) {
			end, user, ok := auditContent(b, e)
			later = later || user
			return end, ok
		})
	}
	if ok {
		i, ok = objRest(b, i, func(key []byte, v int) (int, bool) {
			if string(key) == "contents" {
				return 0, false
			}
			return skipJSON(b, v)
		})
	}
	return ok && later && skipWS(b, i) == len(b)
}

// members walks the object that starts at b[i] ('{'), calling f with
// each member's decoded name and the offset of its value; f returns the
// offset after the value. members returns the offset after the object.
// A name is valid only during its call of f.
func members(b []byte, i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	i, ok := member(b, i, f)
	if !ok {
		return 0, false
	}
	return objRest(b, i, f)
}

// member reads the member that starts at b[i] (its name), calling f (or
// skipping the value when f is nil), and returns the offset after it.
func member(b []byte, i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	z, ok := skipString(b, i)
	if !ok {
		return 0, false
	}
	key, ok := decodeRaw(nil, b[i+1:z-1])
	if !ok {
		return 0, false
	}
	i = skipWS(b, z)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return 0, false
	}
	if f == nil {
		return skipJSON(b, i)
	}
	return f(key, i)
}

// objRest reads the rest of an object after a member's value at b[i]:
// more members (f as for member) and the closing brace, and returns the
// offset after it.
func objRest(b []byte, i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			var ok bool
			if i, ok = member(b, skipWS(b, i+1), f); !ok {
				return 0, false
			}
		default:
			return 0, false
		}
	}
}

// elements walks the array that starts at b[i] ('['), calling f with the
// offset of each element; f returns the offset after it. elements
// returns the offset after the array.
func elements(b []byte, i int, f func(e int) (int, bool)) (int, bool) {
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	if i >= len(b) {
		return 0, false
	}
	i, ok := f(i)
	if !ok {
		return 0, false
	}
	return arrRest(b, i, f)
}

// arrRest reads the rest of an array after an element ending at b[i]:
// more elements (f, or skipped when f is nil) and the closing bracket,
// and returns the offset after it.
func arrRest(b []byte, i int, f func(e int) (int, bool)) (int, bool) {
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			var ok bool
			if i = skipWS(b, i+1); i >= len(b) {
				return 0, false
			}
			if f == nil {
				i, ok = skipJSON(b, i)
			} else {
				i, ok = f(i)
			}
			if !ok {
				return 0, false
			}
		default:
			return 0, false
		}
	}
}

// skipWS returns the offset of the first byte at or after i that is not
// JSON white space.
func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// skipString returns the offset after the string that starts at b[i]
// ('"'): the first quote after it not escaped by an odd run of
// backslashes. Quotes are found eight bytes at a time (a text of code
// holds an escaped quote every few dozen bytes, too often for a call of
// bytes.IndexByte per quote to pay).
func skipString(b []byte, i int) (int, bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	const quotes = ones * '"'
	j := i + 1
	for {
		q := -1
		for ; j+8 <= len(b); j += 8 {
			x := binary.LittleEndian.Uint64(b[j:]) ^ quotes
			// The lowest byte flagged is the first quote (a flag above
			// a true one may be false; none below it is).
			if m := (x - ones) &^ x & highs; m != 0 {
				q = j + bits.TrailingZeros64(m)/8
				break
			}
		}
		if q < 0 {
			for ; j < len(b) && b[j] != '"'; j++ {
			}
			if j == len(b) {
				return 0, false
			}
			q = j
		}
		p := q - 1
		for p > i && b[p] == '\\' {
			p--
		}
		if (q-1-p)%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}

// skipJSON returns the offset after the value that starts at b[i]:
// strings by skipString, containers by their nesting (a closing bracket
// must match its opening one), anything else up to the next delimiter.
func skipJSON(b []byte, i int) (int, bool) {
	var st [32]byte
	stack := st[:0] // the closing brackets expected, innermost last
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			z, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			i = z
		case '{', '[':
			stack = append(stack, c+2) // '}' is '{'+2, ']' is '['+2
			i++
			continue
		case '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return 0, false
			}
			stack = stack[:len(stack)-1]
			i++
		default:
			if len(stack) > 0 {
				i++
				continue
			}
			// A scalar at the top: up to the next delimiter.
			for i < len(b) && !isWS(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
				i++
			}
			return i, true
		}
		if len(stack) == 0 {
			return i, true
		}
	}
	return 0, false
}
