//go:build !unix

package main

import "os"

// upgradeSignals: none where there is no SIGUSR2 (and no tableflip).
var upgradeSignals []os.Signal
