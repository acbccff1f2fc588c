//go:build unix

package testsvc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx(t), "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func TestPostgresKillRestartStop(t *testing.T) {
	pg := StartPostgres(t)
	port := pg.Port()
	if want := "postgres://postgres@127.0.0.1:"; !strings.HasPrefix(pg.DSN(), want) || !strings.HasSuffix(pg.DSN(), "/postgres?sslmode=disable") {
		t.Fatalf("DSN() = %q, want %s<port>/postgres?sslmode=disable", pg.DSN(), want)
	}

	conn := connect(t, pg.DSN())
	var version int
	if err := conn.QueryRow(ctx(t), "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < MinPostgresMajor*10000 {
		t.Fatalf("server_version_num = %d, want ≥ %d", version, MinPostgresMajor*10000)
	}
	var fsync string
	if err := conn.QueryRow(ctx(t), "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Fatalf("SHOW fsync = %q, %v; want off", fsync, err)
	}
	if _, err := conn.Exec(ctx(t), "CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}

	// Kill: the open connection breaks, committed rows survive crash recovery.
	pid := pg.proc.pid
	children := childrenOf(pid)
	if runtime.GOOS == "linux" && len(children) == 0 {
		t.Fatal("no postgres server processes found under the postmaster")
	}
	pg.Kill()
	if err := conn.Ping(ctx(t)); err == nil {
		t.Fatal("ping on a connection to a killed server succeeded")
	}
	for _, c := range children {
		if c.alive() {
			t.Errorf("server process %d outlived Kill", c.pid)
		}
	}
	if c, err := pgx.Connect(ctx(t), pg.DSN()); err == nil {
		c.Close(context.Background())
		t.Fatal("connected to a killed server")
	}
	pg.Kill() // killing a dead server does nothing

	pg.Restart()
	if pg.Port() != port {
		t.Fatalf("port after Restart = %d, want %d", pg.Port(), port)
	}
	conn = connect(t, pg.DSN())
	if n := count(t, conn); n != 2 {
		t.Fatalf("rows after Kill+Restart = %d, want 2", n)
	}
	if _, err := conn.Exec(ctx(t), "INSERT INTO items VALUES (3)"); err != nil {
		t.Fatal(err)
	}

	// Stop is clean; Restart of a stopped server brings the data back.
	pg.Stop()
	if err := conn.Ping(ctx(t)); err == nil {
		t.Fatal("ping on a connection to a stopped server succeeded")
	}
	if !strings.Contains(logTail(pg.log, 0, 1<<20), "database system is shut down") {
		t.Errorf("no clean shutdown in the server log:\n%s", logTail(pg.log, 0, 2048))
	}
	pg.Stop() // stopping a stopped server does nothing
	pg.Restart()
	conn = connect(t, pg.DSN())
	if n := count(t, conn); n != 3 {
		t.Fatalf("rows after Stop+Restart = %d, want 3", n)
	}

	// Restart of a running server stops it first.
	pg.Restart()
	if n := count(t, connect(t, pg.DSN())); n != 3 {
		t.Fatalf("rows after a running Restart = %d, want 3", n)
	}
}

func TestPostgresRolesAndDatabases(t *testing.T) {
	pg := StartPostgres(t)
	dbDSN := pg.CreateDatabase(t, "quota test")
	app := pg.CreateRole(t, "app", "s3cret'pw")
	pg.Exec(t, "CREATE TABLE t (v int)")
	pg.Exec(t, "GRANT SELECT, INSERT ON t TO app")

	conn := connect(t, app)
	if _, err := conn.Exec(ctx(t), "INSERT INTO t VALUES ($1)", 7); err != nil {
		t.Fatalf("granted INSERT: %v", err)
	}
	_, err := conn.Exec(ctx(t), "DELETE FROM t")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("DELETE as least-privilege role: err = %v, want insufficient_privilege (42501)", err)
	}

	// Roles other than the superuser must give their password.
	if c, err := pgx.Connect(ctx(t), pg.DSNFor("app", "wrong", "postgres")); err == nil {
		c.Close(context.Background())
		t.Fatal("connected with a wrong password")
	}
	if c, err := pgx.Connect(ctx(t), pg.DSNFor("app", "", "postgres")); err == nil {
		c.Close(context.Background())
		t.Fatal("connected without a password")
	}

	var db string
	if err := connect(t, dbDSN).QueryRow(ctx(t), "SELECT current_database()").Scan(&db); err != nil || db != "quota test" {
		t.Fatalf("current_database() = %q, %v", db, err)
	}
}

// Servers started side by side get their own ports and directories, and
// cleanup leaves no process and no directory behind.
func TestParallelStartsAndCleanup(t *testing.T) {
	var (
		mu       sync.Mutex
		procs    []*proc
		children []procID
		dirs     []string
		addrs    = map[string]bool{}
	)
	t.Run("group", func(t *testing.T) {
		for range 2 {
			t.Run("both", func(t *testing.T) {
				t.Parallel()
				pg := StartPostgres(t)
				rd := StartRedis(t)
				pg.Exec(t, "SELECT 1")
				c := redis.NewClient(&redis.Options{Addr: rd.Addr()})
				defer c.Close()
				if err := c.Ping(ctx(t)).Err(); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				procs = append(procs, pg.proc, rd.proc)
				children = append(children, childrenOf(pg.proc.pid)...)
				dirs = append(dirs, pg.dir, rd.dir)
				addrs[fmt.Sprint(pg.Port())] = true
				addrs[rd.Addr()] = true
			})
		}
	})
	if len(procs) != 4 || len(addrs) != 4 {
		t.Fatalf("recorded %d servers on %d distinct addresses, want 4 and 4", len(procs), len(addrs))
	}
	for _, p := range procs {
		if !p.exited {
			t.Errorf("server process %d not reaped by cleanup", p.pid)
		}
	}
	for _, c := range children {
		if c.alive() {
			t.Errorf("postgres process %d still running after cleanup", c.pid)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("directory %s still there after cleanup (%v)", d, err)
		}
	}
}

