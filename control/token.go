package control

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables and paths of the token files.
const (
	// EnvToken holds the bearer token (see LoadToken).
	EnvToken = "BULWARK_CONTROL_TOKEN"
	// EnvStateDir overrides the state directory (see StateDir).
	EnvStateDir = "BULWARK_STATE_DIR"
	// SystemStateDir is the state directory of a gateway run by root or
	// by systemd with StateDirectory=bulwark.
	SystemStateDir = "/var/lib/bulwark"
	// GeneratedTokenBytes is the entropy of a generated token.
	GeneratedTokenBytes = 32
	// maxTokenFileBytes bounds what is read from a token file: the
	// token and some trailing white space.
	maxTokenFileBytes = MaxTokenBytes + 64
)

// ErrInsecureFile is matched (errors.Is) by the error for a token file
// that group or others may read or write, and for a state directory that
// they may write.
var ErrInsecureFile = errors.New("control: file open to group or others")

type insecureError struct{ msg string }

func (e *insecureError) Error() string        { return e.msg }
func (e *insecureError) Is(target error) bool { return target == ErrInsecureFile }

// TokenID returns a short, non-reversible identifier of a token for audit
// lines: the first 12 hex digits of its SHA-256, or "anonymous".
func TokenID(token string) string {
	if token == "" {
		return "anonymous"
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// validToken checks the length and the alphabet of a token. The token
// never appears in the error.
func validToken(tok string) error {
	if len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes {
		return fmt.Errorf("control: token length %d out of range [%d, %d]", len(tok), MinTokenBytes, MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= 0x20 || tok[i] == 0x7f {
			return errors.New("control: token must not contain spaces or control characters")
		}
	}
	return nil
}

// LoadToken returns the operator's token: from $BULWARK_CONTROL_TOKEN,
// else from tokenFile (read as by ReadTokenFile), else "". Both set is an
// error, as is a token outside [MinTokenBytes, MaxTokenBytes] bytes or
// with spaces or control characters, and a file that group or others may
// read or write (ErrInsecureFile). Errors about the file name it as
// control.token_file; the token never appears in them.
func LoadToken(tokenFile string, getenv func(string) string) (string, error) {
	env := getenv(EnvToken)
	if env != "" && tokenFile != "" {
		return "", errors.New("control: both BULWARK_CONTROL_TOKEN and control.token_file are set; use one")
	}
	if tokenFile != "" {
		tok, err := readTokenFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("control: control.token_file: %w", err)
		}
		return tok, nil
	}
	if env == "" {
		return "", nil
	}
	if err := validToken(env); err != nil {
		return "", err
	}
	return env, nil
}

// GenerateToken returns a new random token: GeneratedTokenBytes bytes
// from crypto/rand in unpadded URL-safe base64 (43 characters), usable in
// a header, a URL or a shell without quoting.
func GenerateToken() (string, error) {
	b := make([]byte, GeneratedTokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("control: generate token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// StateDir returns the directory where a gateway keeps its generated
// control token, and where `bulwark ctl` looks for it:
//
//  1. $BULWARK_STATE_DIR, when set;
//  2. else $STATE_DIRECTORY, set by systemd for a unit with
//     StateDirectory=bulwark (the first entry when it lists several);
//  3. else /var/lib/bulwark when running as root (the directory systemd's
//     StateDirectory=bulwark creates, so `sudo bulwark ctl` finds the
//     token of a systemd-run gateway);
//  4. else $XDG_STATE_HOME/bulwark, or ~/.local/state/bulwark: the XDG
//     place for state that persists across restarts but is not worth a
//     backup, so a gateway run by a user and `bulwark ctl` run by the same
//     user meet there.
//
// The directory must be absolute. It is not created here.
func StateDir(getenv func(string) string) (string, error) {
	abs := func(name, d string) (string, error) {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("control: $%s %s is not an absolute path", name, quoteShort(d))
		}
		return filepath.Clean(d), nil
	}
	if d := getenv(EnvStateDir); d != "" {
		return abs(EnvStateDir, d)
	}
	if d := getenv("STATE_DIRECTORY"); d != "" {
		first, _, _ := strings.Cut(d, ":")
		return abs("STATE_DIRECTORY", first)
	}
	if os.Geteuid() == 0 {
		return SystemStateDir, nil
	}
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "bulwark"), nil
	}
	if h := getenv("HOME"); h != "" && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "bulwark"), nil
	}
	return "", fmt.Errorf("control: no state directory: set $%s", EnvStateDir)
}

