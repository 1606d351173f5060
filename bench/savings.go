package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// Replies is the bench's scripted model for the emulator
// (emulator.Options.Reply): the n-th request of a registered API key gets
// the n-th answer registered for it; any other request gets "OK.". Safe for
// concurrent use; the zero value is ready to use.
type Replies struct {
	mu    sync.Mutex
	byKey map[string]*replyState
}

type replyState struct {
	answers []string
	next    int
}

// Register scripts the answers for requests made with apiKey.
func (r *Replies) Register(apiKey string, answers []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = make(map[string]*replyState)
	}
	r.byKey[emulator.KeyID(apiKey)] = &replyState{answers: answers}
}

// Reply answers req; use it as emulator.Options.Reply.
func (r *Replies) Reply(req emulator.ReplyRequest) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.byKey[req.KeyID]
	if st == nil || st.next >= len(st.answers) {
		return "OK."
	}
	st.next++
	return st.answers[st.next-1]
}

// SavingsOptions configures RunSavings.
type SavingsOptions struct {
	// DirectURL is the upstream (the emulator) base URL; the naive and the
	// ideal client talk to it directly. ProxyURL is the proxy in front of
	// it. Both are required.
	DirectURL, ProxyURL string
	// Replies, when set, receives the scripted answers of every session
	// under the API keys the run uses. Nil when the upstream is not the
	// bench's emulator: then the upstream answers as it likes, and the
	// clients still send their scripted histories.
	Replies *Replies
	// Sessions to replay. Nil means Sessions().
	Sessions []*Session
	// RunID makes the run's API keys unique, so that an upstream's
	// implicit-cache history of an earlier run does not count. Empty means
	// "run".
	RunID string
	// Parallel is the number of sessions replayed at once. Zero means 4.
	Parallel int
	// Progress, when set, receives one line per finished session.
	Progress io.Writer
	// Prices are the prices by model the bills (Tokens.Billed) use; a
	// session whose model has none is billed $0.
	Prices map[string]Price
	// Ledger, when set, returns the proxy's net ledger (saved minus cost
	// increases, US dollars) of the requests made with an API key and how
	// many of those requests the proxy finished with; RunSavings waits
	// until it finished every request of the session. Nil: the proxy's
	// ledger is not read.
	Ledger func(apiKey string) (dollars float64, requests int)
	// AdminURL, when set, is the proxy's admin listener: RunSavings reads
	// the rewrite audit's failures (AuditMetric) from its /metrics before
	// and after the replay.
	AdminURL string
}

// Tokens are the totals of one replay of a session.
type Tokens struct {
	// Prompt and Cached sum promptTokenCount and cachedContentTokenCount
	// (implicit cache) of the session's responses.
	Prompt int `json:"prompt_tokens"`
	Cached int `json:"cached_tokens"`
	// Bytes is the request bytes the upstream received: for the proxy, the
	// size after rewriting (from its X-Gemini-Proxy-Report header).
	Bytes int `json:"bytes_uploaded"`
	// ClientBytes is what the client sent.
	ClientBytes int `json:"client_bytes"`
	// Billed is the US dollars of the session's usageMetadata at
	// SavingsOptions.Prices, implicit caching included.
	Billed float64 `json:"billed_dollars"`
}

func (t *Tokens) add(o Tokens) {
	t.Prompt += o.Prompt
	t.Cached += o.Cached
	t.Bytes += o.Bytes
	t.ClientBytes += o.ClientBytes
	t.Billed += o.Billed
}

// SessionResult is the savings of one session (or of a total).
type SessionResult struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Kind        Kind   `json:"kind,omitempty"`
	Requests    int    `json:"requests"`
	Naive       Tokens `json:"naive"`
	Proxy       Tokens `json:"proxy"`
	Ideal       Tokens `json:"ideal"`
	// Changed counts the requests the proxy rewrote; Unflattened the turns
	// it created by un-flattening.
	Changed     int `json:"changed_requests"`
	Unflattened int `json:"unflattened_turns"`
	// Kept counts the proxied requests sent with the conversation's sent
	// prefix kept rather than compacted (compaction=keeps_prefix in the
	// report header; rewrite.cache_aware_compaction).
	Kept int `json:"kept_prefix_requests,omitempty"`
	// AnswersMatch reports whether the proxied replay received the same
	// answers as the naive one.
	AnswersMatch bool `json:"answers_match"`
	// AuditFailures counts the session's proxied requests that failed the
	// rewrite audit (measured with SavingsOptions.AdminURL).
	AuditFailures int `json:"audit_failures,omitempty"`
	// Errors lists request failures; a session with errors has partial
	// figures.
	Errors []string `json:"errors,omitempty"`
	// Ledger is the proxy's own net ledger of the proxied replay, in US
	// dollars; nil when it was not read (SavingsOptions.Ledger).
	Ledger *float64 `json:"ledger_dollars,omitempty"`
}

// Saved is the share of naive prompt tokens the proxy saved.
func (r SessionResult) Saved() float64 { return share(r.Naive.Prompt-r.Proxy.Prompt, r.Naive.Prompt) }

