package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

func TestManualMovesOnlyWhenTold(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	m := clock.NewManual(start)
	if got := m.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	if got := m.Advance(1500 * time.Millisecond); !got.Equal(start.Add(1500 * time.Millisecond)) {
		t.Fatalf("Advance = %v", got)
	}
	if got := m.Advance(-2 * time.Second); !got.Equal(start.Add(-500 * time.Millisecond)) {
		t.Fatalf("Advance backwards = %v", got)
	}
	m.Set(start)
	if got := m.Now(); !got.Equal(start) {
		t.Fatalf("after Set, Now() = %v", got)
	}
}

func TestManualConcurrent(t *testing.T) {
	m := clock.NewManual(time.Unix(0, 0))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				m.Advance(time.Nanosecond)
				_ = m.Now()
			}
		}()
	}
	wg.Wait()
	if got := m.Now(); !got.Equal(time.Unix(0, 8000)) {
		t.Fatalf("Now() = %v, want 8000ns after epoch", got)
	}
}

func TestOrDefaultsToReal(t *testing.T) {
	if _, ok := clock.Or(nil).(clock.Real); !ok {
		t.Fatal("Or(nil) is not the real clock")
	}
	m := clock.NewManual(time.Unix(5, 0))
	if clock.Or(m) != clock.Clock(m) {
		t.Fatal("Or(m) did not return m")
	}
	a := clock.Real{}.Now()
	b := clock.Real{}.Now()
	if b.Before(a) {
		t.Fatal("real clock went backwards")
	}
}
