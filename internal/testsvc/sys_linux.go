package testsvc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// setDeathSignal makes the kernel send sig to the child when the test
// process dies without cleaning up. (The signal is tied to the OS thread
// that started the child; Go only retires threads of goroutines that exit
// while locked to them, which tests do not do.)
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}

// procID names a process across pid reuse: pid plus start time in clock
// ticks since boot.
type procID struct {
	pid   int
	start uint64
}

// self names the test process.
func self() procID {
	_, start, _, _ := procStat(os.Getpid())
	return procID{os.Getpid(), start}
}

// String formats p for an owner file; parseProcID reads it back.
func (p procID) String() string { return fmt.Sprintf("%d %d", p.pid, p.start) }

func parseProcID(s string) (procID, bool) {
	var p procID
	n, err := fmt.Sscanf(s, "%d %d", &p.pid, &p.start)
	return p, err == nil && n == 2 && p.pid > 0
}

// childrenOf lists the live children of pid by scanning /proc.
func childrenOf(pid int) []procID {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procID
	for _, e := range ents {
		cpid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, start, state, ok := procStat(cpid)
		if ok && ppid == pid && state != 'Z' {
			out = append(out, procID{cpid, start})
		}
	}
	return out
}

// procStat reads ppid, start time and state of pid from /proc/pid/stat.
func procStat(pid int) (ppid int, start uint64, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, 0, false
	}
	// "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return 0, 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, 0, false
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, 0, false
	}
	return ppid, start, f[0][0], true
}

// alive reports whether the process still exists and is not a zombie (an
// orphan's zombie may linger if PID 1 does not reap; it holds nothing).
func (p procID) alive() bool {
	_, start, state, ok := procStat(p.pid)
	return ok && start == p.start && state != 'Z'
}

// killAll sends SIGKILL to every process in ps that is still alive and
// waits up to d for them to be gone. It reports whether they all went.
func killAll(ps []procID, d time.Duration) bool {
	for _, p := range ps {
		if p.alive() {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(d)
	for {
		left := false
		for _, p := range ps {
			if p.alive() {
				left = true
				break
			}
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
