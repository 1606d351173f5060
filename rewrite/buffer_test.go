package rewrite

import (
	"bytes"
	"testing"
)

// checkBuffer rewrites body again with an Options.Buffer and checks that
// the body is the same bytes as want (the rewrite without one), written
// into the memory the Buffer gave when the body changed, whatever that
// memory held before; that a Buffer giving too little is not used; that
// nothing is asked for when the body does not change; and that the Report
// keeps nothing of that memory (overwriting it after the call changes
// nothing in the Report).
func checkBuffer(t *testing.T, body []byte, opts Options, v Verifier, want []byte) {
	t.Helper()
	for _, short := range []bool{false, true} {
		var given [][]byte
		opts.Buffer = func(n int) []byte {
			if n < 0 {
				t.Fatalf("Buffer(%d)", n)
			}
			c := n + len(given)*7 // more room than asked, some of the time
			if short {
				c = max(n-1, 0)
			}
			b := bytes.Repeat([]byte{'\\'}, c+3)[:c] // stale bytes, and past the capacity
			b = b[:c:c]
			given = append(given, b)
			return b[:n/2] // any length: only the capacity counts
		}
		got, rep, err := Request(body, opts, v)
		if err != nil {
			t.Fatalf("with a Buffer (short %v): %v", short, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("with a Buffer (short %v): the body differs\nwant: %q\ngot:  %q", short, want, got)
		}
		before := renderReport(rep, nil)
		switch {
		case len(given) > 2:
			t.Fatalf("Buffer called %d times", len(given))
		case bytes.Equal(want, body) && len(given) > 0 && rep.UnflattenedTurns == 0:
			t.Fatalf("Buffer called %d times for a body that did not change", len(given))
		case short || len(given) == 0:
			// Allocated by Request (or the body itself).
			for _, b := range given {
				if len(got) > 0 && cap(b) > 0 && &got[0] == &b[:1][0] {
					t.Fatal("the body is in a buffer smaller than it")
				}
			}
		default:
			last := given[len(given)-1]
			if len(got) == 0 || &got[0] != &last[:1][0] {
				t.Fatalf("the changed body is not in the last buffer given (%d given)", len(given))
			}
		}
		for _, b := range given {
			b = b[:cap(b)]
			for i := range b {
				b[i] = 'x'
			}
		}
		if after := renderReport(rep, nil); after != before {
			t.Fatalf("the Report changed when the buffers were overwritten:\nbefore: %s\nafter:  %s", before, after)
		}
	}
}

// TestBuffer checks Options.Buffer on requests that change in each way:
// references only, references and a split by StablePrefix, a split only,
// nothing.
func TestBuffer(t *testing.T) {
	file := "```go a.go\n" + bigFile("a") + "```\n"
	question := "Why does F3 return 3?\n\n"
	cases := map[string][]byte{
		"references":           session(7, 60),
		"split":                body(t, question+file),
		"references and split": body(t, file, "Noted.", file, "Noted.", question+"```go b.go\n"+bigFile("b")+"```\n"),
		"unchanged":            body(t, question),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			opts := DefaultOptions()
			want, rep, err := Request(body, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			switch name {
			case "references":
				if len(rep.Replacements) == 0 || rep.Reordered != 0 {
					t.Fatalf("want references only: %s", rep.Header())
				}
			case "split":
				if len(rep.Replacements) != 0 || rep.Reordered == 0 {
					t.Fatalf("want a split only: %s", rep.Header())
				}
			case "references and split":
				if len(rep.Replacements) == 0 || rep.Reordered == 0 {
					t.Fatalf("want references and a split: %s", rep.Header())
				}
			case "unchanged":
				if rep.Changed() {
					t.Fatalf("want no change: %s", rep.Header())
				}
			}
			checkBuffer(t, body, opts, nil, want)
			if err := Audit(body, want, rep); err != nil {
				t.Fatal(err)
			}
		})
	}
}
