// Package admission is the contract between the host that admits a
// request (package host) and code that serves admitted requests without
// depending on the host (control/internal/jsonapi): the causes an
// admitted handler's context is cancelled with, and the hold that keeps
// the request's admission slot while work outlives the handler.
//
// Package host re-exports all of it (host.ErrDraining, host.Hold, ...);
// library users call those.
package admission

import (
	"context"
	"errors"
)

// The context causes of an admitted handler's context. Use errors.Is.
var (
	// ErrDraining: the host's Shutdown cancelled the handler.
	ErrDraining = errors.New("host: draining")
	// ErrRequestTimeout: the host's request timeout expired.
	ErrRequestTimeout = errors.New("host: request timeout")
	// ErrStopped: the host is stopping or stopped (a readiness failure).
	ErrStopped = errors.New("host: stopped")
)

// Holder is an admitted request as its handler's context carries it
// (under ContextKey).
type Holder interface {
	// Hold keeps the request's admission slot until release is called
	// (see [Hold]).
	Hold() (release func())
}

// ContextKey is the context key of the [Holder] of an admitted request.
type ContextKey struct{}

// Hold keeps the admission slot of the request that ctx belongs to (the
// context an admitted handler received) until release is called, so that
// work outliving the handler (a goroutine still finishing after a timeout
// answer) is counted by the host and awaited by its drain. Call Hold
// before the handler returns; release is idempotent. Outside an admitted
// request, or after its handler returned, Hold does nothing.
func Hold(ctx context.Context) (release func()) {
	if h, ok := ctx.Value(ContextKey{}).(Holder); ok {
		return h.Hold()
	}
	return func() {}
}
