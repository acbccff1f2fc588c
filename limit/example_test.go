package limit_test

import (
	"fmt"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

// A per-peer fixed window: two requests per minute. The window starts at
// the first admission and rolls over exactly one Window later.
func ExampleFixedWindow() {
	fw := limit.FixedWindow{Limit: 2, Window: time.Minute}
	if err := fw.Validate(); err != nil {
		panic(err)
	}
	var s limit.FixedWindowState // usually a value inside a keyed table
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 10 * time.Second, 20500 * time.Millisecond, time.Minute} {
		d := fw.AllowN(&s, t0.Add(at), 1)
		fmt.Printf("t=%-6v allowed=%-5v remaining=%d Retry-After=%d\n", at, d.Allowed, d.Remaining, d.RetryAfterSeconds())
	}
	// Time going backwards is reported, and decided at the latest instant.
	d := fw.AllowN(&s, t0.Add(30*time.Second), 1)
	fmt.Println("clock regressed:", d.ClockRegressed, "allowed:", d.Allowed)
	// Output:
	// t=0s     allowed=true  remaining=1 Retry-After=0
	// t=10s    allowed=true  remaining=0 Retry-After=0
	// t=20.5s  allowed=false remaining=0 Retry-After=40
	// t=1m0s   allowed=true  remaining=1 Retry-After=0
	// clock regressed: true allowed: true
}

// Seed 003's password-login window: five attempts per rolling minute. The
// next slot is the oldest attempt plus the window; rejected attempts do not
// push it back.
func ExampleRollingLog() {
	rl := limit.RollingLog{Limit: 5, Window: time.Minute}
	if err := rl.Validate(); err != nil {
		panic(err)
	}
	var s limit.RollingLogState
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		rl.Allow(&s, t0.Add(time.Duration(i)*time.Second))
	}
	for _, at := range []time.Duration{5 * time.Second, 30 * time.Second, time.Minute} {
		now := t0.Add(at)
		d := rl.Allow(&s, now)
		oldest, _ := s.Oldest()
		fmt.Printf("t=%-5v allowed=%-5v remaining=%d Retry-After=%-2d next slot at %s\n",
			at, d.Allowed, d.Remaining, d.RetryAfterSeconds(), oldest.Add(rl.Window).Format(time.TimeOnly))
	}
	// Output:
	// t=5s    allowed=false remaining=0 Retry-After=55 next slot at 00:01:00
	// t=30s   allowed=false remaining=0 Retry-After=30 next slot at 00:01:00
	// t=1m0s  allowed=true  remaining=0 Retry-After=0  next slot at 00:01:01
}

// A route limit as in seed 004: qps 100 with a burst of 200, with a cost
// per request.
func ExampleGCRA() {
	g := limit.GCRA{Rate: 100, Burst: 200}
	if err := g.Validate(); err != nil {
		panic(err)
	}
	fmt.Println("emission interval:", g.Interval())
	var s limit.GCRAState
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := g.AllowN(&s, t0, 150)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	d = g.AllowN(&s, t0, 60)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	d = g.AllowN(&s, t0.Add(100*time.Millisecond), 60)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// A cost above Burst can never be admitted.
	d = g.AllowN(&s, t0, 201)
	fmt.Println(d.Allowed, d.RetryAfter == limit.InfDuration)
	// Output:
	// emission interval: 10ms
	// true 50 1.5s
	// false 0 100ms
	// true 0 2s
	// false true
}

// Validate names the field and its allowed range.
func ExampleGCRA_Validate() {
	err := limit.GCRA{Rate: 100, Burst: 0}.Validate()
	fmt.Println(err)
	// Output: limit: GCRA.Burst 0 out of range [1, 1000000000]
}

// One bucket shared by many goroutines, without a lock: the TAT is one
// atomic word advanced by compare-and-swap, and a rejection writes
// nothing.
func ExampleGCRA_AllowAtomic() {
	g := limit.GCRA{Rate: 10, Burst: 3} // 10/s, bursts of 3
	var s limit.AtomicGCRAState         // zero: a full bucket
	now := int64(0)                     // Mono nanoseconds, e.g. clock.Nanos(c)
	for range 4 {
		d := g.AllowAtomic(&s, now, 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	now += int64(100 * time.Millisecond) // one emission interval later
	fmt.Println(g.AllowAtomic(&s, now, 1).Allowed)
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 100ms
	// true
}
