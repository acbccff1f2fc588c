//go:build unix

package testsvc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a server process started by this package. It is reaped with
// wait4 by whoever asks, so no goroutine ever waits on it: a test that
// checks for leaked goroutines sees none from here.
type proc struct {
	pid    int
	exited bool
	status syscall.WaitStatus
}

// startProc starts path with args in dir, stdin from /dev/null and stdout
// plus stderr appended to logFile. cred, when non-nil, runs the process as
// another user (PostgreSQL refuses to run as root). deathSig is delivered
// to the process if the test process dies first (Linux only).
func startProc(path string, args []string, dir, logFile string, cred *syscall.Credential, deathSig syscall.Signal) (*proc, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	logf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	attr := &syscall.SysProcAttr{
		Setpgid:    true, // a ^C in the terminal goes to the test, which then stops us
		Credential: cred,
	}
	setDeathSignal(attr, deathSig)
	p, err := os.StartProcess(path, append([]string{path}, args...), &os.ProcAttr{
		Dir:   dir,
		Env:   os.Environ(),
		Files: []*os.File{devnull, logf, logf},
		Sys:   attr,
	})
	if err != nil {
		return nil, err
	}
	pid := p.Pid
	// Drop the os.Process handle (and its pidfd): from here on the pid is
	// ours until we reap it with wait4, so signalling it by number is safe.
	_ = p.Release()
	return &proc{pid: pid}, nil
}

// poll reports whether the process has exited, reaping it if so.
func (p *proc) poll() bool {
	if p.exited {
		return true
	}
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: somebody else reaped it; it is gone either way
			p.exited = true
			return true
		}
		if wpid == p.pid {
			p.exited, p.status = true, ws
			return true
		}
		return false
	}
}

// signal sends sig unless the process has already been reaped.
func (p *proc) signal(sig syscall.Signal) {
	if p.poll() {
		return
	}
	_ = syscall.Kill(p.pid, sig)
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *proc) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.poll() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// stop asks the process to exit with sig, escalating to SIGKILL after
// grace. It reports whether the process exited on the polite signal.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) bool {
	p.signal(sig)
	if p.wait(grace) {
		return true
	}
	p.signal(syscall.SIGKILL)
	p.wait(time.Minute)
	return false
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// caller retries with a new one if the server then fails to bind it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testsvc: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logSize returns the current size of a log file (0 if it does not exist),
// so that a start attempt can look at only its own output.
func logSize(name string) int64 {
	fi, err := os.Stat(name)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns at most max bytes of name starting at offset from,
// trimmed to whole lines where possible.
func logTail(name string, from int64, max int) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", name, err)
	}
	if from > int64(len(b)) {
		from = 0
	}
	b = b[from:]
	if len(b) > max {
		b = b[len(b)-max:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(string(b))
}

// ownerFile, in each server directory, names the test process that made
// it, so a later run can tell a leftover from a directory in use.
const ownerFile = "owner"

// makeServerDir creates a fresh os.TempDir()/prefix* directory for one
// server and records this process as its owner. Directories of earlier
// runs whose owner died without cleaning up are removed first (once per
// prefix and process).
func makeServerDir(prefix string) (string, error) {
	sweepOnce(prefix)
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("testsvc: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(self().String()), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("testsvc: %w", err)
	}
	return dir, nil
}

var swept sync.Map // prefix → *sync.Once

func sweepOnce(prefix string) {
	once, _ := swept.LoadOrStore(prefix, new(sync.Once))
	once.(*sync.Once).Do(func() { sweepStale(prefix) })
}

// sweepStale removes this user's os.TempDir()/prefix* directories whose
// owner process is gone: what test processes that died abnormally (no
// cleanup) left behind. A directory without an owner file (still being
// made, or made by an older version) is removed only after two hours and
// only if its server is not running.
func sweepStale(prefix string) {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range matches {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue // not ours
		}
		if b, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil {
			if owner, ok := parseProcID(string(b)); ok && owner.alive() {
				continue
			}
		} else if time.Since(fi.ModTime()) < 2*time.Hour ||
			pidAlive(filepath.Join(dir, "data", "postmaster.pid")) || pidAlive(filepath.Join(dir, "redis.pid")) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// pidAlive reports whether the pid on the first line of file names a live
// process.
func pidAlive(file string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
