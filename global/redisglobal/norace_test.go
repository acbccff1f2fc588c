//go:build !race

package redisglobal_test

const raceEnabled = false
