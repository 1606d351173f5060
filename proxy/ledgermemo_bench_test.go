package proxy

import (
	"strings"
	"testing"
)

// BenchmarkLayoutMemoEdited lays out a conversation of a 512 KB document
// whose memo also holds an edited copy of the document (the same start,
// a few bytes added at its end: the memo names both alike). The edited
// copy is remembered last, so it is the first candidate tried, and
// missed, on every layout.
//
//	go test ./proxy -run '^$' -bench 'LayoutMemoEdited' -benchmem
func BenchmarkLayoutMemoEdited(b *testing.B) {
	doc := strings.Repeat(`func f() {\n\treturn \"x\"\n}\n`, 512<<10/28)
	mk := func(doc string) []byte {
		return []byte(`{"contents":[{"parts":[{"text":"` + doc + `"}],"role":"user"},{"parts":[{"text":"` +
			strings.Repeat("answer ", 64) + `"}],"role":"model"},{"parts":[{"text":"and now?"}],"role":"user"}]}`)
	}
	body, edited := mk(doc), mk(doc+"// edited")
	l := &ledger{memo: newLayoutMemo(ledgerMemoBytes)}
	for _, x := range [][]byte{body, edited} {
		p, err := l.layoutOf("t", x, "gemini-2.5-flash")
		if err != nil {
			b.Fatal(err)
		}
		releaseLayout(p)
	}
	before := l.memo.replays.Load()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		p, err := l.layoutOf("t", body, "gemini-2.5-flash")
		if err != nil {
			b.Fatal(err)
		}
		releaseLayout(p)
	}
	if l.memo.replays.Load() == before {
		b.Fatal("the document was not laid out from the memo")
	}
}
