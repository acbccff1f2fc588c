//go:build race

package wire

// raceEnabled: the race detector makes sync.Pool drop items on purpose,
// so allocation tests are skipped under it (scripts/test runs them once
// without -race).
const raceEnabled = true
