package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/wire"
)

// One line protects a handler per client address: 10 requests per second
// with bursts of 20.
func ExampleMustPerIP() {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := ratelimit.MustPerIP(10, 20)(api)

	for i := 0; i < 21; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil) // RemoteAddr 192.0.2.1
		h.ServeHTTP(rec, req)
		if i >= 19 {
			fmt.Printf("%d %d Retry-After=%q\n", i, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 19 200 Retry-After=""
	// 20 429 Retry-After="1"
}

// A limiter used directly, with a hand-moved clock.
func ExampleLimiter_Allow() {
	clk := clock.NewManual(time.Unix(0, 0))
	l, err := ratelimit.New(limit.GCRA{Rate: 1, Burst: 2}, ratelimit.Options{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	for i := 0; i < 3; i++ {
		d := l.Allow("tenant-42")
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	clk.Advance(time.Second)
	fmt.Println(l.Allow("tenant-42").Allowed)
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 1s
	// true
}

// Keyed by an API key header, with the client address as fallback, and
// the RateLimit fields on every answer.
func ExampleLimiter_Middleware() {
	l, err := ratelimit.New(ratelimit.PerSecond(5, 5), ratelimit.Options{Policy: "api-key"})
	if err != nil {
		panic(err)
	}
	mw, err := l.Middleware(ratelimit.Header("X-API-Key", ratelimit.ClientIP(nil)),
		ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersAlways})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", "k-1")
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
	// Output:
	// 200 "api-key";q=5;w=1 "api-key";r=4;t=1
}

// Refusals answered the application's way, and observed with the
// request: the RateLimit fields and Retry-After are already set when
// the handler runs.
func ExampleMiddlewareOptions_rejectHandler() {
	l, err := ratelimit.New(ratelimit.PerSecond(1, 1), ratelimit.Options{Policy: "ip"})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	mw, err := l.Middleware(ratelimit.ClientIP(nil), ratelimit.MiddlewareOptions{
		OnRejectRequest: func(r *http.Request, rej wire.Rejection) {
			fmt.Println("refused", r.URL.Path, "by", rej.Layer, "for", rej.Reason)
		},
		RejectHandler: func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(rej.Problem.Status)
			fmt.Fprintln(w, "<p>Slow down.</p>")
		},
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }))
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/search", nil))
		fmt.Printf("%d Retry-After=%q RateLimit=%q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("RateLimit"), rec.Body)
	}
	// Output:
	// 200 Retry-After="" RateLimit="" hello
	// refused /search by ratelimit for over_limit
	// 429 Retry-After="1" RateLimit="\"ip\";r=0;t=1" <p>Slow down.</p>
}
