//go:build race

package redisglobal_test

// raceEnabled reports a build with the race detector, which slows every
// goroutine several times over.
const raceEnabled = true
