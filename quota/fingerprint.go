package quota

import (
	"crypto/sha256"
	"encoding/binary"
)

// fingerprintDomain separates request fingerprints from every other
// SHA-256 use. It names the encoding version: changing the encoding would
// make every receipt counted before the change look reused, so a change
// needs a new version and a migration plan.
const fingerprintDomain = "bulwark/quota/request-fingerprint/v1\x00"

// Fingerprint returns the value for [Request.Fingerprint]: the SHA-256 of
// a domain-separated, length-prefixed encoding of the request a receipt
// stands for,
//
//	SHA-256( "bulwark/quota/request-fingerprint/v1" 0x00
//	         ‖ uint64be(len(method)) ‖ method
//	         ‖ uint64be(len(target)) ‖ target
//	         ‖ bodySHA256 )
//
// so no two different (method, target, body) triples share an encoding
// ("GET" + "/x" differs from "GE" + "T/x"). The encoding is stable: the
// same inputs give the same fingerprint in every release, and stores keep
// it for the receipt's window.
//
//   - method is the request method as received (methods are
//     case-sensitive).
//   - target is what the upstream acts on besides the body: the canonical
//     path, followed by "?" and the raw query when the request has one.
//     Leaving the query out would let a client replay one key for
//     requests that differ only in their query parameters.
//   - bodySHA256 is the SHA-256 of the body exactly as forwarded upstream
//     (sha256.Sum256(nil) for no body).
//
// Headers are not part of the fingerprint.
func Fingerprint(method, target string, bodySHA256 [32]byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte(fingerprintDomain))
	binary.BigEndian.PutUint64(n[:], uint64(len(method)))
	h.Write(n[:])
	h.Write([]byte(method))
	binary.BigEndian.PutUint64(n[:], uint64(len(target)))
	h.Write(n[:])
	h.Write([]byte(target))
	h.Write(bodySHA256[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}
