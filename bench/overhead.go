package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Target is one configuration the overhead runner sends requests to.
type Target struct {
	// Name labels the configuration, e.g. "direct" or "proxy-rewrite".
	Name string `json:"name"`
	// URL is its base URL.
	URL string `json:"url"`
	// PID, when non-zero, is the process serving it; its CPU time and
	// resident memory are read from /proc.
	PID int `json:"pid,omitempty"`
	// MetricsURL, when set, is its Prometheus endpoint (the proxy's admin
	// /metrics): the Go runtime's go_memstats_alloc_bytes_total and
	// go_memstats_mallocs_total, read around each batch, give the bytes and
	// objects it allocates per request.
	MetricsURL string `json:"metrics_url,omitempty"`
}

// Size is one request shape of the overhead runner.
type Size struct {
	// Name labels it ("small", "medium", "large").
	Name string `json:"name"`
	// Body is the generateContent request body.
	Body []byte `json:"-"`
	// Turns is the number of contents in Body.
	Turns int `json:"turns"`
	// Model, when set, replaces OverheadOptions.Model in its requests
	// (AnswersSize: the fake's long answers).
	Model string `json:"model,omitempty"`
}

// Request sizes of the issue "gemini-proxy bench": medium is 70 KB in six
// turns, large 1 MB (binary units, the whole JSON body).
const (
	MediumBytes = 70 << 10
	LargeBytes  = 1 << 20
)

// Sizes returns the standard request shapes: small (about 1 KB, one turn),
// medium (exactly MediumBytes, six turns re-sending two files, the last turn
// quoting a note) and large (exactly LargeBytes, documents of the corpus
// re-sent over six turns).
func Sizes() []Size {
	small := []map[string]any{userText(strings.Repeat("Explain the difference between a slice and an array in Go. ", 17))}
	files := fence("go", "scan.go", Document("scan.go")) + "\n\n" + fence("go", "list.go", Document("list.go"))
	var medium []map[string]any
	for i := range 3 {
		medium = append(medium, userText("Here are my files:\n\n"+files))
		if i < 2 {
			medium = append(medium, modelText(fmt.Sprintf("Answer %d: the Scanner splits input into tokens.", i+1)))
		}
	}
	medium = append(medium, userText("What changed since my last question? The team's notes say:\n\n"+Document("HACKING.md")))
	fitBody(medium, MediumBytes)
	var docs strings.Builder
	for _, f := range []string{"reverseproxy.go", "scan.go", "sort.go", "chats.go", "HACKING.md", "wasm_exec.js", "memmove_amd64.s", "gcc_libinit.c", "MPL-2.0", "Apache-2.0"} {
		docs.WriteString(fence("", f, Document(f)) + "\n")
	}
	var large []map[string]any
	for i := range 6 {
		if i%2 == 0 {
			large = append(large, userText(fmt.Sprintf("Context:\n\n%s\nQuestion %d?", docs.String(), i/2+1)))
		} else {
			large = append(large, modelText("Noted."))
		}
	}
	// Grow the last user turn with more real text past 1 MB, then cut it.
	for body(large) < LargeBytes {
		setText(large[len(large)-1], docs.String()+text(large[len(large)-1]))
	}
	fitBody(large, LargeBytes)
	return []Size{
		{Name: "small", Body: mustJSON(map[string]any{"contents": small}), Turns: len(small)},
		{Name: "medium", Body: mustJSON(map[string]any{"contents": medium}), Turns: len(medium)},
		{Name: "large", Body: mustJSON(map[string]any{"contents": large}), Turns: len(large)},
	}
}

// fitBody cuts the text of the last content so that the request body is
// exactly n bytes, padding with ASCII (one byte each in JSON) where cutting
// a multi-byte or escaped character overshoots.
func fitBody(contents []map[string]any, n int) {
	last := contents[len(contents)-1]
	for range 8 {
		size := body(contents)
		t := text(last)
		switch {
		case size > n && t == "":
			panic(fmt.Sprintf("bench: request body cannot be cut to %d bytes", n))
		case size > n:
			// Each byte of text is at least one byte of JSON.
			cut := max(len(t)-(size-n), 0)
			for cut > 0 && !utf8.RuneStart(t[cut]) {
				cut--
			}
			setText(last, t[:cut])
		case size < n:
			setText(last, t+strings.Repeat(".", n-size))
		default:
			return
		}
	}
	panic(fmt.Sprintf("bench: request body not fitted to %d bytes", n))
}

