//go:build unix

package main

import (
	"os"
	"syscall"
)

// upgradeSignals asks for an upgrade (upgrade.go).
var upgradeSignals = []os.Signal{syscall.SIGUSR2}
