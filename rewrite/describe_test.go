package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReportBlocks(t *testing.T) {
	code := strings.Repeat("func f() { return }\n", 40) // 800 bytes
	other := strings.Repeat("func g() { panic(1) }\n", 40)
	doc := strings.Repeat("some document text ", 40)
	img := strings.Repeat("\x89PNG image bytes ", 64)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	text := func(s string) map[string]any { return map[string]any{"text": s} }
	turn := func(role string, parts ...map[string]any) map[string]any {
		return map[string]any{"role": role, "parts": parts}
	}
	fenced := func(name, body string) string { return "```go " + name + "\n" + body + "```\n" }
	// A block's span ends before its last line break.
	blk := func(s, kind string) Block {
		s = strings.TrimSuffix(s, "\n")
		return Block{SHA256: sum(s), Bytes: len(s), Kind: kind}
	}
	image := map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": base64.StdEncoding.EncodeToString([]byte(img))}}
	// Twenty distinct files, each sent twice in the new turn: the list
	// outgrows the linear search for repeats.
	var many string
	var manyWant []Block
	for i := range 20 {
		f := fenced(fmt.Sprintf("f%d.go", i), strings.Repeat(fmt.Sprintf("var v%d = %d\n", i, i), 50))
		many += f + "and again\n" + f
		manyWant = append(manyWant, blk(f, "code"))
	}
	tests := []struct {
		name     string
		contents []map[string]any
		want     []Block
	}{
		{
			name: "many blocks, each once",
			contents: []map[string]any{
				turn("user", text("hi")),
				turn("model", text("ok")),
				turn("user", text(many)),
			},
			want: manyWant,
		},
		{
			name: "only the new turn, each block once",
			contents: []map[string]any{
				turn("user", text("Look:\n"+fenced("a.go", code))),
				turn("model", text("ok")),
				turn("user", text("Again:\n"+fenced("a.go", code)+"and\n"+fenced("b.go", other)+"<document>"+doc+"</document>\n"+fenced("a.go", code)), image),
			},
			want: []Block{
				blk(fenced("a.go", code), "code"),
				blk(fenced("b.go", other), "code"),
				blk("<document>"+doc+"</document>", "document"),
				{SHA256: sum(img), Bytes: len(img), Kind: "image"},
			},
		},
		{
			name: "blocks of earlier turns are not listed",
			contents: []map[string]any{
				turn("user", text("Look:\n"+fenced("a.go", code))),
				turn("model", text("ok")),
				turn("user", text("thanks")),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := json.Marshal(map[string]any{"contents": tt.contents})
			if err != nil {
				t.Fatal(err)
			}
			_, rep, err := Request(body, DefaultOptions(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, rep.Blocks); diff != "" {
				t.Errorf("Blocks mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConversationID(t *testing.T) {
	conversationID := func(raw []byte) string {
		var c convInput
		c.set(raw)
		return c.id()
	}
	small := []byte(`{"role":"user","parts":[{"text":"hi"}]}`)
	sum := sha256.Sum256(small)
	if got := conversationID(small); got != hex.EncodeToString(sum[:]) {
		t.Errorf("small content: %s, want its SHA-256", got)
	}
	edge := bytes.Repeat([]byte("e"), 512) // hashed whole, up to 2*convEdge
	sum = sha256.Sum256(edge)
	if got := conversationID(edge); got != hex.EncodeToString(sum[:]) {
		t.Errorf("512-byte content: %s, want its SHA-256", got)
	}
	big := bytes.Repeat([]byte("abcdefgh"), 2048) // 16 KiB
	sum = sha256.Sum256(slices.Concat(big[:256], big[len(big)-256:], binary.BigEndian.AppendUint64(nil, uint64(len(big)))))
	if got := conversationID(big); got != hex.EncodeToString(sum[:]) {
		t.Errorf("large content: %s, want the SHA-256 of its edges and length", got)
	}
	middle := bytes.Clone(big)
	middle[300] = 'X' // outside both 256-byte edges
	end := bytes.Clone(big)
	end[len(end)-1] = 'X'
	longer := append(bytes.Clone(big), 'a')
	id := conversationID(big)
	for _, tc := range []struct {
		name string
		raw  []byte
		same bool
	}{
		{"same bytes", bytes.Clone(big), true},
		{"middle differs (documented: shares statistics)", middle, true},
		{"last byte differs", end, false},
		{"one byte longer", longer, false},
		{"first byte differs", append([]byte("X"), big[1:]...), false},
	} {
		if got := conversationID(tc.raw) == id; got != tc.same {
			t.Errorf("%s: same id = %v, want %v", tc.name, got, tc.same)
		}
	}
}
