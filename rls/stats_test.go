package rls_test

import (
	"reflect"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bulwarkhq/bulwark/rls"
)

// Every outcome of a descriptor has a counter of its own, and Stats.Each
// (what the gateway's bulwark_rls_requests_total exports) visits every
// counter under a distinct name.
func TestStatsCountEveryOutcome(t *testing.T) {
	l := serve(t, `
domain: d
descriptors:
  - key: lim
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: qm
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: un
    rate_limit: {unlimited: true}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: a}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: a}]}
`)
	l.run(2, "d", desc("lim", "x"))               // ok, over_limit
	l.run(2, "d", desc("sh", "x"))                // ok, shadow
	l.run(2, "d", desc("qm", "x"))                // ok, quota
	l.run(1, "d", desc("un", "x"))                // unlimited
	l.run(1, "d", desc("nothing", "x"))           // unmatched
	l.run(1, "d", desc("a", "x"), desc("b", "x")) // replaced, ok
	l.run(1, "other", desc("lim", "x"))           // unknown_domain, unmatched
	if _, err := l.req(&pb.RateLimitRequest{}); err == nil {
		t.Fatal("empty request accepted")
	}
	want := rls.Stats{Requests: 11, Invalid: 1, UnknownDomain: 1, Unmatched: 2, Unlimited: 1,
		OK: 4, OverLimit: 1, Shadow: 1, Quota: 1, Replaced: 1}
	got := l.srv.Stats()
	if got != want {
		t.Fatalf("stats\n got  %+v\n want %+v", got, want)
	}
	// Each descriptor once: 11 of them.
	if n := got.Unmatched + got.Unlimited + got.OK + got.OverLimit + got.Shadow + got.Quota + got.Replaced; n != 11 {
		t.Fatalf("%d descriptor outcomes for 11 descriptors", n)
	}
	seen := map[string]uint64{}
	got.Each(func(r string, n uint64) {
		if _, dup := seen[r]; dup {
			t.Errorf("result %q twice", r)
		}
		seen[r] = n
	})
	if k := reflect.TypeFor[rls.Stats]().NumField(); len(seen) != k {
		t.Fatalf("Each visits %d counters of %d: %v", len(seen), k, seen)
	}
	if seen["quota"] != 1 || seen["replaced"] != 1 || seen["unlimited"] != 1 || seen["unmatched"] != 2 {
		t.Fatalf("Each: %v", seen)
	}
}
