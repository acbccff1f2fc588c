package limit_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

var t0 = time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC)

const (
	ns  = time.Nanosecond
	sec = time.Second
)

// step is one row of an x/time/rate style table: a call at t0+at with cost
// n and the exact decision expected.
type step struct {
	at   time.Duration
	n    int64
	want limit.Decision
}

func allowed(lim, rem int64, reset time.Duration) limit.Decision {
	return limit.Decision{Allowed: true, Limit: lim, Remaining: rem, ResetAfter: reset}
}

func rejected(lim int64, retry, reset time.Duration) limit.Decision {
	return limit.Decision{Limit: lim, RetryAfter: retry, ResetAfter: reset}
}

func regressed(d limit.Decision) limit.Decision {
	d.ClockRegressed = true
	return d
}

func TestFixedWindowSteps(t *testing.T) {
	fw := limit.FixedWindow{Limit: 3, Window: 10 * sec}
	var s limit.FixedWindowState
	for i, st := range []step{
		{0, 0, allowed(3, 3, 0)}, // query on an empty state
		{0, 1, allowed(3, 2, 10*sec)},
		{1 * sec, 2, allowed(3, 0, 9*sec)},
		{2 * sec, 1, rejected(3, 8*sec, 8*sec)},
		{2 * sec, 0, allowed(3, 0, 8*sec)}, // query on a full window
		{2 * sec, 4, rejected(3, limit.InfDuration, 8*sec)},
		{10*sec - ns, 1, rejected(3, ns, ns)},          // last nanosecond of the window
		{10 * sec, 1, allowed(3, 2, 10*sec)},           // window rolls over at start+Window exactly
		{5 * sec, 1, regressed(allowed(3, 1, 10*sec))}, // backwards: decided at 10s
		{10 * sec, 1, allowed(3, 0, 10*sec)},
		{9 * sec, 1, regressed(rejected(3, 10*sec, 10*sec))}, // the wait never shrinks
		{15 * sec, 1, rejected(3, 5*sec, 5*sec)},
		{14 * sec, 1, rejected(3, 6*sec, 6*sec)},               // the rejection at 15s was not an observation
		{20 * sec, 3, allowed(3, 0, 10*sec)},                   // cost == Limit fits a fresh window
		{100 * 365 * 24 * time.Hour, 1, allowed(3, 2, 10*sec)}, // huge jump
		{0, -5, regressed(allowed(3, 2, 10*sec))},
	} {
		got := fw.AllowN(&s, t0.Add(st.at), st.n)
		if got != st.want {
			t.Fatalf("step %d: AllowN(t0+%v, %d)\n got %+v\nwant %+v", i, st.at, st.n, got, st.want)
		}
	}
}

// A rejected decision is not an observation: only admissions move the
// instant ClockRegressed compares against.
func TestRejectionsAreNotObserved(t *testing.T) {
	fw := limit.FixedWindow{Limit: 1, Window: 10 * sec}
	var fs limit.FixedWindowState
	fw.AllowN(&fs, t0, 1)
	before := fs
	if d := fw.AllowN(&fs, t0.Add(5*sec), 1); d.Allowed || fs != before {
		t.Fatalf("rejection changed state: %+v", d)
	}
	if d := fw.AllowN(&fs, t0.Add(3*sec), 1); d.ClockRegressed || d.RetryAfter != 7*sec {
		t.Fatalf("got %+v, want rejection at 3s without ClockRegressed", d)
	}

	g := limit.GCRA{Rate: 1, Burst: 1}
	var gs limit.GCRAState
	g.AllowN(&gs, t0, 1)
	gBefore := gs
	if d := g.AllowN(&gs, t0.Add(sec/2), 1); d.Allowed || gs != gBefore {
		t.Fatalf("rejection changed state: %+v", d)
	}
	if d := g.AllowN(&gs, t0.Add(sec/4), 1); d.ClockRegressed {
		t.Fatalf("got %+v, want no ClockRegressed", d)
	}

	rl := limit.RollingLog{Limit: 1, Window: 10 * sec}
	var rs limit.RollingLogState
	rl.Allow(&rs, t0)
	if d := rl.Allow(&rs, t0.Add(5*sec)); d.Allowed || rs.Len() != 1 {
		t.Fatalf("got %+v len %d", d, rs.Len())
	}
	if d := rl.Allow(&rs, t0.Add(3*sec)); d.ClockRegressed || d.RetryAfter != 7*sec {
		t.Fatalf("got %+v, want rejection at 3s without ClockRegressed", d)
	}
}

