package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genai"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
	"github.com/gemini-proxy/gemini-proxy/internal/emulator"
	"github.com/gemini-proxy/gemini-proxy/internal/testutil"
	"github.com/gemini-proxy/gemini-proxy/metrics"
	"github.com/gemini-proxy/gemini-proxy/proxy"
	"github.com/gemini-proxy/gemini-proxy/rewrite"
)

// liveSession is one client of TestFleetSentinelsManualFailover: a Go
// SDK chat (the history re-sent as contents) or a flattened transcript
// (the history quoted in one user text), of one tenant. Its questions
// carry its marker, so that every upstream request can be traced to the
// one conversation it belongs to.
type liveSession struct {
	id     int
	key    string
	flat   bool
	client *genai.Client

	mu    sync.Mutex
	convs []*liveConv // every conversation, the last one current
	turns atomic.Int64
	err   atomic.Pointer[error]
}

// liveConv is one conversation of a liveSession.
type liveConv struct {
	marker string
	chat   *genai.Chat
	hist   [][2]string
}

// liveConvTurns is the length of one conversation; the session then
// starts a new one, so that histories stay short however long the
// failover takes.
const liveConvTurns = 10

// turn sends the session's next question and records the answer; an error
// is kept (the first) and ends the session.
func (s *liveSession) turn(t *testing.T) bool {
	s.mu.Lock()
	if len(s.convs) == 0 || len(s.convs[len(s.convs)-1].hist) == liveConvTurns {
		c := &liveConv{marker: fmt.Sprintf("<<session %d conversation %d>>", s.id, len(s.convs))}
		if !s.flat {
			var err error
			if c.chat, err = s.client.Chats.Create(t.Context(), "gemini-2.5-flash", nil, nil); err != nil {
				s.mu.Unlock()
				s.err.CompareAndSwap(nil, &err)
				return false
			}
		}
		s.convs = append(s.convs, c)
	}
	c := s.convs[len(s.convs)-1]
	s.mu.Unlock()
	q := fmt.Sprintf("%s question %d: what does line %d of the file do?", c.marker, len(c.hist), 7*len(c.hist)+3)
	var answer string
	if s.flat {
		resp, err := s.client.Models.GenerateContent(t.Context(), "gemini-2.5-flash", genai.Text(transcriptFormats[0].build(c.hist, q)), nil)
		if err != nil {
			err = fmt.Errorf("session %d (flattened) turn %d: %w", s.id, len(c.hist), err)
			s.err.CompareAndSwap(nil, &err)
			return false
		}
		answer = resp.Text()
	} else {
		resp, err := c.chat.SendMessage(t.Context(), genai.Part{Text: q})
		if err != nil {
			err = fmt.Errorf("session %d (chat) turn %d: %w", s.id, len(c.hist), err)
			s.err.CompareAndSwap(nil, &err)
			return false
		}
		answer = resp.Text()
	}
	if answer == "" {
		err := fmt.Errorf("session %d turn %d: empty answer", s.id, len(c.hist))
		s.err.CompareAndSwap(nil, &err)
		return false
	}
	s.mu.Lock()
	c.hist = append(c.hist, [2]string{q, answer})
	s.mu.Unlock()
	s.turns.Add(1)
	return true
}

