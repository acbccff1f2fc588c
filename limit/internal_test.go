package limit

import (
	"testing"
	"time"
	"unsafe"
)

func TestStateSizes(t *testing.T) {
	if n := unsafe.Sizeof(FixedWindowState{}); n != 40 {
		t.Errorf("FixedWindowState is %d bytes, want 40", n)
	}
	if n := unsafe.Sizeof(GCRAState{}); n != 32 {
		t.Errorf("GCRAState is %d bytes, want 32", n)
	}
	if n := unsafe.Sizeof(RollingLogState{}); n != 56 {
		t.Errorf("RollingLogState is %d bytes, want 56", n)
	}
}

// A log that stays busy for years keeps its offsets below rebaseAfter and
// its ring at exactly Limit slots.
func TestRollingLogRebase(t *testing.T) {
	rl := RollingLog{Limit: 4, Window: MaxWindow}
	var s RollingLogState
	now := time.Now()
	start := now
	for i := range 10_000 {
		now = now.Add(MaxWindow/2 - time.Duration(i%3))
		if d := rl.Allow(&s, now); !d.Allowed {
			t.Fatalf("step %d: %+v", i, d)
		}
		for j := range s.Len() {
			if off := s.at(j); off < 0 || off > rebaseAfter {
				t.Fatalf("step %d: offset %d out of [0, %d]", i, off, int64(rebaseAfter))
			}
		}
		if len(s.ring) != rl.Limit {
			t.Fatalf("ring has %d slots, want %d", len(s.ring), rl.Limit)
		}
	}
	if s.Len() < 2 || s.Len() > 3 {
		t.Fatalf("Len %d, want 2 or 3", s.Len())
	}
	if n, _ := s.Newest(); !n.Equal(now) {
		t.Fatalf("Newest %v, want %v", n, now)
	}
	if now.Sub(start) < 100*365*24*time.Hour/20 {
		t.Fatalf("covered only %v", now.Sub(start))
	}
}

// A recycled state with a ring of another size is resized to Limit at the
// next admission, keeping its live entries.
func TestRollingLogResize(t *testing.T) {
	var s RollingLogState
	t0 := time.Unix(1e9, 0)
	RollingLog{Limit: 8, Window: time.Minute}.Allow(&s, t0)
	RollingLog{Limit: 8, Window: time.Minute}.Allow(&s, t0.Add(time.Second))
	rl := RollingLog{Limit: 3, Window: time.Minute}
	if d := rl.Allow(&s, t0.Add(2*time.Second)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("got %+v", d)
	}
	if len(s.ring) != 3 || s.Len() != 3 {
		t.Fatalf("ring %d slots, %d entries", len(s.ring), s.Len())
	}
	if o, _ := s.Oldest(); !o.Equal(t0) {
		t.Fatalf("Oldest %v", o)
	}
}
