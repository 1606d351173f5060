package reliability

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
)

// TestFindCanary makes sure the credential search can fail: each encoded
// form of the key, embedded in a longer text, is found.
func TestFindCanary(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
	}{
		{"raw in JSON", `{"key":"` + canaryKey + `"}`},
		{"query string", "GET /v1beta/models?key=" + url.QueryEscape(canaryKey) + "&x=1"},
		{"base64 of a header", base64.StdEncoding.EncodeToString([]byte("x-goog-api-key: " + canaryKey + "\r\n"))},
		{"url-safe base64, offset 1", base64.URLEncoding.EncodeToString([]byte("k=" + canaryKey))},
		{"hex", fmt.Sprintf("%x", "key "+canaryKey)},
		{"truncated", "key=AIzaSy-RELIABILITY-CANARY-KE…"},
	} {
		if findCanary([]byte(tc.text)) == "" {
			t.Errorf("%s: canary not found in %q", tc.name, tc.text)
		}
	}
	if f := findCanary([]byte("AIzaSy-some-other-key " + base64.StdEncoding.EncodeToString([]byte("hello")))); f != "" {
		t.Errorf("found %q in a text without the canary", f)
	}
}

// redisCmd sends one command to a Redis server and returns its raw reply.
func redisCmd(t *testing.T, addr string, args ...string) []byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Wait up to the 10s deadline for the reply to start (SAVE on a loaded
	// machine can take longer than any quiet period), then read until it
	// has been quiet for 300ms.
	var out bytes.Buffer
	r := bufio.NewReader(c)
	for first := true; ; first = false {
		if !first {
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		}
		line, err := r.ReadBytes('\n')
		out.Write(line)
		if err != nil {
			break
		}
	}
	return out.Bytes()
}

// TestNoCredentialInOutputs runs the full stack in shared (Redis) mode at
// debug level, once with JSON and once with text logs (the second with
// upstream.api_key replacing the client's key), sends keys in every place
// a client puts them (header, ?key=, Vertex bearer token) on successful,
// rewritten, unflattened, failing and rejected requests, and searches the
// logs, the /metrics scrape, every response, and the whole Redis keyspace
// with its values (an uncompressed RDB dump) for the key.
func TestNoCredentialInOutputs(t *testing.T) {
	rds := cachetest.StartRedis(t)
	up := newUpstream(t, emulator.Options{})
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			env := []string{
				"GEMINI_PROXY_LOG_FORMAT=" + format,
				"GEMINI_PROXY_CACHE_BACKEND=redis",
				"GEMINI_PROXY_CACHE_REDIS_URL=" + rds.URL(),
				"GEMINI_PROXY_CACHE_TENANT_SECRET=reliability-tenant-secret-0123456789",
				"GEMINI_PROXY_UPSTREAM_VERTEX_URL=" + up.URL,
				"GEMINI_PROXY_SERVER_MAX_BODY_BYTES=1048576",
				"GEMINI_PROXY_REWRITE_MAX_BODY_BYTES=1048576",
			}
			if format == "text" {
				env = append(env, "GEMINI_PROXY_UPSTREAM_API_KEY="+tenantKey(9))
			}
			s := startStack(t, up.URL, env...)
			doc := strings.Repeat("func add(a, b int) int { return a + b } // a line of code\n", 20)
			vertex := "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent"
			first := send(t.Context(), "POST", s.proxyURL+generatePath, jsonHeader(), prompt("a canary"))
			answerText := answer(first)
			var text string
			json.Unmarshal([]byte(`"`+answerText+`"`), &text)
			transcript := contents("User: Please write a short story about a canary.\nAssistant: " + text + "\nUser: shorter?")
			for _, rq := range []struct {
				target string
				header http.Header
				body   []byte
			}{
				{s.proxyURL + generatePath + "?key=" + url.QueryEscape(canaryKey), http.Header{"Content-Type": {"application/json"}, "X-Goog-Api-Key": {"-"}}, prompt("query key")},
				{s.proxyURL + streamPath, jsonHeader(), contents(doc, "ok", doc)},
				{s.proxyURL + arrayPath, jsonHeader(), transcript},
				{s.proxyURL + generatePath, jsonHeader(), transcript},
				{s.proxyURL + vertex, jsonHeader("Authorization", "Bearer "+canaryKey, "X-Goog-Api-Key", "-"), prompt("vertex")},
				{s.proxyURL + generatePath, jsonHeader("X-Emulator-Fault", "status=500"), prompt("fault")},
				{s.proxyURL + generatePath, jsonHeader(), []byte(`{"contents":[`)},
				{s.proxyURL + generatePath, jsonHeader(), contents(strings.Repeat("x", 1100000))},
				{s.proxyURL + "/v1beta/models?key=" + canaryKey, http.Header{"X-Goog-Api-Key": {"-"}}, nil},
				{s.proxyURL + "/v1beta/cachedContents?key=" + canaryKey + "&pageSize=1", http.Header{"X-Goog-Api-Key": {"-"}}, nil},
			} {
				method := "POST"
				if rq.body == nil {
					method = "GET"
				}
				if rq.header.Get("X-Goog-Api-Key") == "-" {
					rq.header.Del("X-Goog-Api-Key")
					rq.header.Set("X-Goog-Api-Key", "")
				}
				r := send(t.Context(), method, rq.target, rq.header, rq.body)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if f := findCanary(r.Body); f != "" {
					t.Errorf("%s %s: response names the key: %s", method, rq.target, excerpt(r.Body, f))
				}
			}
			if f := findCanary([]byte(s.metrics(t))); f != "" {
				t.Errorf("/metrics names the key")
			}
			// Let the Redis writer drain, then dump everything Redis holds.
			time.Sleep(300 * time.Millisecond)
			keys := redisCmd(t, rds.Addr, "KEYS", "*")
			collect("redis KEYS *", keys)
			if !bytes.Contains(keys, []byte("gemini-proxy:")) {
				t.Errorf("no gemini-proxy key in Redis, the check would be vacuous: %q", keys)
			}
			if f := findCanary(keys); f != "" {
				t.Errorf("a Redis key names the credential: %s", excerpt(keys, f))
			}
			redisCmd(t, rds.Addr, "CONFIG", "SET", "rdbcompression", "no")
			if r := redisCmd(t, rds.Addr, "SAVE"); !bytes.HasPrefix(r, []byte("+OK")) {
				t.Fatalf("SAVE: %q", r)
			}
			dirReply := strings.Split(string(redisCmd(t, rds.Addr, "CONFIG", "GET", "dir")), "\r\n")
			if len(dirReply) < 5 {
				t.Fatalf("CONFIG GET dir: %q", dirReply)
			}
			dump, err := os.ReadFile(filepath.Join(dirReply[4], "dump.rdb"))
			if err != nil {
				t.Fatal(err)
			}
			collect("redis dump.rdb", dump)
			if f := findCanary(dump); f != "" {
				t.Errorf("Redis holds the credential: %s", excerpt(dump, f))
			}
			if !bytes.Contains(dump, []byte("emulator")) {
				t.Errorf("the Redis dump holds no response text; is it compressed? (%d bytes)", len(dump))
			}
			// Stop the process now so that the whole log, shutdown included,
			// is searched here.
			if err, ok := s.stop(15 * time.Second); !ok || err != nil {
				t.Fatalf("stop: exited %v, err %v", ok, err)
			}
			logs := s.logs.Bytes()
			if !bytes.Contains(logs, []byte("request")) {
				t.Errorf("no access log lines; the check would be vacuous")
			}
			if f := findCanary(logs); f != "" {
				t.Errorf("the %s log names the key: %s", format, excerpt(logs, f))
			}
		})
	}
}

