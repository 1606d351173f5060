package cachetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters without replicas, on loopback.
type Cluster struct {
	Nodes []*Redis
}

// URL returns a redis:// URL naming every node as a seed (go-redis's addr
// parameters).
func (c *Cluster) URL() string {
	u := "redis://" + c.Nodes[0].Addr
	for i, n := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr
	}
	return u
}

// StartCluster starts n redis-server processes with cluster mode on (each
// with its own free client and bus ports), joins them with redis-cli
// --cluster create (the slots split evenly, no replicas), and waits until
// every node reports cluster_state:ok. cluster-require-full-coverage is
// off: after a node is stopped the others keep serving their slots. Every
// process is stopped when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	cli := redisCLI(t)
	c := &Cluster{}
	var addrs []string
	for range n {
		port, bus := FreePort(t), FreePort(t)
		r := startServer(t, port, nil, "--port", strconv.Itoa(port), "--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus), "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no")
		c.Nodes = append(c.Nodes, r)
		addrs = append(addrs, r.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, r := range c.Nodes {
		waitFor(t, 60*time.Second, "cluster_state:ok on "+r.Addr, func() error {
			rc := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
			defer rc.Close()
			info, err := rc.ClusterInfo(context.Background()).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return errors.New("cluster state not ok")
			}
			return nil
		})
	}
	return c
}

// Sentinel is one master, with a replica when StartSentinelReplicated
// or StartSentinels started it, watched by one sentinel or, from
// StartSentinels, several.
type Sentinel struct {
	Master, Sentinel *Redis
	// Sentinels are every sentinel, Sentinel the first.
	Sentinels []*Redis
	// Replica is the master's replica, nil without one.
	Replica *Redis
	// MasterName is the name the sentinel knows the master by.
	MasterName string
	// link relays the replica's replication connection (StartSentinels
	// only), so that HoldReplication can stop it.
	link *relay
}

// URL returns the redis-sentinel:// URL of the sentinels, naming the
// master.
func (s *Sentinel) URL() string {
	u := "redis-sentinel://" + s.Sentinel.Addr + "?master_name=" + s.MasterName
	for _, o := range s.Sentinels[1:] {
		u += "&addr=" + o.Addr
	}
	return u
}

// StartSentinel starts a master and a sentinel (redis-server --sentinel,
// its configuration file in t.TempDir()) watching it, and waits until the
// sentinel names the master. Both are stopped when the test ends.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return startSentinel(t, StartRedis(t), nil)
}

// StartSentinelReplicated is StartSentinel with a replica of the master
// (redis-server --replicaof), and waits until the replica is in sync and
// the sentinel lists it, so that KillMaster can fail over to it. Sentinel
// mode is part of Debian's redis-server; without it the test is skipped
// (fails under CI) as StartRedis says.
func StartSentinelReplicated(t testing.TB) *Sentinel {
	t.Helper()
	master := StartRedis(t)
	host, mport, _ := net.SplitHostPort(master.Addr)
	port := FreePort(t)
	replica := startServer(t, port, nil, "--port", strconv.Itoa(port), "--replicaof", host, mport)
	waitFor(t, 60*time.Second, "replica "+replica.Addr+" in sync", func() error {
		return infoHas(replica.Addr, "replication", "master_link_status:up")
	})
	return startSentinel(t, master, replica)
}

// StartSentinels starts a master, its replica and n sentinels watching
// them (quorum n/2+1), and waits until every sentinel names the master,
// lists the replica in sync and knows the n-1 others, so that Failover
// can run a SENTINEL FAILOVER. The replica replicates through a relay the
// test can stop (HoldReplication). Everything is stopped when the test
// ends.
func StartSentinels(t testing.TB, n int) *Sentinel {
	t.Helper()
	master := StartRedis(t)
	link := startRelay(t, master.Addr)
	host, lport, _ := net.SplitHostPort(link.addr)
	port := FreePort(t)
	replica := startServer(t, port, nil, "--port", strconv.Itoa(port), "--replicaof", host, lport)
	waitFor(t, 60*time.Second, "replica "+replica.Addr+" in sync", func() error {
		return infoHas(replica.Addr, "replication", "master_link_status:up")
	})
	s := &Sentinel{Master: master, Replica: replica, MasterName: sentinelMaster, link: link}
	for range n {
		// A long failover time-out: a sentinel points a replica whose
		// master address is not the master's (the relay's) at the master
		// only after it, which would end HoldReplication.
		s.Sentinels = append(s.Sentinels, startOneSentinel(t, master, replica, n/2+1, 300000))
	}
	s.Sentinel = s.Sentinels[0]
	for _, sn := range s.Sentinels {
		waitFor(t, 60*time.Second, "sentinel "+sn.Addr+" to know the others", func() error {
			sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, DisableIdentity: true})
			defer sc.Close()
			others, err := sc.Sentinels(context.Background(), sentinelMaster).Result()
			if err != nil {
				return err
			}
			if len(others) != n-1 {
				return fmt.Errorf("knows %d other sentinels, want %d", len(others), n-1)
			}
			return nil
		})
	}
	return s
}

