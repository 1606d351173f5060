// Command abserve compares two gemini-proxy binaries on the bench's small
// request (bench.Sizes' small body: one content under min_block_bytes, a
// request the rewrite cannot change), unary, as `gemini-proxy bench`
// measures overhead: the fake Gemini (`bench --fake-upstream`), the plain
// httputil proxy (`bench --plain-proxy`) and each binary's `serve` with
// rewriting off and on run as child processes; each one's CPU per request
// is read from /proc (utime+stime, 100 Hz ticks) while its own batch
// runs, with its context switches (all threads) and the p50 latency seen
// by the load generator (this process). The targets alternate batch by
// batch, the first one rotating each round; ratios are per round, from
// the same round's batches, and their medians are printed.
//
//	go run ./scripts/abserve -a /tmp/gp-main -b /tmp/gp-branch -rounds 6 -d 2s -c 1,64
//
// Only for measuring: loopback only, bounded by rounds × targets × d.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

var addrRE = regexp.MustCompile(`listener=(?:proxy|plain|fake) addr=(\S+)`)

type child struct {
	name string
	url  string
	pid  int
	cmd  *exec.Cmd
}

func start(name, exe string, args, env []string) *child {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "GEMINI_PROXY_LOG_LEVEL=info", "GEMINI_PROXY_LOG_FORMAT=text")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-found:
		return &child{name: name, url: "http://" + a, pid: cmd.Process.Pid, cmd: cmd}
	case <-time.After(20 * time.Second):
		panic("no listening line from " + name)
	}
}

func ticks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		panic(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// ctxsw sums the voluntary and involuntary context switches of pid's threads.
func ctxsw(pid int) int64 {
	dirs, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var n int64
	for _, d := range dirs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, d.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "voluntary_ctxt_switches:") || strings.HasPrefix(l, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.TrimSpace(l[strings.IndexByte(l, ':')+1:]), 10, 64)
				n += v
			}
		}
	}
	return n
}

func main() {
	mainBin := flag.String("a", "", "binary A (main)")
	brBin := flag.String("b", "", "binary B (branch)")
	rounds := flag.Int("rounds", 5, "rounds")
	dur := flag.Duration("d", 3*time.Second, "batch duration")
	concs := flag.String("c", "1,64", "concurrencies")
	flag.Parse()
	text := strings.Repeat("Explain the difference between a slice and an array in Go. ", 17)
	body, _ := json.Marshal(map[string]any{"contents": []map[string]any{{"role": "user", "parts": []map[string]any{{"text": text}}}}})
	fake := start("fake", *mainBin, []string{"bench", "--fake-upstream"}, nil)
	defer fake.cmd.Process.Kill()
	targets := []*child{start("plain", *mainBin, []string{"bench", "--plain-proxy", fake.url}, nil)}
	for _, b := range []struct{ n, exe string }{{"A", *mainBin}, {"B", *brBin}} {
		if b.exe == "" {
			continue
		}
		for _, on := range []string{"false", "true"} {
			n := b.n + "-off"
			if on == "true" {
				n = b.n + "-on"
			}
			targets = append(targets, start(n, b.exe, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", fake.url}, []string{"GEMINI_PROXY_REWRITE_ENABLED=" + on}))
		}
	}
	for _, t := range targets {
		defer t.cmd.Process.Kill()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.DisableCompression = 256, true
	client := &http.Client{Transport: tr}
	do := func(url string) (time.Duration, error) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1beta/models/gemini-2.5-flash:generateContent", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Goog-Api-Key", "bench-overhead")
		t0 := time.Now()
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		return time.Since(t0), err
	}
	type res struct{ cpu, p50, sw []float64 }
	results := map[string]*res{}
	var cs []int
	for _, c := range strings.Split(*concs, ",") {
		n, _ := strconv.Atoi(c)
		cs = append(cs, n)
	}
	for r := 0; r < *rounds; r++ {
		for _, c := range cs {
			for k := range targets {
				t := targets[(k+r)%len(targets)]
				for range 100 {
					do(t.url)
				}
				var mu sync.Mutex
				var lat []time.Duration
				errs := 0
				t0, s0 := ticks(t.pid), ctxsw(t.pid)
				deadline := time.Now().Add(*dur)
				var wg sync.WaitGroup
				for range c {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(deadline) {
							d, err := do(t.url)
							mu.Lock()
							if err != nil {
								errs++
							} else {
								lat = append(lat, d)
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				cpu := float64(ticks(t.pid)-t0) * 10000 / float64(len(lat)) // µs per request (100 Hz ticks)
				sw := float64(ctxsw(t.pid)-s0) / float64(len(lat))
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				p50 := float64(lat[len(lat)/2].Microseconds())
				key := fmt.Sprintf("c%d/%s", c, t.name)
				if results[key] == nil {
					results[key] = &res{}
				}
				results[key].cpu = append(results[key].cpu, cpu)
				results[key].p50 = append(results[key].p50, p50)
				results[key].sw = append(results[key].sw, sw)
				fmt.Fprintf(os.Stderr, "round %d %s: %d req, %.1f µs cpu/req, p50 %.0f µs, ctxsw/req %.2f, errors %d\n", r, key, len(lat), cpu, p50, sw, errs)
			}
		}
	}
	med := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	fmt.Println("cell\tcpu µs/req (median; all)\tp50 µs (median; all)\tctxsw/req (median)")
	var keys []string
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := results[k]
		fmt.Printf("%s\t%.1f %v\t%.0f %v\t%.2f\n", k, med(r.cpu), fmtAll(r.cpu), med(r.p50), fmtAll(r.p50), med(r.sw))
	}
	// Per-round ratios.
	for _, c := range cs {
		for _, pair := range [][2]string{{"A-on", "A-off"}, {"B-on", "B-off"}, {"A-on", "plain"}, {"B-on", "plain"}, {"A-off", "plain"}, {"B-off", "plain"}} {
			a, b := results[fmt.Sprintf("c%d/%s", c, pair[0])], results[fmt.Sprintf("c%d/%s", c, pair[1])]
			if a == nil || b == nil {
				continue
			}
			var rs []float64
			for i := range a.cpu {
				rs = append(rs, a.cpu[i]/b.cpu[i])
			}
			fmt.Printf("c%d %s ÷ %s CPU: median %.2f× %v\n", c, pair[0], pair[1], med(rs), fmtAll(rs))
		}
	}
}

func fmtAll(v []float64) string {
	var b strings.Builder
	for i, x := range v {
		if i > 0 {
			b.WriteByte(' ')
		}
		if x < 10 {
			fmt.Fprintf(&b, "%.2f", x)
		} else {
			fmt.Fprintf(&b, "%.0f", x)
		}
	}
	return "[" + b.String() + "]"
}