// TestListenersExposeOnlyTheirAPI checks that the admin listener serves
// its endpoints (the savings page at /, metrics, health and readiness)
// and nothing of the traffic (no prompt, no answer),
// with pprof off by default, and that the proxy listener serves only the
// Gemini API: /metrics, /healthz, /readyz and /debug/pprof/ on it go to
// the upstream like any other path.
func TestListenersExposeOnlyTheirAPI(t *testing.T) {
	up := newUpstream(t, emulator.Options{})
	const marker = "PROMPT-MARKER-7f3a"
	for _, pprof := range []bool{false, true} {
		t.Run(fmt.Sprintf("pprof=%v", pprof), func(t *testing.T) {
			s := startStack(t, up.URL, fmt.Sprintf("GEMINI_PROXY_ADMIN_PPROF=%v", pprof))
			r := send(t.Context(), "POST", s.proxyURL+streamPath, jsonHeader(), prompt(marker))
			if r.Status != 200 {
				t.Fatalf("generate: %d", r.Status)
			}
			answerStart := "This is the Gemini API emulator"
			for _, p := range []string{"/", "/metrics", "/healthz", "/readyz", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/vars", generatePath, "/v1beta/models"} {
				got := send(t.Context(), "GET", s.adminURL+p, nil, nil)
				if got.Err != nil {
					t.Fatal(got.Err)
				}
				if bytes.Contains(got.Body, []byte(marker)) || bytes.Contains(got.Body, []byte(answerStart)) {
					t.Errorf("admin %s serves prompt or response content", p)
				}
				wantOK := p == "/" || p == "/metrics" || p == "/healthz" || p == "/readyz" || pprof && strings.HasPrefix(p, "/debug/pprof/")
				if (got.Status == 200) != wantOK {
					t.Errorf("admin %s: status %d, want 200: %v", p, got.Status, wantOK)
				}
			}
			before := len(up.requests())
			var paths []string
			for _, p := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/", "/debug/pprof/cmdline"} {
				got := send(t.Context(), "GET", s.proxyURL+p, nil, nil)
				if got.Err != nil {
					t.Fatal(got.Err)
				}
				if got.Status != 404 || bytes.Contains(got.Body, []byte("gemini_proxy_")) || bytes.Contains(got.Body, []byte("goroutine")) {
					t.Errorf("proxy listener %s answered %d %.100s itself; want the upstream's 404", p, got.Status, got.Body)
				}
				paths = append(paths, p)
			}
			var seen []string
			for _, r := range up.requests()[before:] {
				seen = append(seen, r.Path)
			}
			if diff := cmp.Diff(paths, seen); diff != "" {
				t.Errorf("paths forwarded to the upstream (-want +got):\n%s", diff)
			}
		})
	}
}

