package cache

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Redis deployment kinds, as RedisStats.Mode reports them.
const (
	RedisModeSingle   = "single"
	RedisModeSentinel = "sentinel"
	RedisModeCluster  = "cluster"
)

// RedisTLS holds the TLS settings of a rediss:// (or rediss-sentinel://)
// connection beyond the URL: PEM files of the certificate authorities that
// sign the server's certificate (empty: the system pool) and of a client
// certificate and its key (both or neither).
type RedisTLS struct {
	CAFile, CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate
	// (empty: the URL's host).
	ServerName string
}

// redisTarget is what newRedisClient makes of Options: go-redis's
// universal options and the kind of deployment they name.
type redisTarget struct {
	uo   redis.UniversalOptions
	mode string
}

// parseRedisTarget reads opts.RedisURL (and RedisCluster, RedisMasterName,
// RedisTLS): redis:// or rediss:// for one server (go-redis ParseURL);
// the same with addr= query parameters, or RedisCluster, for a Cluster
// whose seeds are the host and each addr (ParseClusterURL);
// redis-sentinel:// or rediss-sentinel://, or RedisMasterName, for
// Sentinel, whose addresses are the host and each addr, master_name the
// query parameter or RedisMasterName (ParseFailoverURL: the URL's
// user:password authenticates to the sentinels, the username and
// password query parameters to the master). Errors never quote the URL,
// which may hold a password.
func parseRedisTarget(opts Options) (redisTarget, error) {
	var t redisTarget
	u, err := url.Parse(opts.RedisURL)
	if err != nil {
		return t, errors.New("cache: invalid redis url")
	}
	raw := opts.RedisURL
	sentinel := opts.RedisMasterName != ""
	switch u.Scheme {
	case "redis-sentinel", "rediss-sentinel":
		sentinel = true
		raw = strings.TrimSuffix(u.Scheme, "-sentinel") + raw[len(u.Scheme):]
	case "redis", "rediss":
	default:
		return t, errors.New("cache: redis url scheme must be redis, rediss, redis-sentinel or rediss-sentinel")
	}
	tlsOn := strings.HasPrefix(raw, "rediss:")
	switch {
	case sentinel:
		if opts.RedisCluster {
			return t, errors.New("cache: redis cluster and sentinel are exclusive")
		}
		fo, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return t, errors.New("cache: invalid redis sentinel url")
		}
		if opts.RedisMasterName != "" {
			fo.MasterName = opts.RedisMasterName
		}
		if fo.MasterName == "" {
			return t, errors.New("cache: redis sentinel needs a master name (master_name query parameter or cache.redis_sentinel_master)")
		}
		t.mode = RedisModeSentinel
		t.uo = redis.UniversalOptions{Addrs: fo.SentinelAddrs, MasterName: fo.MasterName, DB: fo.DB,
			Username: fo.Username, Password: fo.Password, SentinelUsername: fo.SentinelUsername, SentinelPassword: fo.SentinelPassword,
			PoolSize: fo.PoolSize}
	case opts.RedisCluster || u.Query().Has("addr"):
		co, err := redis.ParseClusterURL(raw)
		if err != nil {
			return t, errors.New("cache: invalid redis cluster url")
		}
		if u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return t, errors.New("cache: redis cluster has only database 0")
		}
		t.mode = RedisModeCluster
		t.uo = redis.UniversalOptions{Addrs: co.Addrs, IsClusterMode: true, Username: co.Username, Password: co.Password, PoolSize: co.PoolSize}
	default:
		so, err := redis.ParseURL(raw)
		if err != nil {
			return t, errors.New("cache: invalid redis url")
		}
		t.mode = RedisModeSingle
		t.uo = redis.UniversalOptions{Addrs: []string{so.Addr}, DB: so.DB, Username: so.Username, Password: so.Password, PoolSize: so.PoolSize}
	}
	if tlsOn {
		tc, err := opts.RedisTLS.config(u.Hostname())
		if err != nil {
			return t, err
		}
		t.uo.TLSConfig = tc
	} else if opts.RedisTLS != (RedisTLS{}) {
		return t, errors.New("cache: redis tls settings need a rediss:// url")
	}
	if opts.RedisPoolSize > 0 {
		t.uo.PoolSize = opts.RedisPoolSize
	}
	// Bounds, whatever the URL said. Each call's context bounds its dial
	// too (a read: RedisTimeout); the dial time-out only lets the writer,
	// whose calls get ten times that, open a connection on a loaded
	// machine, where a loopback dial can take longer than 50 ms (issue 16
	// item 9); a TLS handshake needs the same room.
	uo := &t.uo
	uo.DialTimeout = 10 * opts.RedisTimeout
	uo.ReadTimeout = opts.RedisTimeout
	uo.WriteTimeout = opts.RedisTimeout
	uo.PoolTimeout = opts.RedisTimeout
	uo.ContextTimeoutEnabled = true
	uo.MaxRetries = -1
	uo.DialerRetries = 1
	uo.DisableIdentity = true
	uo.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if t.mode == RedisModeCluster {
		// MOVED and ASK after a resharding or a failover: followed, a few
		// times, within the call's context.
		uo.MaxRedirects = 3
	}
	return t, nil
}

// newRedisClient returns the go-redis universal client for t: a Client, a
// sentinel-backed FailoverClient or a ClusterClient.
func newRedisClient(t redisTarget) redis.UniversalClient {
	return redis.NewUniversalClient(&t.uo)
}

// config returns the TLS configuration for host.
func (o RedisTLS) config(host string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if o.ServerName != "" {
		tc.ServerName = o.ServerName
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cache: reading redis tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("cache: redis tls ca file holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("cache: redis tls client certificate needs both cert and key files")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cache: loading redis tls client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
