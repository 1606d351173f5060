package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/gemini-proxy/gemini-proxy/bench"
	"github.com/gemini-proxy/gemini-proxy/config"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/proxy"
)

func benchFlags(fs *pflag.FlagSet) {
	fs.Bool("quick", false, "CI-sized run: short overhead cells, whole run under a minute")
	fs.Bool("check", false, "exit non-zero unless the savings targets are met (total savings, share of the ideal, control sessions unchanged)")
	fs.String("out", "", "directory for result.json, bench.md and chart.png")
	fs.String("replay", "", "replay recorded requests (serve --record FILE) through the rewrite engine and report the savings per model")
	fs.String("proxy-url", "", "measure a running proxy at this URL (with --upstream-url) instead of the in-process stack")
	fs.String("upstream-url", "", "the upstream the running proxy forwards to (with --proxy-url)")
	fs.String("admin-url", "", "the running proxy's admin listener (with --proxy-url), to read its rewrite audit failures from /metrics")
	fs.String("sessions", "", "replay only the sessions whose name matches this regular expression")
	fs.Bool("savings", true, "measure savings on the session corpus")
	fs.Bool("overhead", true, "measure latency, throughput, CPU and memory")
	fs.Duration("time-limit", 0, "hard limit for the overhead measurement (0: 25s with --quick, 12m otherwise)")
	fs.String("plain-proxy", "", "internal: serve a plain httputil.ReverseProxy to this upstream on loopback (the overhead reference)")
	_ = fs.MarkHidden("plain-proxy")
	fs.Bool("fake-upstream", false, "internal: serve the overhead runner's fixed-cost fake Gemini (bench.FakeGeminiAll) on loopback")
	_ = fs.MarkHidden("fake-upstream")
}

