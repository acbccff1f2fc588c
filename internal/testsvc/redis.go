//go:build unix

package testsvc

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RedisServerEnv, when set, names the redis-server binary to use instead
// of searching PATH.
const RedisServerEnv = "BULWARK_REDIS_SERVER"

const (
	redisStartTimeout = 2 * time.Minute // generous for a busy machine, as pgStartTimeout
	redisStopGrace    = 10 * time.Second
)

// Redis is a private redis-server started for one test, without
// persistence. Its methods are safe for concurrent use; failures of Stop,
// Kill and Restart are reported with t.Errorf so they may be called from
// any goroutine.
type Redis struct {
	t   testing.TB
	bin string
	dir string // working directory, pid file and log; removed on cleanup
	log string

	extra   []string  // more redis-server arguments (cluster mode)
	busPort int       // cluster bus port, 0 when not in cluster mode
	tls     *RedisTLS // nil: plain TCP

	mu   sync.Mutex
	port int
	proc *proc
}

// StartRedis starts redis-server on a free port of 127.0.0.1 with
// persistence off (no snapshots, no append-only file) in a fresh temporary
// directory and waits until it answers PING. t.Cleanup stops it and
// removes the directory. A missing binary fails the test with the name of
// the Debian package to install; it never skips.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return startRedis(t, false, nil)
}

// RedisTLSOptions configure [StartRedisTLS].
type RedisTLSOptions struct {
	// RequireClientCert makes the server refuse clients that present no
	// certificate signed by its CA (tls-auth-clients yes); otherwise a
	// client certificate is optional.
	RequireClientCert bool
}

// RedisTLS is the TLS side of a server started by [StartRedisTLS]: a
// throwaway CA made for it, the server's certificate (for 127.0.0.1, ::1
// and localhost) and a client certificate, all signed by that CA.
type RedisTLS struct {
	CA                *CA
	Server, Client    *Issued
	RequireClientCert bool
}

// StartRedisTLS is [StartRedis] for a server that speaks only TLS (no
// plain port): a fresh CA and certificates are generated in Go for it, in
// the server's directory. Connect with [Redis.URL] (rediss://) and a TLS
// configuration that trusts TLS().CA (see [Redis.ClientTLS]).
func StartRedisTLS(t testing.TB, o RedisTLSOptions) *Redis {
	t.Helper()
	return startRedis(t, false, &o)
}

func startRedis(t testing.TB, cluster bool, tlsOpts *RedisTLSOptions) *Redis {
	t.Helper()
	began := time.Now()
	bin, err := findRedis(exec.LookPath)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := makeServerDir("bulwark-redis-")
	if err != nil {
		t.Fatal(err)
	}
	r := &Redis{t: t, bin: bin, dir: dir, log: filepath.Join(dir, "redis.log")}
	t.Cleanup(r.cleanup)
	if tlsOpts != nil {
		if r.tls, err = makeRedisTLS(dir, *tlsOpts); err != nil {
			t.Fatal(err)
		}
	}
	if cluster {
		bus, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		r.busPort = bus
		r.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "5000"}
	}
	r.mu.Lock()
	err = r.startLocked(true)
	port := r.port
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	mode := ""
	if r.tls != nil {
		mode = " (TLS only)"
	}
	t.Logf("testsvc: redis-server on 127.0.0.1:%d%s ready in %v", port, mode, time.Since(began).Round(time.Millisecond))
	return r
}

func makeRedisTLS(dir string, o RedisTLSOptions) (*RedisTLS, error) {
	ca, err := newCA(dir, "bulwark testsvc redis CA")
	if err != nil {
		return nil, err
	}
	srv, err := ca.Issue(dir, "server", true)
	if err != nil {
		return nil, err
	}
	cli, err := ca.Issue(dir, "client", false)
	if err != nil {
		return nil, err
	}
	return &RedisTLS{CA: ca, Server: srv, Client: cli, RequireClientCert: o.RequireClientCert}, nil
}

// TLS returns the server's TLS material, nil for a plain server.
func (r *Redis) TLS() *RedisTLS { return r.tls }

