package login_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

var t0 = time.Date(2026, 10, 11, 9, 41, 11, 917_000_000, time.UTC)

// faultStore wraps a real store and fails operation kinds on command: the
// fault is injected at the store boundary, the store behind it is the real
// one. A failing kind fails before reaching the inner store, like a cache
// call whose request never arrived: nothing is changed. A Hit fails as a
// read when reads fail, else as a write when writes fail.
type faultStore struct {
	rate login.Store
	lock login.LockoutStore
	fail atomic.Uint32 // login.Op set
}

var errInjected = &injectedError{}

type injectedError struct{}

func (*injectedError) Error() string { return "injected cache failure" }

func (f *faultStore) set(ops login.Op)        { f.fail.Store(uint32(ops)) }
func (f *faultStore) failing(o login.Op) bool { return login.Op(f.fail.Load())&o != 0 }

func (f *faultStore) Hit(ctx context.Context, k login.Key, limit int, window time.Duration) (login.Hit, error) {
	switch {
	case f.failing(login.OpRead):
		return login.Hit{}, &login.OpError{Op: login.OpRead, Err: errInjected}
	case f.failing(login.OpWrite):
		return login.Hit{}, &login.OpError{Op: login.OpWrite, Err: errInjected}
	}
	return f.rate.Hit(ctx, k, limit, window)
}

func (f *faultStore) LockedFor(ctx context.Context, k login.Key) (time.Duration, error) {
	if f.failing(login.OpRead) {
		return 0, errInjected
	}
	return f.lock.LockedFor(ctx, k)
}

func (f *faultStore) AddFailure(ctx context.Context, k login.Key, p login.LockoutPolicy) (time.Duration, error) {
	if f.failing(login.OpWrite) {
		return 0, errInjected
	}
	return f.lock.AddFailure(ctx, k, p)
}

func (f *faultStore) ClearFailures(ctx context.Context, k login.Key) error {
	if f.failing(login.OpRemove) {
		return errInjected
	}
	return f.lock.ClearFailures(ctx, k)
}

// pairStore gives a store HitPair in its sequential form (two Hits), so
// that the Limiter's one-operation path for both windows runs against a
// real store; pairs counts the calls.
type pairStore struct {
	login.Store
	pairs      atomic.Int64
	failSecond atomic.Bool // the second window fails (as a write) after the first admitted
}

func (p *pairStore) HitPair(ctx context.Context, k1 login.Key, l1 int, w1 time.Duration, k2 login.Key, l2 int, w2 time.Duration) (login.Hit, login.Hit, error) {
	p.pairs.Add(1)
	f, err := p.Store.Hit(ctx, k1, l1, w1)
	if err != nil || !f.Allowed {
		return f, login.Hit{}, err
	}
	if p.failSecond.Load() {
		return f, login.Hit{}, &login.OpError{Op: login.OpWrite, Err: errInjected}
	}
	s, err := p.Store.Hit(ctx, k2, l2, w2)
	return f, s, err
}

// eachStoreKind runs f with stores used as they are and wrapped as a
// login.PairStore (want reports which pairs.Load() to expect: none for
// the plain kind).
func eachStoreKind(t *testing.T, f func(t *testing.T, wrap func(login.Store) login.Store)) {
	t.Run("two-hits", func(t *testing.T) { f(t, func(s login.Store) login.Store { return s }) })
	var wrapped []*pairStore
	t.Run("pair", func(t *testing.T) {
		f(t, func(s login.Store) login.Store {
			p := &pairStore{Store: s}
			wrapped = append(wrapped, p)
			return p
		})
		for _, p := range wrapped {
			if p.pairs.Load() == 0 {
				t.Error("the limiter never used HitPair")
			}
		}
	})
}

// recorder is a Listener that keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []login.Event
}

func (r *recorder) listen(e login.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
}

func (r *recorder) types() []login.EventType {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]login.EventType, len(r.evs))
	for i, e := range r.evs {
		out[i] = e.Type
	}
	return out
}

func (r *recorder) all() []login.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]login.Event(nil), r.evs...)
}

func newMemoryStore(t testing.TB, clk clock.Clock) *login.MemoryStore {
	t.Helper()
	s, err := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newMemoryLockoutStore(t testing.TB, clk clock.Clock) *login.MemoryLockoutStore {
	t.Helper()
	s, err := login.NewMemoryLockoutStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newLimiter(t testing.TB, cfg login.Config) *login.Limiter {
	t.Helper()
	l, err := login.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func evaluate(t testing.TB, l *login.Limiter, ip, user string) login.Decision {
	t.Helper()
	d, err := l.Evaluate(context.Background(), ip, user)
	if err != nil {
		t.Fatalf("Evaluate(%q, %q): %v", ip, user, err)
	}
	return d
}

func equalTypes(a []login.EventType, b ...login.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