func TestFixedWindowRefund(t *testing.T) {
	fw := limit.FixedWindow{Limit: 2, Window: 10 * sec}
	var s limit.FixedWindowState
	if s.Refund(time.Time{}, 1) {
		t.Fatal("refund on an empty state applied")
	}
	fw.AllowN(&s, t0, 2)
	first := s.WindowStart()
	if !first.Equal(t0) {
		t.Fatalf("WindowStart %v, want %v", first, t0)
	}
	if s.Refund(first, 0) || s.Refund(first, -1) {
		t.Fatal("refund of n <= 0 applied")
	}
	if s.Refund(first.Add(ns), 1) {
		t.Fatal("refund with another start applied")
	}
	if !s.Refund(first, 1) || s.Count() != 1 {
		t.Fatalf("refund of 1 did not apply: count %d", s.Count())
	}
	if d := fw.AllowN(&s, t0.Add(sec), 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("refunded unit not reusable: %+v", d)
	}
	if !s.Refund(first, 100) || s.Count() != 0 {
		t.Fatalf("refund must clamp at zero, count %d", s.Count())
	}
	// A window that ended but was not replaced still takes the refund,
	// harmlessly: the next admission starts a new window anyway.
	if !s.Refund(first, 1) {
		t.Fatal("refund into the current window failed")
	}
	if d := fw.AllowN(&s, t0.Add(10*sec), 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("new window: %+v", d)
	}
	if s.Refund(first, 1) {
		t.Fatal("refund into a rolled-over window applied")
	}
	if s.Count() != 1 {
		t.Fatalf("count %d after stale refund, want 1", s.Count())
	}
	s.Reset()
	if s.Refund(t0.Add(10*sec), 1) || !s.WindowStart().IsZero() || !fw.Expired(&s, t0) {
		t.Fatal("reset state is not empty")
	}
}

// Seed 003's login window: five per minute.
func TestRollingLogSteps(t *testing.T) {
	rl := limit.RollingLog{Limit: 5, Window: 60 * sec}
	var s limit.RollingLogState
	for i, st := range []step{
		{0, 1, allowed(5, 4, 60*sec)},
		{1 * sec, 1, allowed(5, 3, 60*sec)},
		{2 * sec, 1, allowed(5, 2, 60*sec)},
		{3 * sec, 1, allowed(5, 1, 60*sec)},
		{4 * sec, 1, allowed(5, 0, 60*sec)},
		{5 * sec, 1, rejected(5, 55*sec, 59*sec)},            // next slot = oldest + window
		{30 * sec, 1, rejected(5, 30*sec, 34*sec)},           // rejections never extend the wait
		{60*sec - ns, 1, rejected(5, ns, 4*sec+ns)},          // one nanosecond early
		{60 * sec, 1, allowed(5, 0, 60*sec)},                 // the timestamp at 0 is <= now-window: dropped
		{60 * sec, 1, rejected(5, 1*sec, 60*sec)},            // next slot is the one taken at 1s
		{30 * sec, 1, regressed(rejected(5, 1*sec, 60*sec))}, // backwards: decided at 60s
		{61*sec + 500*time.Millisecond, 1, allowed(5, 0, 60*sec)},
		{200 * sec, 1, allowed(5, 4, 60*sec)}, // everything left: empty log again
		{100 * 365 * 24 * time.Hour, 1, allowed(5, 4, 60*sec)},
	} {
		got := rl.Allow(&s, t0.Add(st.at))
		if got != st.want {
			t.Fatalf("step %d: Allow(t0+%v)\n got %+v\nwant %+v", i, st.at, got, st.want)
		}
	}
}

