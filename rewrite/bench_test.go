package rewrite

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sourceFile returns a realistic, escape-heavy Go source file of about
// lines lines (tabs, quotes, backslashes), with line edit changed when
// edit >= 0.
func sourceFile(lines, edit int) string {
	var b strings.Builder
	b.WriteString("package server\n\nimport (\n\t\"fmt\"\n\t\"net/http\"\n)\n\n")
	for i := 7; i < lines; i += 6 {
		fmt.Fprintf(&b, "// handle%d serves \"/v1/item/%d\" and logs the result.\n", i, i)
		fmt.Fprintf(&b, "func handle%d(w http.ResponseWriter, r *http.Request) {\n", i)
		fmt.Fprintf(&b, "\tif r.Method != \"GET\" {\n\t\thttp.Error(w, \"method\\tnot allowed\", %d)\n\t}\n", 405)
		fmt.Fprintf(&b, "\tfmt.Fprintf(w, \"item %%d: %%q\\n\", %d, r.URL.Path)\n}\n", i)
	}
	s := b.String()
	if edit >= 0 {
		ls := strings.SplitAfter(s, "\n")
		k := 10 + edit*7%(len(ls)-12)
		ls[k] = fmt.Sprintf("\t// edited in turn %d\n", edit)
		s = strings.Join(ls, "")
	}
	return s
}

// session builds a naive ask-mode request: every user turn re-sends the
// current file (edited in some turns), every model turn answers briefly.
func session(turns, fileLines int) []byte {
	var contents []map[string]any
	version := -1
	for t := 0; t < turns; t++ {
		if t%2 == 1 {
			contents = append(contents, map[string]any{"role": "model", "parts": []any{map[string]any{"text": fmt.Sprintf("Answer %d: the handler returns 405 for other methods.", t)}}})
			continue
		}
		if t%6 == 4 {
			version = t // a small edit in some turns
		}
		text := "Here is my current code:\n```go server.go\n" + sourceFile(fileLines, version) + "```\n" + fmt.Sprintf("Question %d: what does handle13 do?", t)
		contents = append(contents, map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}})
	}
	body, err := json.Marshal(map[string]any{"contents": contents, "generationConfig": map[string]any{"temperature": 0.2}})
	if err != nil {
		panic(err)
	}
	return body
}

// sizedSession returns a session of about size bytes over the given turns.
func sizedSession(size, turns int) []byte {
	userTurns := (turns + 1) / 2
	lines := max(8, size/userTurns/42)
	body := session(turns, lines)
	for len(body) < size*9/10 {
		lines = lines * size / max(len(body), 1)
		body = session(turns, lines+8)
	}
	return body
}

func BenchmarkRequest(b *testing.B) {
	for _, size := range []int{10 << 10, 100 << 10, 1 << 20, 5 << 20} {
		for _, turns := range []int{2, 10, 50} {
			body := sizedSession(size, turns)
			b.Run(fmt.Sprintf("size=%dKB/turns=%d", size>>10, turns), func(b *testing.B) {
				opts := DefaultOptions()
				if _, _, err := Request(body, opts, nil); err != nil {
					b.Fatal(err)
				}
				// SHA-256 over the same bytes, timed in the same iterations,
				// so that machine load affects both alike. ns/op covers both.
				// The audit of each rewrite is timed too: audit/rewrite is
				// its cost as a fraction of the rewrite's (target ≤ 0.10).
				b.ReportAllocs()
				var shaTime, rwTime, auditTime time.Duration
				n := 0
				for b.Loop() {
					t0 := time.Now()
					sha256.Sum256(body)
					t1 := time.Now()
					out, rep, err := Request(body, opts, nil)
					if err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					if err := Audit(body, out, rep); err != nil {
						b.Fatal(err)
					}
					shaTime += t1.Sub(t0)
					rwTime += t2.Sub(t1)
					auditTime += time.Since(t2)
					n++
				}
				shaMBps := float64(len(body)) * float64(n) / shaTime.Seconds() / 1e6
				mbps := float64(len(body)) * float64(n) / rwTime.Seconds() / 1e6
				b.ReportMetric(shaMBps, "sha256-MB/s")
				b.ReportMetric(mbps, "rewrite-MB/s")
				b.ReportMetric(mbps/shaMBps, "ratio")
				b.ReportMetric(auditTime.Seconds()/rwTime.Seconds(), "audit/rewrite")
			})
		}
	}
}