// TokenPath returns the token file, in dir, of the control API listening
// on addr (host:port, as bound: pass the real port, not 0). Gateways on
// different addresses get different files. localhost and the unspecified
// addresses (0.0.0.0, [::], an empty host) count as 127.0.0.1, where a
// client on the same machine reaches them; other hosts keep their own
// name: "127.0.0.1:7922" → dir/control-127.0.0.1-7922.token.
func TokenPath(dir, addr string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		h, port = addr, ""
	}
	h = strings.ToLower(h)
	if ip, err := netip.ParseAddr(h); err == nil {
		h = ip.Unmap().WithZone("").String()
		if ip.IsUnspecified() {
			h = "127.0.0.1"
		}
	}
	if h == "" || h == "localhost" {
		h = "127.0.0.1"
	}
	name := []byte("control-" + h + "-" + port)
	for i, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			name[i] = '_'
		}
	}
	return filepath.Join(dir, string(name)+".token")
}

// WriteTokenFile writes token to path atomically (a temporary file in the
// same directory, synced, then renamed over path) with mode 0600, creating
// the directory with mode 0700 when missing. A directory that group or
// others may write (without the sticky bit) is refused: they could
// replace the file.
func WriteTokenFile(path, token string) error {
	if err := validToken(token); err != nil {
		return err
	}
	return writeStateFile(path, []byte(token+"\n"), "token file", ".control-token-*", false)
}

// errStateFileExists is writeStateFile's answer when createOnly finds
// path already there.
var errStateFileExists = errors.New("control: state file exists")

// WriteStateFile replaces the file at path with data as the token file is
// written: mode 0600, in a state directory created with mode 0700 when
// missing and refused when group or others may write it, through a
// synced temporary file renamed over path (a reader sees the old or the
// new content, never a part). what names the file in errors ("lists
// state file").
func WriteStateFile(path string, data []byte, what string) error {
	return writeStateFile(path, data, what, "."+filepath.Base(path)+"-*", false)
}

// writeStateFile writes content to path with mode 0600, in
// a state directory it creates with mode 0700 when missing and refuses
// when group or others may write it (they could replace the file): to a
// synced temporary file named by pattern in that directory, then renamed
// over path, or with createOnly linked to path (errStateFileExists when
// path is there already: another process made it first). what names the
// file in errors.
func writeStateFile(path string, content []byte, what, pattern string, createOnly bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("control: cannot create the state directory %s: %w", dir, unwrapPath(err))
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("control: state directory %s: %w", dir, unwrapPath(err))
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return &insecureError{fmt.Sprintf("control: state directory %s has mode %04o: group or others could replace the %s; run chmod go-w %s or choose another directory with $%s", dir, perm, what, dir, EnvStateDir)}
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return fmt.Errorf("control: cannot write in the state directory %s: %w", dir, unwrapPath(err))
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone once renamed; the second name of a link
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(content)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if createOnly {
			err = os.Link(tmp, path)
			if errors.Is(err, fs.ErrExist) {
				return errStateFileExists
			}
		} else {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		return fmt.Errorf("control: cannot write the %s %s: %w", what, path, unwrapPath(err))
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename or link durable; best effort
		_ = d.Close()
	}
	return nil
}

// ReadTokenFile reads a token file: a regular file (a symbolic link is
// followed) that group and others can neither read nor write
// (ErrInsecureFile otherwise), holding one token and optional trailing
// white space. The checks are made on the opened file, so the file
// cannot be swapped between check and read. The token never appears in
// errors.
func ReadTokenFile(path string) (string, error) {
	tok, err := readTokenFile(path)
	if err != nil {
		return "", fmt.Errorf("control: %w", err)
	}
	return tok, nil
}

