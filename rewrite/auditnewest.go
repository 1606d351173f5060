package rewrite

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
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
// strings; the texts it skips by their quotes, sixteen bytes at a time,
// and passes over the spans of re-sent documents it has already read
// (walker.known), so that each distinct document is read about once.
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
	w := &walker{b: b}
	if au.pass {
		w.known(au.a.cuts)
	}
	var s span
	var later, ok bool
	if 2*last.start < len(b) || last.kind == kindImage {
		// Read whole when no user turn starts after the cut: s is then
		// the newest user turn.
		s, later, ok = w.walkContents(last.start)
	} else if w.laterUserTurn(last.str) {
		return nil
	} else {
		s, ok = w.newestTurn()
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
func newestTurn(b []byte) (s span, ok bool) { return (&walker{b: b}).newestTurn() }

func (w *walker) newestTurn() (s span, ok bool) {
	s, _, ok = w.walkContents(-1)
	return s, ok
}

// walkContents is newestTurn; with after >= 0 it stops at the first user
// turn that starts after offset after, and reports it with later (s is
// then that turn, and what follows it is not read).
func walkContents(b []byte, after int) (s span, later, ok bool) {
	return (&walker{b: b}).walkContents(after)
}

func (w *walker) walkContents(after int) (s span, later, ok bool) {
	b := w.b
	s = span{-1, -1}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return s, false, false
	}
	seen := false
	i, ok = w.members(i, func(key []byte, v int) (int, bool) {
		if string(key) != "contents" {
			return w.skipJSON(v)
		}
		if seen || b[v] != '[' {
			return 0, false
		}
		seen = true
		return w.elements(v, func(e int) (int, bool) {
			end, user, ok := w.auditContent(e)
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
func (w *walker) auditContent(e int) (end int, user, ok bool) {
	b := w.b
	if b[e] != '{' {
		return 0, false, false
	}
	user, roleSeen := true, false
	end, ok = w.members(e, func(key []byte, v int) (int, bool) {
		if string(key) != "role" {
			return w.skipJSON(v)
		}
		if roleSeen || b[v] != '"' {
			return 0, false
		}
		roleSeen = true
		z, ok := w.skipString(v)
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
func laterUserTurn(b []byte, str span) bool { return (&walker{b: b}).laterUserTurn(str) }

func (w *walker) laterUserTurn(str span) bool {
	b := w.b
	if !isStringOf(b, str, "text") {
		return false
	}
	if z, ok := w.skipString(str.start - 1); !ok || z != str.end+1 {
		return false
	}
	i, ok := w.objRest(str.end+1, nil) // the part
	if ok {
		i, ok = w.arrRest(i, nil) // the parts
	}
	if ok {
		i, ok = w.objRest(i, nil) // the content
	}
	later := false
	if ok {
		i, ok = w.arrRest(i, func(e int) (int, bool) {
			end, user, ok := w.auditContent(e)
			later = later || user
			return end, ok
		})
	}
	if ok {
		i, ok = w.objRest(i, func(key []byte, v int) (int, bool) {
			if string(key) == "contents" {
				return 0, false
			}
			return w.skipJSON(v)
		})
	}
	return ok && later && skipWS(b, i) == len(b)
}

// members walks the object that starts at b[i] ('{'), calling f with
// each member's decoded name and the offset of its value; f returns the
// offset after the value. members returns the offset after the object.
// A name is valid only during its call of f.
func (w *walker) members(i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	b := w.b
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	i, ok := w.member(i, f)
	if !ok {
		return 0, false
	}
	return w.objRest(i, f)
}

// member reads the member that starts at b[i] (its name), calling f (or
// skipping the value when f is nil), and returns the offset after it.
func (w *walker) member(i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	b := w.b
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	z, ok := w.skipString(i)
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
		return w.skipJSON(i)
	}
	return f(key, i)
}

// objRest reads the rest of an object after a member's value at b[i]:
// more members (f as for member) and the closing brace, and returns the
// offset after it.
func (w *walker) objRest(i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	b := w.b
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
			if i, ok = w.member(skipWS(b, i+1), f); !ok {
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
func (w *walker) elements(i int, f func(e int) (int, bool)) (int, bool) {
	b := w.b
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
	return w.arrRest(i, f)
}

// arrRest reads the rest of an array after an element ending at b[i]:
// more elements (f, or skipped when f is nil) and the closing bracket,
// and returns the offset after it.
func (w *walker) arrRest(i int, f func(e int) (int, bool)) (int, bool) {
	b := w.b
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
				i, ok = w.skipJSON(i)
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
// backslashes.
func skipString(b []byte, i int) (int, bool) {
	if q := realQuote(b, i, i+1, len(b)); q >= 0 {
		return q + 1, true
	}
	return 0, false
}

// realQuote returns the offset of the first quote in b[j:lim] not escaped
// by an odd run of backslashes, counted back to b[i] at most (the opening
// quote), or -1 when there is none. Quotes are found sixteen bytes at a
// time, two words tested together (a text of code holds an escaped quote
// every few dozen bytes, too often for a call of bytes.IndexByte per
// quote to pay; one word a step was 1.3x slower on such text).
func realQuote(b []byte, i, j, lim int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	const quotes = ones * '"'
	b = b[:lim]
	for {
		q := -1
		for ; j+16 <= len(b); j += 16 {
			w := b[j : j+16]
			x1 := binary.LittleEndian.Uint64(w) ^ quotes
			x2 := binary.LittleEndian.Uint64(w[8:]) ^ quotes
			// The lowest byte flagged is the first quote (a flag above
			// a true one may be false; none below it is).
			m1 := (x1 - ones) &^ x1 & highs
			m2 := (x2 - ones) &^ x2 & highs
			if m1|m2 != 0 {
				if m1 != 0 {
					q = j + bits.TrailingZeros64(m1)/8
				} else {
					q = j + 8 + bits.TrailingZeros64(m2)/8
				}
				break
			}
		}
		if q < 0 {
			for ; j < len(b) && b[j] != '"'; j++ {
			}
			if j == len(b) {
				return -1
			}
			q = j
		}
		p := q - 1
		for p > i && b[p] == '\\' {
			p--
		}
		if (q-1-p)%2 == 0 {
			return q
		}
		j = q + 1
	}
}

// The walk passes over spans it already knows hold no quote that could
// end a string (issue 17: the walk was most of the audit's cost, reading
// the same re-sent documents again and again). A span is clear when no
// quote in it follows an even run of backslashes counted from the span's
// start: entered inside a string after an even run of backslashes (the
// walk counts it), it cannot end the string, so the walk goes on after
// it, and finds the same end as a walk of every byte. Only the audit's
// own reading makes a span clear, never the engine's word: the records
// say only where to look (each cut's content and its full copy's,
// auditCut cs..ce and ts..te), and
//
//   - a full copy's content is clear when the audit read it whole and
//     found no such quote (realQuote);
//   - a cut's content is clear when it holds the same bytes as a clear
//     full copy's content; when only a prefix and a suffix are the same
//     (an older version of the document), those are clear: the prefix
//     from the cut's start, the suffix from just after its first byte
//     that is not a backslash (so that no run of backslashes in it
//     reaches back into the bytes that differ), and the walk reads what
//     lies between.
//
// Spans are settled when the walk first reaches them (or a cut reaches
// its full copy), so a walk that stops early pays nothing for the rest.

// walker is one walk of b for the newest user turn, with the spans it may
// pass over (none for the package-level functions).
type walker struct {
	b []byte
	// ahead are the spans the walk may pass over, sorted and disjoint.
	ahead []aheadSpan
	// copies are the distinct full copies' contents the cuts name.
	copies []copySpan
}

// aheadSpan is a span the walk may pass over once settled clear: a cut's
// content (copy is the index in walker.copies of its full copy's) or a
// full copy's content (self).
type aheadSpan struct {
	s     span
	copy  int
	self  bool
	state clearState
}

// copySpan is a full copy's content and what the audit found in it.
type copySpan struct {
	s     span
	state clearState
}

type clearState uint8

const (
	spanUnsettled clearState = iota
	spanClear
	spanNotClear
)

// known records the spans of the cuts' contents and their full copies'
// for the walk to settle as it reaches them. Spans out of range, empty or
// overlapping an earlier one are left out: they are only ever a saving.
func (w *walker) known(cuts []auditCut) {
	n := len(w.b)
	valid := func(s span) bool { return 0 <= s.start && s.start < s.end && s.end <= n }
	w.copies = make([]copySpan, 0, len(cuts))
	w.ahead = make([]aheadSpan, 0, 2*len(cuts)+1)
	for k := range cuts {
		c := &cuts[k]
		if c.session || !valid(span{c.ts, c.te}) {
			continue
		}
		w.copies = append(w.copies, copySpan{s: span{c.ts, c.te}})
	}
	slices.SortFunc(w.copies, func(x, y copySpan) int {
		return cmp.Or(cmp.Compare(x.s.start, y.s.start), cmp.Compare(x.s.end, y.s.end))
	})
	w.copies = slices.Compact(w.copies)
	for k := range w.copies {
		w.ahead = append(w.ahead, aheadSpan{s: w.copies[k].s, copy: k, self: true})
	}
	for k := range cuts {
		c := &cuts[k]
		if c.session || !valid(span{c.ts, c.te}) || !valid(span{c.cs, c.ce}) {
			continue
		}
		y, _ := slices.BinarySearchFunc(w.copies, span{c.ts, c.te}, func(x copySpan, t span) int {
			return cmp.Or(cmp.Compare(x.s.start, t.start), cmp.Compare(x.s.end, t.end))
		})
		w.ahead = append(w.ahead, aheadSpan{s: span{c.cs, c.ce}, copy: y})
	}
	slices.SortFunc(w.ahead, func(x, y aheadSpan) int {
		return cmp.Or(cmp.Compare(x.s.start, y.s.start), cmp.Compare(x.s.end, y.s.end))
	})
	kept, end := w.ahead[:0], 0
	for _, a := range w.ahead {
		if a.s.start >= end {
			kept = append(kept, a)
			end = a.s.end
		}
	}
	w.ahead = kept
}

// skipString is skipString, passing over the clear spans inside the
// string.
func (w *walker) skipString(i int) (int, bool) {
	b := w.b
	j := i + 1
	k, _ := slices.BinarySearchFunc(w.ahead, j, func(a aheadSpan, j int) int { return cmp.Compare(a.s.start, j) })
	for {
		lim := len(b)
		if k < len(w.ahead) {
			lim = w.ahead[k].s.start
		}
		if q := realQuote(b, i, j, lim); q >= 0 {
			return q + 1, true
		}
		if k == len(w.ahead) {
			return 0, false
		}
		// The string goes on at lim, the start of ahead[k].
		j = w.pass(k, i)
		k++
	}
}

// pass returns where the walk goes on inside the string that starts at
// b[i] when it reaches ahead[k]: after it when it is clear and an even run
// of backslashes comes before it, else at its start.
func (w *walker) pass(k, i int) int {
	if w.ahead[k].state == spanUnsettled {
		w.settle(k)
	}
	a := &w.ahead[k]
	if a.state != spanClear {
		return a.s.start
	}
	p := a.s.start - 1
	for p > i && w.b[p] == '\\' {
		p--
	}
	if (a.s.start-1-p)%2 != 0 {
		return a.s.start
	}
	return a.s.end
}

// settle finds whether ahead[k] is clear. A cut's content that only
// shares a prefix and a suffix with its full copy's becomes its clear
// prefix, and its clear suffix is inserted after it.
func (w *walker) settle(k int) {
	a := &w.ahead[k]
	y := &w.copies[a.copy]
	if y.state == spanUnsettled {
		y.state = spanNotClear
		if realQuote(w.b, y.s.start-1, y.s.start, y.s.end) < 0 {
			y.state = spanClear
		}
	}
	a.state = spanNotClear
	if y.state != spanClear {
		return
	}
	if a.self {
		a.state = spanClear
		return
	}
	x, t := w.b[a.s.start:a.s.end], w.b[y.s.start:y.s.end]
	if bytes.Equal(x, t) {
		a.state = spanClear
		return
	}
	pre := samePrefix(x, t)
	end := a.s.end
	// The suffix is clear from just after its first byte that is not a
	// backslash.
	from := end - sameSuffix(x[pre:], t)
	for from < end && w.b[from] == '\\' {
		from++
	}
	from++
	a.s.end, a.state = a.s.start+pre, spanClear
	if from < end {
		w.ahead = slices.Insert(w.ahead, k+1, aheadSpan{s: span{from, end}, copy: -1, state: spanClear})
	}
}

// samePrefix returns the length of the longest common prefix of x and y,
// comparing 256 bytes at a time with bytes.Equal first.
func samePrefix(x, y []byte) int {
	n := min(len(x), len(y))
	i := 0
	for ; i+256 <= n && bytes.Equal(x[i:i+256], y[i:i+256]); i += 256 {
	}
	for i < n && x[i] == y[i] {
		i++
	}
	return i
}

// sameSuffix returns the length of the longest common suffix of x and y,
// as samePrefix.
func sameSuffix(x, y []byte) int {
	n := min(len(x), len(y))
	x, y = x[len(x)-n:], y[len(y)-n:]
	i := n
	for ; i >= 256 && bytes.Equal(x[i-256:i], y[i-256:i]); i -= 256 {
	}
	for i > 0 && x[i-1] == y[i-1] {
		i--
	}
	return n - i
}

// skipJSON returns the offset after the value that starts at b[i]:
// strings by skipString, containers by their nesting (a closing bracket
// must match its opening one), anything else up to the next delimiter.
func (w *walker) skipJSON(i int) (int, bool) {
	b := w.b
	var st [32]byte
	stack := st[:0] // the closing brackets expected, innermost last
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			z, ok := w.skipString(i)
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
