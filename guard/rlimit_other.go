//go:build !unix

package guard

// openFileLimit is unknown off Unix.
func openFileLimit() uint64 { return 0 }