func TestRedisKillRestartStop(t *testing.T) {
	rd := StartRedis(t)
	addr := rd.Addr()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", addr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx(t), "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	for param, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		if m, err := c.ConfigGet(ctx(t), param).Result(); err != nil || m[param] != want {
			t.Fatalf("CONFIG GET %s = %v, %v; want %q", param, m, err, want)
		}
	}

	rd.Kill()
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING to a killed server succeeded")
	}
	rd.Kill() // killing a dead server does nothing

	rd.Restart()
	if rd.Addr() != addr {
		t.Fatalf("Addr() after Restart = %q, want %q", rd.Addr(), addr)
	}
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx(t), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil (nothing is persisted)", err)
	}

	rd.Stop()
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING to a stopped server succeeded")
	}
	rd.Stop()
	rd.Restart()
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Stop+Restart: %v", err)
	}
}

// TestRedisTLS: a TLS-only server answers clients that trust its CA and
// present the client certificate, refuses a client without one (client
// certificates required), a client that trusts another CA, and plain TCP;
// it stays TLS-only across Restart.
func TestRedisTLS(t *testing.T) {
	rd := StartRedisTLS(t, RedisTLSOptions{RequireClientCert: true})
	if !strings.HasPrefix(rd.URL(), "rediss://127.0.0.1:") || rd.TLS() == nil {
		t.Fatalf("URL %q, TLS %v", rd.URL(), rd.TLS())
	}
	ping := func(tc *tls.Config) error {
		c := redis.NewClient(&redis.Options{Addr: rd.Addr(), TLSConfig: tc, MaxRetries: -1, DialTimeout: 2 * time.Second})
		defer c.Close()
		return c.Ping(ctx(t)).Err()
	}
	if err := ping(rd.ClientTLS()); err != nil {
		t.Fatalf("trusted client with a certificate: %v", err)
	}
	noCert := rd.ClientTLS()
	noCert.Certificates = nil
	if err := ping(noCert); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	other := NewCA(t, "other CA")
	if err := ping(&tls.Config{RootCAs: other.Pool(), Certificates: rd.ClientTLS().Certificates}); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("client trusting another CA: %v", err)
	}
	if err := ping(nil); err == nil {
		t.Fatal("plain TCP was served")
	}
	for _, f := range []string{rd.TLS().CA.File, rd.TLS().Server.KeyFile, rd.TLS().Client.CertFile} {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
	if fi, _ := os.Stat(rd.TLS().Server.KeyFile); fi.Mode().Perm() != 0o600 {
		t.Fatalf("server key mode %v", fi.Mode())
	}
	rd.Restart()
	if err := ping(rd.ClientTLS()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	if err := ping(nil); err == nil {
		t.Fatal("plain TCP was served after Restart")
	}
	if StartRedis(t).TLS() != nil || StartRedis(t).ClientTLS() != nil {
		t.Fatal("a plain server has TLS material")
	}
}

func TestMissingBinariesNameThePackage(t *testing.T) {
	_, err := pickPostgres([]string{t.TempDir(), filepath.Join(t.TempDir(), "nonexistent")})
	if err == nil || !strings.Contains(err.Error(), "Debian package postgresql") {
		t.Fatalf("pickPostgres with no binaries: err = %v, want advice naming the Debian package postgresql", err)
	}

	t.Setenv(RedisServerEnv, "")
	notFound := func(string) (string, error) { return "", errors.New("not found") }
	if isExecutable("/usr/bin/redis-server") {
		// The Debian fallback finds the installed binary; check the
		// message through the explicit override instead.
		t.Setenv(RedisServerEnv, filepath.Join(t.TempDir(), "redis-server"))
	}
	_, err = findRedis(notFound)
	if err == nil || !strings.Contains(err.Error(), "Debian package redis-server") {
		t.Fatalf("findRedis with no binary: err = %v, want advice naming the Debian package redis-server", err)
	}
}

func TestPostmasterReady(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "postmaster.pid")
	write := func(s string) {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("42\n/d\n1700000000\n5432\n/tmp\n127.0.0.1\n  1 2\nstarting\n")
	if postmasterReady(f, 42, false) {
		t.Error("ready while starting")
	}
	write("42\n/d\n1700000000\n5432\n/tmp\n127.0.0.1\n  1 2\nready   \n")
	if !postmasterReady(f, 42, false) {
		t.Error("not ready when ready")
	}
	if postmasterReady(f, 43, false) {
		t.Error("ready for a pid file left by another (killed) postmaster")
	}
}

// Directories whose owning test process died are removed by the next
// process's sweep; a live owner's are kept.
func TestSweepRemovesDirectoriesOfDeadOwners(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	const prefix = "bulwark-sweeptest-"
	mk := func(owner string) string {
		dir, err := os.MkdirTemp("", prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	mine := mk(self().String())
	orphan := mk(procID{pid: dead.Process.Pid}.String())
	fresh, err := os.MkdirTemp("", prefix) // no owner file yet: being made
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fresh) })

	sweepStale(prefix)
	for dir, wantKept := range map[string]bool{mine: true, orphan: false, fresh: true} {
		_, err := os.Stat(dir)
		if kept := err == nil; kept != wantKept {
			t.Errorf("%s: kept = %v, want %v", dir, kept, wantKept)
		}
	}
}
