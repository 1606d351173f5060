package main

import (
	"fmt"
	"os"

	"github.com/gemini-proxy/gemini-proxy/internal/goenv"
)

// demoSourcePath is the file the demo's naive client re-sends, inside the
// Go installation.
const demoSourcePath = "src/container/list/list.go"

// demoSource returns the file the demo's naive client re-sends and where it
// comes from; tests replace it.
var demoSource = func() (file, source string) { return demoDocument(goenv.Lookup) }

// demoDocument returns the file the demo's naive client re-sends and a line
// saying where it comes from: container/list/list.go of the Go installation
// that lookup finds (`go run` always has one), or, where there is none (a
// built binary on a machine without Go), demoFallbackList, a list package
// written for the demo.
func demoDocument(lookup func() (goenv.Env, error)) (file, source string) {
	env, err := lookup()
	if err != nil {
		return demoFallbackList, "a list.go written for the demo, as no Go installation was found (set GOROOT or put go in PATH)"
	}
	b, err := os.ReadFile(env.File(demoSourcePath))
	if err != nil {
		return demoFallbackList, fmt.Sprintf("a list.go written for the demo, as %s is missing", env.File(demoSourcePath))
	}
	return string(b), fmt.Sprintf("%s of %s at %s", demoSourcePath, env.Version, env.GOROOT)
}

// demoFallbackList is a doubly linked list written for the demo, used when
// the Go installation is absent. It keeps the package comment the demo's
// hand edit rewords and the methods its questions name.
const demoFallbackList = `// Package list implements a doubly linked list.
//
// Walk a list from the front:
//
//	for e := l.Front(); e != nil; e = e.Next() {
//		use(e.Value)
//	}
package list

// Element is one entry of a List.
type Element struct {
	next, prev *Element
	owner      *List

	// Value is what the element holds.
	Value any
}

// Next returns the element after e, or nil at the back of the list.
func (e *Element) Next() *Element { return e.next }

// Prev returns the element before e, or nil at the front of the list.
func (e *Element) Prev() *Element { return e.prev }

// List is a doubly linked list with pointers to both ends. The zero value
// is an empty list.
type List struct {
	head, tail *Element
	n          int
}

// New returns an empty list.
func New() *List { return new(List) }

// Init empties l and returns it.
func (l *List) Init() *List {
	for e := l.head; e != nil; {
		next := e.next
		e.next, e.prev, e.owner = nil, nil, nil
		e = next
	}
	l.head, l.tail, l.n = nil, nil, 0
	return l
}

// Len returns the number of elements of l in constant time.
func (l *List) Len() int { return l.n }

// Front returns the first element of l, or nil when l is empty.
func (l *List) Front() *Element { return l.head }

// Back returns the last element of l, or nil when l is empty.
func (l *List) Back() *Element { return l.tail }

// link puts e between prev and next (either may be nil) and counts it.
func (l *List) link(e, prev, next *Element) *Element {
	e.owner, e.prev, e.next = l, prev, next
	if prev == nil {
		l.head = e
	} else {
		prev.next = e
	}
	if next == nil {
		l.tail = e
	} else {
		next.prev = e
	}
	l.n++
	return e
}

// unlink takes e out of l.
func (l *List) unlink(e *Element) {
	if e.prev == nil {
		l.head = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		l.tail = e.prev
	} else {
		e.next.prev = e.prev
	}
	e.next, e.prev, e.owner = nil, nil, nil
	l.n--
}

// PushFront adds v at the front of l and returns its element.
func (l *List) PushFront(v any) *Element { return l.link(&Element{Value: v}, nil, l.head) }

// PushBack adds v at the back of l and returns its element.
func (l *List) PushBack(v any) *Element { return l.link(&Element{Value: v}, l.tail, nil) }

// InsertBefore adds v just before mark and returns its element; it returns
// nil when mark is not in l.
func (l *List) InsertBefore(v any, mark *Element) *Element {
	if mark.owner != l {
		return nil
	}
	return l.link(&Element{Value: v}, mark.prev, mark)
}

// InsertAfter adds v just after mark and returns its element; it returns
// nil when mark is not in l.
func (l *List) InsertAfter(v any, mark *Element) *Element {
	if mark.owner != l {
		return nil
	}
	return l.link(&Element{Value: v}, mark, mark.next)
}

// Remove takes e out of l when it belongs to l and returns e.Value.
func (l *List) Remove(e *Element) any {
	if e.owner == l {
		l.unlink(e)
	}
	return e.Value
}

// MoveToFront moves e to the front of l; nothing happens when e is not in l.
func (l *List) MoveToFront(e *Element) {
	if e.owner != l || l.head == e {
		return
	}
	l.unlink(e)
	l.link(e, nil, l.head)
}

// MoveToBack moves e to the back of l; nothing happens when e is not in l.
func (l *List) MoveToBack(e *Element) {
	if e.owner != l || l.tail == e {
		return
	}
	l.unlink(e)
	l.link(e, l.tail, nil)
}

// PushBackList appends a copy of every value of other to l. It counts the
// values first, so other may be l itself.
func (l *List) PushBackList(other *List) {
	e := other.Front()
	for i := other.Len(); i > 0; i-- {
		l.PushBack(e.Value)
		e = e.Next()
	}
}

// PushFrontList prepends a copy of every value of other to l, keeping their
// order; other may be l itself.
func (l *List) PushFrontList(other *List) {
	e := other.Back()
	for i := other.Len(); i > 0; i-- {
		l.PushFront(e.Value)
		e = e.Prev()
	}
}
`
