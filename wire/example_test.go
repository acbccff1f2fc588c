package wire_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

func Example() {
	rec := httptest.NewRecorder()
	wire.SetRateLimit(rec.Header(), "peer", 300, 0, time.Minute, 2500*time.Millisecond)
	wire.WriteClose(rec, wire.Problem{
		Status:     429,
		Code:       wire.CodeAuthenticationRateLimited,
		Title:      "Too many authentication attempts",
		RetryAfter: wire.RetryAfterSeconds(2500 * time.Millisecond),
	})
	fmt.Println(rec.Code)
	for _, k := range []string{"Content-Type", "Retry-After", "Connection", "RateLimit", "RateLimit-Policy"} {
		fmt.Printf("%s: %s\n", k, rec.Header().Get(k))
	}
	fmt.Print(rec.Body.String())
	// Output:
	// 429
	// Content-Type: application/problem+json
	// Retry-After: 3
	// Connection: close
	// RateLimit: "peer";r=0;t=3
	// RateLimit-Policy: "peer";q=300;w=60
	// {"code":"authentication_rate_limited","retryAfter":3,"status":429,"title":"Too many authentication attempts","type":"about:blank"}
}