// sentinelMaster is the name the sentinels know the master by.
const sentinelMaster = "gpmaster"

// startSentinel starts a sentinel watching master (quorum 1, down after
// two seconds) and waits until it names master and, when replica is not
// nil, lists replica.
func startSentinel(t testing.TB, master, replica *Redis) *Sentinel {
	t.Helper()
	s := startOneSentinel(t, master, replica, 1, 20000)
	return &Sentinel{Master: master, Replica: replica, Sentinel: s, Sentinels: []*Redis{s}, MasterName: sentinelMaster}
}

// startOneSentinel starts a sentinel watching master with quorum (down
// after two seconds, failover time-out failoverMS) and waits until it
// names master and, when replica is not nil, lists replica in sync.
func startOneSentinel(t testing.TB, master, replica *Redis, quorum, failoverMS int) *Redis {
	t.Helper()
	const name = sentinelMaster
	port := FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	host, mport, _ := net.SplitHostPort(master.Addr)
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s 2000\nsentinel failover-timeout %s %d\n",
		port, dir, name, host, mport, quorum, name, name, failoverMS)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := startCmd(t, exec.Command(redisBin(t), conf, "--sentinel"), port, func() error {
		if err := sentinelNames(addr, name, master.Addr); err != nil {
			return err
		}
		if replica == nil {
			return nil
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DisableIdentity: true})
		defer sc.Close()
		rs, err := sc.Replicas(context.Background(), name).Result()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if net.JoinHostPort(r["ip"], r["port"]) == replica.Addr && r["master-link-status"] == "ok" && !strings.Contains(r["flags"], "down") {
				return nil
			}
		}
		return fmt.Errorf("sentinel lists replicas %v, not %s in sync", rs, replica.Addr)
	})
	return s
}

// Failover runs SENTINEL FAILOVER on the first sentinel, as an operator
// does, while the master is up, and waits until every sentinel names the
// replica as master, the replica answers as master, and the old master
// has become its replica, in sync. Master and Replica are swapped
// afterwards. A write the replica had not received when it was promoted
// is lost: the old master drops it when it resynchronises.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	if s.Replica == nil {
		t.Fatal("Failover: no replica")
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr, DisableIdentity: true})
	err := sc.Failover(context.Background(), s.MasterName).Err()
	sc.Close()
	if err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	waitFor(t, 90*time.Second, "the sentinels to promote "+s.Replica.Addr, func() error {
		for _, sn := range s.Sentinels {
			if err := sentinelNames(sn.Addr, s.MasterName, s.Replica.Addr); err != nil {
				return err
			}
		}
		if err := infoHas(s.Replica.Addr, "replication", "role:master"); err != nil {
			return err
		}
		if err := infoHas(s.Master.Addr, "replication", "role:slave"); err != nil {
			return err
		}
		return infoHas(s.Master.Addr, "replication", "master_link_status:up")
	})
	s.Master, s.Replica = s.Replica, s.Master
	s.link = nil
}

// HoldReplication stops the replication stream from the master to the
// replica (StartSentinels only): what the master takes from now on does
// not reach the replica, which still looks in sync to the sentinels for
// a while (replication time-outs are 60 s).
func (s *Sentinel) HoldReplication(t testing.TB) {
	t.Helper()
	if s.link == nil {
		t.Fatal("HoldReplication: the replica does not replicate through a relay (StartSentinels)")
	}
	s.link.hold.Store(true)
}

// relay forwards TCP connections to a target, master to replica; when
// hold is set it drops what the target sends instead.
type relay struct {
	addr string
	hold atomic.Bool
}

// startRelay listens on a loopback port and relays each connection to
// target until the test ends.
func startRelay(t testing.TB, target string) *relay {
	t.Helper()
	r := &relay{}
	r.addr = Relay(t, target, func(fromTarget bool, _ int) (time.Duration, bool) {
		return 0, fromTarget && r.hold.Load()
	})
	return r
}

// Relay listens on a loopback port and forwards each connection to
// target, both ways, until the test ends, and returns its address. Each
// chunk read is first given to pass, with its direction (fromTarget) and
// its number in that direction of its connection (from 0): pass says how
// long to hold it before it is written on, or to drop it.
func Relay(t testing.TB, target string, pass func(fromTarget bool, n int) (delay time.Duration, drop bool)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn, fromTarget bool) {
		defer wg.Done()
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 32<<10)
		for n := 0; ; n++ {
			m, err := src.Read(buf)
			if m > 0 {
				delay, drop := pass(fromTarget, n)
				time.Sleep(delay)
				if !drop {
					if _, err := dst.Write(buf[:m]); err != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go pipe(u, c, false)
			go pipe(c, u, true)
		}
	}()
	return ln.Addr().String()
}

