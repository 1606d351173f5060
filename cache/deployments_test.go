package cache_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
)

// deploymentOpts are sharedOpts for url with edit applied.
func deploymentOpts(url string, edit func(*cache.Options)) cache.Options {
	o := cache.Options{RedisURL: url, RedisTimeout: 5 * time.Second, RedisBudget: 30 * time.Second, RedisFlush: time.Minute, Secret: testSecret}
	if edit != nil {
		edit(&o)
	}
	return o
}

// TestRedisDeployments: two Stores share served responses and
// conversation state through each kind of Redis production runs: a
// 3-node Cluster (the conversation keys of one Conversations call live in
// several slots), Sentinel (by redis-sentinel:// URL and by explicit
// master name), and a TLS-only server that requires a client certificate
// and an ACL user.
func TestRedisDeployments(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T) cache.Options
		mode  string
	}{
		{"cluster", func(t *testing.T) cache.Options {
			return deploymentOpts(cachetest.StartCluster(t, 3).URL(), nil)
		}, cache.RedisModeCluster},
		{"cluster one seed", func(t *testing.T) cache.Options {
			c := cachetest.StartCluster(t, 3)
			return deploymentOpts("redis://"+c.Nodes[1].Addr, func(o *cache.Options) { o.RedisCluster = true })
		}, cache.RedisModeCluster},
		{"sentinel url", func(t *testing.T) cache.Options {
			return deploymentOpts(cachetest.StartSentinel(t).URL(), nil)
		}, cache.RedisModeSentinel},
		{"sentinel master name", func(t *testing.T) cache.Options {
			s := cachetest.StartSentinel(t)
			return deploymentOpts("redis://"+s.Sentinel.Addr, func(o *cache.Options) { o.RedisMasterName = s.MasterName })
		}, cache.RedisModeSentinel},
		{"tls acl", func(t *testing.T) cache.Options {
			r := cachetest.StartTLSRedis(t)
			return deploymentOpts(r.URL(), func(o *cache.Options) {
				o.RedisTLS = cache.RedisTLS{CAFile: r.CAFile, CertFile: r.CertFile, KeyFile: r.KeyFile}
			})
		}, cache.RedisModeSingle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.start(t)
			a, b := newStore(t, opts), newStore(t, opts)
			text := words("Answer shared through "+tt.name, 3000)
			a.RecordServed(tenantA, text, false)
			keys := make([]string, 16)
			for i := range keys {
				keys[i] = fmt.Sprintf("ix:%04d", i)
				a.SetConversation(tenantA, keys[i], []byte("state "+keys[i]))
			}
			a.Wait()
			if !b.Verifier(tenantA).Served(text[:3000]) {
				t.Fatalf("replica B did not verify replica A's response; stats %+v", b.Stats().Redis)
			}
			vs := b.Conversations(tenantA, append(keys, "ix:missing"))
			for i, k := range keys {
				if string(vs[i]) != "state "+k {
					t.Errorf("Conversations[%s] = %q", k, vs[i])
				}
			}
			if vs[len(keys)] != nil {
				t.Errorf("missing key = %q", vs[len(keys)])
			}
			st := b.Stats().Redis
			if st.Mode != tt.mode || !st.Up || st.ReadErrors != 0 || st.Invalid != 0 {
				t.Errorf("redis stats = %+v, want mode %s, up, no error", st, tt.mode)
			}
		})
	}
}

// TestRedisTLSRefusesUnknownCA: with the system's CAs (not the test's),
// the TLS handshake fails; the Store works locally and reports Redis down.
func TestRedisTLSRefusesUnknownCA(t *testing.T) {
	r := cachetest.StartTLSRedis(t)
	s := newStore(t, deploymentOpts(r.URL(), func(o *cache.Options) {
		o.RedisTimeout = time.Second
		o.RedisTLS = cache.RedisTLS{CertFile: r.CertFile, KeyFile: r.KeyFile}
	}))
	text := words("local only", 300)
	s.RecordServed(tenantA, text, false)
	s.Wait()
	if !s.Verifier(tenantA).Served(text) {
		t.Error("local verification failed")
	}
	s.Verifier(tenantA).Served(words("not local", 300))
	if st := s.Stats().Redis; st.Up || st.WriteErrors+st.ReadErrors == 0 {
		t.Errorf("redis stats = %+v, want down with errors", st)
	}
}

// TestRedisURLs: the URL forms New accepts and refuses, without a server
// (New connects lazily). Errors never quote the URL's password.
func TestRedisURLs(t *testing.T) {
	tests := []struct {
		url  string
		edit func(*cache.Options)
		ok   bool
	}{
		{"redis://127.0.0.1:1/0", nil, true},
		{"rediss://u:p@127.0.0.1:1/0", nil, true},
		{"redis://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3", nil, true},
		{"redis-sentinel://127.0.0.1:1?master_name=m&addr=127.0.0.1:2", nil, true},
		{"rediss-sentinel://s:secretpw@127.0.0.1:1?master_name=m&username=u&password=p", nil, true},
		{"redis://127.0.0.1:1", func(o *cache.Options) { o.RedisMasterName = "m" }, true},
		{"redis-sentinel://127.0.0.1:1", nil, false},                                                       // no master name
		{"redis://127.0.0.1:1/3?addr=127.0.0.1:2", nil, false},                                             // cluster has db 0 only
		{"redis://127.0.0.1:1?addr=127.0.0.1:2", func(o *cache.Options) { o.RedisMasterName = "m" }, true}, // two sentinels
		{"redis://127.0.0.1:1", func(o *cache.Options) { o.RedisMasterName, o.RedisCluster = "m", true }, false},
		{"http://secretpw@127.0.0.1:1", nil, false},
		{"redis://:secretpw@127.0.0.1:1?bogus=1", nil, false},
		{"redis://127.0.0.1:1", func(o *cache.Options) { o.RedisTLS.CAFile = "/nonexistent" }, false}, // tls settings without rediss
		{"rediss://127.0.0.1:1", func(o *cache.Options) { o.RedisTLS.CAFile = "/nonexistent" }, false},
		{"rediss://127.0.0.1:1", func(o *cache.Options) { o.RedisTLS.CertFile = "/x" }, false}, // cert without key
	}
	for _, tt := range tests {
		o := cache.Options{RedisURL: tt.url, Secret: testSecret}
		if tt.edit != nil {
			tt.edit(&o)
		}
		s, err := cache.New(o)
		if (err == nil) != tt.ok {
			t.Errorf("New(%q) error = %v, want ok %v", tt.url, err, tt.ok)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("New(%q) error quotes the password: %v", tt.url, err)
		}
		if s != nil {
			s.Close()
		}
	}
}
