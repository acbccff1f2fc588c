package gateway

import "testing"

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