// benchCommand runs `gemini-proxy bench`.
func benchCommand(ctx context.Context, fs *pflag.FlagSet, stdout, stderr io.Writer) error {
	if up, _ := fs.GetString("plain-proxy"); up != "" {
		return servePlainProxy(ctx, up, stdout)
	}
	if fake, _ := fs.GetBool("fake-upstream"); fake {
		return serveFakeUpstream(ctx, stdout)
	}
	if path, _ := fs.GetString("replay"); path != "" {
		return benchReplay(path, stdout)
	}
	quick, _ := fs.GetBool("quick")
	check, _ := fs.GetBool("check")
	outDir, _ := fs.GetString("out")
	proxyURL, _ := fs.GetString("proxy-url")
	upstreamURL, _ := fs.GetString("upstream-url")
	adminURL, _ := fs.GetString("admin-url")
	only, _ := fs.GetString("sessions")
	doSavings, _ := fs.GetBool("savings")
	doOverhead, _ := fs.GetBool("overhead")
	limit, _ := fs.GetDuration("time-limit")
	if (proxyURL == "") != (upstreamURL == "") {
		fmt.Fprintln(stderr, "gemini-proxy bench: --proxy-url and --upstream-url go together")
		return errUsage
	}
	if adminURL != "" && proxyURL == "" {
		fmt.Fprintln(stderr, "gemini-proxy bench: --admin-url goes with --proxy-url")
		return errUsage
	}
	sessions := bench.Sessions()
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			fmt.Fprintf(stderr, "gemini-proxy bench: --sessions: %v\n", err)
			return errUsage
		}
		sessions = slices.DeleteFunc(sessions, func(s *bench.Session) bool { return !re.MatchString(s.Name) })
		if len(sessions) == 0 {
			fmt.Fprintf(stderr, "gemini-proxy bench: --sessions %q matches no session\n", only)
			return errUsage
		}
	}
	if check && !doSavings {
		fmt.Fprintln(stderr, "gemini-proxy bench: --check needs the savings measurement")
		return errUsage
	}
	if limit == 0 {
		limit = 12 * time.Minute
		if quick {
			limit = 25 * time.Second
		}
	}
	// The sessions and request sizes are built from documents read from
	// the Go installation, the module cache and the system.
	corpus, err := bench.LoadCorpus()
	if err != nil {
		return err
	}
	start := time.Now()
	res := &bench.Result{Command: "gemini-proxy bench " + strings.Join(benchArgs(fs), " "), Date: start.UTC(), Machine: machine(), Corpus: corpus}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The in-process stack: the emulator with the scripted replies, and the
	// proxy built exactly as serve builds it (same cache and Verifier).
	var replies *bench.Replies
	runID := fmt.Sprintf("%x", start.UnixNano())
	var flipURL, flipAdmin string // the in-process proxy with rewrite.stable_prefix flipped
	stable := config.Default().Rewrite.StablePrefix
	// The in-process proxies with rewrite.cache_aware_compaction flipped
	// and with rewrite.compact_superseded off.
	var awareURL, awareAdmin, offURL, offAdmin string
	aware := config.Default().Rewrite.CacheAwareCompaction
	prices := map[string]bench.Price{}
	for _, p := range config.Default().Metrics.Prices {
		prices[p.Model] = bench.Price{Input: p.Input, CachedInput: p.CachedInput, Output: p.Output}
	}
	var ledger func(string) (float64, int) // the in-process proxy's ledger by API key
	if proxyURL == "" {
		replies = new(bench.Replies)
		logger := slog.New(slog.DiscardHandler)
		emu := emulator.New(emulator.Options{Reply: replies.Reply})
		el, err := listen("emulator", "127.0.0.1:0", emu, config.Default().Server, logger)
		if err != nil {
			return err
		}
		done := make(chan error, 3)
		running := 1
		defer func() {
			cancel()
			for range running {
				<-done
			}
		}()
		go func() { done <- serveUntil(ctx, []*listener{el}, 0, time.Second, new(atomic.Bool), logger) }()
		upstreamURL = "http://" + el.ln.Addr().String()
		c := config.Default()
		// The admin listener serves /metrics, where the rewrite audit's
		// failures are read.
		c.Server.Listen, c.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
		c.Server.ShutdownGrace = time.Second
		c.Upstream.URL = upstreamURL
		c.Cache.TenantSecret = "bench-" + runID
		var lk benchLedger
		ledger = func(key string) (float64, int) { return lk.of(proxy.TenantOfKey([]byte(c.Cache.TenantSecret), key)) }
		addrs := make(chan [2]string, 1)
		// The second proxy differs only in rewrite.stable_prefix, so that
		// the savings say what the option does (issue #8).
		flip := c
		flip.Rewrite.StablePrefix = !c.Rewrite.StablePrefix
		// The third and fourth differ only in how they compact, so that
		// the savings say what rewrite.cache_aware_compaction does
		// against compaction always on and off (issue 14).
		flipAware := c
		flipAware.Rewrite.CacheAwareCompaction = !c.Rewrite.CacheAwareCompaction
		noCompact := c
		noCompact.Rewrite.CompactSuperseded = false
		urls := []*[2]*string{{&proxyURL, &adminURL}, {&flipURL, &flipAdmin}, {&awareURL, &awareAdmin}, {&offURL, &offAdmin}}
		for i, pc := range []config.Config{c, flip, flipAware, noCompact} {
			running++
			pctx := ctx
			if i == 0 {
				pctx = context.WithValue(ctx, exchangeHookKey{}, lk.add)
			}
			go func() { done <- serveConfig(pctx, pc, logger, func(p, a string) { addrs <- [2]string{p, a} }) }()
			select {
			case a := <-addrs:
				*urls[i][0], *urls[i][1] = "http://"+a[0], "http://"+a[1]
			case err := <-done:
				done <- nil
				return err
			case <-time.After(10 * time.Second):
				return errors.New("bench: in-process proxy did not start")
			}
		}
		fmt.Fprintf(stderr, "bench: emulator %s, proxy %s, proxy with stable_prefix=%v %s, with cache_aware_compaction=%v %s, with compact_superseded=false %s (in-process)\n", upstreamURL, proxyURL, !stable, flipURL, !aware, awareURL, offURL)
	}

	if doSavings {
		fmt.Fprintln(stderr, "bench: savings: replaying the session corpus naive, through the proxy and ideal")
		s, err := bench.RunSavings(ctx, bench.SavingsOptions{DirectURL: upstreamURL, ProxyURL: proxyURL, AdminURL: adminURL, Replies: replies, Sessions: sessions, RunID: runID, Progress: stderr, Prices: prices, Ledger: ledger})
		if err != nil {
			return err
		}
		res.Savings = s
		res.Verifier = s.ByKind[bench.KindFlattened].Unflattened > 0
		// The proxies with one option flipped replay the corpus at the
		// same time: each has its own API keys, /metrics and cache.
		var variants [3]*bench.Savings
		var verrs [3]error
		var wg sync.WaitGroup
		for i, v := range []struct{ url, admin, what, id string }{
			{flipURL, flipAdmin, fmt.Sprintf("rewrite.stable_prefix=%v", !stable), "-flip"},
			{awareURL, awareAdmin, fmt.Sprintf("rewrite.cache_aware_compaction=%v", !aware), "-aware"},
			{offURL, offAdmin, "rewrite.compact_superseded=false", "-nocompact"},
		} {
			if v.url == "" {
				continue
			}
			fmt.Fprintf(stderr, "bench: savings again with %s\n", v.what)
			wg.Add(1)
			go func() {
				defer wg.Done()
				variants[i], verrs[i] = bench.RunSavings(ctx, bench.SavingsOptions{DirectURL: upstreamURL, ProxyURL: v.url, AdminURL: v.admin, Replies: replies, Sessions: sessions, RunID: runID + v.id, Prices: prices})
			}()
		}
		wg.Wait()
		if err := errors.Join(verrs[:]...); err != nil {
			return err
		}
		if f := variants[0]; f != nil {
			res.StablePrefix = &bench.StablePrefix{Off: f, On: s}
			if !stable {
				res.StablePrefix = &bench.StablePrefix{Off: s, On: f}
			}
		}
		if a, o := variants[1], variants[2]; a != nil && o != nil {
			res.Compaction = &bench.Compaction{Weighed: s, Always: a, Off: o}
			if !aware {
				res.Compaction.Weighed, res.Compaction.Always = a, s
			}
		}
	}
	if doOverhead {
		o, err := runOverhead(ctx, quick, limit, upstreamURL, proxyURL, replies == nil, stderr)
		if err != nil {
			return err
		}
		res.Overhead = o
	}
	res.Duration = time.Since(start).Round(time.Millisecond)

	var md bytes.Buffer
	writeBenchMarkdown(&md, res)
	stdout.Write(md.Bytes())
	if outDir != "" {
		if err := bench.WriteJSON(outDir, res); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, "bench.md"), md.Bytes(), 0o644); err != nil {
			return err
		}
		if err := bench.WriteChart(filepath.Join(outDir, "chart.png"), res.Savings, res.Overhead); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", outDir)
	}
	if check {
		if err := bench.Check(res.Savings, res.Verifier); err != nil {
			return fmt.Errorf("bench: savings targets missed:\n%w", err)
		}
		if err := bench.CheckLedger(res.Savings); err != nil {
			return fmt.Errorf("bench: the proxy's dollar ledger differs from the bill:\n%w", err)
		}
		if res.StablePrefix != nil {
			if err := bench.CheckStablePrefix(res.StablePrefix); err != nil {
				return fmt.Errorf("bench: rewrite.stable_prefix hurts:\n%w", err)
			}
			for _, s := range []*bench.Savings{res.StablePrefix.Off, res.StablePrefix.On} {
				if s.Audit.Failures > 0 {
					return fmt.Errorf("bench: the rewrite audit failed %d times with rewrite.stable_prefix flipped", s.Audit.Failures)
				}
			}
		}
		if res.Compaction != nil {
			if err := bench.CheckCompaction(res.Compaction); err != nil {
				return fmt.Errorf("bench: rewrite.cache_aware_compaction costs more:\n%w", err)
			}
			for _, s := range []*bench.Savings{res.Compaction.Weighed, res.Compaction.Always, res.Compaction.Off} {
				if s.Audit.Failures > 0 {
					return fmt.Errorf("bench: the rewrite audit failed %d times in the compaction comparison", s.Audit.Failures)
				}
			}
		}
		fmt.Fprintf(stderr, "bench: savings targets met (total ≥ %.0f%%, each dedup session ≥ %.0f%% of the ideal, each flattened ≥ %.0f%% with a verifier, each two-document ≥ %.0f%%, each JSON-text ≥ %.0f%%, each tool-result at most the ideal, none below the ideal, control sessions unchanged, no failed audit)\n", 100*bench.MinTotalSaved, 100*bench.MinShareOfIdeal, 100*bench.MinFlattenedShareOfIdeal, 100*bench.MinTwoDocShareOfIdeal, 100*bench.MinJSONShareOfIdeal)
	}
	return nil
}