func TestRollingLogAccessors(t *testing.T) {
	rl := limit.RollingLog{Limit: 3, Window: 60 * sec}
	var s limit.RollingLogState
	if _, ok := s.Oldest(); ok {
		t.Fatal("empty log has an oldest entry")
	}
	if _, ok := s.Newest(); ok {
		t.Fatal("empty log has a newest entry")
	}
	for _, at := range []time.Duration{0, 10 * sec, 20 * sec, 30 * sec} {
		rl.Allow(&s, t0.Add(at))
	}
	o, _ := s.Oldest()
	n, _ := s.Newest()
	if s.Len() != 3 || !o.Equal(t0) || !n.Equal(t0.Add(20*sec)) {
		t.Fatalf("Len %d Oldest %v Newest %v", s.Len(), o, n)
	}
	// The login layer's next-slot instant: Oldest()+Window.
	d := rl.Allow(&s, t0.Add(30*sec))
	if next := t0.Add(30 * sec).Add(d.RetryAfter); !next.Equal(o.Add(rl.Window)) {
		t.Fatalf("next slot %v, want %v", next, o.Add(rl.Window))
	}
	if rl.Expired(&s, t0.Add(80*sec-ns)) || !rl.Expired(&s, t0.Add(80*sec)) {
		t.Fatal("log must expire exactly at newest+Window")
	}
	if rl.Expired(&s, t0) {
		t.Fatal("an instant before the newest entry is never expired")
	}
	s.Reset()
	if s.Len() != 0 || !rl.Expired(&s, t0) {
		t.Fatal("reset log not empty")
	}
	if d := rl.Allow(&s, t0); !d.Allowed || d.ClockRegressed || d.Remaining != 2 {
		t.Fatalf("after Reset: %+v", d)
	}
}

// Lowering Limit on a populated state, then raising it again.
func TestRollingLogLimitChange(t *testing.T) {
	var s limit.RollingLogState
	big := limit.RollingLog{Limit: 5, Window: 60 * sec}
	for i := range 5 {
		big.Allow(&s, t0.Add(time.Duration(i)*sec))
	}
	small := limit.RollingLog{Limit: 2, Window: 60 * sec}
	// Five entries, limit two: a slot frees when the 4th oldest (3s) leaves.
	if d := small.Allow(&s, t0.Add(10*sec)); d.Allowed || d.RetryAfter != 53*sec || d.ResetAfter != 54*sec {
		t.Fatalf("got %+v", d)
	}
	if d := small.Allow(&s, t0.Add(63*sec)); !d.Allowed || d.Remaining != 0 || s.Len() != 2 {
		t.Fatalf("got %+v len %d", d, s.Len())
	}
	if d := big.Allow(&s, t0.Add(63*sec)); !d.Allowed || d.Remaining != 2 || s.Len() != 3 {
		t.Fatalf("got %+v len %d", d, s.Len())
	}
}

func TestGCRASteps(t *testing.T) {
	g := limit.GCRA{Rate: 1, Burst: 3} // T = 1s, tolerance 3s
	var s limit.GCRAState
	for i, st := range []step{
		{0, 0, allowed(3, 3, 0)}, // a zero state is a full bucket
		{0, 1, allowed(3, 2, 1*sec)},
		{0, 2, allowed(3, 0, 3*sec)},
		{0, 1, rejected(3, 1*sec, 3*sec)},
		{0, 4, rejected(3, limit.InfDuration, 3*sec)}, // cost > Burst: never
		{sec - ns, 1, rejected(3, ns, 2*sec+ns)},
		{sec, 1, allowed(3, 0, 3*sec)},
		{sec / 2, 1, regressed(rejected(3, 1*sec, 3*sec))}, // backwards: decided at 1s
		{sec / 2, 0, regressed(allowed(3, 0, 3*sec))},
		{2*sec + sec/2, 1, allowed(3, 0, 2*sec+sec/2)}, // Remaining floors 0.5 to 0
		{10 * sec, 0, allowed(3, 3, 0)},
		{10 * sec, 3, allowed(3, 0, 3*sec)},
		{100 * 365 * 24 * time.Hour, 2, allowed(3, 1, 2*sec)},
	} {
		got := g.AllowN(&s, t0.Add(st.at), st.n)
		if got != st.want {
			t.Fatalf("step %d: AllowN(t0+%v, %d)\n got %+v\nwant %+v", i, st.at, st.n, got, st.want)
		}
	}
	if g.Expired(&s, t0.Add(100*365*24*time.Hour+2*sec-ns)) || !g.Expired(&s, t0.Add(100*365*24*time.Hour+2*sec)) {
		t.Fatal("bucket must be full (expired) exactly at tat")
	}
	s.Reset()
	if !g.Expired(&s, t0) {
		t.Fatal("reset bucket not full")
	}
}

