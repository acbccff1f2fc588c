//go:build unix

package testsvc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// MinPostgresMajor is the oldest PostgreSQL major version the tests accept.
const MinPostgresMajor = 15

// PostgresBinDirEnv, when set, names the directory holding the postgres and
// initdb binaries to use instead of searching PATH and
// /usr/lib/postgresql/*/bin.
const PostgresBinDirEnv = "BULWARK_PG_BINDIR"

const (
	// pgStartTimeout bounds waiting for a real server to accept
	// connections: generous, because at load average 30-40 on two CPUs
	// (scripts/test-under-load beside -race builds) an initdb plus start
	// was seen to take over a minute. A server that never comes up still
	// fails the test, with its log.
	pgStartTimeout = 3 * time.Minute
	pgStopGrace    = 30 * time.Second
	pgSuperuser    = "postgres"
	pgOSUser       = "postgres" // the OS account that runs the server when tests run as root
	// pgTemplateVersion changes whenever pgConf, pgHBA or the initdb flags
	// change, so a cached template made with the old ones is not reused.
	pgTemplateVersion = "3"
)

// pgConf is appended to the template's postgresql.conf. The port and the
// socket directory are per server and passed on the command line.
const pgConf = `
# --- bulwark internal/testsvc: a throwaway server for tests ---
listen_addresses = '127.0.0.1'
max_connections = 200
shared_buffers = 32MB
huge_pages = off
# Durability against a machine crash is pointless here. synchronous_commit
# stays on: with fsync off it costs one write(2) per commit, and it makes a
# committed transaction survive Kill, as it would a real server crash.
fsync = off
full_page_writes = off
synchronous_commit = on
max_parallel_workers_per_gather = 0
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] '
log_timezone = 'UTC'
timezone = 'UTC'
lc_messages = 'C'
`

// pgHBA trusts the superuser on loopback and the local socket, and makes
// every other role authenticate with its password, as a real deployment's
// least-privilege runtime role would.
const pgHBA = `# bulwark internal/testsvc
local all all                trust
host  all postgres 127.0.0.1/32 trust
host  all all      127.0.0.1/32 scram-sha-256
`

// Postgres is a private PostgreSQL server started for one test. Its methods
// are safe for concurrent use; failures of Stop, Kill and Restart are
// reported with t.Errorf so they may be called from any goroutine.
type Postgres struct {
	t    testing.TB
	bin  pgBinaries
	cred *syscall.Credential // non-nil when the server runs as the postgres OS user
	dir  string              // owns everything below; removed on cleanup
	data string              // the data directory (dir/data)
	log  string              // server output (dir/postgres.log)

	standby bool // started as a streaming replica (status "standby")

	mu   sync.Mutex
	port int
	proc *proc // nil or exited when the server is down
}

// StartPostgres starts a PostgreSQL server (≥ 15) on a free port of
// 127.0.0.1 in a fresh temporary directory and waits until it accepts
// connections. t.Cleanup stops it and removes the directory. A missing
// server binary fails the test with the name of the Debian package to
// install; it never skips.
//
// The server has fsync off and trusts the superuser "postgres" (see
// [Postgres.DSN]); other roles authenticate with a password (see
// [Postgres.CreateRole]). The data directory is copied from a template
// cluster made by initdb once per machine and server version, so a start
// takes well under a second on an idle machine.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	began := time.Now()
	bin, err := findPostgres()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := postgresCredential()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := postgresTemplate(bin, cred)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := makeServerDir("bulwark-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &Postgres{t: t, bin: bin, cred: cred, dir: dir, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log")}
	t.Cleanup(p.cleanup)
	if err := chownForServer(dir, cred); err != nil {
		t.Fatal(err)
	}
	// cp -a keeps the owner (the postgres OS user when we are root) and
	// the 0700 mode PostgreSQL insists on.
	if out, err := exec.Command("cp", "-a", filepath.Join(tmpl, "data"), p.data).CombinedOutput(); err != nil {
		t.Fatalf("testsvc: copy the template cluster: %v: %s", err, out)
	}
	p.mu.Lock()
	err = p.startLocked(true)
	port := p.port
	p.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("testsvc: PostgreSQL %d on 127.0.0.1:%d ready in %v", bin.major, port, time.Since(began).Round(time.Millisecond))
	return p
}

// DSN returns the connection URL of the superuser "postgres" on the
// database "postgres": postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (p *Postgres) DSN() string {
	return p.DSNFor(pgSuperuser, "", "postgres")
}

