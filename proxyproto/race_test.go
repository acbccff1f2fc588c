//go:build race

package proxyproto

// raceEnabled reports that the race detector is on: its instrumentation
// makes allocation counts meaningless.
const raceEnabled = true
