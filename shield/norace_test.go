//go:build !race

package shield

const raceEnabled = false
