package login_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// One Attempt reused across requests (as the gateway's fast engine
// does) keeps what it derived from the client's address only for that
// address: a scripted sequence of attempts from changing clients is
// decided as with a fresh Attempt each time.
func TestAttemptReusedAcrossClients(t *testing.T) {
	newThrottle := func() *login.Throttle {
		s, err := login.NewMemoryStore(login.MemoryConfig{Clock: clock.NewManual(t0)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		l, err := login.New(login.Config{Store: s, Limit: 3, Window: time.Minute,
			PerClient: login.PerClient{Limit: 2, Window: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		th, err := login.NewThrottle(login.MiddlewareConfig{Limiter: l})
		if err != nil {
			t.Fatal(err)
		}
		return th
	}
	steps := []struct{ client, user string }{
		{"192.0.2.1", "alice"}, {"192.0.2.1", "bob"}, {"192.0.2.1", "carol"}, // the third: client window full
		{"192.0.2.2", "alice"}, {"192.0.2.2", "alice"}, {"192.0.2.2", "alice"},
		{"192.0.2.1", "dave"},
		{"2001:db8::1", "alice"}, {"not an address", "alice"}, {"2001:db8::1", "erin"}, {"2001:db8::1", "frank"},
		{"", "alice"}, {"192.0.2.3", "alice"},
	}
	reused, fresh := newThrottle(), newThrottle()
	var a login.Attempt
	for i, st := range steps {
		creds := login.Credentials{Username: st.user, Password: true}
		reused.Decide(context.Background(), &a, "POST", creds, nil, st.client)
		var b login.Attempt
		fresh.Decide(context.Background(), &b, "POST", creds, nil, st.client)
		if a.Action != b.Action || a.Decision != b.Decision || (a.Err == nil) != (b.Err == nil) {
			t.Errorf("step %d (%s, %s): reused attempt %v %+v %v, fresh %v %+v %v", i, st.client, st.user,
				a.Action, a.Decision, a.Err, b.Action, b.Decision, b.Err)
		}
		reused.Done(&a, 401)
		fresh.Done(&b, 401)
	}
	// The script reaches both windows.
	var a2 login.Attempt
	fresh.Decide(context.Background(), &a2, "POST", login.Credentials{Username: "zed", Password: true}, nil, "192.0.2.1")
	if a2.Decision.Reason != login.ReasonClient {
		t.Errorf("192.0.2.1's fourth attempt: reason %q, want %q", a2.Decision.Reason, login.ReasonClient)
	}
}
