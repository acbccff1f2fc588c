package main

import (
	"fmt"
	"os"

	"github.com/bulwarkhq/bulwark/control"
)

// derivedStateDir reports whether the state directory control.StateDir
// returns was derived from the user's home ($XDG_STATE_HOME or $HOME),
// not named by the operator ($BULWARK_STATE_DIR, systemd's
// $STATE_DIRECTORY) or the system's (/var/lib/bulwark, as root).
func derivedStateDir(getenv func(string) string, euid int) bool {
	return getenv(control.EnvStateDir) == "" && getenv("STATE_DIRECTORY") == "" && euid != 0
}

// writableDir makes sure the gateway can write in dir, creating it
// (mode 0700, as the gateway's state files do) when missing.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// stateDirOrNone is the state directory serve runs with. A directory
// derived from a home the user cannot write in (no home, a read-only
// one: a service account, a container) is dropped with a warning, and
// the gateway runs as without one (a per-process fingerprint key, lists
// kept in memory only, a control API without a generated token: on
// loopback, unauthenticated, without the console) rather than failing
// to start. A directory the operator named must work: its failure stops
// the start.
func stateDirOrNone(dir string, derived bool) (string, error) {
	if !derived {
		return dir, nil
	}
	if err := writableDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}
