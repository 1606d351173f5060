package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// Token estimation constants.
const (
	// PriorTokensPerByte is the tokens-per-byte ratio used for a model
	// before any calibration sample arrived: 1/3.5, source code and JSON
	// with the Gemma 3 vocabulary (gemini-api.md §8.3 measured 3.1–3.7
	// bytes per token on code, 4.4–4.9 on English prose).
	PriorTokensPerByte = 1 / 3.5
	// ImageTokens is what one replaced image part is estimated to have
	// cost: 258 tokens, the API's price of an image up to 384 px (larger
	// images cost 258 per 768 px tile, so this underestimates them).
	ImageTokens = 258
	// minCalibrationBytes is the smallest amount of text, in bytes, a
	// calibration sample must cover; smaller ones are too noisy.
	minCalibrationBytes = 256
	// usageDecay and exactDecay are the weights of the past in the
	// exponentially weighted sums: each sample multiplies the sums by
	// 1-decay before adding itself, so a ratio follows roughly the last
	// 1/decay samples, weighted by their size in bytes.
	usageDecay = 0.05
	exactDecay = 0.2
	// maxCountTokens bounds the countTokens calls in flight.
	maxCountTokens = 4
	// countTokensTimeout bounds one countTokens call.
	countTokensTimeout = 30 * time.Second
	// maxCountTokensResponse bounds the countTokens response read.
	maxCountTokensResponse = 1 << 20
)

// Price is one model's price in US dollars per million tokens.
type Price struct {
	// Input is the price of uncached prompt tokens (and tool-use prompt
	// tokens).
	Input float64
	// CachedInput is the price of cached prompt tokens.
	CachedInput float64
	// Output is the price of output tokens, thinking included.
	Output float64
	// Storage is the price of keeping a million tokens in an explicit
	// context cache for one hour. Zero means unknown: the model is never
	// cached.
	Storage float64
	// Checked is the date the price was checked, as YYYY-MM-DD. Empty
	// means unknown; it is exported as
	// gemini_proxy_price_checked_timestamp_seconds.
	Checked string
}

// savings estimates what rewriting saved, calibrates the tokens-per-byte
// ratio of each model, prices requests and samples exact token counts with
// countTokens. Safe for concurrent use.
type savings struct {
	m      *metrics.Metrics
	prices map[string]Price // by normalised model

	mu     sync.Mutex
	ratios map[string]*ratio // by model label

	ctSem      chan struct{}
	sampleRate float64
	limit      *limiter
	// countTokens returns the exact token count of a sampled request.
	countTokens func(context.Context, *sample) (int64, error)
	// random returns a number in [0, 1); it decides sampling.
	random func() float64

	wg sync.WaitGroup // background jobs; tests wait on it
}

// ratio holds one model's exponentially weighted calibration sums.
type ratio struct {
	usageTokens, usageBytes float64
	exactTokens, exactBytes float64
}

// value is the ratio in use: from exact samples when there are any, else
// from usageMetadata, else the prior.
func (r *ratio) value() float64 {
	switch {
	case r.exactBytes > 0 && r.exactTokens > 0:
		return r.exactTokens / r.exactBytes
	case r.usageBytes > 0 && r.usageTokens > 0:
		return r.usageTokens / r.usageBytes
	}
	return PriorTokensPerByte
}

func newSavings(m *metrics.Metrics, opts Options, label func(string) string) (*savings, error) {
	s := &savings{
		m:          m,
		prices:     make(map[string]Price, len(opts.Prices)),
		ratios:     make(map[string]*ratio),
		ctSem:      make(chan struct{}, maxCountTokens),
		sampleRate: opts.CountTokensSampleRate,
		random:     rand.Float64,
	}
	if s.sampleRate < 0 || s.sampleRate > 1 || math.IsNaN(s.sampleRate) {
		return nil, fmt.Errorf("proxy: count tokens sample rate %v is not in [0, 1]", s.sampleRate)
	}
	perSecond := opts.CountTokensPerSecond
	if perSecond <= 0 {
		perSecond = 1
	}
	s.limit = newLimiter(perSecond, time.Now)
	var errs []error
	for name, p := range opts.Prices {
		model := normalizeModel(name)
		s.prices[model] = p
		if label(model) != model {
			continue // not on the allowlist: no label of its own to export under
		}
		m.Price.WithLabelValues(model, metrics.PriceInput).Set(p.Input)
		m.Price.WithLabelValues(model, metrics.PriceCachedInput).Set(p.CachedInput)
		m.Price.WithLabelValues(model, metrics.PriceOutput).Set(p.Output)
		if p.Checked != "" {
			d, err := time.Parse(time.DateOnly, p.Checked)
			if err != nil {
				errs = append(errs, fmt.Errorf("proxy: price of %s: checked date: %w", name, err))
				continue
			}
			m.PriceChecked.WithLabelValues(model).Set(float64(d.Unix()))
		}
	}
	return s, errors.Join(errs...)
}

