package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
)

// The daemon's garbage-collector settings
//
// GOGC stays Go's default (100). Measured on the gateway benchmark
// (scripts/bench-gateway, wrk -c50, shield and route limit on): the fast
// HTTP/1.1 engine allocates nothing per proxied request, so the
// collector does not run under its load at all; on the net/http engine
// GOGC=400 left the CPU per request unchanged (105.5 against 105.7 µs)
// while doubling the peak resident memory (94 MB against 46 MB). A
// higher GOGC buys nothing here and costs memory.
//
// GOMEMLIMIT: in a container with a memory limit (cgroup v2 memory.max,
// or v1 memory.limit_in_bytes), the soft limit is set to 90% of it, so
// that a burst of traffic served by net/http (handed over requests,
// HTTP/2, login and quota routes) makes the collector work harder before
// the kernel's OOM killer ends the process. Without a limit nothing is
// set. Setting GOGC or GOMEMLIMIT in the environment overrides both
// choices (Go reads them at start; the daemon then leaves them alone).

// cgroupLimitFiles are where the container's memory limit is read.
var cgroupLimitFiles = []string{
	"/sys/fs/cgroup/memory.max",                   // cgroup v2
	"/sys/fs/cgroup/memory/memory.limit_in_bytes", // cgroup v1
}

// memoryDefaults applies the soft memory limit unless GOMEMLIMIT is set;
// it returns a sentence for the log, or "" when nothing was set.
func memoryDefaults(getenv func(string) string, readFile func(string) ([]byte, error)) string {
	if getenv("GOMEMLIMIT") != "" {
		return ""
	}
	limit, file := cgroupMemoryLimit(readFile)
	if limit <= 0 {
		return ""
	}
	soft := limit / 10 * 9
	debug.SetMemoryLimit(soft)
	return fmt.Sprintf("GOMEMLIMIT %d MiB: 90%% of the memory limit in %s", soft>>20, file)
}

// cgroupMemoryLimit returns the container's memory limit in bytes, or 0
// when there is none (or it cannot be read).
func cgroupMemoryLimit(readFile func(string) ([]byte, error)) (int64, string) {
	for _, f := range cgroupLimitFiles {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, ""
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 reports "no limit" as a huge page-aligned number.
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, ""
		}
		return n, f
	}
	return 0, ""
}
