//go:build unix

package testsvc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyName is the application_name a standby started by
// [StartPostgresStandby] connects with, and the primary's
// synchronous_standby_names.
const StandbyName = "bulwark_standby"

// StartPostgresStandby makes a synchronous streaming replica of primary:
// it lets the superuser replicate over loopback, takes a base backup with
// pg_basebackup (-X stream -R), starts the copy as a hot standby on a
// free port of 127.0.0.1, then sets synchronous_standby_names to it and
// synchronous_commit to remote_apply on the primary, and waits until the
// primary reports the standby as sync. From then on a commit returns only
// once the standby has applied it. t.Cleanup stops the standby and
// removes its directory.
func StartPostgresStandby(t testing.TB, primary *Postgres) *Postgres {
	t.Helper()
	began := time.Now()
	if err := appendFile(filepath.Join(primary.data, "pg_hba.conf"), "host replication postgres 127.0.0.1/32 trust\n"); err != nil {
		t.Fatal(err)
	}
	primary.Exec(t, "SELECT pg_reload_conf()")
	dir, err := makeServerDir("bulwark-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Postgres{t: t, bin: primary.bin, cred: primary.cred, dir: dir, data: filepath.Join(dir, "data"), log: filepath.Join(dir, "postgres.log"), standby: true}
	t.Cleanup(s.cleanup)
	if err := chownForServer(dir, s.cred); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(s.bin.dir, "pg_basebackup"), "-h", "127.0.0.1", "-p", fmt.Sprint(primary.Port()),
		"-U", pgSuperuser, "-D", s.data, "-X", "stream", "-R", "-c", "fast", "--no-sync")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testsvc: pg_basebackup: %v\n%s", err, out)
	}
	// Later lines win: name the standby for synchronous_standby_names.
	conninfo := fmt.Sprintf("\nprimary_conninfo = 'host=127.0.0.1 port=%d user=%s application_name=%s'\n", primary.Port(), pgSuperuser, StandbyName)
	if err := appendFile(filepath.Join(s.data, "postgresql.auto.conf"), conninfo); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(s.data, "postmaster.pid"))
	s.mu.Lock()
	err = s.startLocked(true)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	primary.Exec(t, "ALTER SYSTEM SET synchronous_standby_names = '"+StandbyName+"'")
	primary.Exec(t, "ALTER SYSTEM SET synchronous_commit = 'remote_apply'")
	primary.Exec(t, "SELECT pg_reload_conf()")
	deadline := time.Now().Add(pgStartTimeout)
	for {
		var state string
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := pgx.Connect(ctx, primary.DSN())
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1", StandbyName).Scan(&state)
			conn.Close(context.Background())
		}
		cancel()
		if state == "sync" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("testsvc: standby not synchronous within %v (state %q, %v):\n%s", pgStartTimeout, state, err, logTail(s.log, 0, 2048))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("testsvc: synchronous standby on 127.0.0.1:%d ready in %v", s.Port(), time.Since(began).Round(time.Millisecond))
	return s
}

// Promote turns a standby into a primary (pg_promote, waiting up to a
// minute) and fails t if it does not leave recovery.
func (p *Postgres) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatalf("testsvc: promote: connect: %v", err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil || !ok {
		t.Fatalf("testsvc: pg_promote: %v %v", ok, err)
	}
}