// ratioFor returns the ratio in use for a model label and exports it.
func (s *savings) ratioFor(label string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ratioLocked(label).value()
}

func (s *savings) ratioLocked(label string) *ratio {
	r := s.ratios[label]
	if r == nil {
		r = &ratio{}
		s.ratios[label] = r
		s.m.TokensPerByte.WithLabelValues(label).Set(r.value())
	}
	return r
}

// calibrate adds one sample of tokens for bytes of text to a model's ratio.
func (s *savings) calibrate(label, source string, tokens, bytes float64) {
	if bytes < minCalibrationBytes || tokens <= 0 {
		return
	}
	s.mu.Lock()
	r := s.ratioLocked(label)
	if source == metrics.SourceCountTokens {
		r.exactTokens = r.exactTokens*(1-exactDecay) + tokens
		r.exactBytes = r.exactBytes*(1-exactDecay) + bytes
	} else {
		r.usageTokens = r.usageTokens*(1-usageDecay) + tokens
		r.usageBytes = r.usageBytes*(1-usageDecay) + bytes
	}
	v := r.value()
	s.mu.Unlock()
	s.m.TokensPerByte.WithLabelValues(label).Set(v)
	s.m.CalibrationSamples.WithLabelValues(label, source).Inc()
}

// savingsJob is one rewritten request that the upstream accepted.
type savingsJob struct {
	label  string // model label
	model  string // normalised model name, for prices
	report *rewrite.Report
	usage  *Usage // nil when the response had none
	sample *sample
}

// sample is what a countTokens call needs. It holds the caller's
// credential in memory for the duration of the call only.
type sample struct {
	url    string
	header http.Header
	body   []byte // the original request body
	model  string // model id from the path
}

// record estimates and records the savings of a rewritten request and
// returns the estimated tokens removed. With usage it first calibrates the
// model's ratio from this very request, so that even the first request of
// a model is estimated from a measured ratio; with a sample it then asks
// countTokens, in the background, for the exact count of the original
// request.
func (s *savings) record(j *savingsJob) float64 {
	if j.usage != nil {
		s.calibrateUsage(j)
	}
	est := s.estimate(j)
	if j.sample != nil && s.reserveSample() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.ctSem }()
			s.exact(j, est)
		}()
	}
	return est
}

// wait blocks until every background job has finished.
func (s *savings) wait() { s.wg.Wait() }

// sampled reports whether a request is chosen for a countTokens sample.
func (s *savings) sampled() bool {
	return s.sampleRate > 0 && s.random() < s.sampleRate
}

// reserveSample takes a rate-limit token and a concurrency slot for a
// sampled request, counting why when it cannot.
func (s *savings) reserveSample() bool {
	if !s.limit.allow() {
		s.m.CountTokens.WithLabelValues(metrics.CountTokensRateLimited).Inc()
		return false
	}
	if !tryAcquire(s.ctSem) {
		s.m.CountTokens.WithLabelValues(metrics.CountTokensBusy).Inc()
		return false
	}
	return true
}