// ClientTLS returns a client configuration for a TLS server: it trusts
// only the server's CA and presents the client certificate. It is nil
// for a plain server.
func (r *Redis) ClientTLS() *tls.Config {
	if r.tls == nil {
		return nil
	}
	return &tls.Config{RootCAs: r.tls.CA.Pool(), Certificates: []tls.Certificate{r.tls.Client.Cert}, MinVersion: tls.VersionTLS12}
}

// URL returns redis://127.0.0.1:PORT, or rediss:// for a TLS server.
func (r *Redis) URL() string {
	if r.tls != nil {
		return "rediss://" + r.Addr()
	}
	return "redis://" + r.Addr()
}

// Addr returns "127.0.0.1:PORT". It stays the same across Restart.
func (r *Redis) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "127.0.0.1:" + strconv.Itoa(r.port)
}

// Stop shuts the server down (SIGTERM) and waits until it has exited.
// Stopping a stopped server does nothing.
func (r *Redis) Stop() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(); err != nil {
		r.t.Errorf("%v", err)
	}
}

// Kill crashes the server with SIGKILL and waits until it is gone, so open
// connections break at once. Killing a stopped server does nothing.
func (r *Redis) Kill() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.poll() {
		return
	}
	r.proc.signal(syscall.SIGKILL)
	if !r.proc.wait(time.Minute) {
		r.t.Errorf("testsvc: redis-server on port %d survived SIGKILL", r.port)
	}
}

// Restart starts the server again on the same port and waits until it
// answers PING. A running server is first stopped. Nothing is persisted, so
// the restarted server is empty, like a cache node that came back.
func (r *Redis) Restart() {
	r.t.Helper()
	began := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(); err != nil {
		r.t.Errorf("%v", err)
		return
	}
	if err := r.startLocked(false); err != nil {
		r.t.Errorf("%v", err)
		return
	}
	r.t.Logf("testsvc: redis-server restarted on 127.0.0.1:%d in %v", r.port, time.Since(began).Round(time.Millisecond))
}

func (r *Redis) stopLocked() error {
	if r.proc == nil || r.proc.poll() {
		return nil
	}
	if !r.proc.stop(syscall.SIGTERM, redisStopGrace) {
		return fmt.Errorf("testsvc: redis-server on port %d did not shut down within %v; killed it:\n%s",
			r.port, redisStopGrace, logTail(r.log, 0, 2048))
	}
	return nil
}

func (r *Redis) cleanup() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(); err != nil {
		r.t.Errorf("%v", err)
	}
	if r.t.Failed() {
		r.t.Logf("testsvc: redis-server log (tail):\n%s", logTail(r.log, 0, 4096))
	}
	if err := os.RemoveAll(r.dir); err != nil {
		r.t.Errorf("testsvc: remove %s: %v", r.dir, err)
	}
}