func TestGCRAInterval(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want time.Duration
	}{
		{1, sec},
		{3, 333_333_333},
		{1.5, 666_666_667},
		{7, 142_857_143},
		{limit.MaxRate, 1},
		{limit.MinRate, limit.Year},
		{0, 0},
		{-1, 0},
		{math.NaN(), 0},
		{math.Inf(1), 0},
		{2e9, 0},
	} {
		if got := (limit.GCRA{Rate: tc.rate, Burst: 1}).Interval(); got != tc.want {
			t.Errorf("Interval(Rate %v) = %d, want %d", tc.rate, got, tc.want)
		}
	}
}

// TestGCRAEffectiveRate bounds the drift that rounding the emission
// interval causes, against a float model that uses Rate directly: a client
// that retries exactly when told gets Burst + floor(H/T) units in H, and
// that differs from Burst + H*Rate by at most 1 + H*|1/T - Rate/1e9|, where
// |T - 1e9/Rate| <= 0.5ns.
func TestGCRAEffectiveRate(t *testing.T) {
	for _, rate := range []float64{3, 7, 1000, 333_333_333, 1.0 / 7} {
		g := limit.GCRA{Rate: rate, Burst: 10}
		T := g.Interval()
		horizon := 5000 * T
		var s limit.GCRAState
		now, got := t0, int64(0)
		for now.Sub(t0) <= horizon {
			d := g.AllowN(&s, now, 1)
			if d.Allowed {
				got++
				continue
			}
			now = now.Add(d.RetryAfter)
		}
		h := float64(horizon)
		float := float64(g.Burst) + h*rate/1e9
		tol := 1 + h*math.Abs(1/float64(T)-rate/1e9)
		if math.Abs(float64(got)-float) > tol {
			t.Errorf("rate %v: %d admitted in %v, float model %.3f ± %.3f", rate, got, horizon, float, tol)
		}
		if want := g.Burst + int64(horizon/T); got != want {
			t.Errorf("rate %v: %d admitted, want %d", rate, got, want)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    limit.Decision
		want int64
	}{
		{limit.Decision{Allowed: true}, 0},
		{limit.Decision{RetryAfter: ns}, 1},
		{limit.Decision{RetryAfter: sec}, 1},
		{limit.Decision{RetryAfter: sec + ns}, 2},
		{limit.Decision{RetryAfter: 55 * sec}, 55},
		{limit.Decision{RetryAfter: 0}, 1},
		{limit.Decision{RetryAfter: limit.InfDuration}, 9_223_372_037},
	} {
		if got := tc.d.RetryAfterSeconds(); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d.RetryAfter, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		field string
		msg   string
	}{
		{"fw ok", limit.FixedWindow{Limit: 1, Window: 1}.Validate(), "", ""},
		{"fw max", limit.FixedWindow{Limit: limit.MaxLimit, Window: limit.MaxWindow}.Validate(), "", ""},
		{"fw limit 0", limit.FixedWindow{Limit: 0, Window: sec}.Validate(), "FixedWindow.Limit",
			"limit: FixedWindow.Limit 0 out of range [1, 1000000000]"},
		{"fw limit big", limit.FixedWindow{Limit: limit.MaxLimit + 1, Window: sec}.Validate(), "FixedWindow.Limit",
			"limit: FixedWindow.Limit 1000000001 out of range [1, 1000000000]"},
		{"fw window 0", limit.FixedWindow{Limit: 1}.Validate(), "FixedWindow.Window",
			"limit: FixedWindow.Window 0s out of range [1ns, 24h0m0s]"},
		{"fw window big", limit.FixedWindow{Limit: 1, Window: limit.MaxWindow + 1}.Validate(), "FixedWindow.Window",
			"limit: FixedWindow.Window 24h0m0.000000001s out of range [1ns, 24h0m0s]"},
		{"rl ok", limit.RollingLog{Limit: limit.MaxRollingLimit, Window: limit.MaxWindow}.Validate(), "", ""},
		{"rl limit", limit.RollingLog{Limit: limit.MaxRollingLimit + 1, Window: sec}.Validate(), "RollingLog.Limit",
			"limit: RollingLog.Limit 10001 out of range [1, 10000]"},
		{"rl window", limit.RollingLog{Limit: 5, Window: -sec}.Validate(), "RollingLog.Window",
			"limit: RollingLog.Window -1s out of range [1ns, 24h0m0s]"},
		{"gcra ok", limit.GCRA{Rate: 100, Burst: 200}.Validate(), "", ""},
		{"gcra rate 0", limit.GCRA{Rate: 0, Burst: 1}.Validate(), "GCRA.Rate",
			"limit: GCRA.Rate 0 out of range [3.1709791983764586e-08, 1e+09]"},
		{"gcra rate nan", limit.GCRA{Rate: math.NaN(), Burst: 1}.Validate(), "GCRA.Rate",
			"limit: GCRA.Rate NaN out of range [3.1709791983764586e-08, 1e+09]"},
		{"gcra burst 0", limit.GCRA{Rate: 1, Burst: 0}.Validate(), "GCRA.Burst",
			"limit: GCRA.Burst 0 out of range [1, 1000000000]"},
		{"gcra refill", limit.GCRA{Rate: 1, Burst: 40_000_000}.Validate(), "GCRA refill time Burst/Rate",
			"limit: GCRA refill time Burst/Rate 11111h6m40s out of range [1ns, 8784h0m0s]"},
		{"gcra refill max", limit.GCRA{Rate: 1, Burst: int64(limit.MaxRefill / sec)}.Validate(), "", ""},
	} {
		if tc.msg == "" {
			if tc.err != nil {
				t.Errorf("%s: unexpected error %v", tc.name, tc.err)
			}
			continue
		}
		var re *limit.RangeError
		if !errors.Is(tc.err, limit.ErrInvalid) || !errors.As(tc.err, &re) {
			t.Errorf("%s: error %v does not wrap ErrInvalid as *RangeError", tc.name, tc.err)
			continue
		}
		if re.Field != tc.field || tc.err.Error() != tc.msg {
			t.Errorf("%s: got field %q error %q\nwant field %q error %q", tc.name, re.Field, tc.err, tc.field, tc.msg)
		}
	}
}

// Parameters that fail Validate reject everything and touch nothing.
func TestInvalidParametersFailClosed(t *testing.T) {
	for _, fw := range []limit.FixedWindow{{}, {Limit: -1, Window: sec}, {Limit: 1, Window: -1}, {Limit: math.MaxInt64, Window: sec}} {
		var s limit.FixedWindowState
		d := fw.AllowN(&s, t0, 1)
		if d.Allowed || d.RetryAfter != limit.InfDuration || s != (limit.FixedWindowState{}) {
			t.Errorf("%+v: got %+v", fw, d)
		}
	}
	for _, rl := range []limit.RollingLog{{}, {Limit: 1 << 40, Window: sec}, {Limit: 1, Window: 0}} {
		var s limit.RollingLogState
		d := rl.Allow(&s, t0)
		if d.Allowed || d.RetryAfter != limit.InfDuration || s.Len() != 0 {
			t.Errorf("%+v: got %+v", rl, d)
		}
	}
	for _, g := range []limit.GCRA{{}, {Rate: math.Inf(1), Burst: 1}, {Rate: 1, Burst: -1}, {Rate: limit.MinRate, Burst: limit.MaxBurst}} {
		var s limit.GCRAState
		d := g.AllowN(&s, t0, 1)
		if d.Allowed || d.RetryAfter != limit.InfDuration || s != (limit.GCRAState{}) {
			t.Errorf("%+v: got %+v", g, d)
		}
	}
}

// Extreme instants: the zero time, far past and far future, where Sub
// saturates. Nothing panics, a far-future instant starts afresh and going
// back from it is a regression.
func TestExtremeInstants(t *testing.T) {
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	past := time.Date(-9999, 1, 1, 0, 0, 0, 0, time.UTC)

	fw := limit.FixedWindow{Limit: 1, Window: sec}
	var fs limit.FixedWindowState
	if d := fw.AllowN(&fs, time.Time{}, 1); !d.Allowed {
		t.Fatalf("zero time: %+v", d)
	}
	if d := fw.AllowN(&fs, time.Time{}, 1); d.Allowed || d.RetryAfter != sec {
		t.Fatalf("zero time again: %+v (the zero instant must not look like an empty state)", d)
	}
	if d := fw.AllowN(&fs, far, 1); !d.Allowed || d.ClockRegressed {
		t.Fatalf("far future: %+v", d)
	}
	if d := fw.AllowN(&fs, past, 1); d.Allowed || !d.ClockRegressed || d.RetryAfter != sec {
		t.Fatalf("far past after far future: %+v", d)
	}

	rl := limit.RollingLog{Limit: 1, Window: sec}
	var rs limit.RollingLogState
	for _, now := range []time.Time{time.Time{}, far} {
		if d := rl.Allow(&rs, now); !d.Allowed || d.ClockRegressed {
			t.Fatalf("%v: %+v", now, d)
		}
	}
	if d := rl.Allow(&rs, past); d.Allowed || !d.ClockRegressed || d.RetryAfter != sec {
		t.Fatalf("far past after far future: %+v", d)
	}
	if n, _ := rs.Newest(); !n.Equal(far) {
		t.Fatalf("Newest %v, want %v", n, far)
	}

	g := limit.GCRA{Rate: 1, Burst: 1}
	var gs limit.GCRAState
	if d := g.AllowN(&gs, past, 1); !d.Allowed {
		t.Fatalf("far past: %+v", d)
	}
	if d := g.AllowN(&gs, past, 1); d.Allowed || d.RetryAfter != sec {
		t.Fatalf("far past again: %+v", d)
	}
	if d := g.AllowN(&gs, far, 1); !d.Allowed || d.ClockRegressed {
		t.Fatalf("far future: %+v", d)
	}
	if d := g.AllowN(&gs, past, 1); d.Allowed || !d.ClockRegressed || d.RetryAfter != sec {
		t.Fatalf("far past after far future: %+v", d)
	}
}

func TestNoRaceAllocations(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation changes allocation counts")
	}
	now := t0
	fw := limit.FixedWindow{Limit: 100, Window: sec}
	var fs limit.FixedWindowState
	g := limit.GCRA{Rate: 100, Burst: 10}
	var gs limit.GCRAState
	rl := limit.RollingLog{Limit: 100, Window: sec}
	var rs limit.RollingLogState

	if n := testing.AllocsPerRun(100, func() {
		now = now.Add(3 * time.Millisecond)
		fw.AllowN(&fs, now, 1)
		g.AllowN(&gs, now, 1)
	}); n != 0 {
		t.Errorf("FixedWindow+GCRA: %v allocs per call", n)
	}
	var as limit.AtomicGCRAState
	tat, mono := int64(limit.FullTAT), int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		mono += int64(3 * time.Millisecond)
		tat, _ = g.Advance(tat, mono, 1)
		g.AllowAtomic(&as, mono, 1)
	}); n != 0 {
		t.Errorf("Advance+AllowAtomic: %v allocs per call", n)
	}
	// The rolling log allocates its ring once, at the first admission.
	if n := testing.AllocsPerRun(100, func() {
		var fresh limit.RollingLogState
		rl.Allow(&fresh, now)
	}); n != 1 {
		t.Errorf("first Allow: %v allocs, want 1", n)
	}
	rl.Allow(&rs, now)
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(3 * time.Millisecond)
		rl.Allow(&rs, now)
	}); n != 0 {
		t.Errorf("RollingLog: %v allocs per call on an existing state", n)
	}
	rs.Reset()
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(3 * time.Millisecond)
		rl.Allow(&rs, now)
	}); n != 0 {
		t.Errorf("RollingLog after Reset: %v allocs per call", n)
	}
}
