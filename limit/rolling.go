package limit

import "time"

// MaxRollingLimit is the largest RollingLog.Limit accepted. The log keeps
// one 8-byte timestamp per admitted unit, so a state holds at most
// 80 KB.
const MaxRollingLimit = 10_000

// rebaseAfter is the offset from the anchor beyond which an admission
// re-anchors a non-empty log on its oldest entry, so offsets stay far from
// overflow however long a log stays busy. It must exceed MaxWindow so that
// a rebase happens at most once per (rebaseAfter - MaxWindow) of time.
const rebaseAfter = 1 << 47 // about 39 hours

const _ = uint64(rebaseAfter - MaxWindow - 1) // compile-time: rebaseAfter > MaxWindow

// RollingLog admits at most Limit units in any Window-long interval ending
// now, remembering one timestamp per admitted unit (seed 003).
//
// Allow at now first forgets timestamps <= now-Window (so a slot frees at
// exactly oldest+Window), then rejects if Limit timestamps remain, and
// otherwise appends now. Decisions report:
//
//   - allowed: Remaining = Limit-len after the append, RetryAfter 0,
//     ResetAfter = newest+Window-now, which is Window (the time until the
//     log is empty again);
//   - rejected: Remaining 0, RetryAfter = oldest+Window-now (> 0, the next
//     free slot), ResetAfter = newest+Window-now; the state is unchanged,
//     so rejected calls never extend the wait.
//
// The login layer's "next slot" instant is Oldest()+Window after Allow;
// its reset instant is now+ResetAfter.
//
// Backward time: if now is earlier than the newest timestamp in the log,
// the decision is made at that newest instant instead (nothing is
// forgotten early, no wait shrinks) and ClockRegressed is set.
//
// If a state holds more timestamps than Limit (Limit was lowered), the
// RetryAfter of a rejection is the time until enough of them leave for one
// slot to free; the excess is discarded at the next admission.
//
// Parameters: Limit in [1, MaxRollingLimit], Window in [1ns, MaxWindow];
// see Validate. With invalid parameters every request is rejected with
// RetryAfter == InfDuration.
type RollingLog struct {
	Limit  int
	Window time.Duration
}

// RollingLogState is the per-key timestamp log. Memory is bounded by Limit:
// a ring buffer of Limit offsets, allocated at the state's first admission
// and reused afterwards (again only if Limit changes). Its zero value is an
// empty log; Reset empties it but keeps the buffer, for tables that recycle
// entries. A copy shares the buffer with the original, so once a state has
// admitted, use only one of them (moving it is fine; keeping both alive is
// not).
type RollingLogState struct {
	anchor time.Time
	ring   []int64 // nanoseconds since anchor; live entries start at head
	head   int32
	n      int32
}

// Validate reports whether the parameters are usable. The error wraps
// ErrInvalid and names the field and its allowed range.
func (r RollingLog) Validate() error {
	if r.Limit < 1 || r.Limit > MaxRollingLimit {
		return rangeError("RollingLog.Limit", r.Limit, 1, MaxRollingLimit)
	}
	if r.Window < 1 || r.Window > MaxWindow {
		return rangeError("RollingLog.Window", r.Window, time.Duration(1), MaxWindow)
	}
	return nil
}

func (r RollingLog) valid() bool {
	return r.Limit >= 1 && r.Limit <= MaxRollingLimit && r.Window >= 1 && r.Window <= MaxWindow
}

// at returns the i-th live entry, 0 being the oldest.
func (s *RollingLogState) at(i int) time.Duration {
	j := int(s.head) + i
	if j >= len(s.ring) {
		j -= len(s.ring)
	}
	return time.Duration(s.ring[j])
}

