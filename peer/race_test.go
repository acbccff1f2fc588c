//go:build race

package peer

// raceEnabled reports that the race detector is on: sync.Pool then drops
// items on purpose, so allocation counts are meaningless.
const raceEnabled = true
