package control_test

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestGenerateToken(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		tok, err := control.GenerateToken()
		if err != nil {
			t.Fatal(err)
		}
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) != control.GeneratedTokenBytes || len(tok) != 43 {
			t.Fatalf("token %q: %d bytes, %v", tok, len(b), err)
		}
		if strings.ContainsAny(tok, "+/=") {
			t.Fatalf("token %q is not URL-safe", tok)
		}
		if seen[tok] {
			t.Fatal("a token repeated")
		}
		seen[tok] = true
	}
}

// TestWriteTokenFileMode: the file is written with mode 0600 whatever the
// umask, atomically replaces an older file (even a more open one) and
// leaves no temporary file; the directory is created 0700.
func TestWriteTokenFileMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "state", "bulwark")
	path := filepath.Join(dir, "control-127.0.0.1-9091.token")
	tok, _ := control.GenerateToken()
	if err := control.WriteTokenFile(path, tok); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Fatalf("state directory mode %v; want 0700", di.Mode().Perm())
	}
	if got, err := control.ReadTokenFile(path); err != nil || got != tok {
		t.Fatalf("read back: %q %v", got, err)
	}
	// Replace a world-readable leftover: the new file is 0600 again.
	os.Chmod(path, 0o644)
	tok2, _ := control.GenerateToken()
	if err := control.WriteTokenFile(path, tok2); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("rewritten mode %v", fi.Mode().Perm())
	}
	if got, _ := control.ReadTokenFile(path); got != tok2 {
		t.Fatal("the file was not replaced")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
	if err := control.WriteTokenFile(path, "short"); err == nil {
		t.Fatal("a short token was written")
	}
}

// TestWriteTokenFileDirectory: a directory that others can write is
// refused unless sticky.
func TestWriteTokenFileDirectory(t *testing.T) {
	tok, _ := control.GenerateToken()
	open := t.TempDir()
	os.Chmod(open, 0o777)
	err := control.WriteTokenFile(filepath.Join(open, "t.token"), tok)
	if !errors.Is(err, control.ErrInsecureFile) || !strings.Contains(err.Error(), open+" has mode 0777") {
		t.Fatalf("world-writable directory: %v", err)
	}
	sticky := t.TempDir()
	os.Chmod(sticky, 0o777|os.ModeSticky)
	if err := control.WriteTokenFile(filepath.Join(sticky, "t.token"), tok); err != nil {
		t.Fatalf("sticky directory (like /tmp): %v", err)
	}
}

