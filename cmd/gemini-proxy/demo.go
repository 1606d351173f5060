package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/savingspage"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/spf13/pflag"
	"google.golang.org/genai"
)

func demoFlags(fs *pflag.FlagSet) {
	fs.String("model", "gemini-2.5-flash", "model the demo conversation uses")
	fs.Bool("show-request", false, "print the contents the emulator received for the last turn through the proxy")
	fs.Bool("logs", false, "print the proxy's and the emulator's logs to stderr")
	fs.Bool("serve", false, "keep the emulator and the proxy running after the conversation, for an SDK and the savings page, until Ctrl-C")
	fs.String("listen", "127.0.0.1:0", "proxy listen address (port 0: any free port)")
	fs.String("admin-listen", "127.0.0.1:0", "admin listen address, for the savings page and /metrics")
}

// demoTurn is one step of the demo's naive client.
type demoTurn struct {
	question string
	// reply, when set, is the edit the model makes: the emulator answers
	// with the whole edited file, and the client applies it.
	reply func(file string) string
	// handEdit, when set, is an edit the user makes before asking.
	handEdit func(file string) string
}

var demoTurns = []demoTurn{
	{question: "Explain what this file does."},
	{question: "Add a method Contains(v any) bool to List.", reply: func(f string) string {
		return f + "\n// Contains reports whether the list holds an element with value v.\nfunc (l *List) Contains(v any) bool {\n\tfor e := l.Front(); e != nil; e = e.Next() {\n\t\tif e.Value == v {\n\t\t\treturn true\n\t\t}\n\t}\n\treturn false\n}\n"
	}},
	{question: "Now add a Clear method that empties the list.", reply: func(f string) string {
		return f + "\n// Clear removes every element of l.\nfunc (l *List) Clear() { l.Init() }\n"
	}},
	{question: "I reworded the package comment. Is PushBackList safe when other is l?", handEdit: func(f string) string {
		return strings.Replace(f, "// Package list implements a doubly linked list.", "// Package list implements a doubly linked list of arbitrary values.", 1)
	}},
	{question: "Summarise what we changed so far."},
}

// demoReply is the emulator's scripted model. It answers from the newest
// full copy of list.go that reached it, and names that copy's hash, so the
// answers show whether the file survived the rewrite intact. The hash is
// the one the proxy's references name for the same version: the SHA-256 of
// the fenced block, fence lines included (rewrite/doc.go).
func demoReply(r emulator.ReplyRequest) string {
	file := ""
	for i := len(r.Contents) - 1; i >= 0 && file == ""; i-- {
		file = fencedFile(r.Contents[i].Text())
	}
	if file == "" {
		return "I cannot see list.go in this conversation."
	}
	sum := sha256.Sum256([]byte(fenceOpen + file + "```"))
	seen := fmt.Sprintf("(I am looking at list.go, %d lines, sha256 %s.)", strings.Count(file, "\n"), hex.EncodeToString(sum[:6]))
	q := strings.TrimSpace(r.LastUserText())
	for _, t := range demoTurns {
		if !strings.HasSuffix(q, t.question) {
			continue
		}
		if t.reply != nil {
			return "Here is the updated file:\n\n```go list.go\n" + t.reply(file) + "```\n\n" + seen
		}
		return fmt.Sprintf("About %q: list.go implements a doubly linked list with O(1) insertion and removal. %s", t.question, seen)
	}
	return "I do not understand the question. " + seen
}

// fenceOpen opens the fence that carries list.go in the demo's messages.
const fenceOpen = "```go list.go\n"

// fencedFile returns the body of the last ```go list.go fence in text.
func fencedFile(text string) string {
	i := strings.LastIndex(text, fenceOpen)
	if i < 0 {
		return ""
	}
	body := text[i+len(fenceOpen):]
	j := strings.Index(body, "\n```")
	if j < 0 {
		return ""
	}
	return body[:j+1]
}

// demoResult is what one turn cost.
type demoResult struct {
	promptTokens, cachedTokens, bytes int
	answer, report                    string
	usage                             *genai.GenerateContentResponseUsageMetadata
}

// billed is the US dollars of a turn's usageMetadata at p, implicit
// caching included, as the proxy's ledger bills it.
func (r demoResult) billed(p config.Price) float64 {
	u := r.usage
	if u == nil {
		return 0
	}
	cached := min(u.CachedContentTokenCount, u.PromptTokenCount)
	return (float64(u.PromptTokenCount-cached+u.ToolUsePromptTokenCount)*p.Input + float64(cached)*p.CachedInput +
		float64(u.CandidatesTokenCount+u.ThoughtsTokenCount)*p.Output) / 1e6
}

