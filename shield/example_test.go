package shield_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/shield"
	"github.com/bulwarkhq/bulwark/wire"
)

func Example() {
	clk := clock.NewManual(time.Date(2026, 7, 19, 12, 0, 0, 0, time.UTC))
	s, err := shield.New(shield.Config{
		PerPeer: 2,
		Clock:   clk,
		Hook:    func(e shield.Event) { fmt.Println("  event:", e.Outcome, e.Reason) },
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	client := netip.MustParseAddr("192.0.2.1")
	for range 3 {
		a := s.Admit(client, true)
		if a.Allowed {
			fmt.Println("allowed")
		} else {
			fmt.Println("rejected, retry after", a.RetryAfterSeconds(), "s")
		}
	}
	clk.Advance(time.Minute) // the window rolls over
	fmt.Println("a minute later:", s.Admit(client, true).Allowed)
	// Output:
	// allowed
	// allowed
	//   event: rate_limited peer
	// rejected, retry after 60 s
	// a minute later: true
}

func ExampleShield_Middleware() {
	s, err := shield.New(shield.Config{PerPeer: 1})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... authenticate ...
		if r.Header.Get("Authorization") == "Bearer good" {
			// Authenticated traffic gives its unit back.
			shield.FromContext(r.Context()).Refund()
		}
		fmt.Fprintln(w, "hello")
	})
	// nil resolver: the socket peer only; forwarding headers are ignored.
	h := s.Middleware(nil)(app)

	send := func(auth string) {
		req := httptest.NewRequest("GET", "/api/login", nil)
		req.RemoteAddr = "192.0.2.1:51234"
		req.Header.Set("X-Forwarded-For", "203.0.113.9") // ignored
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		line := fmt.Sprint(rec.Code)
		if rec.Code != http.StatusOK {
			line += " Retry-After: " + rec.Header().Get("Retry-After") + ", Connection: " + rec.Header().Get("Connection")
		}
		fmt.Println(line)
	}
	send("Bearer good") // refunded
	send("Bearer good") // refunded
	send("")            // uses the only unit
	send("Bearer good") // over the budget: rejected before authentication
	// Output:
	// 200
	// 200
	// 200
	// 429 Retry-After: 60, Connection: close
}

func ExampleConfigFromEnv() {
	env := map[string]string{
		shield.EnvWindow:  "30s",
		shield.EnvPerPeer: "100",
	}
	cfg, err := shield.ConfigFromEnv(shield.Config{}, func(k string) string { return env[k] })
	fmt.Println(cfg.Window, cfg.PerPeer, cfg.Global, err)

	env[shield.EnvMaxPeers] = "5000000"
	_, err = shield.ConfigFromEnv(shield.Config{}, func(k string) string { return env[k] })
	fmt.Println(err)
	// Output:
	// 30s 100 0 <nil>
	// shield: invalid config: BULWARK_SHIELD_MAX_PEERS="5000000": must be an integer in [1, 1048576]
}

// A server that computes each connection's peer fingerprint once, at
// accept: the ConnContext hook and the Middleware share the shield and
// the resolver. Keep-alive requests then cost a table lookup each.
func ExampleShield_ConnContext() {
	s, err := shield.New(shield.Config{PerPeer: 2})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	var res *peer.Resolver // socket peer only

	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	srv := httptest.NewUnstartedServer(s.Middleware(res)(app))
	srv.Config.ConnContext = s.ConnContext(res)
	srv.Start()
	defer srv.Close()

	client := srv.Client() // one keep-alive connection
	for range 3 {
		resp, err := client.Get(srv.URL + "/api/login")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 200
	// 200
	// 429
}

// A rejection answered the application's way: the hook gets the request
// and the Rejection; the shield has already set Retry-After and made the
// connection close.
func ExampleShield_MiddlewareWith() {
	s, err := shield.New(shield.Config{PerPeer: 1})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	h := s.MiddlewareWith(nil, shield.MiddlewareOptions{
		OnRejectRequest: func(r *http.Request, rej wire.Rejection) {
			fmt.Println("rejected", r.Method, r.URL.Path, "by", rej.Layer, "for", rej.Reason)
		},
		RejectHandler: func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(rej.Problem.Status)
			fmt.Fprintf(w, "slow down, retry in %d s\n", rej.Problem.RetryAfter)
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }))

	for range 2 {
		req := httptest.NewRequest("POST", "/api/login", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%d Retry-After: %q, Connection: %q, %s", rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("Connection"), rec.Body)
	}
	// Output:
	// 200 Retry-After: "", Connection: "", hello
	// rejected POST /api/login by shield for peer
	// 429 Retry-After: "60", Connection: "close", slow down, retry in 60 s
}