// DSNFor returns a connection URL for user with password (none if empty)
// on database, over TCP to 127.0.0.1 without TLS.
func (p *Postgres) DSNFor(user, password, database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(user),
		Host:     fmt.Sprintf("127.0.0.1:%d", p.Port()),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	if password != "" {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// Port returns the TCP port the server listens on. It stays the same
// across Restart.
func (p *Postgres) Port() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.port
}

// Exec runs sql as the superuser on the database "postgres" and fails t if
// it returns an error.
func (p *Postgres) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	p.execOn(t, p.DSN(), sql, args...)
}

// CreateDatabase creates database name owned by the superuser and returns
// the superuser's DSN for it.
func (p *Postgres) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	p.Exec(t, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return p.DSNFor(pgSuperuser, "", name)
}

// CreateRole creates a login role with password and no other privileges
// (no superuser, no CREATEDB, no CREATEROLE) and returns its DSN on the
// database "postgres". Grant it what the test needs with Exec.
func (p *Postgres) CreateRole(t testing.TB, name, password string) string {
	t.Helper()
	if password == "" || strings.ContainsRune(password, 0) {
		t.Fatalf("testsvc: CreateRole %q: the password must be non-empty and free of NUL", name)
	}
	p.Exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD '%s'",
		pgx.Identifier{name}.Sanitize(), strings.ReplaceAll(password, "'", "''")))
	return p.DSNFor(name, password, "postgres")
}

func (p *Postgres) execOn(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("testsvc: connect to postgres: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("testsvc: exec %q: %v", sql, err)
	}
}

// Stop shuts the server down cleanly (a "fast" shutdown: open sessions are
// terminated, a checkpoint is written) and waits until it has exited.
// Stopping a stopped server does nothing.
func (p *Postgres) Stop() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.stopLocked(); err != nil {
		p.t.Errorf("%v", err)
	}
}

// Kill crashes the server: SIGKILL to the postmaster, then to every server
// process that outlived it, and waits until they are all gone, so open
// connections break at once. Committed transactions survive (the server
// runs with synchronous_commit on); Restart runs crash recovery. Killing a
// stopped server does nothing.
func (p *Postgres) Kill() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.poll() {
		return
	}
	children := childrenOf(p.proc.pid)
	p.proc.signal(syscall.SIGKILL)
	if !p.proc.wait(time.Minute) {
		p.t.Errorf("testsvc: postgres on port %d survived SIGKILL", p.port)
		return
	}
	if !killAll(children, time.Minute) {
		p.t.Errorf("testsvc: postgres server processes on port %d survived SIGKILL", p.port)
	}
}

// Restart starts the server again on the same port and data directory and
// waits until it accepts connections. A running server is first stopped
// cleanly. Data committed before a Stop or Kill is still there.
func (p *Postgres) Restart() {
	p.t.Helper()
	began := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.stopLocked(); err != nil {
		p.t.Errorf("%v", err)
		return
	}
	if err := p.startLocked(false); err != nil {
		p.t.Errorf("%v", err)
		return
	}
	p.t.Logf("testsvc: PostgreSQL restarted on 127.0.0.1:%d in %v", p.port, time.Since(began).Round(time.Millisecond))
}

func (p *Postgres) stopLocked() error {
	if p.proc == nil || p.proc.poll() {
		return nil
	}
	children := childrenOf(p.proc.pid)
	clean := p.proc.stop(syscall.SIGINT, pgStopGrace)
	killAll(children, time.Minute) // normally all gone already
	if !clean {
		return fmt.Errorf("testsvc: postgres on port %d did not shut down within %v; killed it:\n%s",
			p.port, pgStopGrace, logTail(p.log, 0, 2048))
	}
	return nil
}

func (p *Postgres) cleanup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !p.proc.poll() {
		children := childrenOf(p.proc.pid)
		if !p.proc.stop(syscall.SIGINT, pgStopGrace) {
			p.t.Errorf("testsvc: postgres on port %d did not shut down within %v; killed it", p.port, pgStopGrace)
		}
		killAll(children, time.Minute)
	}
	if p.t.Failed() {
		p.t.Logf("testsvc: PostgreSQL log (tail):\n%s", logTail(p.log, 0, 4096))
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.t.Errorf("testsvc: remove %s: %v", p.dir, err)
	}
}

// startErr is a failed start attempt; retryable ones are tried again.
type startErr struct {
	msg       string
	portInUse bool // pick another port (first start) or wait (restart)
	retryable bool // something of the previous server is still going away
}

func (e *startErr) Error() string { return e.msg }

