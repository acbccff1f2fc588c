//go:build !race

package proxyproto

const raceEnabled = false
