//go:build unix

package testsvc

import (
	"bufio"
	"errors"
	"fmt"
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
	redisStartTimeout = 30 * time.Second
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
	r.mu.Lock()
	err = r.startLocked(true)
	port := r.port
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("testsvc: redis-server on 127.0.0.1:%d ready in %v", port, time.Since(began).Round(time.Millisecond))
	return r
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
	pr, err := startProc(r.bin, []string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--daemonize", "no",
		"--pidfile", filepath.Join(r.dir, "redis.pid"),
		"--logfile", "", // stdout, which is the log file
	}, r.dir, r.log, nil, syscall.SIGKILL)
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
		if redisPing(addr) {
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
// (a server still loading answers -LOADING).
func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
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
