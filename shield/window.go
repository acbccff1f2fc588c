package shield

import "time"

// peerWindow is a peer's fixed window: limit.FixedWindow with a cost of
// one, on clock.Mono nanoseconds instead of time.Time, because it is on
// the hot path of every decision. The semantics are exactly those of
// limit.FixedWindow (TestPeerWindowMatchesFixedWindow checks them side
// by side): a window starts at the first admission into an empty or
// expired state and lasts window, exclusive; an instant earlier than the
// latest admission is decided at that latest instant; a rejection changes
// nothing. It is held under the peer's shard lock.
type peerWindow struct {
	start int64 // Mono ns
	count int64
	// seen is 0 for an empty state, otherwise 1 + the offset from start
	// of the latest instant at which the window admitted.
	seen int64
}

// allow admits one unit at now if the window has room. When it does not,
// retry is how long until the window ends.
func (w *peerWindow) allow(now, limit, window int64) (ok bool, retry time.Duration) {
	var el int64 // effective time since the window start
	fresh := w.seen == 0
	if !fresh {
		el = max(now-w.start, w.seen-1)
		fresh = el >= window
	}
	if fresh {
		w.start, w.count, w.seen = now, 1, 1
		return true, 0
	}
	if w.count >= limit {
		return false, time.Duration(window - el)
	}
	w.count++
	w.seen = el + 1
	return true, 0
}

// expired reports whether the window holds nothing that still matters at
// now: it is empty or ended.
func (w *peerWindow) expired(now, window int64) bool {
	return w.seen == 0 || now-w.start >= window
}

// refund gives back one unit admitted in the window that started at
// start; it does nothing if that window is no longer the current one.
func (w *peerWindow) refund(start int64) bool {
	if w.seen == 0 || start != w.start {
		return false
	}
	w.count -= min(1, w.count)
	return true
}
