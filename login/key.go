package login

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"unicode/utf8"
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

// NormalizeUsername returns the form of a username that all counting uses:
// surrounding white space trimmed and lower-cased rune by rune. There is
// no accent or Unicode compatibility folding: "Émile" and "emile" are
// different accounts, "ÉMILE" and "émile" are the same one. Applications
// should look accounts up by the same form.
func NormalizeUsername(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

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
// empty, or so long that even the most shrinking lower-casing (3 bytes to
// 1) would not bring it within MaxUsernameBytes. appendLowerPrefixed
// checks the exact bound.
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

// rateKey is SHA-256 over the domain tag and the length-prefixed client
// address and normalized username. It does not allocate for ASCII input.
func rateKey(clientIP, username string) (Key, error) {
	if len(clientIP) > MaxClientIPBytes {
		return Key{}, ErrInvalidClientIP
	}
	u, err := checkUsername(username)
	if err != nil {
		return Key{}, err
	}
	var buf [keyBufLen]byte
	b := append(buf[:0], rateDomain...)
	b = appendPrefixed(b, clientIP)
	b, ok := appendLowerPrefixed(b, u)
	if !ok {
		return Key{}, ErrInvalidUsername
	}
	return sha256.Sum256(b), nil
}

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
// and the length-prefixed normalized username, or HMAC-SHA-256 with secret
// when one is configured (so that a reader of the cache cannot test
// guessed usernames against it).
func accountKey(secret []byte, username string) (Key, error) {
	u, err := checkUsername(username)
	if err != nil {
		return Key{}, err
	}
	var buf [keyBufLen]byte
	b := append(buf[:0], lockoutDomain...)
	b, ok := appendLowerPrefixed(b, u)
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

// appendLowerPrefixed appends the length-prefixed lower-case form of s.
// ASCII is lowered in place without allocating; anything else goes through
// strings.ToLower. It reports false for invalid UTF-8 or a lower-case form
// longer than MaxUsernameBytes.
func appendLowerPrefixed(b []byte, s string) ([]byte, bool) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if !ascii {
		if !utf8.ValidString(s) {
			return b, false
		}
		l := strings.ToLower(s)
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