// Allow admits one unit at now if fewer than Limit timestamps are newer
// than now-Window. See RollingLog for the exact semantics.
func (r RollingLog) Allow(s *RollingLogState, now time.Time) Decision {
	if !r.valid() {
		return reject(int64(r.Limit))
	}
	d := Decision{Limit: int64(r.Limit)}
	n := int(s.n)
	if n == 0 {
		s.anchor = now
		s.push(r.Limit, 0)
		d.Allowed = true
		d.Remaining = int64(r.Limit) - 1
		d.ResetAfter = r.Window
		return d
	}
	el := now.Sub(s.anchor)
	newest := s.at(n - 1)
	if el < newest {
		el = newest
		d.ClockRegressed = true
	}
	// Entries <= cut have left the window. el >= newest >= 0: no overflow.
	cut := el - r.Window
	k := 0
	for k < n && s.at(k) <= cut {
		k++
	}
	if live := n - k; live >= r.Limit {
		// The slot frees when the entry Limit places before the newest
		// leaves: the oldest one when the log holds exactly Limit.
		d.RetryAfter = s.at(n-r.Limit) + r.Window - el
		d.ResetAfter = newest + r.Window - el
		return d
	}
	// Admit: forget the k expired entries.
	// head < len(ring) and k <= n <= len(ring): one subtraction wraps.
	if h := int(s.head) + k; h >= len(s.ring) {
		s.head = int32(h - len(s.ring))
	} else {
		s.head = int32(h)
	}
	s.n -= int32(k)
	switch {
	case s.n == 0:
		s.anchor, el = now, 0
	case el > rebaseAfter:
		shift := s.at(0)
		s.anchor = s.anchor.Add(shift)
		for i := range int(s.n) {
			j := (int(s.head) + i) % len(s.ring)
			s.ring[j] -= int64(shift)
		}
		el -= shift
	}
	s.push(r.Limit, el)
	d.Allowed = true
	d.Remaining = int64(r.Limit) - int64(s.n)
	d.ResetAfter = r.Window
	return d
}

// push appends offset off, first resizing the ring to exactly limit slots
// if needed. The caller guarantees s.n < limit.
func (s *RollingLogState) push(limit int, off time.Duration) {
	if len(s.ring) != limit {
		ring := make([]int64, limit)
		for i := range int(s.n) {
			ring[i] = int64(s.at(i))
		}
		s.ring, s.head = ring, 0
	}
	j := int(s.head) + int(s.n)
	if j >= len(s.ring) {
		j -= len(s.ring)
	}
	s.ring[j] = int64(off)
	s.n++
}

// Expired reports whether every timestamp in s has left the window at now,
// so the entry can be reclaimed. An instant before the newest timestamp is
// never expired.
func (r RollingLog) Expired(s *RollingLogState, now time.Time) bool {
	if s.n == 0 {
		return true
	}
	el := now.Sub(s.anchor)
	newest := s.at(int(s.n) - 1)
	return el >= newest && el-newest >= r.Window
}

// Len returns the number of timestamps stored. Timestamps that have left
// the window are forgotten only when Allow admits, so right after Allow
// (and until the next one) Len counts only timestamps newer than
// admission-Window.
func (s *RollingLogState) Len() int { return int(s.n) }

// Oldest returns the oldest stored timestamp, or false for an empty log.
// After an admission, Oldest()+Window is when the next slot frees once the
// log is full.
func (s *RollingLogState) Oldest() (time.Time, bool) {
	if s.n == 0 {
		return time.Time{}, false
	}
	return s.anchor.Add(s.at(0)), true
}

// Newest returns the newest stored timestamp (the latest admission), or
// false for an empty log. Newest()+Window is when the log is empty again.
func (s *RollingLogState) Newest() (time.Time, bool) {
	if s.n == 0 {
		return time.Time{}, false
	}
	return s.anchor.Add(s.at(int(s.n) - 1)), true
}

// Reset empties the log but keeps its buffer for reuse. Like a zero state,
// a reset state has no memory of past instants, so ClockRegressed cannot
// fire on its next call.
func (s *RollingLogState) Reset() {
	s.head, s.n = 0, 0
	s.anchor = time.Time{}
}
