package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

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

// The whole throttle of every replica on one Redis store, in one call;
// an operator's unlock reaches every replica at once. (Not run: it
// needs a Redis server.)
func Example_protect() {
	store, err := redisstore.Open(redisstore.Options{Addr: "127.0.0.1:6379"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	throttle, err := login.Protect(login.WithStore(store), login.WithLockoutStore(store))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /login", throttle.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... check the password: 401 on failure feeds the lockout.
	})))
	// Later, for a user locked out by someone else's guesses:
	if u, err := throttle.Lockout().Unlock(context.Background(), "alice"); err == nil && u.Locked {
		fmt.Println("unlocked")
	}
}
