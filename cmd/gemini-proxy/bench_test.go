package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gemini-proxy/gemini-proxy/bench"
)

func TestRecorder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := newRecorder(path, 64, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("newRecorder: %v", err)
	}
	var seen []string
	h := rec.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = append(seen, string(b))
	}))
	reqs := []struct{ path, body string }{
		{"/v1beta/models/m:generateContent?key=SECRET", "{\n \"contents\": []\n}"},
		{"/v1beta/models/m:streamGenerateContent?alt=sse&key=SECRET&access_token=SECRET&upload_id=x", `{"contents":[1]}`},
		{"/v1beta/models/m:countTokens", `{"contents":[2]}`},
		{"/v1beta/models/m:generateContent", `{"contents":"` + strings.Repeat("x", 100) + `"}`},
		{"/v1beta/models/m:generateContent", `not json`},
	}
	for _, q := range reqs {
		r := httptest.NewRequest(http.MethodPost, q.path, strings.NewReader(q.body))
		r.Header.Set("X-Goog-Api-Key", "SECRET")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if err := rec.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, q := range reqs {
		if seen[i] != q.body {
			t.Errorf("request %d reached the handler as %q, want %q", i, seen[i], q.body)
		}
	}
	got, _ := os.ReadFile(path)
	want := `{"path":"/v1beta/models/m:generateContent","body":{"contents":[]}}` + "\n" +
		`{"path":"/v1beta/models/m:streamGenerateContent?alt=sse","body":{"contents":[1]}}` + "\n"
	if string(got) != want {
		t.Errorf("recording = %q, want %q", got, want)
	}
	if bytes.Contains(got, []byte("SECRET")) {
		t.Errorf("recording contains the credential")
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("recording mode = %v, want 0600", st.Mode().Perm())
	}
}

func TestBenchSavingsCheckAndReplay(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if err := run(t.Context(), []string{"bench", "--quick", "--check", "--overhead=false", "--out", dir}, &out, &errb); err != nil {
		t.Fatalf("bench: %v\n%s", err, errb.String())
	}
	for _, want := range []string{"| **total** |", "ctl-functions", "unchanged (byte for byte)", "| **total two-doc** |", "flat-chat-template",
		"Rewrite audit failures during the replay (`gemini_proxy_rewrite_audit_failures_total`, target 0): 0", "Corpus (documents read at run time", "- Go installation go1."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, out.String())
		}
	}
	for _, f := range []string{"result.json", "bench.md", "chart.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("--out: %v", err)
		}
	}
	rec := filepath.Join(dir, "rec.jsonl")
	line := `{"path":"/v1beta/models/gemini-2.5-flash:generateContent","body":{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}}` + "\n"
	if err := os.WriteFile(rec, []byte(line+line), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"bench", "--replay", rec}, &out, &errb); err != nil {
		t.Fatalf("bench --replay: %v", err)
	}
	if !strings.Contains(out.String(), "gemini-2.5-flash") || !strings.Contains(out.String(), "total") {
		t.Errorf("replay output:\n%s", out.String())
	}
}

// --sessions replays only the matching sessions; bad values are usage
// errors.
func TestBenchSessionsFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(t.Context(), []string{"bench", "--overhead=false", "--sessions", "^ctl-side-task$"}, &out, &errb); err != nil {
		t.Fatalf("bench --sessions: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "| ctl-side-task |") || strings.Contains(out.String(), "| ask-go |") {
		t.Errorf("bench --sessions ^ctl-side-task$ output:\n%s", out.String())
	}
	for _, args := range [][]string{{"--sessions", "["}, {"--sessions", "no-such-session"}, {"--admin-url", "http://127.0.0.1:1"}} {
		errb.Reset()
		if err := run(t.Context(), append([]string{"bench", "--overhead=false"}, args...), io.Discard, &errb); err == nil {
			t.Errorf("bench %v succeeded", args)
		}
	}
}

// The hidden --fake-upstream flag serves bench.FakeGeminiAll (the long
// answers for bench.LongAnswersModel) and announces its address in the
// line startChild waits for.
func TestBenchFakeUpstream(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"bench", "--fake-upstream"}, pw, io.Discard); pw.Close() }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenAddrRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[2]
			}
		}
		close(addr)
	}()
	a, ok := <-addr
	if !ok {
		t.Fatalf("no listening line; run: %v", <-done)
	}
	res, err := http.Post("http://"+a+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "application/json", strings.NewReader(`{"contents":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !bytes.HasPrefix(b, []byte("data: {")) || !bytes.HasSuffix(b, []byte("}\r\n\r\n")) {
		t.Errorf("stream: status %d, body %.60q", res.StatusCode, b)
	}
	res, err = http.Post("http://"+a+"/v1beta/models/"+bench.LongAnswersModel+":streamGenerateContent?alt=sse", "application/json", strings.NewReader(`{"contents":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if n := bytes.Count(b, []byte("\r\n\r\n")); res.StatusCode != http.StatusOK || n != bench.AnswerEvents {
		t.Errorf("long stream: status %d, %d events, want %d", res.StatusCode, n, bench.AnswerEvents)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
