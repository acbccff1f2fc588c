package wire

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// Request IDs
//
// Every request a host with request IDs serves (see host.Config.
// RequestIDs) has one ID: kept from a trusted proxy's RequestIDField
// when it is valid (ValidRequestID), else generated (AppendRequestID).
// It is sent upstream and back to the client in RequestIDField, and
// Write puts it in every problem document as the "request_id" member:
// Write reads it from the response's own RequestIDField, so every
// answer written through this package carries it, whichever layer
// wrote it.

// RequestIDField is the header field that carries a request's ID, in
// the request sent upstream and in the response.
const RequestIDField = "X-Request-Id"

// Bounds of a request ID kept from a trusted proxy.
const (
	// MaxRequestIDLen is the longest request ID kept.
	MaxRequestIDLen = 128
	// RequestIDLen is the length of a generated ID: 16 random bytes
	// in lower-case hex.
	RequestIDLen = 32
)

// ValidRequestID reports whether id may be kept as a request ID: 1 to
// MaxRequestIDLen bytes of A-Z a-z 0-9 and - _ . : + / = (what request
// ID schemes use: hex, UUIDs, base64, prefixed IDs); nothing a log line,
// a JSON string or a header field would have to escape.
func ValidRequestID[T string | []byte](id T) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !idByte[id[i]] {
			return false
		}
	}
	return true
}

var idByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-_.:+/=" {
		t[c] = true
	}
	return t
}()

// AppendRequestID appends a new request ID to dst: RequestIDLen
// lower-case hex digits of 16 random bytes from the runtime's
// per-thread generator (math/rand/v2: ChaCha8, no lock, no
// allocation). The IDs are unique in practice, not secret: they are
// printed in answers and logs.
func AppendRequestID(dst []byte) []byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.AppendEncode(dst, b[:])
}
