package host

import (
	"context"
	"sync/atomic"

	"github.com/bulwarkhq/bulwark/internal/admission"
)

// Hold keeps the admission slot of the request that ctx belongs to (the
// context an admitted handler received) until release is called, so that
// work outliving ServeHTTP (a goroutine still finishing after a timeout
// answer) is counted by InFlight and awaited by Shutdown. Call Hold before
// the handler returns; release is idempotent. Outside an admitted request,
// or after its handler returned, Hold does nothing.
func Hold(ctx context.Context) (release func()) {
	return admission.Hold(ctx)
}

// Hold implements admission.Holder: see [Hold].
func (rq *request) Hold() (release func()) {
	for {
		n := rq.refs.Load()
		if n <= 0 {
			return func() {}
		}
		if rq.refs.CompareAndSwap(n, n+1) {
			break
		}
	}
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			rq.unref()
		}
	}
}
