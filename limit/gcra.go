package limit

import (
	"math/bits"
	"time"
)

// Bounds on GCRA parameters, checked by GCRA.Validate.
const (
	// MinRate is the lowest GCRA.Rate accepted: one unit per Year.
	MinRate = 1.0 / (365 * 24 * 60 * 60)
	// MaxRate is the highest GCRA.Rate accepted: one unit per nanosecond.
	MaxRate = 1e9
	// MaxBurst is the largest GCRA.Burst accepted.
	MaxBurst = 1_000_000_000
	// MaxRefill is the longest time an empty GCRA bucket may take to refill
	// (Burst emission intervals): 366 days, so that a rate per Year fits
	// however its emission interval rounds.
	MaxRefill = Year + 24*time.Hour
	// Year is 365 days, the longest unit of a rate (as envoyproxy/ratelimit
	// counts a year).
	Year = 365 * 24 * time.Hour
)

// GCRA is the generic cell rate algorithm (a token bucket without a refill
// timer): Rate units per second sustained, Burst units at once.
//
// Arithmetic is integer nanoseconds. The emission interval is
// T = round(1s/Rate) (see Interval), so the effective rate is 1e9/T units
// per second: exact for rates that divide 1e9, otherwise within half a
// nanosecond per unit (e.g. Rate 3 gives T = 333333333ns). The tolerance is
// Burst*T, exactly.
//
// With tat the state's theoretical arrival time (now for a zero state),
// AllowN(n) computes tat' = max(tat, now) + n*T and admits iff
// tat'-now <= Burst*T. Decisions report:
//
//   - allowed: Remaining = floor((Burst*T-(tat'-now))/T), RetryAfter 0,
//     ResetAfter = tat'-now (time until the bucket is full again);
//   - rejected: Remaining 0, RetryAfter = tat'-now-Burst*T (> 0),
//     ResetAfter = max(tat-now, 0); the state is unchanged;
//   - n > Burst: never admitted, whatever the state; a rejection with
//     RetryAfter == [InfDuration], state unchanged;
//   - n <= 0: a read-only query: Allowed true, Remaining =
//     floor((Burst*T-max(tat-now, 0))/T), ResetAfter = max(tat-now, 0).
//
// Backward time: if now is earlier than the latest instant at which the
// state admitted, the decision is made at that instant instead (tat never
// moves back, no wait shrinks) and ClockRegressed is set.
//
// Parameters: Rate in [MinRate, MaxRate], Burst in [1, MaxBurst] and
// Burst*T <= MaxRefill; see Validate. With invalid parameters every request
// is rejected with RetryAfter == InfDuration.
type GCRA struct {
	Rate  float64
	Burst int64
}

// GCRAState is the per-key state of a GCRA limiter (the theoretical arrival
// time). Its zero value is a full bucket. It is 32 bytes.
type GCRAState struct {
	tat time.Time
	// seen is 0 for a zero (full) state, otherwise 1 + (tat - the latest
	// instant at which the state admitted) in nanoseconds.
	seen int64
}

// Interval returns the emission interval T = round(1s/Rate) the algorithm
// uses, or 0 if Rate is outside [MinRate, MaxRate] (or NaN).
func (g GCRA) Interval() time.Duration {
	if !(g.Rate >= MinRate && g.Rate <= MaxRate) {
		return 0
	}
	// 1e9/Rate is in [1, 3.1536e16]. Below 2^52 adding 0.5 is exact and
	// truncation is floor: this is math.Round, without the call; above,
	// where only an interval of more than 52 days can be, the sum is
	// within 4 ns of it.
	return time.Duration(float64(time.Second)/g.Rate + 0.5)
}

// Validate reports whether the parameters are usable. The error wraps
// ErrInvalid and names the field and its allowed range.
func (g GCRA) Validate() error {
	t := g.Interval()
	if t == 0 {
		return rangeError("GCRA.Rate", g.Rate, MinRate, float64(MaxRate))
	}
	if g.Burst < 1 || g.Burst > MaxBurst {
		return rangeError("GCRA.Burst", g.Burst, 1, MaxBurst)
	}
	if g.Burst > int64(MaxRefill/t) {
		// The refill time is Burst*T; report it as a duration without
		// overflowing.
		refill := time.Duration(float64(g.Burst) * float64(t))
		return rangeError("GCRA refill time Burst/Rate", refill, time.Duration(1), MaxRefill)
	}
	return nil
}

// interval returns T, or 0 if the parameters are invalid. It is on the
// hot path, so the refill bound is checked with a 128-bit product instead
// of a division.
func (g GCRA) interval() time.Duration {
	t := g.Interval()
	if t == 0 || g.Burst < 1 || g.Burst > MaxBurst {
		return 0
	}
	if hi, lo := bits.Mul64(uint64(g.Burst), uint64(t)); hi != 0 || lo > uint64(MaxRefill) {
		return 0
	}
	return t
}

// AllowN admits n units at now if the bucket holds them. See GCRA for the
// exact semantics, including n <= 0, n > Burst and backward time.
func (g GCRA) AllowN(s *GCRAState, now time.Time, n int64) Decision {
	t := g.interval()
	if t == 0 {
		return reject(g.Burst)
	}
	tau := time.Duration(g.Burst) * t
	// Every return builds its Decision in a single composite literal: on
	// this hot path, filling a Decision variable field by field and then
	// returning it costs store-forwarding stalls that are larger than the
	// arithmetic.
	base := now // the effective now
	var ahead time.Duration
	regressed := false
	if s.seen != 0 {
		ahead = s.tat.Sub(now)
		if lag := time.Duration(s.seen - 1); ahead > lag {
			// now is before the latest admission (tat - lag).
			ahead = lag
			base = s.tat.Add(-lag)
			regressed = true
		}
		ahead = max(ahead, 0)
	}
	if n <= 0 {
		return Decision{Allowed: true, Limit: g.Burst, Remaining: int64(max(tau-ahead, 0) / t), ResetAfter: ahead, ClockRegressed: regressed}
	}
	if n > g.Burst {
		return Decision{Limit: g.Burst, RetryAfter: InfDuration, ResetAfter: ahead, ClockRegressed: regressed}
	}
	// ahead <= the tolerance in force at the latest admission <= MaxRefill
	// and n*T <= tau <= MaxRefill: no overflow.
	next := ahead + time.Duration(n)*t
	if next > tau {
		return Decision{Limit: g.Burst, RetryAfter: next - tau, ResetAfter: ahead, ClockRegressed: regressed}
	}
	s.tat = base.Add(next)
	s.seen = int64(next) + 1
	return Decision{Allowed: true, Limit: g.Burst, Remaining: int64((tau - next) / t), ResetAfter: next, ClockRegressed: regressed}
}

// Expired reports whether the bucket is full again at now (now >= tat), so
// the entry can be reclaimed. A zero state is expired; an instant before
// the latest admission never is.
func (g GCRA) Expired(s *GCRAState, now time.Time) bool {
	return s.seen == 0 || !now.Before(s.tat)
}

// Reset refills the bucket, as if the state were the zero value.
func (s *GCRAState) Reset() { *s = GCRAState{} }
