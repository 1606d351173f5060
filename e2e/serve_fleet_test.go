package e2e

import (
	"bufio"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
)

// serveReplica is one `gemini-proxy serve` process of
// TestServeFleetContextCacheRedis.
type serveReplica struct {
	proxy, admin string // base URLs
	logs         *testutil.Buffer
}

// startServeReplica runs bin serve against upstream with env (after the
// common settings), and returns its addresses once it logged them. It is
// stopped (SIGTERM, then killed) when the test ends.
func startServeReplica(t *testing.T, bin, upstream string, env ...string) *serveReplica {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GEMINI_PROXY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"GEMINI_PROXY_UPSTREAM_URL="+upstream,
		"GEMINI_PROXY_SERVER_LISTEN=127.0.0.1:0",
		"GEMINI_PROXY_ADMIN_LISTEN=127.0.0.1:0",
		"GEMINI_PROXY_LOG_LEVEL=info",
		"GEMINI_PROXY_LOG_FORMAT=json",
	)
	cmd.Env = append(cmd.Env, env...)
	r := &serveReplica{logs: &testutil.Buffer{}}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(r.logs, pw)
	cmd.Stdout = r.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		pw.Close()
		close(exited)
	}()
	t.Cleanup(func() { testutil.Stop(cmd.Process, exited, syscall.SIGTERM, 15*time.Second) })
	select {
	case a := <-testutil.Listening(pr):
		r.proxy, r.admin = "http://"+a[0], "http://"+a[1]
	case <-exited:
		t.Fatalf("gemini-proxy exited at start:\n%s", r.logs.Bytes())
	case <-time.After(60 * time.Second):
		t.Fatalf("gemini-proxy did not log its addresses:\n%s", r.logs.Bytes())
	}
	return r
}

// metric sums the samples of name on the replica's /metrics.
func (r *serveReplica) metric(t *testing.T, name string) float64 {
	t.Helper()
	res, err := http.Get(r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// TestServeFleetContextCacheRedis runs the real binary twice (replicas A
// and B of one fleet: cache.backend redis, one tenant secret, context
// caching on) on one redis-server, and plays the context-cached file
// session (system instruction, tools, buffer.go in every turn, every
// third turn streamed) turn by turn alternately through A and B, next to
// the same session sent directly to an emulator. What README "Running a
// fleet" promises: the registry is shared, so the prefix's cachedContents
// is created once in the fleet, by one replica, and the other replica's
// requests name that cache; every answer equals the direct one (ccReply
// names the system instruction the model saw, which a cached request no
// longer carries itself).
func TestServeFleetContextCacheRedis(t *testing.T) {
	rds := cachetest.StartRedis(t)
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "gemini-proxy")
	if err := testutil.BuildProxy(t.Context(), bin, false); err != nil {
		t.Fatal(err)
	}
	var creates sync.Map // SHA-256 of a create body → count
	var nCreate atomic.Int64
	count := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cachedContents") {
				sum := sha256.Sum256(readAll(t, r))
				v, _ := creates.LoadOrStore(sum, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				nCreate.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
	eo := emulator.Options{Reply: ccReply, ImplicitCacheMinTokens: 1 << 30}
	emu, es := testutil.StartEmulator(t, eo, count)
	_, des := testutil.StartEmulator(t, eo)
	env := []string{
		"GEMINI_PROXY_CACHE_BACKEND=redis",
		"GEMINI_PROXY_CACHE_REDIS_URL=" + rds.URL(),
		"GEMINI_PROXY_CACHE_TENANT_SECRET=" + fleetSecret,
		"GEMINI_PROXY_REWRITE_ENABLED=true",
		"GEMINI_PROXY_UPSTREAM_STATE_CONTEXT_CACHE=true",
	}
	reps := []*serveReplica{startServeReplica(t, bin, es.URL, env...), startServeReplica(t, bin, es.URL, env...)}
	clients := []*ccSession{newCCSession(t, reps[0].proxy, testKey), newCCSession(t, reps[1].proxy, testKey)}
	via := newCCSession(t, reps[0].proxy, testKey) // the session; its client is swapped per turn
	direct := newCCSession(t, des.URL, testKey)
	sum := func(name string) float64 {
		return reps[0].metric(t, name) + reps[1].metric(t, name)
	}
	type sent struct {
		replica int
		cached  string
	}
	var turns []sent
	const n = 8
	for i := range n {
		r := i % 2
		via.client = clients[r].client
		q := ccQuestions[i%len(ccQuestions)]
		got, want := via.turn(t, q), direct.turn(t, q)
		if got.Text() != want.Text() {
			t.Errorf("turn %d (replica %c): answer\n%s\nwant (direct)\n%s", i, 'A'+r, got.Text(), want.Text())
		}
		rs := testutil.GenerateRequests(emu.Received())
		if len(rs) != i+1 {
			t.Fatalf("turn %d: the emulator received %d generate requests, want %d", i, len(rs), i+1)
		}
		last := rs[len(rs)-1]
		if last.Status != 200 {
			t.Errorf("turn %d: upstream answered %d %s", i, last.Status, last.Error)
		}
		turns = append(turns, sent{r, last.CachedContent})
		// Settled: both replicas accounted the turn, and no create is in
		// flight (a create the turn started has reached the emulator and
		// the registry, or none was started), so that the next turn, on
		// the other replica, sees what this one left in Redis.
		deadline := time.Now().Add(60 * time.Second)
		for sum("gemini_proxy_context_cache_requests_total") < float64(i+1) || sum("gemini_proxy_context_cache_created_total") < float64(nCreate.Load()) {
			if time.Now().After(deadline) {
				t.Fatalf("turn %d not settled: %v context-cache requests, %v creates of %d", i,
					sum("gemini_proxy_context_cache_requests_total"), sum("gemini_proxy_context_cache_created_total"), nCreate.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	creates.Range(func(k, v any) bool {
		if c := v.(*atomic.Int64).Load(); c != 1 {
			sum := k.([32]byte)
			t.Errorf("prefix %x: %d cachedContents creates, want 1", sum[:6], c)
		}
		return true
	})
	created := []float64{reps[0].metric(t, "gemini_proxy_context_cache_created_total"), reps[1].metric(t, "gemini_proxy_context_cache_created_total")}
	t.Logf("creates: A %v, B %v, at the emulator %d; turns (replica, cachedContent): %v", created[0], created[1], nCreate.Load(), turns)
	if nCreate.Load() != 1 || created[0]+created[1] != 1 {
		t.Fatalf("the fleet created %d caches (replicas say A %v, B %v), want 1", nCreate.Load(), created[0], created[1])
	}
	creator := 0
	if created[1] == 1 {
		creator = 1
	}
	name := ""
	for _, s := range turns {
		if s.cached != "" && s.replica == creator {
			name = s.cached
		}
	}
	used := 0
	for i, s := range turns {
		if s.replica != creator && s.cached != "" {
			used++
			if name != "" && s.cached != name {
				t.Errorf("turn %d: replica %c named cache %q, the creator's is %q", i, 'A'+s.replica, s.cached, name)
			}
		}
	}
	if used == 0 {
		t.Errorf("replica %c never used the cache replica %c created: turns %v", 'B'-creator, 'A'+creator, turns)
	}
	for i, r := range reps {
		if up := r.metric(t, "gemini_proxy_cache_redis_up"); up != 1 {
			t.Errorf("replica %c: gemini_proxy_cache_redis_up %v, want 1", 'A'+i, up)
		}
	}
}