// benchArgs lists the flags set on the command line, for the record.
func benchArgs(fs *pflag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *pflag.Flag) {
		if f.Value.Type() == "bool" && f.Value.String() == "true" {
			out = append(out, "--"+f.Name)
			return
		}
		out = append(out, "--"+f.Name+"="+f.Value.String())
	})
	return out
}

func machine() string {
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`).FindSubmatch(b); m != nil {
			cpu = string(m[1]) + ", "
		}
	}
	return fmt.Sprintf("%s%d CPUs (GOMAXPROCS %d), %s/%s, %s", cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// runOverhead starts the fake upstream (bench.FakeGemini), the plain Go
// proxy and the proxy with rewriting off and on as child processes of this
// binary (so that their CPU time and memory are their own and none competes
// with the load generator's Go scheduler), then measures the proxies next to
// direct requests to the fake upstream. The emulator is not measured here:
// it parses and tokenizes every body, which would dominate medium and large
// requests. With external (a running proxy given by URL), upstreamURL stays
// the upstream and that proxy replaces the two child proxies.
func runOverhead(ctx context.Context, quick bool, limit time.Duration, upstreamURL, proxyURL string, external bool, stderr io.Writer) (*bench.Overhead, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: locating own binary: %w", err)
	}
	upstreamPID := 0
	if !external {
		addr, _, pid, stop, err := startChild(ctx, exe, []string{"bench", "--fake-upstream"}, nil)
		if err != nil {
			return nil, fmt.Errorf("bench: starting the fake upstream: %w", err)
		}
		defer stop()
		upstreamURL, upstreamPID = "http://"+addr, pid
		fmt.Fprintf(stderr, "bench: overhead upstream: fake Gemini %s (fixed answers, bench.FakeGeminiAll)\n", upstreamURL)
	}
	targets := []bench.Target{{Name: bench.TargetDirect, URL: upstreamURL}}
	type child struct {
		name string
		args []string
		env  []string
	}
	children := []child{{bench.TargetPlain, []string{"bench", "--plain-proxy", upstreamURL}, nil}}
	if !external {
		serveArgs := []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", upstreamURL}
		children = append(children,
			child{bench.TargetPassThrough, serveArgs, []string{"GEMINI_PROXY_REWRITE_ENABLED=false"}},
			child{bench.TargetRewrite, serveArgs, []string{"GEMINI_PROXY_REWRITE_ENABLED=true"}})
	}
	for _, ch := range children {
		addr, admin, pid, stop, err := startChild(ctx, exe, ch.args, ch.env)
		if err != nil {
			return nil, fmt.Errorf("bench: starting %s: %w", ch.name, err)
		}
		defer stop()
		t := bench.Target{Name: ch.name, URL: "http://" + addr, PID: pid}
		if admin != "" {
			t.MetricsURL = "http://" + admin + "/metrics"
		}
		targets = append(targets, t)
	}
	if external {
		targets = append(targets, bench.Target{Name: "proxy (" + proxyURL + ")", URL: proxyURL})
	}
	cell := 15 * time.Second
	if quick {
		cell = 500 * time.Millisecond
	}
	sizes := bench.Sizes()
	if !external {
		// The long answers of issue 17's per-chunk and 256 KB figures come
		// from the fake upstream, which a running proxy's upstream is not.
		sizes = append(sizes, bench.AnswersSize())
	}
	fmt.Fprintf(stderr, "bench: overhead: %d configurations alternating, %s per cell, time limit %s\n", len(targets), cell, limit)
	return bench.RunOverhead(ctx, bench.OverheadOptions{Targets: targets, Sizes: sizes, CellTime: cell, Deadline: time.Now().Add(limit), Progress: stderr, UpstreamPID: upstreamPID})
}

var listenAddrRE = regexp.MustCompile(`listener=(proxy|plain|fake|admin) addr=(\S+)`)

// startChild runs exe with args and waits for its "listening" log line,
// and for its admin listener's too when args has --admin-listen. stop
// interrupts the child and waits for it (killing it after 5s).
func startChild(ctx context.Context, exe string, args, env []string) (addr, admin string, pid int, stop func(), err error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "GEMINI_PROXY_LOG_LEVEL=info", "GEMINI_PROXY_LOG_FORMAT=text")
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = pw, pw
	if err := cmd.Start(); err != nil {
		return "", "", 0, nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); pw.Close(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	wantAdmin := slices.Contains(args, "--admin-listen")
	found, foundAdmin := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenAddrRE.FindStringSubmatch(sc.Text()); m != nil {
				ch := found
				if m[1] == "admin" {
					ch = foundAdmin
				}
				select {
				case ch <- m[2]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	timeout := time.After(15 * time.Second)
	for addr == "" || wantAdmin && admin == "" {
		select {
		case addr = <-found:
		case admin = <-foundAdmin:
		case <-exited:
			return "", "", 0, nil, errors.New("exited before listening")
		case <-ctx.Done():
			stop()
			return "", "", 0, nil, ctx.Err()
		case <-timeout:
			stop()
			return "", "", 0, nil, errors.New("no listening line within 15s")
		}
	}
	return addr, admin, cmd.Process.Pid, stop, nil
}

// servePlainProxy serves bench.PlainProxy on loopback until ctx is done,
// announcing its address on w.
func servePlainProxy(ctx context.Context, upstream string, w io.Writer) error {
	up, err := url.Parse(upstream)
	if err != nil {
		return fmt.Errorf("--plain-proxy: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(w, nil))
	l, err := listen("plain", "127.0.0.1:0", bench.PlainProxy(up), config.Default().Server, logger)
	if err != nil {
		return err
	}
	return serveUntil(ctx, []*listener{l}, 0, time.Second, new(atomic.Bool), logger)
}

// serveFakeUpstream serves bench.FakeGeminiAll on loopback until ctx is done,
// announcing its address on w.
func serveFakeUpstream(ctx context.Context, w io.Writer) error {
	logger := slog.New(slog.NewTextHandler(w, nil))
	l, err := listen("fake", "127.0.0.1:0", bench.FakeGeminiAll(), config.Default().Server, logger)
	if err != nil {
		return err
	}
	return serveUntil(ctx, []*listener{l}, 0, time.Second, new(atomic.Bool), logger)
}

// benchReplay reports what the proxy would have saved on a recording.
func benchReplay(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	opts, err := proxyOptions(config.Default())
	if err != nil {
		return err
	}
	// A fresh cache has served nothing, so it verifies nothing: nil.
	models, total, err := bench.Replay(f, opts.Rewrite.Options, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Replay of %s through the rewrite engine (default options, fresh cache: no transcript is verified, so none is un-flattened).\nTokens are counted by the emulator's tokenizer.\n\n", path)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\trequests\trewritten\trefused\tbytes before\tafter\ttokens before\tafter\tsaved\t")
	for _, m := range append(models, total) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", m.Model, m.Requests, m.Rewritten, m.Failed, m.BytesBefore, m.BytesAfter, m.TokensBefore, m.TokensAfter, 100*m.Saved())
	}
	return tw.Flush()
}

// writeBenchMarkdown prints the run's tables.
func writeBenchMarkdown(w io.Writer, r *bench.Result) {
	fmt.Fprintf(w, "Command: `%s`  \nDate: %s  \nMachine: %s  \nDuration: %s\n", r.Command, r.Date.Format(time.RFC3339), r.Machine, r.Duration)
	if r.Corpus != nil {
		fmt.Fprintf(w, "\nCorpus (documents read at run time; the same versions give the same savings figures), sha256:%s:\n\n", r.Corpus.SHA256)
		for _, o := range r.Corpus.Origins {
			fmt.Fprintf(w, "- %s %s (`%s`): %s\n", o.Source, o.Version, o.Dir, strings.Join(o.Files, ", "))
		}
	}
	if r.Savings != nil {
		fmt.Fprintf(w, "\n### Savings (prompt tokens from the emulator's usageMetadata)\n\n")
		if !r.Verifier {
			fmt.Fprintln(w, "The proxy un-flattened no transcript (no Verifier of served responses): flattened sessions are reported, not checked.")
			fmt.Fprintln(w)
		}
		bench.WriteSavingsTable(w, r.Savings, r.Verifier)
		fmt.Fprintln(w)
		bench.WriteAudit(w, r.Savings)
		bench.WritePending(w, r.Savings, r.Verifier)
		fmt.Fprintf(w, "\n### Billed cost with implicit caching (US dollars per 1,000 sessions, at the default price table; ledger: the proxy's net saved_dollars_total − cost_increase_dollars_total)\n\n")
		bench.WriteLedgerTable(w, r.Savings)
	}
	if r.StablePrefix != nil {
		fmt.Fprintf(w, "\n### Prefix stabilisation (the proxy with rewrite.stable_prefix off and on; implicit-cache tokens from the emulator's prefix model)\n\n")
		bench.WriteStablePrefixTable(w, r.StablePrefix)
	}
	if r.Compaction != nil {
		fmt.Fprintf(w, "\n### Compaction that pays (billed US dollars per 1,000 sessions through proxies with rewrite.cache_aware_compaction on, off, and rewrite.compact_superseded off)\n\n")
		bench.WriteCompactionTable(w, r.Compaction)
	}
	if r.Overhead != nil {
		fmt.Fprintf(w, "\n### Overhead (added = minus direct to the upstream, ÷ plain = ratio to the plain Go proxy; same cell, batches alternated)\n\n")
		bench.WriteOverheadTables(w, r.Overhead)
	}
}

// benchLedger sums the ledger of the in-process proxy's exchanges by
// tenant and counts the exchanges (accounted or not). Safe for concurrent
// use.
type benchLedger struct {
	mu sync.Mutex
	m  map[string][2]float64 // net dollars, exchanges
}

func (b *benchLedger) add(ex proxy.Exchange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string][2]float64{}
	}
	v := b.m[ex.Tenant]
	if ex.Ledger != nil {
		v[0] += ex.Ledger.Counterfactual - ex.Ledger.Billed
	}
	v[1]++
	b.m[ex.Tenant] = v
}

func (b *benchLedger) of(tenant string) (float64, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.m[tenant]
	return v[0], int(v[1])
}