// IdealSaved is the share of naive prompt tokens the ideal client saved.
func (r SessionResult) IdealSaved() float64 {
	return share(r.Naive.Prompt-r.Ideal.Prompt, r.Naive.Prompt)
}

// ShareOfIdeal is the proxy's savings as a share of the ideal client's; 1
// when neither saves anything.
func (r SessionResult) ShareOfIdeal() float64 {
	if r.Naive.Prompt-r.Ideal.Prompt <= 0 {
		if r.Naive.Prompt-r.Proxy.Prompt == 0 {
			return 1
		}
		return 0
	}
	return share(r.Naive.Prompt-r.Proxy.Prompt, r.Naive.Prompt-r.Ideal.Prompt)
}

func share(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Savings is the result of RunSavings.
type Savings struct {
	Sessions []SessionResult `json:"sessions"`
	// Total sums every session; ByKind sums the sessions of each kind.
	Total  SessionResult          `json:"total"`
	ByKind map[Kind]SessionResult `json:"by_kind"`
	// Audit is what the proxy's rewrite audit reported during the replay.
	Audit AuditCount `json:"audit"`
}

// RunSavings replays every session three times: naive directly against
// the upstream, naive through the proxy, and ideal directly, each with its
// own API key, and sums the usage the upstream reported.
func RunSavings(ctx context.Context, o SavingsOptions) (*Savings, error) {
	if o.DirectURL == "" || o.ProxyURL == "" {
		return nil, fmt.Errorf("bench: savings need the upstream and the proxy URL")
	}
	sessions := o.Sessions
	if sessions == nil {
		sessions = Sessions()
	}
	if o.RunID == "" {
		o.RunID = "run"
	}
	par := o.Parallel
	if par <= 0 {
		par = 4
	}
	var auditBefore map[string]int
	if o.AdminURL != "" {
		b, _, err := readAudit(ctx, o.AdminURL)
		if err != nil {
			return nil, err
		}
		auditBefore = b
	}
	results := make([]SessionResult, len(sessions))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var pmu sync.Mutex
	// With an admin URL the proxied replays take turns, so that each
	// session's audit failures are its own.
	var proxyMu sync.Mutex
	for i, s := range sessions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = replaySession(ctx, o, s, &proxyMu)
			if o.Progress != nil {
				pmu.Lock()
				r := results[i]
				fmt.Fprintf(o.Progress, "bench: session %-18s naive %8d  proxy %8d  ideal %8d prompt tokens\n", r.Name, r.Naive.Prompt, r.Proxy.Prompt, r.Ideal.Prompt)
				pmu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Savings{Sessions: results, Total: SessionResult{Name: "total", AnswersMatch: true}, ByKind: map[Kind]SessionResult{}}
	for _, r := range results {
		addResult(&out.Total, r)
		k := out.ByKind[r.Kind]
		if k.Name == "" {
			k = SessionResult{Name: "total " + string(r.Kind), Kind: r.Kind, AnswersMatch: true}
		}
		addResult(&k, r)
		out.ByKind[r.Kind] = k
	}
	if o.AdminURL != "" {
		after, exported, err := readAudit(ctx, o.AdminURL)
		if err != nil {
			return nil, err
		}
		out.Audit = AuditCount{Measured: true, Exported: exported}
		out.Audit.Failures, out.Audit.ByReason = auditDelta(auditBefore, after)
	}
	return out, nil
}

func addResult(t *SessionResult, r SessionResult) {
	t.Requests += r.Requests
	t.Naive.add(r.Naive)
	t.Proxy.add(r.Proxy)
	t.Ideal.add(r.Ideal)
	t.Changed += r.Changed
	t.Unflattened += r.Unflattened
	t.Kept += r.Kept
	t.AuditFailures += r.AuditFailures
	t.AnswersMatch = t.AnswersMatch && r.AnswersMatch
	t.Errors = append(t.Errors, r.Errors...)
	if r.Ledger != nil {
		v := *r.Ledger
		if t.Ledger != nil {
			v += *t.Ledger
		}
		t.Ledger = &v
	}
}

// replaySession plays s naive, through the proxy and ideal. With
// o.AdminURL it holds proxyMu during the proxied replay and counts the
// audit failures the proxy's metrics gained meanwhile.
func replaySession(ctx context.Context, o SavingsOptions, s *Session, proxyMu *sync.Mutex) SessionResult {
	r := SessionResult{Name: s.Name, Description: s.Description, Kind: s.Kind, Requests: len(s.Turns), AnswersMatch: true}
	type mode struct {
		name, url string
		ideal     bool
		tokens    *Tokens
	}
	modes := []mode{{"naive", o.DirectURL, false, &r.Naive}, {"proxy", o.ProxyURL, false, &r.Proxy}, {"ideal", o.DirectURL, true, &r.Ideal}}
	var answers [3][]string
	// play replays s in mode m and returns its answers.
	play := func(m mode) []string {
		var out []string
		key := fmt.Sprintf("bench-%s-%s-%s", o.RunID, s.Name, m.name)
		if o.Replies != nil {
			o.Replies.Register(key, s.Answers())
		}
		rec := &recordingTransport{base: http.DefaultTransport}
		c, err := genai.NewClient(ctx, &genai.ClientConfig{
			APIKey: key, Backend: genai.BackendGeminiAPI,
			HTTPOptions: genai.HTTPOptions{BaseURL: m.url},
			HTTPClient:  &http.Client{Transport: rec},
		})
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: client: %v", m.name, err))
			return nil
		}
		for ti, t := range s.Turns {
			contents := t.Naive
			if m.ideal {
				contents = t.Ideal
			}
			answer, u, err := send(ctx, c, s, contents)
			if err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("%s: %s turn %d: %v", s.Name, m.name, ti+1, err))
				break
			}
			out = append(out, answer)
			sent, report := rec.last()
			tk := Tokens{ClientBytes: sent, Bytes: sent, Billed: billed(o.Prices[s.Model], u)}
			if u != nil {
				tk.Prompt, tk.Cached = int(u.PromptTokenCount), int(u.CachedContentTokenCount)
			}
			if m.name == "proxy" {
				before, after, rules, ok := parseReport(report)
				if ok {
					tk.Bytes = after
					if before != after || rules {
						r.Changed++
					}
					r.Unflattened += unflattened(report)
					if strings.Contains(report, "; compaction=keeps_prefix") {
						r.Kept++
					}
				}
			}
			m.tokens.add(tk)
		}
		if m.name == "proxy" && o.Ledger != nil {
			if v, ok := waitLedger(ctx, o.Ledger, key, len(s.Turns)); ok {
				r.Ledger = &v
			} else {
				r.Errors = append(r.Errors, fmt.Sprintf("%s: the proxy finished fewer than %d requests", s.Name, len(s.Turns)))
			}
		}
		return out
	}
	for mi, m := range modes {
		if m.name != "proxy" || o.AdminURL == "" {
			answers[mi] = play(m)
			continue
		}
		proxyMu.Lock()
		before, _, err := readAudit(ctx, o.AdminURL)
		if err == nil {
			answers[mi] = play(m)
			var after map[string]int
			if after, _, err = readAudit(ctx, o.AdminURL); err == nil {
				r.AuditFailures, _ = auditDelta(before, after)
			}
		}
		proxyMu.Unlock()
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m.name, err))
		}
	}
	if len(answers[0]) != len(answers[1]) {
		r.AnswersMatch = false
	}
	for i := range answers[0] {
		if i >= len(answers[1]) || answers[0][i] != answers[1][i] {
			r.AnswersMatch = false
		}
	}
	return r
}

