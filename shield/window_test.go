package shield

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
)

// TestPeerWindowMatchesFixedWindow runs the shield's int64 peer window and
// limit.FixedWindow (the model-tested reference) side by side on random
// admissions, refunds and clock steps, backwards ones included: every
// decision, wait, expiry and refund must agree.
func TestPeerWindowMatchesFixedWindow(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 9))
		lim := int64(1 + r.IntN(5))
		win := time.Duration(1+r.IntN(5)) * time.Second
		fw := limit.FixedWindow{Limit: lim, Window: win}
		var ref limit.FixedWindowState
		var w peerWindow
		now := clock.Mono(time.Date(2026, 7, 19, 12, 0, 0, 0, time.UTC))
		var starts []int64
		for step := range 300 {
			switch r.IntN(6) {
			case 0, 1, 2:
				d := fw.AllowN(&ref, clock.MonoTime(now), 1)
				ok, retry := w.allow(now, lim, int64(win))
				if ok != d.Allowed || (!ok && retry != d.RetryAfter) {
					t.Fatalf("seed %d step %d: allow = %v, %v; FixedWindow %+v", seed, step, ok, retry, d)
				}
				if ok {
					starts = append(starts, w.start)
					if !ref.WindowStart().Equal(clock.MonoTime(w.start)) {
						t.Fatalf("seed %d step %d: window start %v, FixedWindow %v", seed, step, clock.MonoTime(w.start), ref.WindowStart())
					}
				}
			case 3:
				if len(starts) > 0 {
					st := starts[r.IntN(len(starts))]
					if got, want := w.refund(st), ref.Refund(clock.MonoTime(st), 1); got != want {
						t.Fatalf("seed %d step %d: refund = %v, FixedWindow %v", seed, step, got, want)
					}
				}
			case 4: // time moves, sometimes backwards
				now += int64(r.IntN(3000)-700) * int64(time.Millisecond)
			case 5:
				now += int64(win) * int64(r.IntN(2))
			}
			if got, want := w.expired(now, int64(win)), fw.Expired(&ref, clock.MonoTime(now)); got != want {
				t.Fatalf("seed %d step %d: expired = %v, FixedWindow %v", seed, step, got, want)
			}
			if w.count != ref.Count() {
				t.Fatalf("seed %d step %d: count %d, FixedWindow %d", seed, step, w.count, ref.Count())
			}
		}
	}
}
