//go:build unix

package guard

import "syscall"

// openFileLimit returns the soft RLIMIT_NOFILE (Go raises it to the hard
// limit at start-up on Linux), or 0 if it cannot be read.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}