// KillMaster fails the master over to the replica the way a crash does:
// it waits until the replica acknowledged every write the master took
// (WAIT), kills the master, and waits until the sentinel has promoted the
// replica and the replica answers as master. Master is the replica
// afterwards, and Replica nil.
func (s *Sentinel) KillMaster(t testing.TB) {
	t.Helper()
	if s.Replica == nil {
		t.Fatal("KillMaster: no replica (StartSentinelReplicated)")
	}
	mc := redis.NewClient(&redis.Options{Addr: s.Master.Addr, DisableIdentity: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	n, err := mc.Do(ctx, "WAIT", 1, 20000).Int()
	cancel()
	mc.Close()
	if err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d replicas acknowledged, %v", n, err)
	}
	s.Master.Stop()
	waitFor(t, 90*time.Second, "the sentinel to promote "+s.Replica.Addr, func() error {
		if err := sentinelNames(s.Sentinel.Addr, s.MasterName, s.Replica.Addr); err != nil {
			return err
		}
		return infoHas(s.Replica.Addr, "replication", "role:master")
	})
	s.Master, s.Replica = s.Replica, nil
}

// sentinelNames reports nil when the sentinel at addr names want as
// master name's address.
func sentinelNames(addr, name, want string) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(context.Background(), name).Result()
	if err != nil {
		return err
	}
	if net.JoinHostPort(a[0], a[1]) != want {
		return fmt.Errorf("sentinel names master %v, want %s", a, want)
	}
	return nil
}

// infoHas reports nil when INFO section of the server at addr has line.
func infoHas(addr, section, line string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer rc.Close()
	info, err := rc.Info(context.Background(), section).Result()
	if err != nil {
		return err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if l == line {
			return nil
		}
	}
	return fmt.Errorf("INFO %s has no %q", section, line)
}

// TLSRedis is a redis-server that accepts only TLS connections from
// clients with a certificate of the test's CA, and only the ACL user
// User with Password.
type TLSRedis struct {
	*Redis
	// CAFile, CertFile and KeyFile are PEM files: the CA that signed the
	// server's certificate, and a client certificate it signed with its
	// key.
	CAFile, CertFile, KeyFile string
	User, Password            string
}

// URL returns the rediss:// URL of the server with the ACL user's
// credentials.
func (r *TLSRedis) URL() string {
	return "rediss://" + r.User + ":" + r.Password + "@" + r.Addr + "/0"
}

// StartTLSRedis creates a CA, a server certificate for 127.0.0.1 and a
// client certificate (crypto/x509), and starts redis-server with
// --tls-port only (no plain port), client certificates required, and the
// default user off in favour of one ACL user.
func StartTLSRedis(t testing.TB) *TLSRedis {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "gemini-proxy test CA", true)
	srvCert, srvKey := newCert(t, ca, caKey, "127.0.0.1", false)
	cliCert, cliKey := newCert(t, ca, caKey, "gemini-proxy client", false)
	r := &TLSRedis{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem"),
		User: "proxy", Password: "tls-acl-password"}
	writePEM(t, r.CAFile, "CERTIFICATE", ca.Raw)
	writePEM(t, r.CertFile, "CERTIFICATE", cliCert.Raw)
	writePEM(t, r.KeyFile, "PRIVATE KEY", marshalKey(t, cliKey))
	sc, sk := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	writePEM(t, sc, "CERTIFICATE", srvCert.Raw)
	writePEM(t, sk, "PRIVATE KEY", marshalKey(t, srvKey))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	pair, err := tls.LoadX509KeyPair(r.CertFile, r.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.Redis = startServer(t, port, func() error {
		rc := redis.NewClient(&redis.Options{Addr: addr, Username: r.User, Password: r.Password, DisableIdentity: true,
			TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
		defer rc.Close()
		return rc.Ping(context.Background()).Err()
	}, "--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", sc, "--tls-key-file", sk,
		"--tls-ca-cert-file", r.CAFile, "--tls-auth-clients", "yes",
		"--user", "default", "off", "--user", r.User, "on", ">"+r.Password, "~*", "+@all")
	return r
}

// newCert returns a certificate for name signed by parent (self-signed
// when parent is nil) and its key.
func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func marshalKey(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// redisCLI returns the path of redis-cli, or skips (fails under CI).
func redisCLI(t testing.TB) string {
	t.Helper()
	redisBin(t)
	bin, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-cli not found under CI (.ci/run installs redis-server, which brings redis-tools): %v", err)
		}
		t.Skip("redis-cli not installed (apt-get install redis-tools)")
	}
	return bin
}

// waitFor calls check until it returns nil, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
