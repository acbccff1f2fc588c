package login

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Input bounds. Longer values are rejected before anything is counted.
const (
	// MaxUsernameBytes is the longest username accepted, in bytes of its
	// normalized form (see NormalizeUsername).
	MaxUsernameBytes = 256
	// MaxClientIPBytes is the longest client address string accepted.
	MaxClientIPBytes = 64
)

// Input errors. A request that yields one of them is malformed (HTTP 400)
// and is not counted.
var (
	// ErrMissingCredentials reports an empty (or all-space) username.
	ErrMissingCredentials = errors.New("login: missing credentials")
	// ErrInvalidUsername reports a username longer than
	// [MaxUsernameBytes] or not valid UTF-8.
	ErrInvalidUsername = errors.New("login: invalid username")
	// ErrInvalidClientIP reports a client address longer than
	// [MaxClientIPBytes].
	ErrInvalidClientIP = errors.New("login: invalid client address")
)

// Folding says how usernames are compared and keyed. The limiter, the
// lockout and the credential reader's ambiguity check each take one; give
// them the same. The zero value is FoldUnicode.
type Folding uint8

const (
	// FoldUnicode, the default: white space trimmed, then NFKC, Unicode
	// case folding and NFKC again (the NFKC_Casefold of Unicode's
	// identifier profiles). "ｃarol" (fullwidth c), "CAROL", "Carol" and
	// "carol" are one account, "ß" and "ss" too, as for Django (which
	// NFKC-normalizes usernames at login) and every framework that
	// compares them case-insensitively. Seed 003 asks for trim and
	// lower-case only; a throttle that folds less than the login handler
	// gives an attacker one budget per spelling, so Bulwark folds more.
	// Accents stay: "émile" and "emile" are different accounts.
	FoldUnicode Folding = iota
	// FoldLower: white space trimmed and lower-cased rune by rune only,
	// as seed 003 says. For a login handler that compares usernames
	// byte for byte after lower-casing, where "ｃarol" and "carol" are
	// different accounts.
	FoldLower
	foldings // the number of foldings
)

// Normalize returns the form of s that counting uses under f.
func (f Folding) Normalize(s string) string {
	s = strings.TrimSpace(s)
	if f == FoldLower {
		return strings.ToLower(s)
	}
	if isASCII(s) {
		return strings.ToLower(s) // NFKC and folding are lower-casing on ASCII
	}
	s = norm.NFKC.String(s)
	s = cases.Fold().String(s) // a Caser holds state: one per call
	return strings.TrimSpace(norm.NFKC.String(s))
}

// String returns "unicode" or "lower".
func (f Folding) String() string {
	switch f {
	case FoldUnicode:
		return "unicode"
	case FoldLower:
		return "lower"
	}
	return "Folding(" + strconv.Itoa(int(f)) + ")"
}

func (f Folding) valid() bool { return f < foldings }

// NormalizeUsername returns the form of a username that counting uses by
// default: [FoldUnicode].Normalize. Applications should look accounts up
// by an equivalent form, or a coarser one.
func NormalizeUsername(s string) string { return FoldUnicode.Normalize(s) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// One-byte domain tags keep the two key spaces apart even for equal
// inputs. They and the 2-byte length prefixes are short so that a typical
// key input (IPv4 address, username up to 35 bytes) fits one SHA-256 block.
const (
	rateDomain    = "\x01"
	lockoutDomain = "\x02"
	clientDomain  = "\x03"
)

// keyBufLen fits the domain tag, two length prefixes, the longest address
// and the longest normalized username.
const keyBufLen = len(rateDomain) + 4 + MaxClientIPBytes + MaxUsernameBytes

// checkUsername trims username and rejects what cannot be a username:
// empty, or so long that even the most shrinking folding (3 bytes to 1)
// would not bring it within MaxUsernameBytes. appendFoldedPrefixed checks
// the exact bound.
func checkUsername(username string) (string, error) {
	u := strings.TrimSpace(username)
	switch {
	case u == "":
		return "", ErrMissingCredentials
	case len(u) > 3*MaxUsernameBytes:
		return "", ErrInvalidUsername
	}
	return u, nil
}

// rateInput is the input of an attempt's rate key: the domain tag and
// the length-prefixed client address and username normalized under a
// Folding, checked; the key is its SHA-256 (key). A limiter hashes it
// only when a step needs the key (an attempt refused by the lockout or
// the per-client window never does). Neither allocates for ASCII input.
type rateInput struct {
	buf [keyBufLen]byte
	n   int
}

// set makes in the input of clientIP and username normalized under f,
// or returns their input error (ErrInvalidClientIP,
// ErrMissingCredentials, ErrInvalidUsername).
func (in *rateInput) set(f Folding, clientIP, username string) error {
	if len(clientIP) > MaxClientIPBytes {
		return ErrInvalidClientIP
	}
	u, err := checkUsername(username)
	if err != nil {
		return err
	}
	b := append(in.buf[:0], rateDomain...)
	b = appendPrefixed(b, clientIP)
	b, ok := appendFoldedPrefixed(b, f, u)
	if !ok {
		return ErrInvalidUsername
	}
	in.n = copy(in.buf[:], b) // b is in.buf unless the username was not ASCII
	return nil
}

// key returns the rate key of in.
func (in *rateInput) key() Key { return sha256.Sum256(in.buf[:in.n]) }

// clientKey keys the per-client dimension: SHA-256 over its domain tag
// and the length-prefixed client address. The tag keeps it apart from
// every rate key, so it can live in the same store. The caller has
// checked the address length.
func clientKey(clientIP string) Key {
	var buf [len(clientDomain) + 2 + MaxClientIPBytes]byte
	b := append(buf[:0], clientDomain...)
	return sha256.Sum256(appendPrefixed(b, clientIP))
}

// accountKey keys the lockout by account only: SHA-256 over a domain tag
// and the length-prefixed username normalized under f, or HMAC-SHA-256
// with secret when one is configured (so that a reader of the cache
// cannot test guessed usernames against it).
func accountKey(secret []byte, f Folding, username string) (Key, error) {
	u, err := checkUsername(username)
	if err != nil {
		return Key{}, err
	}
	var buf [keyBufLen]byte
	b := append(buf[:0], lockoutDomain...)
	b, ok := appendFoldedPrefixed(b, f, u)
	if !ok {
		return Key{}, ErrInvalidUsername
	}
	if len(secret) == 0 {
		return sha256.Sum256(b), nil
	}
	m := hmac.New(sha256.New, secret)
	m.Write(bytes.Clone(b)) // a copy, so that buf does not escape on the unkeyed path
	var k Key
	m.Sum(k[:0])
	return k, nil
}

// appendPrefixed appends s after its length as a 2-byte big-endian
// number; callers bound every input far below 64 KiB.
func appendPrefixed(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// appendFoldedPrefixed appends the length-prefixed form of s normalized
// under f. ASCII is lowered in place without allocating (under either
// folding); anything else goes through f.Normalize. It reports false for
// invalid UTF-8 or a normalized form longer than MaxUsernameBytes.
func appendFoldedPrefixed(b []byte, f Folding, s string) ([]byte, bool) {
	if !isASCII(s) {
		if !utf8.ValidString(s) {
			return b, false
		}
		l := f.Normalize(s)
		if len(l) > MaxUsernameBytes {
			return b, false
		}
		return appendPrefixed(b, l), true
	}
	if len(s) > MaxUsernameBytes {
		return b, false
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b, true
}