func tryAcquire(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// calibrateUsage calibrates from the rewrite report of the body sent and
// its promptTokenCount: prompt tokens minus one role token per content,
// over the text bytes of the rewritten contents plus the raw bytes of the
// rest of the prompt (system instruction, tools, non-text parts). The
// report describes exactly what was sent, so the body is not decoded
// again. Requests with media, file references or cachedContent are left
// out, since their tokens are not a function of bytes.
func (s *savings) calibrateUsage(j *savingsJob) {
	rep := j.report
	if rep == nil || rep.Media || rep.TextBytes+rep.OtherBytes == 0 {
		return
	}
	s.calibrate(j.label, metrics.SourceUsage, float64(j.usage.PromptTokens-int64(rep.Contents)), float64(rep.TextBytes+rep.OtherBytes))
}

// estimate records the estimated tokens saved by each rule and returns
// the total. Dollars are the ledger's (ledger.go): a removed token was not
// necessarily billed at the input price.
func (s *savings) estimate(j *savingsJob) float64 {
	r := s.ratioFor(j.label)
	total := 0.0
	for rule, tokens := range estimateTokens(j.report, r) {
		if tokens == 0 {
			continue
		}
		total += tokens
		s.m.TokensSaved.WithLabelValues(string(rule), j.label).Add(tokens)
	}
	return total
}

// estimateTokens estimates the prompt tokens each rule removed: text bytes
// removed, as the model read them (promptBytes), times ratio; for an image
// ImageTokens minus its reference's tokens (refTokens); for un-flattening
// the tokens it counted (unflattenedTokens).
// Savings can be negative (a reference longer than what it replaced is
// never produced, but un-flattening adds role tokens); they are floored at
// zero per rule because counters only grow.
func estimateTokens(rep *rewrite.Report, ratio float64) map[rewrite.Rule]float64 {
	out := make(map[rewrite.Rule]float64, len(rewrite.Rules))
	if rep == nil {
		return out
	}
	for _, x := range rep.Replacements {
		if x.Rule == rewrite.RuleImage {
			out[x.Rule] += ImageTokens - refTokens(x.Reference)
			continue
		}
		out[x.Rule] += float64(promptBytes(x)) * ratio
	}
	if tokens, ok := unflattenedTokens(rep); ok {
		out[rewrite.RuleUnflatten] += tokens
	} else if rep.UnflattenedBytes > 0 {
		out[rewrite.RuleUnflatten] += float64(rep.UnflattenedBytes) * ratio
	}
	for rule, v := range out {
		if v < 0 {
			out[rule] = 0
		}
	}
	return out
}

// textRemoved returns the text bytes removed by rules other than image, as
// the model read them (promptBytes), and the tokens removed that do not
// follow from bytes: the replaced images' (ImageTokens minus their
// references' refTokens) and what un-flattening counted
// (unflattenedTokens).
func textRemoved(rep *rewrite.Report, ratio float64) (textBytes int, fixedTokens float64) {
	for _, x := range rep.Replacements {
		if x.Rule == rewrite.RuleImage {
			fixedTokens += ImageTokens - refTokens(x.Reference)
			continue
		}
		textBytes += promptBytes(x)
	}
	// Un-flattening removes labels, and a JSON history's syntax and
	// escapes, that no replacement records.
	if tokens, ok := unflattenedTokens(rep); ok {
		fixedTokens += tokens
	} else {
		textBytes += rep.UnflattenedBytes
	}
	return textBytes, fixedTokens
}

// promptBytes returns the bytes a text replacement took out of the prompt
// as the model reads it: a file in a JSON string (an editor's JSON text, a
// tool result) is read escaped, a newline as `\n`, so its decoded bytes
// came out 7% to 10% below what the emulator counted on the bench's
// editor-json and agent-read-file sessions, at the request's own tokens
// per byte. A Replacement without PromptBytes (not made by
// rewrite.Request) counts Bytes.
func promptBytes(x rewrite.Replacement) int {
	if x.PromptBytes == 0 {
		return x.Bytes - x.RefBytes
	}
	return x.PromptBytes - x.PromptRefBytes
}

// unflattenedTokens returns the tokens un-flattening removed, as
// rewrite.Options.CountTokens (textTokens, runRewrite) counted them, less
// the role token of each content it made, and whether rep has that count
// (a count of 0 reads as none: a rewrite without CountTokens).
// Its JSON syntax and escapes tokenise three times denser than the text
// around them (`":"` is two tokens of the model, each escape's backslash
// one), so at the request's tokens per byte the bench's flat-json-array
// session's counterfactual missed two thirds of them.
func unflattenedTokens(rep *rewrite.Report) (float64, bool) {
	if rep.UnflattenedTokens == 0 {
		return 0, false
	}
	return float64(rep.UnflattenedTokens - rep.UnflattenedTurns), true
}

// exact asks countTokens for the original request's token count, exports
// it next to the estimate and calibrates the model's ratio from it: the
// exact tokens saved (original minus sent) over the text bytes removed.
func (s *savings) exact(j *savingsJob, estimated float64) {
	ctx, cancel := context.WithTimeout(context.Background(), countTokensTimeout)
	defer cancel()
	orig, err := s.countTokens(ctx, j.sample)
	if err != nil {
		s.m.CountTokens.WithLabelValues(metrics.CountTokensError).Inc()
		return
	}
	s.m.CountTokens.WithLabelValues(metrics.CountTokensOK).Inc()
	sent := j.usage.PromptTokens
	s.m.SampledTokens.WithLabelValues(j.label, metrics.SampledOriginalExact).Add(float64(orig))
	s.m.SampledTokens.WithLabelValues(j.label, metrics.SampledOriginalEstimated).Add(float64(sent) + estimated)
	s.m.SampledTokens.WithLabelValues(j.label, metrics.SampledSent).Add(float64(sent))
	textBytes, fixedTokens := textRemoved(j.report, s.ratioFor(j.label))
	s.calibrate(j.label, metrics.SourceCountTokens, float64(orig-sent)-fixedTokens, float64(textBytes))
}

// spend records the estimated dollars of one response from its usage, or
// counts the request as unpriced.
func (s *savings) spend(label, model string, u *Usage) {
	p, ok := s.prices[model]
	if !ok {
		s.m.UnpricedRequests.WithLabelValues(label).Inc()
		return
	}
	uncached := max(u.PromptTokens-u.CachedTokens, 0)
	d := float64(uncached+u.ToolUsePromptTokens)*p.Input +
		float64(u.CachedTokens)*p.CachedInput +
		float64(u.CandidatesTokens+u.ThoughtsTokens)*p.Output
	if d > 0 {
		s.m.SpentDollars.WithLabelValues(label).Add(d / 1e6)
	}
}

// newSample prepares a countTokens call for the original body of r, or
// returns nil when none can be made: Vertex paths (their countTokens takes
// another shape), tuned models, and requests without a credential.
func (h *Handler) newSample(st *reqState, r *http.Request) *sample {
	if st.info.vertex || st.orig == nil {
		return nil
	}
	path := r.URL.Path
	i := strings.LastIndexByte(path, ':')
	j := strings.LastIndex(path, "/models/")
	if i < 0 || j < 0 || j > i {
		return nil
	}
	s := &sample{model: path[j+len("/models/") : i], body: st.orig, header: http.Header{}}
	u := *h.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + path[:i] + ":countTokens"
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	switch {
	case h.opts.APIKey != "":
		s.header.Set("X-Goog-Api-Key", string(h.opts.APIKey))
	case r.Header.Get("X-Goog-Api-Key") != "":
		s.header.Set("X-Goog-Api-Key", r.Header.Get("X-Goog-Api-Key"))
	case r.URL.Query().Get("key") != "":
		u.RawQuery = "key=" + url.QueryEscape(r.URL.Query().Get("key"))
	case r.Header.Get("Authorization") != "":
		s.header.Set("Authorization", r.Header.Get("Authorization"))
	default:
		return nil
	}
	s.url = u.String()
	s.header.Set("Content-Type", "application/json")
	return s
}

// countTokensBody wraps a generateContent body into a countTokens request:
// {"generateContentRequest": {...the body..., "model": "models/M"}}.
func countTokensBody(body []byte, model string) ([]byte, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decoding request: %w", err)
	}
	m, err := json.Marshal("models/" + model)
	if err != nil {
		return nil, err
	}
	req["model"] = m
	return json.Marshal(map[string]any{"generateContentRequest": req})
}

