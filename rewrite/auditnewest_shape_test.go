package rewrite

import (
	"bytes"
	"encoding/json"
	"testing"
)

// shapeGen builds a valid JSON request body from a fuzzer's bytes: a top
// object with members before and after "contents", contents of every
// role spelling, parts with text strings full of quotes, backslashes and
// `{"role":"user"` look-alikes, and tool parts whose values nest objects
// and arrays with "role", "contents" and "text" members. texts records
// the span of every "text" string's contents it wrote.
type shapeGen struct {
	in    []byte
	b     []byte
	texts []span
	depth int
}

func (g *shapeGen) next() byte {
	if len(g.in) == 0 {
		return 0
	}
	c := g.in[0]
	g.in = g.in[1:]
	return c
}

func (g *shapeGen) ws() {
	switch g.next() % 8 {
	case 0:
		g.b = append(g.b, ' ')
	case 1:
		g.b = append(g.b, "\n\t "...)
	case 2:
		g.b = append(g.b, '\r', '\n')
	}
}

var shapeStrings = []string{
	``, `a`, `\"`, `\\`, `\\\"`, `\\\\`, `{\"role\":\"user\"`, `\"}]},{\"role\":\"user\"}]}`,
	`}]}`, `]`, `\u0022`, `\\u0022`, `{"`, `\/`, "x\\n", `\"text\":\"`, `\u005c`,
}

func (g *shapeGen) str() {
	g.b = append(g.b, '"')
	for n := int(g.next() % 4); n > 0; n-- {
		s := shapeStrings[int(g.next())%len(shapeStrings)]
		if s == `{"` {
			s = `{\"`
		}
		g.b = append(g.b, s...)
	}
	g.b = append(g.b, '"')
}

var shapeKeys = []string{`"role"`, `"contents"`, `"text"`, `"parts"`, `"r\u006fle"`, `"x"`, `"response"`, `"c\u006fntents"`}

// value writes an arbitrary value that may nest look-alikes.
func (g *shapeGen) value() {
	g.ws()
	if g.depth > 6 {
		g.str()
		return
	}
	g.depth++
	defer func() { g.depth-- }()
	switch g.next() % 7 {
	case 0, 1:
		g.str()
	case 2:
		g.b = append(g.b, "-1.5e3"...)
	case 3:
		g.b = append(g.b, '[')
		for n := int(g.next() % 3); n > 0; n-- {
			g.value()
			if n > 1 {
				g.b = append(g.b, ',')
			}
		}
		g.ws()
		g.b = append(g.b, ']')
	case 4:
		g.role(`"user"`)
	default:
		g.b = append(g.b, '{')
		for n := int(g.next() % 3); n > 0; n-- {
			g.ws()
			k := shapeKeys[int(g.next())%len(shapeKeys)]
			g.b = append(g.b, k...)
			g.ws()
			g.b = append(g.b, ':')
			if k == `"text"` {
				g.text()
			} else {
				g.value()
			}
			if n > 1 {
				g.b = append(g.b, ',')
			}
		}
		g.ws()
		g.b = append(g.b, '}')
	}
	g.ws()
}

func (g *shapeGen) role(r string) {
	g.b = append(g.b, `{"role":`...)
	g.b = append(g.b, r...)
	g.b = append(g.b, '}')
}

func (g *shapeGen) text() {
	g.ws()
	start := len(g.b) + 1
	g.str()
	g.texts = append(g.texts, span{start, len(g.b) - 1})
	g.ws()
}

var shapeRoles = []string{`"user"`, `"model"`, `""`, `"\u0075ser"`, `"m\u006fdel"`, `"function"`, ``}

