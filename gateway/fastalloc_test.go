package gateway

import (
	"testing"

	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

// A request proxied by the fast engine (on event loops and with a
// goroutine per connection) with the shield and a route rate limit on
// allocates at most twice (the bound; it is 0 today):
// client, gateway and upstream on real loopback sockets, the client and
// the upstream allocation-free.
func TestNoRaceFastEngineAllocs(t *testing.T) {
	for _, engine := range []string{EngineAuto, EngineGoroutine} {
		t.Run("engine="+engineLabel(engine), func(t *testing.T) { testFastEngineAllocs(t, engine) })
	}
}

func testFastEngineAllocs(t *testing.T, engine string) {
	if raceEnabled {
		t.Skip("allocations are not meaningful under -race")
	}
	addr := startBenchGateway(t, engine)
	rc := dialRaw(t, addr, "/items/1")
	for range 100 { // warm: buffers, pools, the connection's caches
		if err := rc.do(); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(2000, func() {
		if err := rc.do(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations per proxied request", allocs)
	if allocs > 2 {
		t.Fatalf("%.0f allocations per proxied request, want at most 2", allocs)
	}
}

// Over TLS (HTTP/1.1 by ALPN, keep-alive) the fast engine proxies a
// request without allocating either; crypto/tls allocates a reader per
// record it reads (conn.go, readFromUntil: the client's and the
// gateway's here), which is not the gateway's to remove.
func TestNoRaceFastEngineTLSAllocs(t *testing.T) {
	for _, engine := range []string{EngineAuto, EngineGoroutine} {
		t.Run("engine="+engineLabel(engine), func(t *testing.T) {
			if raceEnabled {
				t.Skip("allocations are not meaningful under -race")
			}
			rc := dialRawTLS(t, startBenchGatewayTLS(t, engine), "/items/1")
			for range 100 {
				if err := rc.do(); err != nil {
					t.Fatal(err)
				}
			}
			outside, inTLS := hosttest.AllocsPerRunOutside(2000, func() {
				if err := rc.do(); err != nil {
					t.Fatal(err)
				}
			}, tlsRecordRead)
			t.Logf("%.0f allocations per proxied request, %.0f in crypto/tls's record reads (client and gateway)", outside, inTLS)
			if outside != 0 || inTLS > 2 {
				t.Fatalf("%.0f allocations per proxied request outside crypto/tls's record reads (want 0), %.0f inside (want at most 2)", outside, inTLS)
			}
		})
	}
}

// tlsRecordRead is crypto/tls's function that allocates a reader per
// record it reads (Go 1.26).
const tlsRecordRead = "crypto/tls.(*Conn).readFromUntil"
