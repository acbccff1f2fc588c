package limit_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

// TestGCRAAdvanceSteps is TestGCRASteps on a bare TAT: the same decisions
// while time moves forward; going backwards is decided at the earlier
// instant as is (stricter, no ClockRegressed).
func TestGCRAAdvanceSteps(t *testing.T) {
	g := limit.GCRA{Rate: 1, Burst: 3} // T = 1s, tolerance 3s
	S := int64(sec)
	base := int64(1e15)
	tat := int64(limit.FullTAT)
	for i, st := range []struct {
		at   int64
		n    int64
		want limit.Decision
	}{
		{0, 0, allowed(3, 3, 0)}, // FullTAT is a full bucket
		{0, 1, allowed(3, 2, 1*sec)},
		{0, 2, allowed(3, 0, 3*sec)},
		{0, 1, rejected(3, 1*sec, 3*sec)},
		{0, 4, rejected(3, limit.InfDuration, 3*sec)},
		{S - 1, 1, rejected(3, ns, 2*sec+ns)},
		{S, 1, allowed(3, 0, 3*sec)},
		{S / 2, 1, rejected(3, 1*sec+sec/2, 3*sec+sec/2)}, // backwards: decided at S/2 itself
		{S / 2, 0, allowed(3, 0, 3*sec+sec/2)},
		{2*S + S/2, 1, allowed(3, 0, 2*sec+sec/2)},
		{10 * S, 0, allowed(3, 3, 0)},
		{10 * S, 3, allowed(3, 0, 3*sec)},
		{100 * 365 * 24 * 3600 * S, 2, allowed(3, 1, 2*sec)},
	} {
		now := base + st.at
		next, got := g.Advance(tat, now, st.n)
		if got != st.want {
			t.Fatalf("step %d: Advance(tat, base+%d, %d)\n got %+v\nwant %+v", i, st.at, st.n, got, st.want)
		}
		if (next != tat) != (got.Allowed && st.n > 0) {
			t.Fatalf("step %d: next %d, tat %d, decision %+v", i, next, tat, got)
		}
		tat = next
	}
	end := base + 100*365*24*3600*S + 2*S
	if g.ExpiredAt(tat, end-1) || !g.ExpiredAt(tat, end) {
		t.Fatal("bucket must be full (expired) exactly at tat")
	}
	if !g.ExpiredAt(limit.FullTAT, math.MinInt64+1) {
		t.Fatal("FullTAT is not expired")
	}
}

// AdvanceInto is Advance writing in place: the same next and the same
// decision, every field of a previously used Decision overwritten, on
// every branch (invalid parameters, query, n > Burst, refusal,
// admission).
func TestCompiledGCRAAdvanceInto(t *testing.T) {
	dirty := limit.Decision{Allowed: true, Limit: -1, Remaining: -2, RetryAfter: -3, ResetAfter: -4, ClockRegressed: true}
	base := int64(1e15)
	for _, g := range []limit.GCRA{{Rate: 1, Burst: 3}, {}} {
		c := g.Compile()
		S := int64(sec)
		for _, tat := range []int64{limit.FullTAT, base - S, base, base + S, base + 3*S} {
			for _, n := range []int64{-1, 0, 1, 2, 3, 4} {
				wantNext, want := c.Advance(tat, base, n)
				got := dirty
				if next := c.AdvanceInto(&got, tat, base, n); next != wantNext || got != want {
					t.Fatalf("%+v tat %d n %d: AdvanceInto = %d %+v, Advance = %d %+v", g, tat, n, next, got, wantNext, want)
				}
			}
		}
	}
}

func TestGCRAAdvanceInvalidFailsClosed(t *testing.T) {
	for _, g := range []limit.GCRA{{}, {Rate: math.Inf(1), Burst: 1}, {Rate: 1, Burst: -1}, {Rate: limit.MinRate, Burst: limit.MaxBurst}} {
		next, d := g.Advance(limit.FullTAT, 0, 1)
		if d.Allowed || d.RetryAfter != limit.InfDuration || next != limit.FullTAT {
			t.Errorf("%+v: got %+v, next %d", g, d, next)
		}
		var s limit.AtomicGCRAState
		if d := g.AllowAtomic(&s, 0, 1); d.Allowed || d.RetryAfter != limit.InfDuration || s.TAT() != limit.FullTAT {
			t.Errorf("%+v: AllowAtomic %+v", g, d)
		}
	}
}

