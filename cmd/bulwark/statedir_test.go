package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStateDirOrNone: a state directory derived from the home is kept
// (created, mode 0700) when it can be written, and dropped with the
// reason when it cannot; one the operator named is kept either way (its
// failure stops the start, as before).
func TestStateDirOrNone(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(home, ".local", "state", "bulwark")
	if got, err := stateDirOrNone(dir, true); err != nil || got != dir {
		t.Fatalf("writable home: %q %v", got, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created %v %v, want mode 0700", fi, err)
	}
	file := filepath.Join(home, "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(file, ".local", "state", "bulwark")
	if got, err := stateDirOrNone(bad, true); err == nil || got != "" {
		t.Errorf("unwritable home: %q %v, want none and an error", got, err)
	}
	if got, err := stateDirOrNone(bad, false); err != nil || got != bad {
		t.Errorf("named directory: %q %v, want it kept", got, err)
	}
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		getenv func(string) string
		euid   int
		want   bool
	}{
		{env("HOME", "/home/u"), 1000, true},
		{env("XDG_STATE_HOME", "/x"), 1000, true},
		{env("BULWARK_STATE_DIR", "/s"), 1000, false},
		{env("STATE_DIRECTORY", "/var/lib/bulwark"), 1000, false},
		{env("HOME", "/root"), 0, false},
	} {
		if got := derivedStateDir(tc.getenv, tc.euid); got != tc.want {
			t.Errorf("derivedStateDir(euid %d) = %v, want %v", tc.euid, got, tc.want)
		}
	}
}

// TestQuickstartWithoutWritableHome: a user whose home directory does
// not exist (as nobody's /nonexistent) starts the quickstart: it warns
// that it runs without a state directory and serves. As root the test
// runs the binary as nobody (uid 65534), whose state directory would
// otherwise be /var/lib/bulwark.
func TestQuickstartWithoutWritableHome(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := bulwarkBin(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BULWARK_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "STATE_DIRECTORY=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME=/nonexistent")
	if os.Geteuid() == 0 {
		// A copy nobody may run, in a directory nobody may enter.
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		copyBin := filepath.Join(dir, "bulwark")
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(copyBin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		bin = copyBin
	}
	cmd := exec.Command(bin, "serve", "--log-format", "json", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0")
	cmd.Env = env
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	s := startCmd(t, cmd)
	s.waitLog(t, "no writable state directory: running without one", `"dir":"/nonexistent/.local/state/bulwark"`)
	res, err := http.Get(s.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("quickstart: %d", res.StatusCode)
	}
	s.stop(t)
}
