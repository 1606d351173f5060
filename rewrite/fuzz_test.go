package rewrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"
)

// FuzzRequest checks the rewrite invariants on arbitrary bodies, seeded from
// the golden requests: no panic; invalid JSON is an error; valid JSON in
// gives valid JSON out with every member outside contents unchanged; every
// removed span hashes to its reported SHA-256 and the rest of each text is
// kept; output never larger than input; idempotent; deterministic.
func FuzzRequest(f *testing.F) {
	for _, path := range goldenFiles(f) {
		a, err := txtar.ParseFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if in, ok := file(a, "request.json"); ok {
			f.Add(bytes.TrimSuffix(in, []byte("\n")), false)
			f.Add(bytes.TrimSuffix(in, []byte("\n")), true)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, small bool) {
		opts := DefaultOptions()
		if small {
			opts.MinBlockBytes = 24 // reach the replacement paths with short inputs
		}
		fuzzCheck(t, body, opts)
	})
}

// FuzzSession builds multi-turn requests from two fuzzed texts, placed in
// turns by a bit pattern, so that the dedup paths (identity, similarity,
// superseded versions, runs) see many more repeats than byte mutations make.
func FuzzSession(f *testing.F) {
	f.Add("```go a.go\nfunc a() {}\nfunc b() {}\n```", "func a() {}\nfunc c() {}\n", uint16(0x5a5a), uint8(0))
	f.Add("<file path=\"x\">\nalpha\nbeta\n</file>", "--- x ---\nalpha\nbeta\n--- End ---", uint16(0x00ff), uint8(3))
	f.Add("intro\nalpha beta gamma delta\nepsilon zeta\n", "```\nalpha beta gamma delta\nepsilon zeta\n", uint16(0x1234), uint8(1))
	f.Add("```go a.go\n"+strings.Repeat("func a() { return 1 }\n", 8)+"```", "<file path=\"b\">\n"+strings.Repeat("beta gamma\n", 16)+"</file>", uint16(0x0f0f), uint8(4))
	f.Add("```\n# Guide\n"+strings.Repeat("Prose about the build.\n", 4)+"```go\nfunc a() {}\n```\n"+strings.Repeat("More prose.\n", 4)+"```\nraw\n```\nEnd.\n```", "Q?", uint16(0x0300), uint8(0))
	f.Add("```go a.go\n"+strings.Repeat("func a() { return 1 }\n", 8)+"```", "```go a.go\n"+strings.Repeat("func a() { return 2 }\n", 8)+"```", uint16(0x0030), uint8(0x18))
	// Long enough for the scan's marks, so that a text that repeats a
	// after b copies a's decoding from an earlier text (anchors) and its
	// blocks (segIndex).
	f.Add("```go a.go\n"+strings.Repeat("\tfmt.Println(\"a\\tb\")\n", 40)+"```", "<file path=\"b\">\n"+strings.Repeat("beta \"gamma\" é\n", 40)+"</file>", uint16(0xf0f0), uint8(0))
	f.Fuzz(func(t *testing.T, a, b string, pat uint16, shape uint8) {
		var contents []map[string]any
		for i := 0; i < 8; i++ {
			text := a
			if pat>>i&1 == 1 {
				text = b
			}
			if pat>>(i+8)&1 == 1 {
				text += "\n" + a
			}
			if shape&4 != 0 && i%2 == 0 {
				text = "Why?\n" + text + "\n" // question first (stable prefix)
			}
			c := map[string]any{"parts": []any{map[string]any{"text": text}}}
			if i%2 == 1 {
				c["role"] = "model"
			} else if shape&1 == 0 {
				c["role"] = "user"
			}
			contents = append(contents, c)
		}
		if shape&2 != 0 {
			contents = contents[:7]
		}
		body, err := json.Marshal(map[string]any{"contents": contents, "tools": []any{}})
		if err != nil {
			return
		}
		opts := DefaultOptions()
		opts.MinBlockBytes = 16
		if shape&8 != 0 {
			// Weigh compaction against a sent prefix (compaction.go).
			opts.Sent = &SentPrefix{Contents: int(pat>>4) % 9, CachedRatio: float64(shape>>4) / 15}
		}
		fuzzCheck(t, body, opts)
	})
}

func fuzzCheck(t *testing.T, body []byte, opts Options) {
	t.Helper()
	out, rep, err := Request(body, opts, nil)
	valid := json.Valid(body)
	if err != nil {
		if valid && errors.Is(err, ErrInvalidJSON) && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
			t.Fatalf("valid JSON object rejected as invalid: %q", body)
		}
		return
	}
	if !valid {
		t.Fatalf("invalid JSON accepted: %q", body)
	}
	if err := checkInvariants(body, out, rep, opts, nil); err != nil {
		t.Fatalf("%v\nin:  %q\nout: %q", err, body, out)
	}
	if err := auditBoth(t, body, out, rep); err != nil && !auditKnownReason(err) {
		t.Fatalf("audit: %v\nin:  %q\nout: %q", err, body, out)
	}
	reopts := opts
	if c := rep.Compaction; c != nil && c.Kept {
		// A kept prefix is the rewrite with compaction off (compaction.go).
		reopts.CompactSuperseded, reopts.Sent = false, nil
	}
	again, rep2, err := Request(out, reopts, nil)
	if err != nil {
		t.Fatalf("rewriting the output: %v", err)
	}
	if !bytes.Equal(again, out) || rep2.Changed() {
		t.Fatalf("not idempotent\nin:    %q\nonce:  %q\ntwice: %q\nreport: %s", body, out, again, renderReport(rep2, nil))
	}
	out2, _, _ := Request(body, opts, nil)
	if !bytes.Equal(out, out2) {
		t.Fatalf("not deterministic")
	}
	checkBuffer(t, body, opts, nil, out)
	// The path for requests too small to change, and the other shortcuts
	// (segmentation reuse, run pre-test), must change nothing.
	slow, slowRep, err := request1(body, opts, nil, false)
	if err != nil || !bytes.Equal(slow, out) || renderReport(slowRep, nil) != renderReport(rep, nil) || !reflect.DeepEqual(slowRep, rep) {
		t.Fatalf("small-request path differs (err %v)\nin:   %q\nfast: %q %s\nslow: %q %s\n%s", err, body, out, renderReport(rep, nil), slow, renderReport(slowRep, nil), cmp.Diff(rep, slowRep, reportCmp))
	}
}

// FuzzSegReuse checks that segmenting a text after others it may begin
// like finds the blocks of a fresh segmentation.
func FuzzSegReuse(f *testing.F) {
	for i, a := range segSamples {
		f.Add(a, segTails[i%len(segTails)], uint16(len(a)/2))
	}
	f.Fuzz(func(t *testing.T, a, tail string, k uint16) {
		cut := int(k) % (len(a) + 1)
		checkSegReuse(t, []string{a, a[:cut] + tail, a + tail, a[:cut/2] + tail + a[cut:], tail + "\n" + a + tail + a[:cut]})
	})
}

// FuzzPlainLine checks that no banner or secondary block starts at a line
// that plainLine passes.
func FuzzPlainLine(f *testing.F) {
	f.Add("Answer 1: fine.", "\n|-- a\n|-- b\n|-- c\n")
	f.Add("app/", "\n├── a\n├── b\n└── c\n")
	f.Add("Open tabs:", "\n- a.go\n- b.go\n")
	f.Fuzz(func(t *testing.T, line, rest string) {
		if strings.Contains(line, "\n") {
			return
		}
		checkPlainLine(t, line+rest)
	})
}
