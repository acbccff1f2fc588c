package login_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/wire"
)

func Example() {
	clk := clock.NewManual(time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC))
	store, err := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, err := login.New(login.Config{Store: store}) // 5 attempts per 60 s
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 6 {
		d, _ := lim.Evaluate(ctx, "192.0.2.1", "Alice")
		fmt.Printf("attempt %d: allowed=%v remaining=%d retry=%ds reset=%s\n",
			i+1, d.Allowed, d.Remaining, d.RetryAfterSeconds, login.FormatReset(d.ResetAt))
		clk.Advance(10 * time.Second)
	}
	// Output:
	// attempt 1: allowed=true remaining=4 retry=0s reset=2026-10-11T09:01:00Z
	// attempt 2: allowed=true remaining=3 retry=0s reset=2026-10-11T09:01:00Z
	// attempt 3: allowed=true remaining=2 retry=0s reset=2026-10-11T09:01:00Z
	// attempt 4: allowed=true remaining=1 retry=0s reset=2026-10-11T09:01:00Z
	// attempt 5: allowed=true remaining=0 retry=0s reset=2026-10-11T09:01:00Z
	// attempt 6: allowed=false remaining=0 retry=10s reset=2026-10-11T09:01:00Z
}

func ExampleLockout() {
	clk := clock.NewManual(time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC))
	store, err := login.NewMemoryLockoutStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lo, err := login.NewLockout(login.LockoutConfig{MaxFailures: 3, Duration: 5 * time.Minute, Store: store})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		st, _ := lo.RecordFailure(ctx, "bob") // bob may or may not exist
		fmt.Printf("locked=%v retry=%ds\n", st.Locked, st.RetryAfterSeconds)
	}
	clk.Advance(5 * time.Minute)
	st, _ := lo.Check(ctx, "bob")
	fmt.Println("after 5 minutes locked:", st.Locked)
	// Output:
	// locked=false retry=0s
	// locked=false retry=0s
	// locked=true retry=300s
	// after 5 minutes locked: false
}

func ExampleDisabled() {
	events := func(e login.Event) { fmt.Println("event:", e.Type) }
	lim, err := login.New(login.Config{Store: login.Disabled{}, Listener: events})
	if err != nil {
		panic(err)
	}
	d, _ := lim.Evaluate(context.Background(), "192.0.2.1", "alice")
	fmt.Printf("%+v\n", d)
	// Output:
	// {Allowed:true Limit:5 Remaining:-1 ResetAt:0001-01-01 00:00:00 +0000 UTC RetryAfterSeconds:0 Degraded:true Reason: Window:0s}
}

// The per-client dimension bounds how many usernames one address may try,
// and so how many keys it can add to the store.
func ExampleConfig_perClient() {
	clk := clock.NewManual(time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC))
	store, err := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	lim, err := login.New(login.Config{Store: store, PerClient: login.PerClient{Limit: 3}})
	if err != nil {
		panic(err)
	}
	for _, user := range []string{"ann", "bob", "cy", "dee"} {
		d, _ := lim.Evaluate(context.Background(), "192.0.2.1", user)
		fmt.Printf("%s: allowed=%v reason=%q keys=%d\n", user, d.Allowed, d.Reason, store.Len())
	}
	// Output:
	// ann: allowed=true reason="" keys=2
	// bob: allowed=true reason="" keys=3
	// cy: allowed=true reason="" keys=4
	// dee: allowed=false reason="client" keys=4
}

// ReadUsername reads the username wherever a framework might find it and
// leaves the body for the handler.
func ExampleReadUsername() {
	r := httptest.NewRequest(http.MethodPost, "/login?next=/home", strings.NewReader(`{"Username":"Alice","password":"x"}`))
	r.Header.Set("Content-Type", "application/json")
	user, err := login.ReadUsername(r, login.UsernameOptions{})
	body, _ := io.ReadAll(r.Body)
	fmt.Println(user, err, string(body))

	// The query names another account than the body: refused.
	r = httptest.NewRequest(http.MethodPost, "/login?username=victim", strings.NewReader("username=decoy&password=x"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	_, err = login.ReadUsername(r, login.UsernameOptions{})
	p := login.ProblemFor(err)
	fmt.Println(p.Status, p.Code)
	// Output:
	// Alice <nil> {"Username":"Alice","password":"x"}
	// 400 ambiguous_credentials
}

// Protect builds the whole throttle in one call, with the defaults (5
// attempts per client and username per minute, 20 per client, a lockout
// after 10 failed passwords) and the options given: here a lockout after
// 2 failures, for a minute. The handler's 401s lock the account for
// every client.
func ExampleProtect() {
	clk := clock.NewManual(time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC))
	throttle, err := login.Protect(login.WithLockout(2, time.Minute, time.Minute), login.WithClock(clk))
	if err != nil {
		panic(err)
	}
	defer throttle.Close()
	handler := throttle.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "wrong password", http.StatusUnauthorized) // every password is wrong today
	}))
	for _, client := range []string{"192.0.2.1:1000", "198.51.100.7:2000", "203.0.113.9:3000"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader("username=alice&password=guess"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = client
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	// The owner called: an operator lifts the lock.
	u, _ := throttle.Lockout().Unlock(context.Background(), "ALICE")
	fmt.Println("unlocked:", u.Locked)
	// Output:
	// 401  4
	// 401  4
	// 429 60 0
	// unlocked: true
}

// Refusals answered the application's way (a page for browsers), and
// observed with the request. Every refusal gets the same page: a locked
// account must look like a throttled one.
func ExampleWithRejectHandler() {
	clk := clock.NewManual(time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC))
	throttle, err := login.Protect(login.WithLimit(1, time.Minute), login.WithClock(clk),
		login.WithOnReject(func(r *http.Request, rej wire.Rejection) {
			fmt.Println("refused", r.URL.Path, "by", rej.Layer, "for", rej.Reason)
		}),
		login.WithRejectHandler(func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(rej.Problem.Status)
			fmt.Fprintf(w, "<p>Too many attempts: try again in %s s.</p>\n", w.Header().Get("Retry-After"))
		}))
	if err != nil {
		panic(err)
	}
	defer throttle.Close()
	handler := throttle.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	}))
	for range 2 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader("username=alice&password=right"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		handler.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body)
	}
	// Output:
	// 200 welcome
	// refused /login by login for account
	// 429 <p>Too many attempts: try again in 60 s.</p>
}

// The middleware wraps a login handler; with a lockout, the handler's 401s
// lock the account for every client. (Protect does the same in one call.)
func ExampleNewMiddleware() {
	clk := clock.NewManual(time.Date(2026, 10, 11, 9, 0, 0, 0, time.UTC))
	rate, _ := login.NewMemoryStore(login.MemoryConfig{Clock: clk})
	locks, _ := login.NewMemoryLockoutStore(login.MemoryConfig{Clock: clk})
	lockout, _ := login.NewLockout(login.LockoutConfig{MaxFailures: 2, Duration: time.Minute, Store: locks, Clock: clk})
	lim, _ := login.New(login.Config{Store: rate, PerClient: login.PerClient{Limit: login.RecommendedPerClientLimit}, Lockout: lockout, Clock: clk})
	throttle, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: lim})
	if err != nil {
		panic(err)
	}
	handler := throttle(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "wrong password", http.StatusUnauthorized) // every password is wrong today
	}))
	for _, client := range []string{"192.0.2.1:1000", "198.51.100.7:2000", "203.0.113.9:3000"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader("username=alice&password=guess"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = client
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 401  4
	// 401  4
	// 429 60 0
}