// checkUpstreamTurns checks every generate request the emulator received
// against the sessions: it was answered 200; it names exactly one
// conversation (no other conversation's marker, so no other tenant's or
// session's text); every model turn in it is an answer that conversation's
// client received; and nothing the client had sent or received up to that
// question is missing from it (no lost turn).
func checkUpstreamTurns(t *testing.T, rs []emulator.Received, sessions []*liveSession) int {
	t.Helper()
	type owner struct {
		s *liveSession
		c *liveConv
	}
	byMarker := map[string]owner{}
	for _, s := range sessions {
		for _, c := range s.convs {
			byMarker[c.marker] = owner{s, c}
		}
	}
	checked := 0
	for i, r := range testutil.GenerateRequests(rs) {
		if r.Status != 200 {
			t.Errorf("upstream request %d: %d %s", i, r.Status, r.Error)
		}
		var all strings.Builder
		for _, c := range r.Contents {
			all.WriteString(c.Text())
			all.WriteByte('\n')
		}
		text := all.String()
		var found []owner
		for m, o := range byMarker {
			if strings.Contains(text, m) {
				found = append(found, o)
			}
		}
		if len(found) != 1 {
			var ms []string
			for _, o := range found {
				ms = append(ms, o.c.marker)
			}
			t.Errorf("upstream request %d holds the text of %d conversations %v, want exactly 1", i, len(found), ms)
			continue
		}
		o := found[0]
		// The newest question it holds is the one it asks.
		last := -1
		for k, h := range o.c.hist {
			if strings.Contains(text, h[0]) {
				last = k
			}
		}
		if last < 0 {
			t.Errorf("upstream request %d (%s): none of its conversation's questions", i, o.c.marker)
			continue
		}
		for k := range last + 1 {
			if !strings.Contains(text, o.c.hist[k][0]) {
				t.Errorf("upstream request %d (%s, question %d): question %d is missing", i, o.c.marker, last, k)
			}
			if k < last && !strings.Contains(text, o.c.hist[k][1]) {
				t.Errorf("upstream request %d (%s, question %d): answer %d is missing", i, o.c.marker, last, k)
			}
		}
		for j, c := range r.Contents {
			if c.Role != "model" {
				continue
			}
			if !slices.ContainsFunc(o.c.hist[:last], func(h [2]string) bool { return h[1] == c.Text() }) {
				t.Errorf("upstream request %d (%s): model turn %d %.80q is no answer its client received before", i, o.c.marker, j, c.Text())
			}
		}
		checked++
	}
	return checked
}