// startLocked starts the postmaster and waits until it is ready. With
// newPort it picks a free port first and again whenever the port turns out
// to be taken; without, it keeps p.port and retries until the deadline.
func (p *Postgres) startLocked(newPort bool) error {
	deadline := time.Now().Add(pgStartTimeout)
	for attempt := 1; ; attempt++ {
		if newPort && (p.port == 0 || attempt > 1) {
			port, err := freePort()
			if err != nil {
				return err
			}
			p.port = port
		}
		err := p.startOnce(deadline)
		if err == nil {
			return nil
		}
		var se *startErr
		if !errors.As(err, &se) || !(se.portInUse || se.retryable) || time.Now().After(deadline) || (newPort && attempt >= 5) {
			return err
		}
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
}

func (p *Postgres) startOnce(deadline time.Time) error {
	from := logSize(p.log)
	pr, err := startProc(filepath.Join(p.bin.dir, "postgres"),
		[]string{"-D", p.data, "-p", strconv.Itoa(p.port), "-k", p.dir},
		p.dir, p.log, p.cred, syscall.SIGQUIT) // SIGQUIT: immediate shutdown of the whole server
	if err != nil {
		return fmt.Errorf("testsvc: start postgres: %w", err)
	}
	p.proc = pr
	pidFile := filepath.Join(p.data, "postmaster.pid")
	for {
		if pr.poll() {
			out := logTail(p.log, from, 2048)
			return &startErr{
				msg: fmt.Sprintf("testsvc: postgres exited during start-up (%v) on port %d:\n%s", pr.status, p.port, out),
				portInUse: strings.Contains(out, "could not bind") || strings.Contains(out, "Address already in use") ||
					strings.Contains(out, "could not create any TCP/IP sockets"),
				retryable: strings.Contains(out, "pre-existing shared memory block") || strings.Contains(out, "lock file"),
			}
		}
		if postmasterReady(pidFile, pr.pid, p.standby) {
			break
		}
		if time.Now().After(deadline) {
			pr.stop(syscall.SIGQUIT, 5*time.Second)
			return fmt.Errorf("testsvc: postgres on port %d not ready within %v:\n%s", p.port, pgStartTimeout, logTail(p.log, from, 2048))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The postmaster says it is ready; prove it over TCP like a client.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.dsnLocked())
	if err == nil {
		err = conn.Ping(ctx)
		conn.Close(context.Background())
	}
	if err != nil {
		pr.stop(syscall.SIGQUIT, 5*time.Second)
		return fmt.Errorf("testsvc: postgres on port %d is up but refuses connections: %w", p.port, err)
	}
	return nil
}

func (p *Postgres) dsnLocked() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", pgSuperuser, p.port)
}

// postmasterReady reports whether postmaster.pid was written by pid and its
// status line (the eighth) says "ready" (or "standby" for a replica).
func postmasterReady(pidFile string, pid int, standby bool) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return false
	}
	st := strings.TrimSpace(lines[7])
	return st == "ready" || standby && st == "standby"
}

// pgBinaries is a PostgreSQL installation: the directory holding postgres
// and initdb, and its version.
type pgBinaries struct {
	dir     string
	major   int
	version string // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
}

var (
	findPostgresOnce sync.Once
	foundPostgres    pgBinaries
	findPostgresErr  error
)

func findPostgres() (pgBinaries, error) {
	findPostgresOnce.Do(func() {
		var dirs []string
		if d := os.Getenv(PostgresBinDirEnv); d != "" {
			dirs = []string{d}
		} else {
			if path, err := exec.LookPath("postgres"); err == nil {
				if real, err := filepath.EvalSymlinks(path); err == nil {
					path = real
				}
				dirs = append(dirs, filepath.Dir(path))
			}
			globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
			dirs = append(dirs, globbed...)
		}
		foundPostgres, findPostgresErr = pickPostgres(dirs)
	})
	return foundPostgres, findPostgresErr
}

var pgVersionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// pickPostgres returns the newest installation among dirs that has both
// postgres and initdb, failing with install advice if there is none or it
// is older than MinPostgresMajor.
func pickPostgres(dirs []string) (pgBinaries, error) {
	var found []pgBinaries
	for _, dir := range dirs {
		if !isExecutable(filepath.Join(dir, "postgres")) || !isExecutable(filepath.Join(dir, "initdb")) {
			continue
		}
		out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
		if err != nil {
			continue
		}
		m := pgVersionRE.FindSubmatch(out)
		if m == nil {
			continue
		}
		major, _ := strconv.Atoi(string(m[1]))
		found = append(found, pgBinaries{dir: dir, major: major, version: strings.TrimSpace(string(out))})
	}
	if len(found) == 0 {
		return pgBinaries{}, fmt.Errorf("testsvc: PostgreSQL server binaries (postgres, initdb) not found in %s, on PATH or under /usr/lib/postgresql/*/bin: "+
			"install the Debian package postgresql (PostgreSQL ≥ %d; scripts/test does it when run as root)", strings.Join(dirs, ", "), MinPostgresMajor)
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].major > found[j].major })
	if found[0].major < MinPostgresMajor {
		return pgBinaries{}, fmt.Errorf("testsvc: %s in %s is too old: install the Debian package postgresql with PostgreSQL ≥ %d",
			found[0].version, found[0].dir, MinPostgresMajor)
	}
	return found[0], nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// postgresCredential returns the credential of the postgres OS user when
