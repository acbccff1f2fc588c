package login_test

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// threadCPU measures the CPU time the benchmark goroutine's OS thread
// spends, so a per-op cost can be reported even on a machine shared with
// other work (wall-clock ns/op then includes waiting for a CPU). The
// goroutine is locked to its thread until stop is called.
func threadCPU(b *testing.B) (stop func()) {
	runtime.LockOSThread()
	start := rusageThread()
	return func() {
		used := rusageThread() - start
		runtime.UnlockOSThread()
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func rusageThread() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