// TestFleetSentinelsManualFailover runs four live clients of two tenants
// (Go SDK chats and flattened transcripts) through three proxy replicas
// on a Redis master and its replica watched by three Sentinels (quorum
// 2), and, while they send, runs SENTINEL FAILOVER as an operator does:
// the replica is promoted and the old master becomes its replica. Every
// request is answered; every upstream request holds exactly one
// conversation, all of it, and no model turn its client did not receive
// (no lost or cross-tenant turn, whatever the proxies found or missed in
// Redis meanwhile); every proxy replica writes to the new master after
// the failover (the old one is read-only now) and reports Redis up, a
// replica that saw errors having logged "redis unavailable" and then
// "redis available again".
func TestFleetSentinelsManualFailover(t *testing.T) {
	s := cachetest.StartSentinels(t, 3)
	logs := make([]*testutil.Buffer, 3)
	fl := newFleetWith(t, 3, s.URL(), 3*time.Second, func(i int, o *cache.Options) {
		logs[i] = &testutil.Buffer{}
		o.Logger = slog.New(slog.NewTextHandler(logs[i], nil))
		if i == 2 {
			// One replica names the sentinels in a redis:// URL and the
			// master with cache.redis_sentinel_master.
			o.RedisURL = "redis://" + s.Sentinel.Addr
			for _, sn := range s.Sentinels[1:] {
				o.RedisURL += map[bool]string{true: "?", false: "&"}[sn == s.Sentinels[1]] + "addr=" + sn.Addr
			}
			o.RedisMasterName = s.MasterName
		}
	})
	var sessions []*liveSession
	for i := range 4 {
		key := []string{testKey, "e2e-second-tenant-key"}[i%2]
		sessions = append(sessions, &liveSession{id: i, key: key, flat: i >= 2, client: testutil.NewClient(t, fl.front, key)})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, ls := range sessions {
		wg.Go(func() {
			// Bounded: at most 5000 turns, 30 ms apart.
			for range 5000 {
				select {
				case <-stop:
					return
				default:
				}
				if !ls.turn(t) {
					return
				}
				time.Sleep(30 * time.Millisecond)
			}
		})
	}
	// waitTurns waits until every session made at least n turns in all,
	// or one failed.
	waitTurns := func(n []int64) {
		deadline := time.Now().Add(120 * time.Second)
		for {
			done := true
			for i, ls := range sessions {
				if e := ls.err.Load(); e != nil {
					close(stop)
					wg.Wait()
					t.Fatal(*e)
				}
				if ls.turns.Load() < n[i] {
					done = false
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("sessions stalled: want %v turns", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitTurns([]int64{4, 4, 4, 4})
	oldMaster := s.Master.Addr
	s.Failover(t)
	t.Logf("SENTINEL FAILOVER: %s promoted, %s its replica", s.Master.Addr, oldMaster)
	// Each store's successful writes when the failover was complete, and
	// at least six more turns of every session from then on.
	var writes []uint64
	for _, st := range fl.stores {
		writes = append(writes, st.Stats().Redis.Writes)
	}
	var more []int64
	for _, ls := range sessions {
		more = append(more, ls.turns.Load()+6)
	}
	waitTurns(more)
	close(stop)
	wg.Wait()
	for _, ls := range sessions {
		if e := ls.err.Load(); e != nil {
			t.Fatal(*e)
		}
	}
	// A replica whose last call failed pauses Redis for a second: a few
	// more requests through the front (each replica in turn) bring every
	// one back up, or the test fails.
	probe := &liveSession{id: 99, key: testKey, flat: true, client: testutil.NewClient(t, fl.front, testKey)}
	sessions = append(sessions, probe)
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, st := range fl.stores {
			st.Wait()
		}
		up := 0
		for _, st := range fl.stores {
			if r := st.Stats().Redis; r.Up && r.Mode == cache.RedisModeSentinel {
				up++
			}
		}
		if up == len(fl.stores) {
			break
		}
		if time.Now().After(deadline) {
			for i, st := range fl.stores {
				t.Errorf("replica %d redis stats %+v, want sentinel and up", i, st.Stats().Redis)
			}
			t.FailNow()
		}
		if !probe.turn(t) {
			t.Fatal(*probe.err.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	n := checkUpstreamTurns(t, fl.emu.Received(), sessions)
	total := 0
	for _, ls := range sessions {
		total += int(ls.turns.Load())
	}
	if n != total {
		t.Errorf("checked %d upstream generate requests, the clients made %d turns", n, total)
	}
	for i, st := range fl.stores {
		r := st.Stats().Redis
		t.Logf("replica %d: %d read and %d write errors, %d writes (%d after the failover), %d hits", i, r.ReadErrors, r.WriteErrors, r.Writes, r.Writes-writes[i], r.Hits)
		if r.Writes <= writes[i] {
			t.Errorf("replica %d wrote nothing to Redis after the failover (%d writes then, %d now)", i, writes[i], r.Writes)
		}
		log := string(logs[i].Bytes())
		if r.ReadErrors+r.WriteErrors > 0 {
			t.Logf("replica %d logged:\n%s", i, log)
			down := strings.Index(log, "redis unavailable")
			if down < 0 || !strings.Contains(log[down:], "redis available again") {
				t.Errorf("replica %d had Redis errors but did not log unavailable, then available again:\n%s", i, log)
			}
		}
	}
	if dbSize(t, oldMaster) == 0 || dbSize(t, s.Master.Addr) == 0 {
		t.Error("a Redis node holds no keys")
	}
	t.Logf("%d turns over %d conversations checked", total, func() int {
		c := 0
		for _, ls := range sessions {
			c += len(ls.convs)
		}
		return c
	}())
}

// lostReplica is one proxy replica of TestFleetSentinelFailoverLostWrites:
// rewriting, verifying answers and continuing interactions through a
// cache.Store on Redis behind the sentinels.
type lostReplica struct {
	url   string
	store *cache.Store
}

func newLostReplica(t *testing.T, redisURL string, up *url.URL) lostReplica {
	t.Helper()
	store, err := cache.New(cache.Options{RedisURL: redisURL, Secret: []byte(fleetSecret), RedisTimeout: 3 * time.Second, RedisBudget: 30 * time.Second, RedisFlush: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h, err := proxy.New(proxy.Options{
		Upstream:     up,
		Rewrite:      proxy.RewriteOptions{Enabled: true},
		TenantSecret: []byte(fleetSecret),
		Verifier:     func(tenant string) rewrite.Verifier { return store.Verifier(tenant) },
		OnServed:     store.RecordServed,
		Interactions: proxy.InteractionsOptions{Enabled: true, Store: &waitingStore{store}},
	}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(h)
	t.Cleanup(ps.Close)
	return lostReplica{url: ps.URL, store: store}
}

// TestFleetSentinelFailoverLostWrites: what a proxy replica wrote to the
// master but the master had not replicated when the sentinels promoted
// its replica is gone, and the other proxy replica, which never saw it,
// must treat it as a miss. Replica A serves a chat's first turn (its
// interaction id replicated, WAIT), then, with the replication stream
// held, its second turn (the id continuing it) and a flattened
// transcript's first answer; SENTINEL FAILOVER then promotes the replica
// without them. Replica B, given the whole history, cannot find the
// second turn's interaction (the upstream request does not continue it)
// and still gets the answer a direct client gets for the whole history;
// the lost flattened answer, which B cannot verify, stays user text in
// full (no model turn made from it). Replica A, which kept its local
// copies, goes on as well.
func TestFleetSentinelFailoverLostWrites(t *testing.T) {
	s := cachetest.StartSentinels(t, 3)
	emu, es := testutil.StartEmulator(t, emulator.Options{Now: func() time.Time { return fixedNow }})
	_, des := testutil.StartEmulator(t, emulator.Options{Now: func() time.Time { return fixedNow }})
	up, _ := url.Parse(es.URL)
	a, b := newLostReplica(t, s.URL(), up), newLostReplica(t, s.URL(), up)
	direct := testutil.NewClient(t, des.URL, testKey)

	var hist []*genai.Content
	turn := func(r lostReplica, q string) *genai.GenerateContentResponse {
		t.Helper()
		hist = append(hist, genai.NewContentFromText(q, genai.RoleUser))
		got, err := testutil.NewClient(t, r.url, testKey).Models.GenerateContent(t.Context(), ixModel, hist, nil)
		if err != nil {
			t.Fatalf("turn %q: %v", q, err)
		}
		want, err := direct.Models.GenerateContent(t.Context(), ixModel, hist, nil)
		if err != nil {
			t.Fatalf("turn %q direct: %v", q, err)
		}
		if got.Text() != want.Text() {
			t.Errorf("turn %q: proxy answered %q, a direct client %q", q, got.Text(), want.Text())
		}
		hist = append(hist, got.Candidates[0].Content)
		r.store.Wait()
		return got
	}
	waitReplicated := func() {
		t.Helper()
		rc := redis.NewClient(&redis.Options{Addr: s.Master.Addr, DisableIdentity: true})
		defer rc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if n, err := rc.Do(ctx, "WAIT", 1, 20000).Int(); err != nil || n != 1 {
			t.Fatalf("WAIT: %d replicas, %v", n, err)
		}
	}

	first := turn(a, "First question: what is a goroutine?")
	waitReplicated()
	replicated := dbSize(t, s.Replica.Addr)
	s.HoldReplication(t)
	second := turn(a, "Second question: how do I stop one?")
	if rs := emu.Received(); rs[len(rs)-1].API != "interactions" || ixOf(t, rs[len(rs)-1]).Prev != first.ResponseID {
		t.Fatalf("replica A's second turn did not continue the first's interaction %q: the test tests nothing", first.ResponseID)
	}
	var flat [][2]string
	fq1 := "Flattened question one: what does sync.WaitGroup.Go do?"
	fr, err := testutil.NewClient(t, a.url, testKey).Models.GenerateContent(t.Context(), ixModel, genai.Text(transcriptFormats[0].build(nil, fq1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.store.Wait()
	flat = append(flat, [2]string{fq1, fr.Text()})
	if m, r := dbSize(t, s.Master.Addr), dbSize(t, s.Replica.Addr); m <= r || r != replicated {
		t.Fatalf("master holds %d keys, its replica %d (%d before the hold): the writes were not held back", m, r, replicated)
	}
	s.Failover(t)
	if n := dbSize(t, s.Master.Addr); n != replicated {
		t.Fatalf("the promoted master holds %d keys, want the %d replicated before the hold", n, replicated)
	}

	// Replica B: the second turn's interaction is lost.
	turn(b, "Third question: and with a context?")
	rs := emu.Received()
	last := rs[len(rs)-1]
	if last.API == "interactions" {
		x := ixOf(t, last)
		if x.Prev == second.ResponseID {
			t.Errorf("replica B continued interaction %q, whose id was lost in the failover", x.Prev)
		}
		t.Logf("replica B, third turn: an interaction continuing %q with %d steps", x.Prev, len(x.Input))
	} else {
		t.Logf("replica B, third turn: %s", last.API)
	}
	fq2 := "Flattened question two: and errgroup?"
	body := transcriptFormats[0].build(flat, fq2)
	if _, err := testutil.NewClient(t, b.url, testKey).Models.GenerateContent(t.Context(), ixModel, genai.Text(body), nil); err != nil {
		t.Fatal(err)
	}
	rs = emu.Received()
	last = rs[len(rs)-1]
	var userText strings.Builder
	for _, c := range last.Contents {
		if c.Role == "model" {
			t.Errorf("replica B sent a model turn %.80q: the only answer was lost with the old master", c.Text())
			continue
		}
		userText.WriteString(c.Text())
	}
	for _, want := range []string{fq1, fr.Text(), fq2} {
		if !strings.Contains(userText.String(), want) {
			t.Errorf("replica B's upstream request lost %.60q", want)
		}
	}
	// Replica A again, and B once more: both go on.
	turn(a, "Fourth question: thanks, summarise.")
	turn(b, "Fifth question: one more example?")
	for i, st := range []*cache.Store{a.store, b.store} {
		if r := st.Stats().Redis; r.Mode != cache.RedisModeSentinel {
			t.Errorf("replica %d redis stats %+v, want sentinel", i, r)
		}
	}
}

// TestFleetSessionNextTurnOtherReplica: a client in session mode
// (X-Gemini-Proxy-Session, no history sent) whose turns alternate between
// two proxy replicas on one Redis, each turn sent as soon as the last
// answer arrived: every turn continues the session's newest interaction,
// so the model sees every earlier turn. The stores are used as serve uses
// them (no test wrapper waiting for writes): the replica that answered
// must have made the session's new state visible in Redis before the
// client has the answer, or the other replica continues an older
// interaction and the model never sees the turn between.
func TestFleetSessionNextTurnOtherReplica(t *testing.T) {
	rds := cachetest.StartRedis(t)
	_, es := testutil.StartEmulator(t, emulator.Options{Now: func() time.Time { return fixedNow }})
	up, _ := url.Parse(es.URL)
	replica := func() string {
		store, err := cache.New(cache.Options{RedisURL: rds.URL(), Secret: []byte(fleetSecret), RedisTimeout: 3 * time.Second, RedisBudget: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		h, err := proxy.New(proxy.Options{Upstream: up, Rewrite: proxy.RewriteOptions{Enabled: true}, TenantSecret: []byte(fleetSecret),
			Interactions: proxy.InteractionsOptions{Enabled: true, Store: store}}, slog.New(slog.DiscardHandler), metrics.New(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		ps := httptest.NewServer(h)
		t.Cleanup(ps.Close)
		return ps.URL
	}
	urls := []string{replica(), replica()}
	for s := range 20 {
		var cs []*genai.Client
		for _, u := range urls {
			c, err := genai.NewClient(t.Context(), &genai.ClientConfig{APIKey: testKey, Backend: genai.BackendGeminiAPI,
				HTTPOptions: genai.HTTPOptions{BaseURL: u, Headers: http.Header{proxy.HeaderSession: {fmt.Sprint("editor-", s)}}},
				HTTPClient:  &http.Client{}})
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		for i := 1; i <= 4; i++ {
			stream := i == 3
			q := fmt.Sprintf("Session %d, question %d?", s, i)
			var text string
			if stream {
				for r, err := range cs[(s+i)%2].Models.GenerateContentStream(t.Context(), ixModel, genai.Text(q), nil) {
					if err != nil {
						t.Fatalf("session %d request %d: %v", s, i, err)
					}
					text += r.Text()
				}
			} else {
				r, err := cs[(s+i)%2].Models.GenerateContent(t.Context(), ixModel, genai.Text(q), nil)
				if err != nil {
					t.Fatalf("session %d request %d: %v", s, i, err)
				}
				text = r.Text()
			}
			if want := fmt.Sprintf("has %d contents", 2*i-1); !strings.Contains(text, want) {
				t.Errorf("session %d request %d (replica %d): the model did not see the session so far (%s): %q", s, i, (s+i)%2, want, text)
				break
			}
		}
	}
}