func (g *shapeGen) content() {
	g.ws()
	g.b = append(g.b, '{')
	role := shapeRoles[int(g.next())%len(shapeRoles)]
	members := []func(){}
	if role != `` {
		members = append(members, func() {
			g.b = append(g.b, `"role"`...)
			g.ws()
			g.b = append(g.b, ':')
			g.ws()
			g.b = append(g.b, role...)
		})
	}
	members = append(members, func() {
		g.b = append(g.b, `"parts"`...)
		g.ws()
		g.b = append(g.b, ':')
		g.ws()
		g.b = append(g.b, '[')
		for n := int(g.next()%3) + 1; n > 0; n-- {
			g.ws()
			switch g.next() % 3 {
			case 0, 1:
				g.b = append(g.b, `{"text":`...)
				g.text()
				g.b = append(g.b, '}')
			default:
				g.b = append(g.b, `{"functionResponse":{"name":"f","response":`...)
				g.value()
				g.b = append(g.b, `}}`...)
			}
			if n > 1 {
				g.b = append(g.b, ',')
			}
		}
		g.ws()
		g.b = append(g.b, ']')
	})
	if g.next()%4 == 0 {
		members = append(members, func() {
			g.b = append(g.b, `"x"`...)
			g.b = append(g.b, ':')
			g.value()
		})
	}
	if g.next()%2 == 0 && len(members) > 1 {
		members[0], members[1] = members[1], members[0]
	}
	for k, m := range members {
		g.ws()
		m()
		g.ws()
		if k < len(members)-1 {
			g.b = append(g.b, ',')
		}
	}
	g.b = append(g.b, '}')
	g.ws()
}

func (g *shapeGen) body() []byte {
	g.ws()
	g.b = append(g.b, '{')
	n := 0
	member := func(key string, f func()) {
		if n > 0 {
			g.b = append(g.b, ',')
		}
		n++
		g.ws()
		g.b = append(g.b, key...)
		g.ws()
		g.b = append(g.b, ':')
		f()
	}
	contents := func() {
		g.ws()
		g.b = append(g.b, '[')
		for k := int(g.next() % 6); k > 0; k-- {
			g.content()
			if k > 1 {
				g.b = append(g.b, ',')
			}
		}
		g.ws()
		g.b = append(g.b, ']')
		g.ws()
	}
	others := func() {
		key := shapeKeys[int(g.next())%len(shapeKeys)]
		if key == `"contents"` || key == `"c\u006fntents"` {
			member(key, contents)
		} else {
			member(key, g.value)
		}
	}
	for k := int(g.next() % 3); k > 0; k-- {
		others()
	}
	member(`"contents"`, contents)
	for k := int(g.next() % 3); k > 0; k-- {
		others()
	}
	g.ws()
	g.b = append(g.b, '}')
	g.ws()
	return g.b
}

// FuzzNewestShapes checks findNewest, with random superseded text cuts,
// against encoding/json on bodies built to look like contents from the
// middle: a cut in the newest user turn must always be found (a miss is a
// lost document), and one outside it may fail only on a body the walker
// refuses.
func FuzzNewestShapes(f *testing.F) {
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"))
	f.Add(bytes.Repeat([]byte{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9}, 8))
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &shapeGen{in: in}
		b := g.body()
		if !json.Valid(b) {
			t.Fatalf("generator wrote invalid JSON: %s", b)
		}
		want, all, wok := contentsRef(b)
		if !wok {
			t.Fatalf("encoding/json refuses %s", b)
		}
		// Which contents array encoding/json keeps: the last "contents".
		_ = all
		got, ok := newestTurn(b)
		if ok && got != want {
			t.Fatalf("newestTurn(%s) = %v, encoding/json %v", b, got, want)
		}
		if len(g.texts) == 0 {
			return
		}
		// Random superseded cuts: a non-empty subset of the texts, each
		// cut covering its whole string.
		var cuts []auditCut
		for k, s := range g.texts {
			if k == len(g.texts)-1 && len(cuts) == 0 || g.next()%2 == 0 {
				cuts = append(cuts, auditCut{start: s.start, end: s.end, str: s, super: true})
			}
		}
		au := &auditor{b1: b, a: &auditRec{cuts: cuts}}
		err := au.findNewest(0)
		for _, c := range cuts {
			inNewest := want.start <= c.start && c.start < want.end
			flagged := err != nil || au.newest.start <= c.start && c.start < au.newest.end
			if inNewest && !flagged {
				t.Fatalf("cut %v in the newest user turn %v accepted (newest %v, err %v): %s", c.str, want, au.newest, err, b)
			}
			if err != nil && ok {
				t.Fatalf("findNewest failed on a body newestTurn reads: %v: %s", err, b)
			}
			if !inNewest && flagged && err == nil {
				t.Fatalf("cut %v outside the newest user turn %v flagged (newest %v): %s", c.str, want, au.newest, b)
			}
		}
	})
}