// tenantOp is one request of the tenant-isolation test.
type tenantOp struct {
	Tenant int
	Kind   string // ask, transcript, naive, stream
	Arg    int    // which prompt or document of the shared pools
}

// TestTenantIsolation is a randomised differential test: several tenants
// send interleaved requests drawn from shared pools (the same prompts, so
// the same answers; the same documents), including flattened transcripts
// quoting answers served to themselves or only to others. Each tenant's
// requests must reach the upstream byte for byte as they do when that
// tenant's requests alone go through a fresh proxy, with the same report:
// nothing served to, blocked for, or analysed for one tenant changes
// another's rewrite.
func TestTenantIsolation(t *testing.T) {
	const tenants, ops, rounds = 3, 24, 3
	up := newUpstream(t, emulator.Options{})
	prompts := []string{"a lighthouse", "a river", "a mountain", "a city", "a forest"}
	docs := []string{
		strings.Repeat("func add(a, b int) int { return a + b } // addition, line\n", 15),
		strings.Repeat("# Notes\nThe quick brown fox jumps over the lazy dog, again.\n", 15),
	}
	answers := make([]string, len(prompts))
	for i, p := range prompts {
		r := send(t.Context(), "POST", up.URL+generatePath, jsonHeader("X-Goog-Api-Key", "oracle-key"), prompt(p))
		json.Unmarshal([]byte(`"`+answer(r)+`"`), &answers[i])
	}
	body := func(op tenantOp) (string, []byte) {
		switch op.Kind {
		case "ask":
			return generatePath, prompt(prompts[op.Arg])
		case "stream":
			return streamPath, prompt(prompts[op.Arg])
		case "transcript":
			return generatePath, contents("User: Please write a short story about " + prompts[op.Arg] + ".\nAssistant: " + answers[op.Arg] + "\nUser: and a sequel?")
		default:
			d := docs[op.Arg%len(docs)]
			return generatePath, contents("Here is my file:\n```\n"+d+"```", "Looks fine.", "Again:\n```\n"+d+"```\nAny bugs?")
		}
	}
	type result struct {
		Body   string
		Report string
	}
	run := func(t *testing.T, seq []tenantOp) []result {
		s := startStack(t, up.URL, "GEMINI_PROXY_LOG_LEVEL=info")
		var out []result
		for _, op := range seq {
			path, b := body(op)
			before := len(up.requests())
			r := send(t.Context(), "POST", s.proxyURL+path, jsonHeader("X-Goog-Api-Key", tenantKey(op.Tenant)), b)
			if r.Err != nil || r.Status != 200 {
				t.Fatalf("%+v: %d %v %s", op, r.Status, r.Err, r.Body)
			}
			seen := up.requests()
			if len(seen) != before+1 {
				t.Fatalf("%+v: %d upstream requests", op, len(seen)-before)
			}
			out = append(out, result{string(seen[len(seen)-1].Body), r.Header.Get("X-Gemini-Proxy-Report")})
		}
		return out
	}
	kinds := []string{"ask", "stream", "transcript", "transcript", "naive"}
	unflattened := 0
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 42))
		seq := make([]tenantOp, ops)
		for i := range seq {
			seq[i] = tenantOp{Tenant: rng.IntN(tenants), Kind: kinds[rng.IntN(len(kinds))], Arg: rng.IntN(len(prompts))}
		}
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			shared := run(t, seq)
			for tn := range tenants {
				var alone []tenantOp
				var want []result
				for i, op := range seq {
					if op.Tenant == tn {
						alone = append(alone, op)
						want = append(want, shared[i])
					}
				}
				got := run(t, alone)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("tenant %d: interleaved with others (-) vs alone (+) differ; ops %+v:\n%s", tn, alone, diff)
				}
			}
			for _, r := range shared {
				if strings.Contains(r.Report, "unflatten") {
					unflattened++
				}
			}
		})
	}
	if unflattened == 0 {
		t.Errorf("no request was un-flattened in %d rounds; the test would not notice a leak", rounds)
	}
	t.Logf("%d un-flattened requests in %d rounds", unflattened, rounds)
}