// readTokenFile is ReadTokenFile with errors that the callers prefix.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %w", path, unwrapPath(err))
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", &insecureError{fmt.Sprintf("%s has mode %04o: a token file must not be readable or writable by group or others; run chmod 600 %s (for a Kubernetes secret volume, set defaultMode: 0400)", path, perm, path)}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %w", path, unwrapPath(err))
	}
	if len(b) > maxTokenFileBytes {
		return "", fmt.Errorf("%s is larger than %d bytes: it must hold only the token", path, maxTokenFileBytes)
	}
	tok := strings.TrimRight(string(b), " \t\r\n")
	if err := validToken(tok); err != nil {
		return "", errors.New(strings.TrimPrefix(err.Error(), "control: "))
	}
	return tok, nil
}

// unwrapPath drops the *fs.PathError layer (its path is already in the
// message) and keeps the cause, so errors.Is(err, fs.ErrNotExist) holds.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// StoreToken writes token to the token file of the control API listening
// on addr (the bound host:port) in the state directory (StateDir), and
// returns the file's path for the log. A gateway without an operator's
// token calls it at start with a token from GenerateToken.
func StoreToken(token, addr string, getenv func(string) string) (path string, err error) {
	dir, err := StateDir(getenv)
	if err != nil {
		return "", err
	}
	path = TokenPath(dir, addr)
	return path, WriteTokenFile(path, token)
}

// LookupToken finds the token a gateway stored for the control API on
// addr (host:port): in StateDir's directory, then in SystemStateDir. It
// returns the token and its file; when no file exists, an error matching
// fs.ErrNotExist that names the places searched. A file that exists but
// cannot be read, is insecure or holds no valid token is an error too.
func LookupToken(addr string, getenv func(string) string) (token, path string, err error) {
	var tried []string
	dirs := []string{SystemStateDir}
	if d, err := StateDir(getenv); err == nil && d != SystemStateDir {
		dirs = []string{d, SystemStateDir}
	}
	for _, d := range dirs {
		p := TokenPath(d, addr)
		tok, err := ReadTokenFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			tried = append(tried, p)
			continue
		}
		return tok, p, err
	}
	return "", "", fmt.Errorf("control: no token file (looked for %s): %w", strings.Join(tried, ", "), fs.ErrNotExist)
}

// CheckAddr refuses to serve the API on a non-loopback address without a
// token. addr is host:port; a host name other than "localhost" counts as
// non-loopback.
func CheckAddr(addr string, haveToken bool) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("control: control.addr %q: %v", addr, err)
	}
	if haveToken {
		return nil
	}
	if h == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("control: control.addr %q is not a loopback address; set control.token_file or BULWARK_CONTROL_TOKEN to expose the API", addr)
}

// LoadOrCreateKeyFile returns the key material in path (read as a token
// file: mode 0600, one token-shaped string), creating it with
// GenerateToken when it does not exist. Creation is atomic and
// exclusive: the key is written to a temporary file in the same
// directory (created with mode 0700 when missing, refused when group or
// others may write it), synced, then hard-linked to path, which fails
// when another process created path meanwhile; that process's key is
// then read. The key never appears in errors.
func LoadOrCreateKeyFile(path string) (string, error) {
	key, err := readTokenFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return "", fmt.Errorf("control: key file: %w", err)
		}
		return key, nil
	}
	key, err = GenerateToken()
	if err != nil {
		return "", err
	}
	switch err := writeStateFile(path, []byte(key+"\n"), "key file", ".key-*", true); {
	case errors.Is(err, errStateFileExists):
		// Another process made it first: use its key.
		if key, err = readTokenFile(path); err != nil {
			return "", fmt.Errorf("control: key file: %w", err)
		}
	case err != nil:
		return "", err
	}
	return key, nil
}
