package login_test

import (
	"context"
	"fmt"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
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