// BenchmarkSavings reports the bytes of a 10-turn session (10 user turns, 19 contents) that re-sends a
// 500-line file in every user turn (edited in some), naive vs rewritten vs
// an ideal stateful client that sends each active version once and a
// reference of the same size as ours for every other copy.
func BenchmarkSavings(b *testing.B) {
	body := session(19, 500)
	opts := DefaultOptions()
	out, rep, err := Request(body, opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	ideal := idealSize(b, body, rep.Replacements[0].RefBytes)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Request(body, opts, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(body)), "naive-bytes")
	b.ReportMetric(float64(len(out)), "rewritten-bytes")
	b.ReportMetric(float64(ideal), "ideal-bytes")
	b.ReportMetric(100*(1-float64(len(out))/float64(len(body))), "saved-%")
	b.ReportMetric(100*float64(len(out)-ideal)/float64(ideal), "over-ideal-%")
}

// TestSavingsTarget keeps the savings target (≥ 80% fewer bytes than naive,
// within 5% of the ideal client) from regressing silently.
func TestSavingsTarget(t *testing.T) {
	body := session(19, 500)
	out, rep, err := Request(body, DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if saved := 1 - float64(len(out))/float64(len(body)); saved < 0.80 {
		t.Errorf("saved %.1f%% of %d bytes, want ≥ 80%%\n%s", 100*saved, len(body), renderReport(rep, nil))
	}
	if ideal := idealSize(t, body, rep.Replacements[0].RefBytes); float64(len(out)) > 1.05*float64(ideal) {
		t.Errorf("rewritten %d bytes, ideal %d: more than 5%% over", len(out), ideal)
	}
}

// idealSize is the size of the request an ideal stateful client would send
// for a session body: every file copy except the first copy of the final
// version becomes a reference of refBytes bytes.
func idealSize(tb testing.TB, body []byte, refBytes int) int {
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
		GenerationConfig json.RawMessage `json:"generationConfig"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		tb.Fatal(err)
	}
	const open = "```go server.go\n"
	file := func(t string) (start, end int, ok bool) {
		start = strings.Index(t, open)
		end = strings.LastIndex(t, "```\n")
		return start, end + 3, start >= 0 && end > start
	}
	var final string
	for _, c := range req.Contents {
		if s, e, ok := file(c.Parts[0].Text); ok {
			final = c.Parts[0].Text[s+len(open) : e-3]
		}
	}
	kept := false
	for i := range req.Contents {
		t := &req.Contents[i].Parts[0].Text
		s, e, ok := file(*t)
		if !ok {
			continue
		}
		if !kept && (*t)[s+len(open):e-3] == final {
			kept = true
			continue
		}
		*t = (*t)[:s] + strings.Repeat("r", refBytes) + (*t)[e:]
	}
	out, err := json.Marshal(req)
	if err != nil {
		tb.Fatal(err)
	}
	return len(out)
}

// BenchmarkTurn50 rewrites turn 50 of a realistic session (a 300-line file
// re-sent in every user turn, 51 contents) with the memo its previous
// request left (49 turns known, 2 new), with an empty memo and with no
// memo at all, timed in the same iterations, and reports the three and the
// ratios of warm to cold and to no memo (issue 4: turn N only analyses
// what is new; the memo pays only when warm beats no memo).
func BenchmarkTurn50(b *testing.B) {
	full := session(51, 300)
	var req struct {
		Contents         []json.RawMessage `json:"contents"`
		GenerationConfig json.RawMessage   `json:"generationConfig"`
	}
	if err := json.Unmarshal(full, &req); err != nil {
		b.Fatal(err)
	}
	prev, err := json.Marshal(map[string]any{"contents": req.Contents[:49], "generationConfig": req.GenerationConfig})
	if err != nil {
		b.Fatal(err)
	}
	opts := DefaultOptions()
	warm := newMapMemo()
	if _, _, err := Request(prev, opts, memoVerifier{nil, warm}); err != nil {
		b.Fatal(err)
	}
	warm.frozen = true // every iteration sees the state after the previous request
	want, _, err := Request(full, opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	if got, _, _ := Request(full, opts, memoVerifier{nil, warm}); !bytes.Equal(got, want) {
		b.Fatal("warm memo changed the output")
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(full)))
	var coldTime, warmTime, noneTime time.Duration
	n := 0
	for b.Loop() {
		cold := newMapMemo()
		t0 := time.Now()
		if _, _, err := Request(full, opts, memoVerifier{nil, cold}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, _, err := Request(full, opts, memoVerifier{nil, warm}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, _, err := Request(full, opts, nil); err != nil {
			b.Fatal(err)
		}
		coldTime += t1.Sub(t0)
		warmTime += t2.Sub(t1)
		noneTime += time.Since(t2)
		n++
	}
	b.ReportMetric(float64(coldTime.Microseconds())/float64(n), "cold-µs/op")
	b.ReportMetric(float64(warmTime.Microseconds())/float64(n), "warm-µs/op")
	b.ReportMetric(float64(noneTime.Microseconds())/float64(n), "nomemo-µs/op")
	b.ReportMetric(float64(warmTime)/float64(coldTime), "warm/cold")
	b.ReportMetric(float64(warmTime)/float64(noneTime), "warm/nomemo")
}
