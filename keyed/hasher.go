package keyed

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// Hasher turns strings into Key128 values with per-process random seeds,
// so clients cannot craft colliding keys. Distinct strings collide only
// with probability about 2^-128 for a client that does not know the
// seeds: each word of a Key128 is an independently seeded 64-bit hash.
// A Hasher is safe for concurrent use. The zero value is not usable (Sum
// panics); call NewHasher.
//
// Strings of up to 16 bytes (client addresses, short names) are hashed
// with the wyhash construction that Go's runtime uses for map keys where
// AES instructions are missing: the string's bytes, in two words, are
// each XORed with a secret and multiplied together (the 128-bit product's
// halves XORed), then mixed once more with the length under a third
// secret; the two words of the key run this with independent random
// secrets. That costs four multiplications and no call. Longer strings
// go through [maphash.String] under two independent seeds. The secrets
// and seeds are drawn from the runtime's random source when NewHasher
// runs and never leave the process.
type Hasher struct {
	s0, s1 maphash.Seed
	k      *[6]uint64 // secrets of the short-string hash
}

// NewHasher returns a hasher with fresh random seeds.
func NewHasher() Hasher {
	h := Hasher{s0: maphash.MakeSeed(), s1: maphash.MakeSeed(), k: new([6]uint64)}
	seed := maphash.MakeSeed()
	for i := range h.k {
		h.k[i] = maphash.Comparable(seed, i)
	}
	return h
}

// Sum hashes s without allocating.
func (h Hasher) Sum(s string) Key128 {
	a, b := h.Sum2(s)
	return Key128{a, b}
}

// Sum2 returns the two words of Sum(s): Key128{Sum2(s)} == Sum(s). Hot
// paths use it to build the key in place (an array returned by a call
// goes through memory; two words come back in registers).
func (h Hasher) Sum2(s string) (uint64, uint64) {
	n := len(s)
	if n > 16 {
		return maphash.String(h.s0, s), maphash.String(h.s1, s)
	}
	// a and b hold every byte of s, a function of s that is one-to-one
	// for each length n (the wyhash reads; the length goes into the final
	// mix).
	p := unsafe.Pointer(unsafe.StringData(s))
	var a, b uint64
	switch {
	case n >= 8:
		a = *(*uint64)(p)
		b = *(*uint64)(unsafe.Add(p, n-8))
	case n >= 4:
		a = uint64(*(*uint32)(p))<<32 | uint64(*(*uint32)(unsafe.Add(p, n-4)))
	case n > 0:
		a = uint64(*(*byte)(p))<<16 | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))
	}
	k := h.k
	l := uint64(n)
	return mix(mix(a^k[0], b^k[1]), l^k[2]), mix(mix(a^k[3], b^k[4]), l^k[5])
}

// mix is the folded multiply: the halves of the 128-bit product XORed.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}