func text(c map[string]any) string { return c["parts"].([]map[string]any)[0]["text"].(string) }

func setText(c map[string]any, s string) { c["parts"].([]map[string]any)[0]["text"] = s }

func userText(s string) map[string]any {
	return map[string]any{"role": "user", "parts": []map[string]any{{"text": s}}}
}

func modelText(s string) map[string]any {
	return map[string]any{"role": "model", "parts": []map[string]any{{"text": s}}}
}

func body(contents []map[string]any) int { return len(mustJSON(map[string]any{"contents": contents})) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// OverheadOptions configures RunOverhead.
type OverheadOptions struct {
	// Targets are the configurations; the first is the baseline the added
	// latency is measured against (direct to the upstream).
	Targets []Target
	// Sizes are the request shapes; nil means Sizes().
	Sizes []Size
	// Concurrency levels; nil means 1, 16 and 64.
	Concurrency []int
	// Model is the model in the request path; empty means gemini-2.5-flash.
	Model string
	// APIKey is sent as x-goog-api-key; empty means "bench-overhead".
	APIKey string
	// CellTime is the time spent on one (size, mode, concurrency) cell,
	// shared by all targets; at least two rounds always run. Zero means 2s.
	CellTime time.Duration
	// Deadline, when set, ends the run: cells not started by then are
	// skipped and reported as such.
	Deadline time.Time
	// Progress, when set, receives one line per cell.
	Progress io.Writer
	// UpstreamPID, when non-zero, is the process serving the upstream (the
	// fake Gemini of `gemini-proxy bench`). Every target's requests reach
	// it, so its CPU time is reported per 1,000 requests of all targets,
	// with its memory, as the process TargetUpstream.
	UpstreamPID int
}

// Cell is the measurement of one target in one (size, mode, concurrency)
// cell.
type Cell struct {
	Size        string `json:"size"`
	Mode        string `json:"mode"` // "unary" or "sse"
	Concurrency int    `json:"concurrency"`
	Target      string `json:"target"`
	Requests    int    `json:"requests"`
	Errors      int    `json:"errors"`
	// P50 and P99 are the latencies (request sent to last body byte read).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// AddedP50 and AddedP99 are P50 and P99 minus the baseline target's.
	AddedP50 time.Duration `json:"added_p50_ns"`
	AddedP99 time.Duration `json:"added_p99_ns"`
	// RatioP50 and RatioP99 are P50 and P99 divided by the plain Go
	// proxy's (TargetPlain) in the same cell, whose batches alternated with
	// this target's; zero without that target.
	RatioP50 float64 `json:"ratio_p50_vs_plain,omitempty"`
	RatioP99 float64 `json:"ratio_p99_vs_plain,omitempty"`
	// Throughput is requests per second while this target was loaded.
	Throughput float64 `json:"throughput_rps"`
	// CPUPer1000 is the target process's CPU seconds per 1,000 requests;
	// zero without a PID.
	CPUPer1000 float64 `json:"cpu_seconds_per_1000,omitempty"`
	// AllocBytes and AllocObjects are what the target's Go heap allocated
	// per request, the scrapes' own allocation taken out (see
	// Target.MetricsURL); zero without a MetricsURL.
	AllocBytes   float64 `json:"alloc_bytes_per_request,omitempty"`
	AllocObjects float64 `json:"alloc_objects_per_request,omitempty"`
}

// ProcessStats is the memory of a target process.
type ProcessStats struct {
	Target string `json:"target"`
	// IdleRSS is the resident set before the first request, PeakRSS the
	// high-water mark (VmHWM) at the end, in bytes.
	IdleRSS int64 `json:"idle_rss_bytes"`
	PeakRSS int64 `json:"peak_rss_bytes"`
	// CPUPer1000 is CPU seconds per 1,000 requests over the whole run.
	CPUPer1000 float64 `json:"cpu_seconds_per_1000"`
	Requests   int     `json:"requests"`
}

// Overhead is the result of RunOverhead.
type Overhead struct {
	Cells     []Cell         `json:"cells"`
	Processes []ProcessStats `json:"processes,omitempty"`
	// Skipped lists the cells left out because the deadline passed.
	Skipped []string `json:"skipped,omitempty"`
}

// RunOverhead measures every target in every cell, alternating targets
// batch by batch (the starting target rotates each round), so that slow
// phases of the machine hit every configuration alike.
func RunOverhead(ctx context.Context, o OverheadOptions) (*Overhead, error) {
	if len(o.Targets) == 0 {
		return nil, fmt.Errorf("bench: overhead needs at least one target")
	}
	if o.Sizes == nil {
		o.Sizes = Sizes()
	}
	if o.Concurrency == nil {
		o.Concurrency = []int{1, 16, 64}
	}
	if o.Model == "" {
		o.Model = defaultModel
	}
	if o.APIKey == "" {
		o.APIKey = "bench-overhead"
	}
	if o.CellTime <= 0 {
		o.CellTime = 2 * time.Second
	}
	clients := make([]*http.Client, len(o.Targets))
	for i := range clients {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		tr.DisableCompression = true
		clients[i] = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	out := &Overhead{}
	cpu0 := make([]float64, len(o.Targets))
	totalReqs := make([]int, len(o.Targets))
	for i, t := range o.Targets {
		if t.PID != 0 {
			st, err := readProc(t.PID)
			if err != nil {
				return nil, err
			}
			out.Processes = append(out.Processes, ProcessStats{Target: t.Name, IdleRSS: st.rss})
			cpu0[i] = st.cpu
		}
	}
	var up0 procStat
	if o.UpstreamPID != 0 {
		st, err := readProc(o.UpstreamPID)
		if err != nil {
			return nil, err
		}
		up0 = st
	}
	for _, size := range o.Sizes {
		for _, mode := range []string{"unary", "sse"} {
			for _, conc := range o.Concurrency {
				cellName := fmt.Sprintf("%s/%s/c%d", size.Name, mode, conc)
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				if !o.Deadline.IsZero() && time.Now().After(o.Deadline) {
					out.Skipped = append(out.Skipped, cellName)
					continue
				}
				cells := runCell(ctx, o, clients, size, mode, conc)
				for i := range cells {
					totalReqs[i] += cells[i].Requests
				}
				out.Cells = append(out.Cells, cells...)
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "bench: overhead %-16s", cellName)
					for _, c := range cells {
						fmt.Fprintf(o.Progress, "  %s p50 %s", c.Target, fmtDur(c.P50))
					}
					fmt.Fprintln(o.Progress)
				}
			}
		}
	}
	pi := 0
	for i, t := range o.Targets {
		if t.PID == 0 {
			continue
		}
		st, err := readProc(t.PID)
		if err != nil {
			return nil, err
		}
		p := &out.Processes[pi]
		pi++
		p.PeakRSS, p.Requests = st.hwm, totalReqs[i]
		if totalReqs[i] > 0 {
			p.CPUPer1000 = (st.cpu - cpu0[i]) * 1000 / float64(totalReqs[i])
		}
	}
	if o.UpstreamPID != 0 {
		st, err := readProc(o.UpstreamPID)
		if err != nil {
			return nil, err
		}
		p := ProcessStats{Target: TargetUpstream, IdleRSS: up0.rss, PeakRSS: st.hwm}
		for _, n := range totalReqs {
			p.Requests += n
		}
		if p.Requests > 0 {
			p.CPUPer1000 = (st.cpu - up0.cpu) * 1000 / float64(p.Requests)
		}
		out.Processes = append(out.Processes, p)
	}
	return out, nil
}