func TestAtomicGCRAState(t *testing.T) {
	g := limit.GCRA{Rate: 10, Burst: 2} // T = 100ms
	var s limit.AtomicGCRAState
	if s.TAT() != limit.FullTAT {
		t.Fatalf("zero state TAT %d", s.TAT())
	}
	now := int64(-5e18) // far before the origin: still a full bucket
	if d := g.AllowAtomic(&s, now, 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("%+v", d)
	}
	if d := g.AllowAtomic(&s, now, 1); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("%+v", d)
	}
	if s.TAT() != now+int64(200*time.Millisecond) {
		t.Fatalf("TAT %d", s.TAT())
	}
	s.Reset()
	if d := g.AllowAtomic(&s, now, 2); !d.Allowed {
		t.Fatalf("after Reset: %+v", d)
	}
}

// TestAtomicGCRAExactUnderContention: at one instant, however many
// goroutines race, exactly Burst units are admitted, and over a run with
// time moving the total admitted is exactly what serial calls admit.
func TestAtomicGCRAExactUnderContention(t *testing.T) {
	g := limit.GCRA{Rate: 1000, Burst: 50}
	var s limit.AtomicGCRAState
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if g.AllowAtomic(&s, 0, 1).Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 {
		t.Fatalf("%d admitted at one instant, want 50", admitted.Load())
	}
	// Phases of 1..3 ms: each phase admits exactly what a serial run does.
	var ref limit.AtomicGCRAState
	limit.SetAtomicTAT(&ref, s.TAT())
	now := int64(0)
	for p := range 50 {
		now += int64(1+p%3) * int64(time.Millisecond)
		want := 0
		for range 8 * 20 {
			if g.AllowAtomic(&ref, now, 1).Allowed {
				want++
			}
		}
		admitted.Store(0)
		for range 8 {
			wg.Go(func() {
				for range 20 {
					if g.AllowAtomic(&s, now, 1).Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if int(admitted.Load()) != want || s.TAT() != ref.TAT() {
			t.Fatalf("phase %d: %d admitted (TAT %d), serial %d (TAT %d)", p, admitted.Load(), s.TAT(), want, ref.TAT())
		}
	}
}

func TestCompiledGCRA(t *testing.T) {
	var zero limit.CompiledGCRA
	if next, d := zero.Advance(limit.FullTAT, 0, 1); d.Allowed || d.RetryAfter != limit.InfDuration || next != limit.FullTAT {
		t.Fatalf("zero CompiledGCRA: %+v", d)
	}
	for _, n := range []int64{-1, 0, 1} {
		if next, ok := zero.Next(5, 0, n); ok || next != 5 {
			t.Fatalf("zero CompiledGCRA Next(n=%d): %d, %v", n, next, ok)
		}
	}
	g := limit.GCRA{Rate: 3, Burst: 7}
	c := g.Compile()
	if c.Burst() != 7 || c.Interval() != g.Interval() || c.Interval() != 333333333 {
		t.Fatalf("Compile: burst %d interval %v", c.Burst(), c.Interval())
	}
	if bad := (limit.GCRA{Rate: 0, Burst: 7}).Compile(); bad.Interval() != 0 || bad.Burst() != 7 {
		t.Fatalf("invalid: %+v", bad)
	}
	// Compiled and uncompiled decide alike (the model tests use Advance,
	// which compiles on every call).
	tat := int64(limit.FullTAT)
	for i := range 1000 {
		now := int64(i) * 1e8
		n1, d1 := c.Advance(tat, now, int64(i%3))
		n2, d2 := g.Advance(tat, now, int64(i%3))
		if n1 != n2 || d1 != d2 {
			t.Fatalf("step %d: compiled %d %+v, plain %d %+v", i, n1, d1, n2, d2)
		}
		if n3, ok := c.Next(tat, now, int64(i%3)); n3 != n1 || ok != d1.Allowed {
			t.Fatalf("step %d: Next %d %v, Advance %d %+v", i, n3, ok, n1, d1)
		}
		tat = n1
	}
}
