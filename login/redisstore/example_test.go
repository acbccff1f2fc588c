package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/login/redisstore"
)

// One Redis store serves the limiter and the lockout of every replica.
// (Not run: it needs a Redis server.)
func Example() {
	store, err := redisstore.Open(redisstore.Options{Addr: "127.0.0.1:6379"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	events := func(e login.Event) { log.Printf("%s %s %s", e.Type, e.Component, e.Cache) }
	lim, err := login.New(login.Config{Store: store, Listener: events})
	if err != nil {
		log.Fatal(err)
	}
	lockout, err := login.NewLockout(login.LockoutConfig{Store: store, Listener: events})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	d, err := lim.Evaluate(ctx, "192.0.2.1", "alice")
	if err != nil {
		log.Fatal(err) // malformed input: answer 400
	}
	if !d.Allowed {
		fmt.Println("429, retry after", d.RetryAfterSeconds, "s")
		return
	}
	if st, _ := lockout.Check(ctx, "alice"); st.Locked {
		fmt.Println("401")
		return
	}
	// ... check the password; on failure lockout.RecordFailure, on
	// success lockout.RecordSuccess.
}