// demo starts the emulator and the proxy in-process on loopback, drives the
// same naive conversation once directly against the emulator and once
// through the proxy, and prints what each turn cost.
func demo(ctx context.Context, fs *pflag.FlagSet, stdout, stderr io.Writer) error {
	model, _ := fs.GetString("model")
	showRequest, _ := fs.GetBool("show-request")
	logs, _ := fs.GetBool("logs")
	keep, _ := fs.GetBool("serve")
	logger := slog.New(slog.DiscardHandler)
	if logs {
		logger = newLogger(config.Log{Level: "info", Format: "text"}, stderr)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	emu := emulator.New(emulator.Options{Reply: demoReply, Logger: logger})
	el, err := listen("emulator", "127.0.0.1:0", emu, config.Default().Server, logger)
	if err != nil {
		return err
	}
	done := make(chan error, 2)
	go func() { done <- serveUntil(ctx, []*listener{el}, 0, time.Second, new(atomic.Bool), logger) }()
	emuURL := "http://" + el.ln.Addr().String()

	c := config.Default()
	c.Server.Listen, _ = fs.GetString("listen")
	c.Admin.Listen, _ = fs.GetString("admin-listen")
	c.Server.ShutdownGrace = time.Second
	c.Upstream.URL = emuURL
	c.Cache.TenantSecret = "demo"
	addrs := make(chan [2]string, 1)
	var page *savingspage.Page // set before addrs receives
	var lk benchLedger         // the proxy's ledger of the proxied run
	pctx := context.WithValue(ctx, exchangeHookKey{}, lk.add)
	go func() {
		done <- serveWithPage(pctx, c, logger, func(p *savingspage.Page) { page = p }, func(p, a string) { addrs <- [2]string{p, a} })
	}()
	var proxyAddr, adminAddr string
	select {
	case a := <-addrs:
		proxyAddr, adminAddr = a[0], a[1]
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("demo: proxy did not start")
	}

	file, source := demoSource()
	fmt.Fprintf(stdout, "gemini-proxy demo: emulator at %s, proxy at http://%s (admin http://%s)\n", emuURL, proxyAddr, adminAddr)
	fmt.Fprintf(stdout, "A naive client re-sends list.go (%d lines; %s) in every user turn of a %d-turn chat with %s;\nthe model edits the file twice, the user once. Same conversation, direct and through the proxy:\n\n", strings.Count(file, "\n"), source, len(demoTurns), model)

	naive, err := runDemoSession(ctx, emuURL, model, emu, file)
	if err != nil {
		return fmt.Errorf("demo: direct session: %w", err)
	}
	emu.Reset() // same starting state (implicit-cache history) for the second run
	proxied, err := runDemoSession(ctx, "http://"+proxyAddr, model, emu, file)
	if err != nil {
		return fmt.Errorf("demo: session through the proxy: %w", err)
	}
	var price config.Price
	for _, p := range c.Metrics.Prices {
		if p.Model == model {
			price = p
		}
	}
	ledger, n := 0.0, 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		// The proxy's bookkeeping of the last turn may end after the
		// client read its answer.
		if ledger, n = lk.of(proxy.TenantOfKey([]byte(c.Cache.TenantSecret), "demo-key")); n >= len(demoTurns) {
			break
		}
	}
	printDemoTable(stdout, naive, proxied, price, ledger)
	turns := make([]savingspage.Turn, len(naive))
	for i := range naive {
		turns[i] = savingspage.Turn{Naive: naive[i].promptTokens, Proxied: proxied[i].promptTokens}
	}
	page.SetConversation("The demo conversation", turns)
	if showRequest {
		rec := emu.Received()
		last := rec[len(rec)-1]
		fmt.Fprintf(stdout, "\nWhat the emulator received for the last turn through the proxy (%d bytes):\n", len(last.Body))
		for i, ct := range last.Contents {
			fmt.Fprintf(stdout, "--- turn %d (%s) ---\n%s\n", i+1, ct.Role, ct.Text())
		}
	}
	if keep {
		fmt.Fprintf(stdout, `
The emulator and the proxy keep running. Next steps:
  Point an SDK at the proxy (its upstream is the emulator; any API key works):
    export GOOGLE_GEMINI_BASE_URL=http://%s GEMINI_API_KEY=demo-key
  Open the savings page: http://%s/  (metrics: http://%s/metrics)
  Press Ctrl-C to stop.
`, proxyAddr, adminAddr, adminAddr)
		select {
		case <-ctx.Done():
		case err := <-done:
			return err // a listener failed
		}
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}

// runDemoSession plays the naive client against baseURL with the real SDK,
// starting from file.
func runDemoSession(ctx context.Context, baseURL, model string, emu *emulator.Server, file string) ([]demoResult, error) {
	client, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey:      "demo-key",
		Backend:     genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: baseURL},
		HTTPClient:  &http.Client{},
	})
	if err != nil {
		return nil, err
	}
	var history []*genai.Content
	var out []demoResult
	for _, t := range demoTurns {
		if t.handEdit != nil {
			file = t.handEdit(file)
		}
		user := genai.NewContentFromText("Here is my current file:\n\n```go list.go\n"+file+"```\n\n"+t.question, genai.RoleUser)
		resp, err := client.Models.GenerateContent(ctx, model, append(history, user), nil)
		if err != nil {
			return nil, err
		}
		answer := resp.Text()
		if edited := fencedFile(answer); edited != "" {
			file = edited // the client applies the model's edit
		}
		history = append(history, user, genai.NewContentFromText(answer, genai.RoleModel))
		rec := emu.Received()
		r := demoResult{answer: answer, bytes: len(rec[len(rec)-1].Body)}
		if u := resp.UsageMetadata; u != nil {
			r.promptTokens, r.cachedTokens, r.usage = int(u.PromptTokenCount), int(u.CachedContentTokenCount), u
		}
		if h := resp.SDKHTTPResponse; h != nil {
			r.report = h.Headers.Get("X-Gemini-Proxy-Report")
		}
		out = append(out, r)
	}
	return out, nil
}

