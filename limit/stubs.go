package limit

// TODO(limit helper): replace this file with the real implementations in
// fixedwindow.go, rolling.go and gcra.go. Signatures are the contract other
// packages already code against; keep them.

import (
	"errors"
	"time"
)

// ErrInvalid is returned by Validate methods for out-of-range parameters.
var ErrInvalid = errors.New("limit: invalid parameters")

// FixedWindow admits at most Limit units per Window. Windows are anchored at
// the instant the state first admitted (or was reset) and roll over when
// Window has passed since the start.
type FixedWindow struct {
	Limit  int64
	Window time.Duration
}

// FixedWindowState is the per-key state of a FixedWindow. Its zero value is
// an empty window.
type FixedWindowState struct {
	start time.Time
	count int64
}

// Validate reports whether the parameters are usable.
func (w FixedWindow) Validate() error { panic("unimplemented") }

// AllowN admits n units at now if the current window has room.
func (w FixedWindow) AllowN(s *FixedWindowState, now time.Time, n int64) Decision {
	panic("unimplemented")
}

// Expired reports whether s holds nothing that still matters at now, so the
// entry can be reclaimed.
func (w FixedWindow) Expired(s *FixedWindowState, now time.Time) bool { panic("unimplemented") }

// WindowStart returns the start of the state's current window; Refund uses
// it to tell whether a refund still applies.
func (s *FixedWindowState) WindowStart() time.Time { return s.start }

// Refund gives back n units admitted in the window that started at start.
// It does nothing (and returns false) if that window has rolled over.
func (s *FixedWindowState) Refund(start time.Time, n int64) bool { panic("unimplemented") }

// GCRA is the generic cell rate algorithm (a token bucket without a refill
// timer): Rate units per second sustained, Burst units at once.
type GCRA struct {
	Rate  float64
	Burst int64
}

// GCRAState is the per-key state of a GCRA limiter (the theoretical arrival
// time). Its zero value is a full bucket.
type GCRAState struct {
	tat time.Time
}

// Validate reports whether the parameters are usable.
func (g GCRA) Validate() error { panic("unimplemented") }

// AllowN admits n units at now if the bucket holds them.
func (g GCRA) AllowN(s *GCRAState, now time.Time, n int64) Decision { panic("unimplemented") }

// Expired reports whether the bucket is full again at now.
func (g GCRA) Expired(s *GCRAState, now time.Time) bool { panic("unimplemented") }

// RollingLog admits at most Limit units in any Window-long interval ending
// now, remembering one timestamp per admitted unit (seed 003).
type RollingLog struct {
	Limit  int
	Window time.Duration
}

// RollingLogState is the per-key timestamp log. Memory is bounded by Limit.
type RollingLogState struct {
	ts []time.Time
}

// Validate reports whether the parameters are usable.
func (r RollingLog) Validate() error { panic("unimplemented") }

// Allow admits one unit at now if fewer than Limit timestamps are newer
// than now-Window.
func (r RollingLog) Allow(s *RollingLogState, now time.Time) Decision { panic("unimplemented") }

// Expired reports whether every timestamp in s has left the window.
func (r RollingLog) Expired(s *RollingLogState, now time.Time) bool { panic("unimplemented") }
