package keyed

import (
	"strings"
	"testing"
)

// Sum2 is Sum in two words, for every length class of the hash.
func TestHasherSum2(t *testing.T) {
	h := NewHasher()
	for n := range 40 {
		s := strings.Repeat("k", n)
		a, b := h.Sum2(s)
		if k := h.Sum(s); k != (Key128{a, b}) {
			t.Fatalf("len %d: Sum %x, Sum2 %x %x", n, k, a, b)
		}
	}
}

// Each word of a key, on its own, depends on every byte of the string
// and on its length, in every length class (1-3, 4-7, 8-16 bytes: the
// short-string hash; 17 and more: maphash): flipping the low or the high
// bit of any byte, or padding with zero bytes, changes both words.
func TestHasherEveryByteAndLength(t *testing.T) {
	h := NewHasher()
	w0, w1 := map[uint64]string{}, map[uint64]string{}
	add := func(s string) {
		t.Helper()
		k := h.Sum(s)
		if o, dup := w0[k[0]]; dup {
			t.Fatalf("word 0 of %q equals that of %q", s, o)
		}
		if o, dup := w1[k[1]]; dup {
			t.Fatalf("word 1 of %q equals that of %q", s, o)
		}
		w0[k[0]], w1[k[1]] = s, s
	}
	for n := range 34 {
		add(strings.Repeat("\x00", n)) // zero padding: only the length differs
		if n == 0 {
			continue
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i)
		}
		add(string(b))
		for i := range b {
			for _, bit := range []byte{0x01, 0x80} {
				b[i] ^= bit
				add(string(b))
				b[i] ^= bit
			}
		}
	}
}

// Two hashers draw independent secrets for short and long strings.
func TestHasherSeedsPerHasher(t *testing.T) {
	h1, h2 := NewHasher(), NewHasher()
	for _, s := range []string{"", "a", "192.0.2.1", "0123456789abcdef", strings.Repeat("x", 17)} {
		a, b := h1.Sum(s), h2.Sum(s)
		if a[0] == b[0] || a[1] == b[1] {
			t.Errorf("%q: two hashers share a secret: %x %x", s, a, b)
		}
		if a[0] == a[1] {
			t.Errorf("%q: the two words use the same secret", s)
		}
	}
}

// Distinct strings get distinct keys, and Sum2 is Sum: a fuzzer over
// pairs of strings, which would find a flaw in how the short-string hash
// reads the bytes (a byte left out, two strings read alike).
func FuzzHasher(f *testing.F) {
	h := NewHasher()
	f.Add("", "\x00")
	f.Add("abc", "abcd")
	f.Add("1.2.3.4", "1.2.3.40")
	f.Add("0123456789abcdef", "0123456789abcdeg")
	f.Add("0123456789abcdefg", "0123456789abcdef")
	f.Fuzz(func(t *testing.T, s, u string) {
		ks, ku := h.Sum(s), h.Sum(u)
		if a, b := h.Sum2(s); ks != (Key128{a, b}) {
			t.Fatalf("Sum2(%q) != Sum", s)
		}
		if (s == u) != (ks == ku) {
			t.Fatalf("%q and %q: keys %x and %x", s, u, ks, ku)
		}
	})
}
