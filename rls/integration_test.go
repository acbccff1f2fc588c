package rls_test

import (
	"math/rand/v2"
	"strconv"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/bulwarkhq/bulwark/rls"
)

// The requests and expected answers of envoyproxy/ratelimit's
// integration tests (test/integration/integration_test.go:
// testBasicBaseConfig, testConfigReload, testShareThreshold), against
// its integration configuration directory (testdata/envoy/integration).
// Left out, as assertions on what Bulwark does not have: the
// reference's statistics counters and local cache gauges, and its
// fixed-window duration_until_reset (the test copies each answer's own
// duration_until_reset into the expected status, as the reference's test
// does; its "duration decreases after 2 s" check is a fixed-window
// property: a GCRA bucket's reset grows with each hit). Response headers
// are Bulwark's addition and not compared.
func TestReferenceIntegration(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run("stop_counting_over_limit="+strconv.FormatBool(stop), func(t *testing.T) {
			ds := load(t, "integration/config")
			ds = append(ds, rls.DomainConfig{Settings: &rls.Settings{StopCountingOverLimit: stop}})
			tab, clk := newTableClock(t)
			srv, err := rls.New(tab, ds)
			if err != nil {
				t.Fatal(err)
			}
			l := &local{t: t, srv: srv, clk: clk}
			check := func(what string, r *pb.RateLimitResponse, code pb.RateLimitResponse_Code, want ...*pb.RateLimitResponse_DescriptorStatus) {
				t.Helper()
				for i, st := range want {
					if i < len(r.Statuses) {
						st.DurationUntilReset = r.Statuses[i].DurationUntilReset
					}
				}
				got := &pb.RateLimitResponse{OverallCode: r.OverallCode, Statuses: r.Statuses}
				if exp := (&pb.RateLimitResponse{OverallCode: code, Statuses: want}); !proto.Equal(got, exp) {
					t.Fatalf("%s:\n got  %v\n want %v", what, got, exp)
				}
			}
			status := func(code pb.RateLimitResponse_Code, rpu uint32, unit pb.RateLimitResponse_RateLimit_Unit, left uint32) *pb.RateLimitResponse_DescriptorStatus {
				return &pb.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit}, LimitRemaining: left}
			}
			ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
			minute, hour, second := pb.RateLimitResponse_RateLimit_MINUTE, pb.RateLimitResponse_RateLimit_HOUR, pb.RateLimitResponse_RateLimit_SECOND

			check("unknown domain", l.ask("foo", desc("hello", "world")), ok, &pb.RateLimitResponse_DescriptorStatus{Code: ok})
			check("basic key1", l.ask("basic", desc("key1", "foo")), ok, status(ok, 50, second, 49))

			v := strconv.Itoa(rand.Int())
			for i := range 25 {
				code, left := ok, uint32(20-(i+1))
				if i >= 20 {
					code, left = over, 0
				}
				check("key2 #"+strconv.Itoa(i), l.ask("another", desc("key2", v)), code, status(code, 20, minute, left))
			}
			v = strconv.Itoa(rand.Int())
			for i := range 15 {
				code, left1, left2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
				if i >= 10 {
					code, left2 = over, 0
					if stop {
						left1 = 10 // key2 no longer counted once key3 refuses
					}
				}
				check("key2+key3 #"+strconv.Itoa(i), l.ask("another", desc("key2", v), desc("key3", v)), code,
					status(ok, 20, minute, left1), status(code, 10, hour, left2))
			}

			// testConfigReload: reload.yaml added, then removed.
			check("before reload", l.ask("reload", desc("block", "foo")), ok, &pb.RateLimitResponse_DescriptorStatus{Code: ok})
			if err := srv.Reload(append(ds, load(t, "integration/reload/reload.yaml")...)); err != nil {
				t.Fatal(err)
			}
			check("after reload", l.ask("reload", desc("key1", "foo")), ok, status(ok, 50, second, 49))
			check("after reload, block", l.ask("reload", desc("block", "foo")), over, status(over, 0, second, 0))
			if err := srv.Reload(ds); err != nil {
				t.Fatal(err)
			}
			check("restored", l.ask("reload", desc("block", "foo")), ok, &pb.RateLimitResponse_DescriptorStatus{Code: ok})

			// testShareThreshold.
			const d = "share-threshold-test"
			for range 10 {
				l.ask(d, desc("files", "files/a.pdf"))
			}
			check("shared, files/b.csv", l.ask(d, desc("files", "files/b.csv")), over, status(over, 10, hour, 0))
			for i := range 10 {
				check("not shared #"+strconv.Itoa(i), l.ask(d, desc("files_no_share", "files_no_share/"+strconv.Itoa(i))), ok, status(ok, 10, hour, 9))
			}
		})
	}
}