// batch sizes per concurrency: enough requests that each connection is
// reused, few enough that a round stays short.
func batchSize(conc int, size Size) int {
	n := max(4*conc, 16)
	if len(size.Body) > 512<<10 {
		n = max(conc, 4)
	}
	return n
}

func runCell(ctx context.Context, o OverheadOptions, clients []*http.Client, size Size, mode string, conc int) []Cell {
	n := len(o.Targets)
	lat := make([][]time.Duration, n)
	busy := make([]time.Duration, n)
	errs := make([]int, n)
	cpu := make([]float64, n)
	start := time.Now()
	method := "generateContent"
	query := ""
	if mode == "sse" {
		method, query = "streamGenerateContent", "?alt=sse"
	}
	model := o.Model
	if size.Model != "" {
		model = size.Model
	}
	bs := batchSize(conc, size)
	// The allocation counters, read around each batch of a target with a
	// MetricsURL, less what one scrape itself allocates (measured here,
	// before the cell's load, on scrapes back to back).
	heap := make([]*heapMeter, n)
	for i, t := range o.Targets {
		if t.MetricsURL != "" {
			heap[i] = newHeapMeter(ctx, t.MetricsURL)
		}
	}
	for round := 0; round < 2 || time.Since(start) < o.CellTime; round++ {
		if ctx.Err() != nil || (!o.Deadline.IsZero() && time.Now().After(o.Deadline) && round >= 1) {
			break
		}
		for k := range n {
			i := (k + round) % n
			t := o.Targets[i]
			url := strings.TrimSuffix(t.URL, "/") + "/v1beta/models/" + model + ":" + method + query
			heap[i].before(ctx)
			var c0 float64
			if t.PID != 0 {
				if st, err := readProc(t.PID); err == nil {
					c0 = st.cpu
				}
			}
			l, e, d := loadBatch(ctx, clients[i], url, o.APIKey, size.Body, conc, bs)
			if t.PID != 0 {
				if st, err := readProc(t.PID); err == nil {
					cpu[i] += st.cpu - c0
				}
			}
			heap[i].after(ctx, len(l)+e)
			lat[i] = append(lat[i], l...)
			errs[i] += e
			busy[i] += d
		}
	}
	cells := make([]Cell, n)
	for i, t := range o.Targets {
		c := Cell{Size: size.Name, Mode: mode, Concurrency: conc, Target: t.Name, Requests: len(lat[i]) + errs[i], Errors: errs[i]}
		c.P50, c.P99 = percentile(lat[i], 0.50), percentile(lat[i], 0.99)
		if busy[i] > 0 {
			c.Throughput = float64(len(lat[i])) / busy[i].Seconds()
		}
		if t.PID != 0 && c.Requests > 0 {
			c.CPUPer1000 = cpu[i] * 1000 / float64(c.Requests)
		}
		c.AllocBytes, c.AllocObjects = heap[i].perRequest()
		cells[i] = c
	}
	plain := slices.IndexFunc(o.Targets, func(t Target) bool { return t.Name == TargetPlain })
	for i := range cells {
		cells[i].AddedP50 = cells[i].P50 - cells[0].P50
		cells[i].AddedP99 = cells[i].P99 - cells[0].P99
		if plain >= 0 {
			cells[i].RatioP50 = ratio(cells[i].P50, cells[plain].P50)
			cells[i].RatioP99 = ratio(cells[i].P99, cells[plain].P99)
		}
	}
	return cells
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// loadBatch sends total requests with conc workers and returns the
// latencies of the successful ones, the number of failures and the wall
// time.
func loadBatch(ctx context.Context, c *http.Client, url, key string, body []byte, conc, total int) ([]time.Duration, int, time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	next := make(chan struct{}, total)
	for range total {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for range next {
				t0 := time.Now()
				err := do(ctx, c, url, key, body)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, errs, time.Since(start)
}

func do(ctx context.Context, c *http.Client, url, key string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", key)
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	return nil
}

// percentile returns the q-quantile of ds (nearest rank); 0 when empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// procStat is what the bench reads of a process.
type procStat struct {
	cpu      float64 // user + system CPU seconds
	rss, hwm int64   // bytes
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// readProc reads /proc/PID/stat and /proc/PID/status.
func readProc(pid int) (procStat, error) {
	var st procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, fmt.Errorf("reading process stats: %w", err)
	}
	cpu, err := parseStat(string(b))
	if err != nil {
		return st, err
	}
	st.cpu = cpu
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("reading process status: %w", err)
	}
	st.rss, st.hwm = parseStatus(string(b))
	return st, nil
}

// parseStat returns utime+stime in seconds from a /proc/PID/stat line.
// The command name (field 2) may contain spaces, so fields are counted
// after its closing parenthesis.
func parseStat(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: short /proc stat")
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	sy, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: malformed /proc stat times")
	}
	return (u + sy) / clockTicks, nil
}

// parseStatus returns VmRSS and VmHWM in bytes from /proc/PID/status.
func parseStatus(s string) (rss, hwm int64) {
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			hwm = n << 10
		}
	}
	return rss, hwm
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// heapMeter measures what a target's Go heap allocates per request from
// the runtime's cumulative counters on its Prometheus endpoint. A nil
// *heapMeter measures nothing. A failed scrape leaves its batch out.
type heapMeter struct {
	c                *http.Client
	url              string
	scrapeB, scrapeN float64 // one scrape's own allocation
	b0, n0           float64
	ok0              bool
	allocB, allocN   float64 // over the batches measured
	requests         int
}

