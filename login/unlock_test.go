package login_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// TestLockoutUnlock: Unlock lifts a lock and forgets counted failures,
// keyed exactly as Check keys the account — under the lockout's folding
// (FoldUnicode: "ＡＬＩＣＥ " unlocks alice; FoldLower: it does not) and
// with its secret; it reports what it found; an account with nothing is
// not Found; input errors are Check's; a disabled store says so and a
// store without LockoutUnlocker is ErrUnlockUnsupported.
func TestLockoutUnlock(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(t0)
	secret := []byte("0123456789abcdef0123")
	for _, c := range []struct {
		name    string
		folding login.Folding
		secret  []byte
		unlock  string
		found   bool
	}{
		{"unicode", login.FoldUnicode, nil, " ＡＬＩＣＥ ", true},
		{"unicode, secret", login.FoldUnicode, secret, "Alice", true},
		{"lower", login.FoldLower, nil, "ALICE", true},
		{"lower, fullwidth is another account", login.FoldLower, nil, "ＡＬＩＣＥ", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLockout(t, login.LockoutConfig{MaxFailures: 3, Window: time.Minute, Duration: 5 * time.Minute,
				Folding: c.folding, Secret: c.secret, Store: newMemoryLockoutStore(t, clk)})
			for range 3 {
				lockStep(t, l.RecordFailure, "alice")
			}
			if s := lockStep(t, l.Check, "alice"); !s.Locked {
				t.Fatalf("not locked: %+v", s)
			}
			u, err := l.Unlock(ctx, c.unlock)
			if err != nil || u.Found() != c.found || u.Locked != c.found {
				t.Fatalf("unlock %q: %+v %v, want found %v", c.unlock, u, err, c.found)
			}
			if s := lockStep(t, l.Check, "alice"); s.Locked == c.found {
				t.Fatalf("after the unlock: %+v", s)
			}
			if !c.found {
				return
			}
			// Nothing left: the next failure counts from one again.
			if u, err := l.Unlock(ctx, "alice"); err != nil || u.Found() {
				t.Fatalf("second unlock: %+v %v", u, err)
			}
			for i := range 2 {
				if s := lockStep(t, l.RecordFailure, "alice"); s.Locked {
					t.Fatalf("failure %d after the unlock locked: %+v", i+1, s)
				}
			}
			// Failures counted without a lock are forgotten too.
			if u, err := l.Unlock(ctx, "ALICE"); err != nil || u != (login.Unlocked{Failures: 2}) || !u.Found() {
				t.Fatalf("unlock of two failures: %+v %v", u, err)
			}
			for i := range 2 {
				if s := lockStep(t, l.RecordFailure, "alice"); s.Locked {
					t.Fatalf("failure %d after forgetting: %+v", i+1, s)
				}
			}
		})
	}

	l := newLockout(t, login.LockoutConfig{Store: newMemoryLockoutStore(t, clk)})
	for _, bad := range []struct {
		user string
		want error
	}{{"", login.ErrMissingCredentials}, {"  ", login.ErrMissingCredentials}, {string(make([]byte, 800)), login.ErrInvalidUsername}, {"\xff", login.ErrInvalidUsername}} {
		if _, err := l.Unlock(ctx, bad.user); !errors.Is(err, bad.want) {
			t.Errorf("unlock %q: %v, want %v", bad.user, err, bad.want)
		}
	}
	if _, err := newLockout(t, login.LockoutConfig{Store: login.Disabled{}}).Unlock(ctx, "alice"); !errors.Is(err, login.ErrDisabled) {
		t.Errorf("disabled store: %v", err)
	}
	if _, err := newLockout(t, login.LockoutConfig{Store: plainLockoutStore{}}).Unlock(ctx, "alice"); !errors.Is(err, login.ErrUnlockUnsupported) {
		t.Errorf("store without Unlock: %v", err)
	}
}

// plainLockoutStore is a LockoutStore without LockoutUnlocker.
type plainLockoutStore struct{}

func (plainLockoutStore) LockedFor(context.Context, login.Key) (time.Duration, error) { return 0, nil }
func (plainLockoutStore) AddFailure(context.Context, login.Key, login.LockoutPolicy) (time.Duration, error) {
	return 0, nil
}
func (plainLockoutStore) ClearFailures(context.Context, login.Key) error { return nil }