// printDemoTable prints each turn's tokens, bytes and bill (at price, per
// 1,000 conversations) both ways, and the proxy's own ledger.
func printDemoTable(w io.Writer, naive, proxied []demoResult, price config.Price, ledger float64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "turn\tin contents\tprompt tokens naive\tthrough proxy\tsaved\tbytes naive\tthrough proxy\tsaved\tbilled naive\tthrough proxy\tsaved\t")
	var tn, tp, bn, bp int
	var dn, dp float64
	same := true
	for i := range naive {
		n, p := naive[i], proxied[i]
		tn, tp, bn, bp = tn+n.promptTokens, tp+p.promptTokens, bn+n.bytes, bp+p.bytes
		dn, dp = dn+n.billed(price), dp+p.billed(price)
		same = same && n.answer == p.answer
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t$%.2f\t$%.2f\t%s\t\n", i+1, 2*i+1, n.promptTokens, p.promptTokens, pct(n.promptTokens, p.promptTokens), n.bytes, p.bytes, pct(n.bytes, p.bytes),
			1000*n.billed(price), 1000*p.billed(price), pctf(n.billed(price), p.billed(price)))
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%s\t%d\t%d\t%s\t$%.2f\t$%.2f\t%s\t\n", tn, tp, pct(tn, tp), bn, bp, pct(bn, bp), 1000*dn, 1000*dp, pctf(dn, dp))
	tw.Flush()
	fmt.Fprintln(w, "\nTurn N is your Nth message; the proxy's references (\"replaced by the version in turn 7\") count\nthe request's contents, user and model turns alike: your message N is contents turn 2N-1.")
	fmt.Fprintf(w, "\nBilled: US dollars per 1,000 such conversations, from each answer's usageMetadata at the default\nprice table ($%.2f input, $%.3f cached input, $%.2f output per 1M tokens), implicit caching included.\n", price.Input, price.CachedInput, price.Output)
	fmt.Fprintf(w, "The proxy's own ledger (gemini_proxy_saved_dollars_total - cost_increase_dollars_total): $%.2f saved;\nthe bills say $%.2f.\n", 1000*ledger, 1000*(dn-dp))
	fmt.Fprintln(w, "\nX-Gemini-Proxy-Report per turn (rules applied, bytes before->after):")
	for i, p := range proxied {
		fmt.Fprintf(w, "  turn %d: %s\n", i+1, p.report)
	}
	if same {
		fmt.Fprintln(w, "\nThe model's answers were identical in both runs: each answer names the sha256 of the newest\nfull copy of list.go it found, so every version the client sent reached it intact.")
	} else {
		fmt.Fprintln(w, "\nWARNING: the answers differ between the direct and the proxied run.")
	}
}

// pctf is pct for dollars.
func pctf(before, after float64) string {
	if before == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*(before-after)/before)
}

// pct formats the share saved going from before to after.
func pct(before, after int) string {
	if before == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(before-after)/float64(before))
}
