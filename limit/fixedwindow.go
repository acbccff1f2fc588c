package limit

import "time"

// MaxLimit is the largest FixedWindow.Limit accepted.
const MaxLimit = 1_000_000_000

// FixedWindow admits at most Limit units per Window. Windows are anchored at
// the instant the state first admitted (or was reset) and roll over when
// Window has passed since the start.
//
// A window starts at the first admission into an empty or expired state
// (start = now) and lasts until start+Window, exclusive: at exactly
// start+Window the next admission opens a new window. AllowN(n) is allowed
// iff count+n <= Limit. Decisions report:
//
//   - allowed: Remaining = Limit-count after the admission, RetryAfter 0,
//     ResetAfter = start+Window-now;
//   - rejected: Remaining 0, RetryAfter = start+Window-now (> 0) and the
//     same ResetAfter; the state is unchanged;
//   - n > Limit: never admitted, whatever the state; the decision is a
//     rejection with RetryAfter == [InfDuration] and the state is unchanged;
//   - n <= 0: a read-only query: Allowed true, the current Remaining and
//     ResetAfter (0 for an empty or expired state), state unchanged.
//
// Backward time: if now is earlier than the latest instant at which the
// state admitted, the decision is made at that latest instant instead (the
// window neither restarts nor moves back, the wait reported never shrinks)
// and ClockRegressed is set.
//
// Parameters: Limit in [1, MaxLimit], Window in [1ns, MaxWindow]; see
// Validate. With invalid parameters every request is rejected with
// RetryAfter == InfDuration.
type FixedWindow struct {
	Limit  int64
	Window time.Duration
}

// FixedWindowState is the per-key state of a FixedWindow. Its zero value is
// an empty window. It holds no pointers besides the time.Time location and
// is 40 bytes.
type FixedWindowState struct {
	start time.Time
	count int64
	// seen is 0 for an empty state, otherwise 1 + the offset from start of
	// the latest instant at which the state admitted (for ClockRegressed).
	seen int64
}

// Validate reports whether the parameters are usable. The error wraps
// ErrInvalid and names the field and its allowed range.
func (w FixedWindow) Validate() error {
	if w.Limit < 1 || w.Limit > MaxLimit {
		return rangeError("FixedWindow.Limit", w.Limit, 1, MaxLimit)
	}
	if w.Window < 1 || w.Window > MaxWindow {
		return rangeError("FixedWindow.Window", w.Window, time.Duration(1), MaxWindow)
	}
	return nil
}

func (w FixedWindow) valid() bool {
	return w.Limit >= 1 && w.Limit <= MaxLimit && w.Window >= 1 && w.Window <= MaxWindow
}

// AllowN admits n units at now if the current window has room. See
// FixedWindow for the exact semantics, including n <= 0, n > Limit and
// backward time.
func (w FixedWindow) AllowN(s *FixedWindowState, now time.Time, n int64) Decision {
	if !w.valid() {
		return reject(w.Limit)
	}
	d := Decision{Limit: w.Limit}
	var el time.Duration // effective time since the window start
	fresh := s.seen == 0
	if !fresh {
		el = now.Sub(s.start)
		if last := time.Duration(s.seen - 1); el < last {
			el = last
			d.ClockRegressed = true
		}
		fresh = el >= w.Window
	}
	count := s.count
	if fresh {
		count = 0
	} else {
		d.ResetAfter = w.Window - el
	}
	switch {
	case n <= 0:
		d.Allowed = true
		d.Remaining = max(0, w.Limit-count)
		return d
	case n > w.Limit:
		d.RetryAfter = InfDuration
		return d
	case n > w.Limit-count:
		// n <= Limit, so a fresh window would have room: the window is
		// current and ResetAfter > 0 is the wait.
		d.RetryAfter = d.ResetAfter
		return d
	}
	if fresh {
		s.start, s.count, el = now, 0, 0
	}
	s.count += n
	s.seen = int64(el) + 1
	d.Allowed = true
	d.Remaining = w.Limit - s.count
	d.ResetAfter = w.Window - el
	return d
}

// Expired reports whether s holds nothing that still matters at now, so the
// entry can be reclaimed: the state is empty or now >= start+Window. An
// instant before the latest admission is never expired.
func (w FixedWindow) Expired(s *FixedWindowState, now time.Time) bool {
	return s.seen == 0 || now.Sub(s.start) >= w.Window
}

// WindowStart returns the start of the state's current window; Refund uses
// it to tell whether a refund still applies. It is the zero time for an
// empty state.
func (s *FixedWindowState) WindowStart() time.Time { return s.start }

// Refund gives back n units admitted in the window that started at start.
// It does nothing (and returns false) if the state's current window did not
// start at start (it has rolled over, or the state is empty or was reset)
// or n <= 0. The count never goes below zero. Refund does not read a clock:
// a window that has ended in time but not yet been replaced by a new
// admission still accepts the refund, harmlessly.
func (s *FixedWindowState) Refund(start time.Time, n int64) bool {
	if s.seen == 0 || n <= 0 || !start.Equal(s.start) {
		return false
	}
	s.count -= min(n, s.count)
	return true
}

// Count returns the units admitted in the state's current window (which
// may have ended in time; see FixedWindow.Expired).
func (s *FixedWindowState) Count() int64 { return s.count }

// Reset empties the state, as if it were the zero value.
func (s *FixedWindowState) Reset() { *s = FixedWindowState{} }
