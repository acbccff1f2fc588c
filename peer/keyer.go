package peer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/bulwarkhq/bulwark/keyed"
)

// KeySize is the size of a [Keyer]'s random key in bytes.
const KeySize = 32

// fingerprintPrefix separates peer fingerprints from any other use of
// the same key and versions the encoding.
const fingerprintPrefix = "bulwark/peer/v1\x00"

// Address tags of the fingerprint encoding.
const (
	tagUnknown byte = 0
	tagIPv4    byte = 4
	tagIPv6    byte = 6
)

// Keyer turns peers into fingerprints: HMAC-SHA-256, keyed with a random
// per-Keyer key, over
//
//	"bulwark/peer/v1\x00" || uint64be(len(domain)) || domain || tag || address
//
// where tag is 4 (4 address bytes), 6 (16 address bytes) or 0 (the
// unknown peer, no address bytes). The domain keeps the fingerprints of
// different users of one Keyer apart ("shield", "login", ...). The key
// never leaves the Keyer and no address is kept after a call returns.
//
// Only the HMAC's precomputed inner and outer hash states are stored (the
// raw key is wiped once they are derived); [Keyer.Close] zeroes them.
// A Keyer is safe for concurrent use, Close included, and Sum takes no
// lock; create it with [NewKeyer].
type Keyer struct {
	closed atomic.Bool
	// inner and outer hold the marshaled SHA-256 states after absorbing
	// key^ipad and key^opad, as atomically accessed words so that Close
	// can zero them while Sum runs.
	inner, outer [stateWords]atomic.Uint64
	stateLen     int // bytes of a marshaled state
	pool         sync.Pool
}

// stateWords is the room for a marshaled SHA-256 state (108 bytes).
const stateWords = 16

// scratch is the per-call working memory, pooled so that Sum does not
// allocate. It holds no key material or address between calls.
type scratch struct {
	h     hash.Hash
	u     encoding.BinaryUnmarshaler
	state [stateWords * 8]byte
	msg   [128]byte
	sum   [sha256.Size]byte
}

// NewKeyer returns a Keyer with a fresh key from crypto/rand.
func NewKeyer() *Keyer {
	var key [KeySize]byte
	rand.Read(key[:]) // never returns an error; crashes the process if the OS cannot provide randomness
	k := newKeyer(key[:])
	clear(key[:])
	return k
}

// newKeyer derives the HMAC states from key (at most one SHA-256 block).
func newKeyer(key []byte) *Keyer {
	var ipad, opad [sha256.BlockSize]byte
	copy(ipad[:], key)
	copy(opad[:], key)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	k := &Keyer{}
	k.stateLen = absorb(&k.inner, ipad[:])
	absorb(&k.outer, opad[:])
	clear(ipad[:])
	clear(opad[:])
	k.pool.New = func() any {
		h := sha256.New()
		return &scratch{h: h, u: h.(encoding.BinaryUnmarshaler)}
	}
	return k
}

// absorb stores into dst the marshaled SHA-256 state after writing block
// and returns its length.
func absorb(dst *[stateWords]atomic.Uint64, block []byte) int {
	h := sha256.New()
	h.Write(block)
	var buf [stateWords * 8]byte
	state, err := h.(encoding.BinaryAppender).AppendBinary(buf[:0])
	if err != nil || len(state) > len(buf) {
		// crypto/sha256 marshals its state in 108 bytes.
		panic("peer: unexpected sha256 state encoding")
	}
	for i := range dst {
		dst[i].Store(binary.LittleEndian.Uint64(buf[i*8:]))
	}
	clear(buf[:])
	return len(state)
}

// load restores sc's hash to the state held in src.
func (k *Keyer) load(sc *scratch, src *[stateWords]atomic.Uint64) {
	for i := range src {
		binary.LittleEndian.PutUint64(sc.state[i*8:], src[i].Load())
	}
	_ = sc.u.UnmarshalBinary(sc.state[:k.stateLen])
}

// Sum returns the fingerprint of a peer in domain: of addr when ok is
// true and addr is valid (it is canonicalized first, as [Normalize]
// does), of the shared unknown peer otherwise. Once Close has begun it
// returns the zero Digest (a call racing with Close returns either the
// right fingerprint or the zero Digest). Sum does not allocate.
func (k *Keyer) Sum(domain string, addr netip.Addr, ok bool) (d keyed.Digest) {
	if k.closed.Load() {
		return d
	}
	sc := k.pool.Get().(*scratch)
	// Inner hash: state(key^ipad) + message.
	k.load(sc, &k.inner)
	buf := sc.msg[:0]
	buf = append(buf, fingerprintPrefix...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(domain)))
	for len(domain) > 0 {
		if len(buf) == cap(buf) {
			sc.h.Write(buf)
			buf = buf[:0]
		}
		n := copy(buf[len(buf):cap(buf)], domain)
		buf, domain = buf[:len(buf)+n], domain[n:]
	}
	if cap(buf)-len(buf) < 17 {
		sc.h.Write(buf)
		buf = buf[:0]
	}
	if a := canonical(addr); !ok || !a.IsValid() {
		buf = append(buf, tagUnknown)
	} else if a.Is4() {
		b := a.As4()
		buf = append(append(buf, tagIPv4), b[:]...)
	} else {
		b := a.As16()
		buf = append(append(buf, tagIPv6), b[:]...)
	}
	sc.h.Write(buf)
	sc.h.Sum(sc.sum[:0])
	// Outer hash: state(key^opad) + inner digest.
	k.load(sc, &k.outer)
	sc.h.Write(sc.sum[:])
	sc.h.Sum(sc.sum[:0])
	d = sc.sum
	// Leave nothing derived from the key or the address in the pool.
	clear(sc.state[:k.stateLen])
	clear(sc.msg[:len(buf)])
	clear(sc.sum[:])
	sc.h.Reset()
	k.pool.Put(sc)
	// Close stores closed before zeroing the states, so a Sum that read
	// any zeroed word sees closed here and never returns a digest made
	// from a partly wiped key.
	if k.closed.Load() {
		return keyed.Digest{}
	}
	return d
}

// Close zeroes the key material. Later calls to Sum return the zero
// Digest. Close is idempotent.
func (k *Keyer) Close() {
	k.closed.Store(true)
	for i := range k.inner {
		k.inner[i].Store(0)
		k.outer[i].Store(0)
	}
}
