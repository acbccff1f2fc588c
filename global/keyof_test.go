package global_test

import (
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/global"
)

// KeyOf's digests are L2's bucket names, shared by every replica (of
// every version): they never change. The vectors were computed by the
// first implementation (sha256.New over the same bytes).
func TestKeyOfIsStable(t *testing.T) {
	for _, c := range []struct {
		name, key string
		want      global.Key
	}{
		{"r", "tenant", global.Key{0x31372aa2b54bd544, 0xb7287cb73b88f6f3}},
		{"r/all/key:client_ip/1e+06/1000000", "a:127.0.0.1", global.Key{0x4a1f5e78eec655d4, 0x97903780c6fcd3e1}},
		{strings.Repeat("n", 128), strings.Repeat("k", 500), global.Key{0xcdf2078adecf9f5d, 0x1ad1d68a3374b352}},
	} {
		if got := global.KeyOf(c.name, c.key); got != c.want {
			t.Errorf("KeyOf(%.20q, %.20q) = %#x, want %#x", c.name, c.key, got, c.want)
		}
	}
}

// KeyOf hashes on the stack: a refill allocates nothing for its key.
// (Run without -race by scripts/test: the race detector allocates.)
func TestNoRaceKeyOfAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { global.KeyOf("r/all/key:client_ip/1e+06/1000000", "a:127.0.0.1") }); n != 0 {
		t.Errorf("KeyOf allocates %v times", n)
	}
}
