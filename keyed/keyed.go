// Package keyed is the bounded, sharded per-key state table behind every
// keyed limiter in Bulwark.
//
// TODO(keyed helper): replace the stub bodies; keep the exported contract.
package keyed

import (
	"errors"
	"hash/maphash"
	"time"
)

// ErrFull is returned when a new key cannot be inserted because the table
// is at capacity and the bounded reclaim scan found nothing expired. The
// caller must fail closed.
var ErrFull = errors.New("keyed: table full")

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("keyed: table closed")

// Config sizes a Table. All fields are validated by New.
type Config struct {
	// Capacity is the hard maximum number of entries. Required.
	Capacity int
	// ScanLimit is how many existing entries one insert may inspect to
	// reclaim expired ones. 0 means DefaultScanLimit.
	ScanLimit int
	// Shards is the number of independently locked shards, a power of two.
	// 0 picks a default suited to the machine.
	Shards int
}

// DefaultScanLimit is the number of entries an insert inspects by default
// (seed 000: "each new peer inspects at most 64 old entries").
const DefaultScanLimit = 64

// Hashable is a fixed-size key type. Hash must mix every byte of the key
// with seed (each table has its own random seed, so clients cannot craft
// keys that collide) and must not allocate.
type Hashable interface {
	comparable
	Hash(seed maphash.Seed) uint64
}

// Digest is a 32-byte key such as an HMAC-SHA-256 or SHA-256 output.
type Digest [32]byte

// Hash implements Hashable.
func (d Digest) Hash(seed maphash.Seed) uint64 { panic("unimplemented") }

// Table maps fixed-size comparable keys to values of type V with a hard
// capacity. It starts no goroutines and keeps no timers.
type Table[K Hashable, V any] struct {
	expired func(v *V, now time.Time) bool
}

// New returns an empty table. expired reports whether an entry may be
// reclaimed at now; it runs under a shard lock.
func New[K Hashable, V any](cfg Config, expired func(v *V, now time.Time) bool) (*Table[K, V], error) {
	panic("unimplemented")
}

// Do runs fn on the entry for key while holding its shard lock, inserting
// a zero V first (created == true) if the key is absent. If fn returns
// false the entry is removed. fn must be short and must not call back into
// the table. Do returns ErrFull or ErrClosed without calling fn.
func (t *Table[K, V]) Do(key K, now time.Time, fn func(v *V, created bool) (keep bool)) error {
	panic("unimplemented")
}

// Len returns the number of entries.
func (t *Table[K, V]) Len() int { panic("unimplemented") }

// Clear removes every entry.
func (t *Table[K, V]) Clear() { panic("unimplemented") }

// Close clears the table; later calls to Do return ErrClosed.
func (t *Table[K, V]) Close() { panic("unimplemented") }

// Key128 is a fixed-size key derived from a string by a [Hasher].
type Key128 [2]uint64

// Hash implements Hashable.
func (k Key128) Hash(seed maphash.Seed) uint64 { panic("unimplemented") }

// Hasher turns strings into Key128 values with per-process random seeds,
// so clients cannot craft colliding keys. The zero value is not usable;
// call NewHasher.
type Hasher struct{}

// NewHasher returns a hasher with fresh random seeds.
func NewHasher() Hasher { panic("unimplemented") }

// Sum hashes s without allocating.
func (h Hasher) Sum(s string) Key128 { panic("unimplemented") }