// waitLedger waits, for up to 10 s, until ledger has accounted n requests
// of key: the proxy's bookkeeping may finish after the client read its
// answer.
func waitLedger(ctx context.Context, ledger func(string) (float64, int), key string, n int) (float64, bool) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, got := ledger(key)
		if got >= n {
			return v, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return v, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// send makes one request of s and returns the answer text and the last
// usageMetadata.
func send(ctx context.Context, c *genai.Client, s *Session, contents []*genai.Content) (string, *genai.GenerateContentResponseUsageMetadata, error) {
	if !s.Stream {
		resp, err := c.Models.GenerateContent(ctx, s.Model, contents, s.Config)
		if err != nil {
			return "", nil, err
		}
		return resp.Text(), resp.UsageMetadata, nil
	}
	var text string
	var u *genai.GenerateContentResponseUsageMetadata
	for resp, err := range c.Models.GenerateContentStream(ctx, s.Model, contents, s.Config) {
		if err != nil {
			return "", nil, err
		}
		text += resp.Text()
		if resp.UsageMetadata != nil {
			u = resp.UsageMetadata
		}
	}
	return text, u, nil
}

// recordingTransport remembers the size of the last request body and the
// X-Gemini-Proxy-Report header of the last response. A replay sends one
// request at a time per transport.
type recordingTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	sent   int
	report string
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	n := int(req.ContentLength)
	res, err := t.base.RoundTrip(req)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent, t.report = n, ""
	if res != nil {
		t.report = res.Header.Get("X-Gemini-Proxy-Report")
	}
	return res, err
}

func (t *recordingTransport) last() (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent, t.report
}

var (
	reportBytesRE = regexp.MustCompile(`^bytes=(\d+)->(\d+)`)
	unflattenRE   = regexp.MustCompile(`unflatten=(\d+)`)
	ruleRE        = regexp.MustCompile(`; [a-z]+=\d+`)
)

// parseReport reads "bytes=BEFORE->AFTER; rule=N…"; rules reports whether
// any rule was applied.
func parseReport(h string) (before, after int, rules, ok bool) {
	m := reportBytesRE.FindStringSubmatch(h)
	if m == nil {
		return 0, 0, false, false
	}
	before, _ = strconv.Atoi(m[1])
	after, _ = strconv.Atoi(m[2])
	rest := h[len(m[0]):]
	return before, after, ruleRE.MatchString(rest), true
}

func unflattened(h string) int {
	m := unflattenRE.FindStringSubmatch(h)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
