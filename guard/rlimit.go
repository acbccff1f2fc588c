package guard

// Reserved file descriptors and the fallback used by DefaultMaxConns.
const (
	reservedFDs      = 256
	fallbackMaxConns = 4096
	minAutoMaxConns  = 64
)

// DefaultMaxConns is the default conns.max_conns: half of the file
// descriptors left under RLIMIT_NOFILE after 256 are reserved (listeners,
// log files, database and cache pools), because a proxy spends one more
// descriptor upstream for every client connection. It is at least 64 and at
// most MaxMaxConns; 4096 when the limit cannot be read.
func DefaultMaxConns() int { return maxConnsFor(openFileLimit()) }

func maxConnsFor(nofile uint64) int {
	if nofile == 0 {
		return fallbackMaxConns
	}
	if nofile <= reservedFDs+2*minAutoMaxConns {
		return minAutoMaxConns
	}
	n := (nofile - reservedFDs) / 2
	if n > MaxMaxConns {
		return MaxMaxConns
	}
	return int(n)
}
