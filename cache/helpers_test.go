package cache_test

import (
	"net"
	"testing"
	"time"

	"github.com/gemini-proxy/gemini-proxy/cache"
	"github.com/gemini-proxy/gemini-proxy/cache/cachetest"
)

// sharedOpts are the Options of a Store sharing srv, with time-outs far
// above any round trip to a loopback Redis on a loaded machine: tests of
// what is shared must not fail because a call took 60 ms (issue 16 item 9).
// Tests of the time-outs themselves set their own against a blackhole.
func sharedOpts(srv *cachetest.Redis) cache.Options {
	return cache.Options{
		RedisURL:     srv.URL(),
		RedisTimeout: 5 * time.Second,
		RedisBudget:  30 * time.Second,
		RedisFlush:   time.Minute,
		Secret:       testSecret,
	}
}

// testSecret is the Options.Secret of the tests' shared Stores.
var testSecret = []byte("0123456789abcdef-test-secret")

// blackhole returns the address of a listener that accepts connections and
// never answers, like a hung Redis.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
