package login

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// EventType names a cache health transition.
type EventType string

// Event types.
const (
	// CacheUnavailable is emitted on the first observed failure of a
	// cache by one use (one Limiter or one Lockout instance), and again on
	// the first failure after a recovery.
	CacheUnavailable EventType = "CACHE_UNAVAILABLE"
	// CacheRecovered is emitted once every operation kind that had failed
	// has since succeeded. A successful read never clears a failed write
	// or remove, and a rejected rate-limit attempt (which reads but does
	// not write) never clears a failed write.
	CacheRecovered EventType = "CACHE_RECOVERED"
)

// Component names the use of a cache that emitted an event.
type Component string

// Components.
const (
	ComponentRateLimit Component = "login-rate-limit"
	ComponentLockout   Component = "login-lockout"
)

// PrincipalSystem is the principal of every event.
const PrincipalSystem = "system"

// Event reports a cache health transition as observed by one use of one
// instance. It carries no client address, username, key or error text.
type Event struct {
	Type      EventType
	Cache     string
	Component Component
	At        time.Time
	Principal string
}

// Listener receives events synchronously, on the goroutine of the login
// attempt that observed the transition, while the instance's event lock is
// held (so events of one instance arrive in order and strictly alternate).
// A panic in the listener is recovered and logged and never changes a
// login result. A slow listener slows the logins that trigger transitions
// and delays other transitions of the same instance: hand events off
// quickly. A listener must not call back into the Limiter or Lockout that
// emitted the event.
type Listener func(Event)

// maxCacheNameLen bounds the cache name carried in events.
const maxCacheNameLen = 64

func validCacheName(setting, s string) error {
	if len(s) == 0 || len(s) > maxCacheNameLen {
		return fmt.Errorf("login: %s must be 1 to %d bytes", setting, maxCacheNameLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("login: %s must be printable ASCII without spaces", setting)
		}
	}
	return nil
}

// monitor tracks which operation kinds of one cache use have failed and
// emits the transitions.
type monitor struct {
	component Component
	cache     string
	clock     clock.Clock
	listener  Listener
	logger    *slog.Logger

	failed atomic.Uint32 // Op set; read without the lock on the hot path
	// epoch counts recorded failures. An operation notes it before calling
	// the store; its success counts toward recovery only if no failure was
	// recorded while it was in flight, because an operation that started
	// before (or during) an outage and happened to succeed says nothing
	// about the cache afterwards.
	epoch atomic.Uint64
	mu    sync.Mutex // serializes transitions and their events
}

// begin returns the token an operation passes to success.
func (m *monitor) begin() uint64 { return m.epoch.Load() }

// failure records that the kinds in ops failed.
func (m *monitor) failure(ops Op) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch.Add(1)
	old := Op(m.failed.Load())
	m.failed.Store(uint32(old | ops))
	if old == 0 {
		m.emitLocked(CacheUnavailable)
	}
}

// success records that the kinds in ops succeeded in an operation that
// began with token start (from begin).
func (m *monitor) success(ops Op, start uint64) {
	if Op(m.failed.Load())&ops == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := Op(m.failed.Load())
	if old&ops == 0 || m.epoch.Load() != start {
		return
	}
	now := old &^ ops
	m.failed.Store(uint32(now))
	if now == 0 {
		m.emitLocked(CacheRecovered)
	}
}

func (m *monitor) emitLocked(t EventType) {
	if m.listener == nil {
		return
	}
	ev := Event{Type: t, Cache: m.cache, Component: m.component, At: m.clock.Now().UTC(), Principal: PrincipalSystem}
	defer func() {
		if r := recover(); r != nil {
			// The panic value may carry anything; log only its type.
			m.logger.Warn("login: event listener panicked",
				slog.String("component", string(m.component)),
				slog.String("event", string(t)),
				slog.String("panic_type", fmt.Sprintf("%T", r)))
		}
	}()
	m.listener(ev)
}
