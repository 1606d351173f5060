package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// transcriptFormats flatten a history of (question, answer) pairs and the
// current question into one user text, as naive clients do
// (NAIVE-PATTERNS.md "Flattened history").
var transcriptFormats = []struct {
	name  string
	build func(hist [][2]string, q string) string
}{
	{"labels", func(hist [][2]string, q string) string {
		var b strings.Builder
		b.WriteString("Previous conversation:\n")
		for _, h := range hist {
			fmt.Fprintf(&b, "User: %s\nAssistant: %s\n", h[0], h[1])
		}
		fmt.Fprintf(&b, "User: %s\nAssistant:", q)
		return b.String()
	}},
	{"chat-template", func(hist [][2]string, q string) string {
		var b strings.Builder
		for _, h := range hist {
			fmt.Fprintf(&b, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n", h[0], h[1])
		}
		fmt.Fprintf(&b, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", q)
		return b.String()
	}},
	{"chinese", func(hist [][2]string, q string) string {
		var b strings.Builder
		b.WriteString("对话历史：\n")
		for _, h := range hist {
			fmt.Fprintf(&b, "用户：%s\n助手：%s\n", h[0], h[1])
		}
		fmt.Fprintf(&b, "\n当前问题：%s", q)
		return b.String()
	}},
}

// TestRewriteFlattenedTranscript plays a client that flattens its history
// into one user turn per request, quoting the model's real answers (served
// through the proxy). The proxy has no Verifier wired, so nothing may be
// un-flattened: with nothing else repeated, the emulator must receive the
// client's exact bytes and the client the same answers.
func TestRewriteFlattenedTranscript(t *testing.T) {
	t.Parallel()
	questions := []string{
		"Here is my file:\n\n" + fenced(bufferGo) + "\n\nExplain what this file does.",
		"Why does Grow panic with a negative count?",
		"Is Truncate safe after a Read?",
		"Summarise our conversation so far.",
	}
	for _, f := range transcriptFormats {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			run := func(c *genai.Client) (answers, reports []string) {
				var hist [][2]string
				for _, q := range questions {
					resp, err := c.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text(f.build(hist, q)), nil)
					if err != nil {
						t.Fatalf("GenerateContent: %v", err)
					}
					answers = append(answers, resp.Text())
					reports = append(reports, resp.SDKHTTPResponse.Headers.Get(reportHdr))
					hist = append(hist, [2]string{q, resp.Text()})
				}
				return answers, reports
			}
			p := newPair(t, emulator.Options{Reply: scriptReply})
			direct, proxied := p.clients(t)
			want, _ := run(direct)
			got, reports := run(proxied)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answers through the proxy differ (-want +got):\n%s", diff)
			}
			if !strings.Contains(want[0], sha12([]byte(bufferGo))) {
				t.Errorf("first answer %q does not name the file's hash", want[0])
			}
			for i, rep := range reports {
				checkUnchangedReport(t, fmt.Sprintf("request %d", i+1), rep)
			}
			rec := p.proxied.emu.Received()
			sameWire(t, p.direct.emu.Received(), rec)
			for i, r := range rec {
				if len(r.Contents) != 1 {
					t.Errorf("request %d: %d contents upstream, want the single flattened user turn", i+1, len(r.Contents))
				}
			}
			if n := counterSum(t, p.proxied.reg, "gemini_proxy_rewrite_replacements_total", map[string]string{"rule": "unflatten"}); n != 0 {
				t.Errorf("rewrite_replacements_total{rule=unflatten} = %v, want 0 without a verifier", n)
			}
		})
	}
}
