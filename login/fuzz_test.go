package login_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// FuzzEvaluate: any address and username either is rejected as input
// (and counts nothing) or shares its bucket exactly with its normalized
// form; nothing panics.
func FuzzEvaluate(f *testing.F) {
	for _, s := range [][2]string{
		{"192.0.2.1", "alice"}, {"", " Alice "}, {"2001:db8::1", "Émile"}, {"x", "STRAßE"},
		{"192.0.2.1", "\xff"}, {"192.0.2.1", "İstanbul"}, {"1", "ǅ"}, {"10.0.0.1", strings.Repeat("Ⱥ", 128)}, {"10.0.0.1", strings.Repeat("Ⱥ", 85)},
		{"10.0.0.1", strings.Repeat("\u212a", 256)}, {"10.0.0.1", strings.Repeat("a", 256)},
		{"10.0.0.1", "\u00a0bob\u2003"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ip, user string) {
		clk := clock.NewManual(t0)
		s, err := login.NewMemoryStore(login.MemoryConfig{Capacity: 8, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := login.New(login.Config{Limit: 2, Window: time.Minute, Store: s})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		d, err := l.Evaluate(ctx, ip, user)
		if err != nil {
			if s.Len() != 0 || d != (login.Decision{}) {
				t.Fatalf("input error %v counted something", err)
			}
			norm := login.NormalizeUsername(user)
			if norm != "" && len(norm) <= login.MaxUsernameBytes && utf8.ValidString(user) && len(ip) <= login.MaxClientIPBytes {
				t.Fatalf("valid input %q/%q rejected: %v", ip, user, err)
			}
			return
		}
		if !d.Allowed || d.Remaining != 1 {
			t.Fatalf("first attempt %+v", d)
		}
		norm := login.NormalizeUsername(user)
		if login.NormalizeUsername(norm) != norm {
			t.Fatalf("normalization not idempotent: %q → %q → %q", user, norm, login.NormalizeUsername(norm))
		}
		// The normalized form is the same account.
		d, err = l.Evaluate(ctx, ip, norm)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("normalized %q: %+v %v", norm, d, err)
		}
		// An address one byte longer is another client.
		if len(ip) < login.MaxClientIPBytes {
			if d, err := l.Evaluate(ctx, ip+"0", user); err != nil || d.Remaining != 1 {
				t.Fatalf("shifted address shares the bucket: %+v %v", d, err)
			}
		}
	})
}
