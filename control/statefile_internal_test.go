package control

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The key file is created once: a second creator finds the first one's
// file (errStateFileExists) and LoadOrCreateKeyFile returns its key; the
// token file is replaced; both are 0600 and leave no temporary file.
func TestStateFileCreateOnlyAndReplace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	key := filepath.Join(dir, "fingerprint.key")
	first, err := LoadOrCreateKeyFile(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeStateFile(key, []byte("other\n"), "key file", ".key-*", true); !errors.Is(err, errStateFileExists) {
		t.Fatalf("second create: %v, want errStateFileExists", err)
	}
	if again, err := LoadOrCreateKeyFile(key); err != nil || again != first {
		t.Fatalf("reload: %q, %v; want the first key", again, err)
	}
	tok := filepath.Join(dir, "control.token")
	for _, v := range []string{"token-one-0123456789abcdef0123", "token-two-0123456789abcdef0123"} {
		if err := WriteTokenFile(tok, v); err != nil {
			t.Fatal(err)
		}
		if got, err := readTokenFile(tok); err != nil || got != v {
			t.Fatalf("token file: %q, %v; want %q", got, err, v)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Fatalf("state directory holds %d files, want 2 (no temporary file left)", len(ents))
	}
	for _, e := range ents {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o", e.Name(), fi.Mode().Perm())
		}
	}
}
