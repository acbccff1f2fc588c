//go:build unix && !linux

package testsvc

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// setDeathSignal is a no-op off Linux: there is no parent-death signal, so
// servers outlive a test process that dies without running its cleanup.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}

type procID struct{ pid int }

func self() procID { return procID{os.Getpid()} }

func (p procID) String() string { return strconv.Itoa(p.pid) }

func parseProcID(s string) (procID, bool) {
	pid, err := strconv.Atoi(strings.TrimSpace(s))
	return procID{pid}, err == nil && pid > 0
}

// childrenOf cannot list children without /proc; server processes exit on
// their own once their parent is gone.
func childrenOf(int) []procID { return nil }

func (p procID) alive() bool {
	err := syscall.Kill(p.pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func killAll([]procID, time.Duration) bool { return true }