// TestReadTokenFileRefusesOpenModes: a token file that group or others
// may read or write is refused with an error naming the file and its
// mode; the token never appears in errors. Symbolic links are followed
// and the target's mode counts.
func TestReadTokenFileRefusesOpenModes(t *testing.T) {
	dir := t.TempDir()
	const secret = "a-secret-token-0123456789"
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o620, 0o602, 0o660, 0o666, 0o610} {
		p := filepath.Join(dir, "tok-"+mode.String())
		os.WriteFile(p, []byte(secret+"\n"), 0o600)
		os.Chmod(p, mode)
		_, err := control.ReadTokenFile(p)
		want := p + " has mode " + modeOctal(mode) + ": a token file must not be readable or writable by group or others; run chmod 600 " + p
		if !errors.Is(err, control.ErrInsecureFile) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secret) {
			t.Errorf("mode %v: %v\nwant %q", mode, err, want)
		}
		// LoadToken (the operator's control.token_file) refuses it too.
		if _, err := control.LoadToken(p, envOf()); !errors.Is(err, control.ErrInsecureFile) || !strings.HasPrefix(err.Error(), "control: control.token_file: "+p+" has mode") {
			t.Errorf("LoadToken, mode %v: %v", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		p := filepath.Join(dir, "ok-"+mode.String())
		os.WriteFile(p, []byte(secret+"\r\n \t"), 0o600)
		os.Chmod(p, mode)
		if got, err := control.ReadTokenFile(p); err != nil || got != secret {
			t.Errorf("mode %v: %q %v", mode, got, err)
		}
	}
	// Symbolic links: the target's mode counts.
	target := filepath.Join(dir, "ok-"+os.FileMode(0o600).String())
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if got, err := control.ReadTokenFile(link); err != nil || got != secret {
		t.Errorf("link to a 0600 file: %q %v", got, err)
	}
	openTarget := filepath.Join(dir, "tok-"+os.FileMode(0o644).String())
	link2 := filepath.Join(dir, "link2")
	os.Symlink(openTarget, link2)
	if _, err := control.ReadTokenFile(link2); !errors.Is(err, control.ErrInsecureFile) {
		t.Errorf("link to a 0644 file: %v", err)
	}
	// Not a regular file, too large, missing, no token in it.
	if _, err := control.ReadTokenFile(dir); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("directory: %v", err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, []byte(strings.Repeat("x", 600)), 0o600)
	if _, err := control.ReadTokenFile(big); err == nil || !strings.Contains(err.Error(), "larger than 576 bytes") {
		t.Errorf("big: %v", err)
	}
	if _, err := control.ReadTokenFile(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
	spaced := filepath.Join(dir, "spaced")
	os.WriteFile(spaced, []byte("two words in a token file\n"), 0o600)
	if _, err := control.ReadTokenFile(spaced); err == nil || !strings.Contains(err.Error(), "spaces or control characters") || strings.Contains(err.Error(), "words") {
		t.Errorf("spaced: %v", err)
	}
}

func modeOctal(m os.FileMode) string {
	const digits = "01234567"
	p := uint32(m.Perm())
	return string([]byte{'0', digits[p>>6&7], digits[p>>3&7], digits[p&7]})
}

func TestStateDir(t *testing.T) {
	type tc struct {
		name string
		env  func(string) string
		want string
		err  string
	}
	cases := []tc{
		{"explicit", envOf("BULWARK_STATE_DIR", "/srv/bulwark/", "STATE_DIRECTORY", "/var/lib/x", "HOME", "/home/u"), "/srv/bulwark", ""},
		{"relative", envOf("BULWARK_STATE_DIR", "state"), "", `$BULWARK_STATE_DIR "state" is not an absolute path`},
		{"systemd", envOf("STATE_DIRECTORY", "/var/lib/bulwark:/var/lib/other", "HOME", "/home/u"), "/var/lib/bulwark", ""},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, tc{"root", envOf("HOME", "/root", "XDG_STATE_HOME", "/root/.st"), control.SystemStateDir, ""})
	} else {
		cases = append(cases,
			tc{"xdg", envOf("HOME", "/home/u", "XDG_STATE_HOME", "/home/u/.st"), "/home/u/.st/bulwark", ""},
			tc{"home", envOf("HOME", "/home/u"), "/home/u/.local/state/bulwark", ""},
			tc{"none", envOf(), "", "no state directory: set $BULWARK_STATE_DIR"},
		)
	}
	for _, c := range cases {
		got, err := control.StateDir(c.env)
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q %v; want %q %q", c.name, got, err, c.want, c.err)
		}
	}
}

func TestTokenPath(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9091":         "/s/control-127.0.0.1-9091.token",
		"localhost:9091":         "/s/control-127.0.0.1-9091.token",
		"LOCALHOST:9091":         "/s/control-127.0.0.1-9091.token",
		"0.0.0.0:9091":           "/s/control-127.0.0.1-9091.token",
		"[::]:9091":              "/s/control-127.0.0.1-9091.token",
		":9091":                  "/s/control-127.0.0.1-9091.token",
		"127.0.0.1:9092":         "/s/control-127.0.0.1-9092.token",
		"127.0.0.2:9091":         "/s/control-127.0.0.2-9091.token",
		"[::1]:9091":             "/s/control-__1-9091.token",
		"[::ffff:10.0.0.1]:9091": "/s/control-10.0.0.1-9091.token",
		"Gw1.Example:9091":       "/s/control-gw1.example-9091.token",
		"../../etc/passwd:1":     "/s/control-.._.._etc_passwd-1.token",
	} {
		if got := control.TokenPath("/s", addr); got != want {
			t.Errorf("TokenPath(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestStoreAndLookupToken: what a gateway stores under its address, a
// client looking up the same address finds; another address finds
// nothing, and says where it looked.
func TestStoreAndLookupToken(t *testing.T) {
	dir := t.TempDir()
	env := envOf("BULWARK_STATE_DIR", dir)
	tok, _ := control.GenerateToken()
	path, err := control.StoreToken(tok, "127.0.0.1:41234", env)
	if err != nil || path != filepath.Join(dir, "control-127.0.0.1-41234.token") {
		t.Fatalf("StoreToken: %q %v", path, err)
	}
	got, gotPath, err := control.LookupToken("localhost:41234", env)
	if err != nil || got != tok || gotPath != path {
		t.Fatalf("LookupToken: %q %q %v", got, gotPath, err)
	}
	_, _, err = control.LookupToken("127.0.0.1:41235", env)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "control-127.0.0.1-41235.token")) {
		t.Fatalf("another port: %v", err)
	}
	os.Chmod(path, 0o640)
	if _, _, err := control.LookupToken("127.0.0.1:41234", env); !errors.Is(err, control.ErrInsecureFile) {
		t.Fatalf("opened file: %v", err)
	}
}