// the tests run as root (PostgreSQL refuses to run as root), else nil.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(pgOSUser)
	if err != nil {
		return nil, fmt.Errorf("testsvc: tests run as root, so PostgreSQL must run as the OS user %q, which does not exist (%v): install the Debian package postgresql, which creates it", pgOSUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testsvc: OS user %q has a non-numeric uid/gid %q/%q", pgOSUser, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// chownForServer hands dir to the server's OS user when it is not us.
func chownForServer(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("testsvc: hand %s to the %s OS user: %w", dir, pgOSUser, err)
	}
	return nil
}

var templateMu sync.Mutex

// postgresTemplate returns a directory whose "data" subdirectory is an
// initialized, configured, never started cluster to copy for each server.
// It is made once per machine, OS user, server version and configuration
// and kept in os.TempDir()/bulwark-testsvc-UID, because initdb takes
// seconds while a copy takes tens of milliseconds. Test processes racing to
// make it each build their own and the first rename wins.
func postgresTemplate(bin pgBinaries, cred *syscall.Credential) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	owner := "self"
	if cred != nil {
		owner = fmt.Sprintf("%d:%d", cred.Uid, cred.Gid)
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{pgTemplateVersion, bin.dir, bin.version, pgConf, pgHBA, owner}, "\x00")))
	final := filepath.Join(root, "pg-template-"+hex.EncodeToString(sum[:8]))
	// Mark the template used (its mtime is its last use), and drop half-made
	// templates of test processes that died making one and templates of
	// other server versions or settings nobody used for a day.
	now := time.Now()
	_ = os.Chtimes(final, now, now)
	others, _ := filepath.Glob(filepath.Join(root, "pg-t*"))
	for _, dir := range others {
		fi, err := os.Stat(dir)
		if err != nil || dir == final {
			continue
		}
		if age := now.Sub(fi.ModTime()); strings.HasPrefix(filepath.Base(dir), "pg-tmp-") && age > 10*time.Minute || age > 24*time.Hour {
			_ = os.RemoveAll(dir)
		}
	}
	if _, err := os.Stat(filepath.Join(final, "data", "PG_VERSION")); err == nil {
		return final, nil
	}
	tmp, err := os.MkdirTemp(root, "pg-tmp-")
	if err != nil {
		return "", fmt.Errorf("testsvc: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after a successful rename
	if err := chownForServer(tmp, cred); err != nil {
		return "", err
	}
	data := filepath.Join(tmp, "data")
	cmd := exec.Command(filepath.Join(bin.dir, "initdb"),
		"-D", data, "-U", pgSuperuser, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
		"--wal-segsize=1") // 1 MiB WAL segments: less to copy per server
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testsvc: initdb: %v:\n%s", err, out)
	}
	if err := appendFile(filepath.Join(data, "postgresql.conf"), pgConf); err != nil {
		return "", err
	}
	// Truncating keeps the file's owner and mode.
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(pgHBA), 0o600); err != nil {
		return "", fmt.Errorf("testsvc: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, statErr := os.Stat(filepath.Join(final, "data", "PG_VERSION")); statErr == nil {
			return final, nil // another test process won the race
		}
		return "", fmt.Errorf("testsvc: %w", err)
	}
	return final, nil
}

// cacheRoot returns os.TempDir()/bulwark-testsvc-UID, creating it. It must
// be ours (a shared /tmp is writable by everyone) and, when the server runs
// as another OS user, traversable by that user.
func cacheRoot() (string, error) {
	root := filepath.Join(os.TempDir(), fmt.Sprintf("bulwark-testsvc-%d", os.Geteuid()))
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("testsvc: %w", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return "", fmt.Errorf("testsvc: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("testsvc: %s is not a directory owned by uid %d and writable only by it; remove it", root, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o755 { // a umask may have cut the others' x bit
		if err := os.Chmod(root, 0o755); err != nil {
			return "", fmt.Errorf("testsvc: %w", err)
		}
	}
	return root, nil
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("testsvc: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("testsvc: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("testsvc: %w", err)
	}
	return nil
}