// scrapes is the number of back-to-back scrapes newHeapMeter measures a
// scrape's own allocation on; the least difference counts (the rest is the
// process's background work, which the batches pay as well).
const scrapes = 4

func newHeapMeter(ctx context.Context, url string) *heapMeter {
	m := &heapMeter{c: &http.Client{Timeout: 10 * time.Second}, url: url, scrapeB: math.Inf(1), scrapeN: math.Inf(1)}
	var pb, pn float64
	for k := range scrapes {
		b, n, err := heapCounters(ctx, m.c, url)
		if err != nil {
			return nil
		}
		if k > 0 {
			m.scrapeB, m.scrapeN = min(m.scrapeB, b-pb), min(m.scrapeN, n-pn)
		}
		pb, pn = b, n
	}
	return m
}

func (m *heapMeter) before(ctx context.Context) {
	if m == nil {
		return
	}
	var err error
	m.b0, m.n0, err = heapCounters(ctx, m.c, m.url)
	m.ok0 = err == nil
}

// after counts the batch of requests since before: the counters' growth
// less the allocation of the scrape before it.
func (m *heapMeter) after(ctx context.Context, requests int) {
	if m == nil || !m.ok0 {
		return
	}
	b, n, err := heapCounters(ctx, m.c, m.url)
	if err != nil {
		return
	}
	m.allocB += max(b-m.b0-m.scrapeB, 0)
	m.allocN += max(n-m.n0-m.scrapeN, 0)
	m.requests += requests
}

// perRequest returns the bytes and objects allocated per request; zero
// when nothing was measured.
func (m *heapMeter) perRequest() (perBytes, perObjects float64) {
	if m == nil || m.requests == 0 {
		return 0, 0
	}
	return m.allocB / float64(m.requests), m.allocN / float64(m.requests)
}

// heapCounters reads go_memstats_alloc_bytes_total and
// go_memstats_mallocs_total from the Prometheus text exposition at url.
func heapCounters(ctx context.Context, c *http.Client, url string) (allocBytes, allocObjects float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	return parseHeapCounters(res.Body)
}

// parseHeapCounters finds the two counters in a text exposition.
func parseHeapCounters(r io.Reader) (allocBytes, allocObjects float64, err error) {
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() && found < 2 {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "go_memstats_alloc_bytes_total":
			dst = &allocBytes
		case "go_memstats_mallocs_total":
			dst = &allocObjects
		default:
			continue
		}
		v, perr := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("%s: %w", name, perr)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found < 2 {
		return 0, 0, errors.New("no go_memstats_alloc_bytes_total and go_memstats_mallocs_total")
	}
	return allocBytes, allocObjects, nil
}
