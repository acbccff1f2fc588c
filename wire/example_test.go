package wire_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

func Example() {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/login", nil)
	wire.SetRateLimit(rec.Header(), wire.RateLimit{Policy: "peer", Limit: 300, Window: time.Minute, Reset: 2500 * time.Millisecond})
	p := wire.New(wire.CodeAuthenticationRateLimited)
	p.RetryAfter = wire.RetryAfterSeconds(2500 * time.Millisecond)
	wire.WriteClose(rec, req, p)
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
	// {"code":"authentication_rate_limited","detail":"Too many requests from this client; retry later.","retryAfter":3,"status":429,"title":"Too Many Requests","type":"about:blank"}
}