// startLocked starts redis-server and waits for PING. With newPort it picks
// a free port first and again whenever the port turns out to be taken;
// without, it keeps r.port and retries until the deadline.
func (r *Redis) startLocked(newPort bool) error {
	deadline := time.Now().Add(redisStartTimeout)
	for attempt := 1; ; attempt++ {
		if newPort && (r.port == 0 || attempt > 1) {
			port, err := freePort()
			if err != nil {
				return err
			}
			r.port = port
		}
		err := r.startOnce(deadline)
		if err == nil {
			return nil
		}
		var se *startErr
		if !errors.As(err, &se) || !se.portInUse || time.Now().After(deadline) || (newPort && attempt >= 5) {
			return err
		}
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
}

func (r *Redis) startOnce(deadline time.Time) error {
	from := logSize(r.log)
	ports := []string{"--port", strconv.Itoa(r.port)}
	if t := r.tls; t != nil {
		auth := "optional"
		if t.RequireClientCert {
			auth = "yes"
		}
		ports = []string{"--port", "0", "--tls-port", strconv.Itoa(r.port),
			"--tls-cert-file", t.Server.CertFile, "--tls-key-file", t.Server.KeyFile,
			"--tls-ca-cert-file", t.CA.File, "--tls-auth-clients", auth}
	}
	pr, err := startProc(r.bin, append(append(ports,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--daemonize", "no",
		"--pidfile", filepath.Join(r.dir, "redis.pid"),
		"--logfile", "", // stdout, which is the log file
	), r.extra...), r.dir, r.log, nil, syscall.SIGKILL)
	if err != nil {
		return fmt.Errorf("testsvc: start redis-server: %w", err)
	}
	r.proc = pr
	addr := "127.0.0.1:" + strconv.Itoa(r.port)
	for {
		if pr.poll() {
			out := logTail(r.log, from, 2048)
			return &startErr{
				msg:       fmt.Sprintf("testsvc: redis-server exited during start-up (%v) on port %d:\n%s", pr.status, r.port, out),
				portInUse: strings.Contains(out, "Address already in use") || strings.Contains(out, "Could not create server TCP listening socket"),
			}
		}
		if redisPing(addr, r.ClientTLS()) {
			return nil
		}
		if time.Now().After(deadline) {
			pr.stop(syscall.SIGKILL, time.Second)
			return fmt.Errorf("testsvc: redis-server on port %d not answering PING within %v:\n%s", r.port, redisStartTimeout, logTail(r.log, from, 2048))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// redisPing reports whether a Redis server at addr answers PING with PONG
// (a server still loading answers -LOADING), over TLS when tc is set.
func redisPing(addr string, tc *tls.Config) bool {
	var (
		c   net.Conn
		err error
	)
	if tc != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tc)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// findRedis locates redis-server: RedisServerEnv, then PATH, then the
// Debian location.
func findRedis(lookPath func(string) (string, error)) (string, error) {
	if p := os.Getenv(RedisServerEnv); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("testsvc: %s=%s is not an executable file: install the Debian package redis-server", RedisServerEnv, p)
	}
	if p, err := lookPath("redis-server"); err == nil {
		return p, nil
	}
	if isExecutable("/usr/bin/redis-server") {
		return "/usr/bin/redis-server", nil
	}
	return "", errors.New("testsvc: redis-server not found on PATH or in /usr/bin: install the Debian package redis-server (scripts/test does it when run as root)")
}

// RedisCluster is a Redis Cluster of private redis-server processes
// started for one test: masters only, every slot assigned, state ok.
type RedisCluster struct {
	// Nodes are the masters, each a [Redis] (Kill and Restart work per
	// node; a restarted node keeps its nodes.conf and rejoins).
	Nodes []*Redis
}

// StartRedisCluster starts n (3 to 16) redis-server processes with
// cluster mode on free ports of 127.0.0.1 (client and bus ports both
// random), joins them with redis-cli --cluster create as n masters
// without replicas, and waits until every node reports cluster_state:ok.
// t.Cleanup stops them. A missing redis-cli fails the test with the
// Debian package to install (redis-tools).
func StartRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	if n < 3 || n > 16 {
		t.Fatalf("testsvc: StartRedisCluster: %d nodes; a cluster needs 3 to 16 masters", n)
	}
	began := time.Now()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("testsvc: redis-cli not found on PATH: install the Debian package redis-tools")
	}
	c := &RedisCluster{}
	args := []string{"--cluster", "create"}
	for range n {
		r := startRedis(t, true, nil)
		c.Nodes = append(c.Nodes, r)
		args = append(args, r.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.Command(cli, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testsvc: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(redisStartTimeout)
	for _, r := range c.Nodes {
		for !redisClusterOK(r.Addr()) {
			if time.Now().After(deadline) {
				t.Fatalf("testsvc: redis cluster node %s not in state ok within %v:\n%s", r.Addr(), redisStartTimeout, logTail(r.log, 0, 2048))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("testsvc: redis cluster of %d masters ready in %v", n, time.Since(began).Round(time.Millisecond))
	return c
}

// Addrs returns the nodes' "127.0.0.1:PORT" addresses.
func (c *RedisCluster) Addrs() []string {
	var out []string
	for _, r := range c.Nodes {
		out = append(out, r.Addr())
	}
	return out
}

// URL returns redis://first?addr=second&addr=third..., the form
// redis.ParseClusterURL reads.
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			u += "?addr=" + a
		} else {
			u += "&addr=" + a
		}
	}
	return u
}

// redisClusterOK reports whether the node at addr answers CLUSTER INFO
// with cluster_state:ok.
func redisClusterOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("CLUSTER INFO\r\n")); err != nil {
		return false
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil || len(head) < 2 || head[0] != '$' {
		return false
	}
	size, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || size <= 0 || size > 1<<16 {
		return false
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return false
	}
	return strings.Contains(string(body), "cluster_state:ok")
}