// callCountTokens performs a sampled countTokens call through rt.
func callCountTokens(ctx context.Context, rt http.RoundTripper, s *sample) (int64, error) {
	body, err := countTokensBody(s.body, s.model)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = s.header.Clone()
	res, err := rt.RoundTrip(req)
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxCountTokensResponse))
	if err != nil {
		return 0, fmt.Errorf("count tokens: reading response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("count tokens: status %d", res.StatusCode)
	}
	var out struct {
		TotalTokens *int64 `json:"totalTokens"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.TotalTokens == nil {
		return 0, errors.New("count tokens: response has no totalTokens")
	}
	return *out.TotalTokens, nil
}

// limiter is a token bucket: rate tokens per second, bursts up to
// max(1, rate). Safe for concurrent use.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newLimiter(rate float64, now func() time.Time) *limiter {
	b := max(1, rate)
	return &limiter{rate: rate, burst: b, tokens: b, last: now(), now: now}
}

// allow reports whether a call may be made now, taking a token if so.
func (l *limiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// statusLabel bounds an HTTP status code for a label.
func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

// refTokens estimates the tokens of a reference the rewrite wrote. A
// reference is short, mostly ASCII, and a fifth of it is a hex hash and
// a turn number, whose digits the Gemma tokenizer Gemini uses splits one
// by one: at the traffic's tokens per byte its estimate came out a third
// low (17 tokens for a 51-byte image reference the emulator counts as 25),
// which, where an image reference replaces an image of 258 tokens and
// implicit caching already bills most of the naive prompt at the cached
// rate, is most of the net saving (the bench's images session). So it is
// priced by runs, as tokenizers split text (textTokens).
func refTokens(ref string) float64 { return float64(textTokens(ref)) }
