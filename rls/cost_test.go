package rls_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/redisconn"
	"github.com/bulwarkhq/bulwark/rls"
)

// costConfig: a token budget of 10 per minute per user (an LLM
// gateway's limit; Envoy checks it with hits_addend 0 when a request
// starts and reports the tokens used with apply_on_stream_done).
const costConfig = `
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// check is a 0-hit request for user; report one of cost n, stated per
// descriptor (Envoy's hits_addend on the rate limit action) or, perReq,
// for the whole request.
func check(user string) *pb.RateLimitRequest {
	d := desc("user", user)
	d.HitsAddend = wrapperspb.UInt64(0)
	return &pb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{d}}
}

func report(user string, n uint64, perReq bool) *pb.RateLimitRequest {
	d := desc("user", user)
	if perReq {
		return &pb.RateLimitRequest{Domain: "llm", HitsAddend: uint32(n), Descriptors: []*rlv3.RateLimitDescriptor{d}}
	}
	d.HitsAddend = wrapperspb.UInt64(n)
	return &pb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{d}}
}

type asker func(*pb.RateLimitRequest) *pb.RateLimitResponse

// rounds runs n rounds of a check then a report of cost 6 and returns
// the codes of the checks and of the reports.
func rounds(ask asker, user string, n int, perReq bool) (checks, reports string) {
	var c, r []string
	for range n {
		c = append(c, ask(check(user)).OverallCode.String())
		r = append(r, ask(report(user, 6, perReq)).OverallCode.String())
	}
	return strings.Join(c, " "), strings.Join(r, " ")
}

const (
	wantChecks  = "OK OK OVER_LIMIT OVER_LIMIT OVER_LIMIT"
	wantReports = "OK OVER_LIMIT OVER_LIMIT OVER_LIMIT OVER_LIMIT"
)

// A check (hits_addend 0) before each report of cost 6 at 10 per minute:
// envoyproxy/ratelimit passes 2 of 5 checks (its counter reads 0, 6, 12,
// ...: the second report goes over the limit and counts). So does
// Bulwark: the report that crosses the limit counts in full and is
// answered OVER_LIMIT, and a check answers OVER_LIMIT while the limit is
// spent. Before, over-limit reports were dropped and every check passed.
func TestCostReports(t *testing.T) {
	for _, perReq := range []bool{false, true} {
		name := "descriptor_hits_addend"
		if perReq {
			name = "request_hits_addend"
		}
		t.Run(name, func(t *testing.T) {
			l := serve(t, costConfig)
			ask := func(r *pb.RateLimitRequest) *pb.RateLimitResponse {
				resp, err := l.req(r)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			checks, reports := rounds(ask, "alice", 5, perReq)
			if checks != wantChecks || reports != wantReports {
				t.Fatalf("checks %s\nreports %s\nwant %s\nand %s", checks, reports, wantChecks, wantReports)
			}
			// Spent: 12 counted, 9 owed past the 10 (the bound: one
			// window's worth, less the unit that lets the next check
			// through), so the limit is back after 60 s.
			l.settle()
			l.clk.Advance(59 * time.Second)
			if c := ask(check("alice")).OverallCode; c != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("check at 59 s: %v", c)
			}
			l.clk.Advance(time.Second)
			if r := ask(check("alice")); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("check at 60 s: %v", r)
			}
			// Another user is untouched.
			if checks, _ := rounds(ask, "bob", 1, perReq); checks != "OK" {
				t.Fatalf("bob: %s", checks)
			}
		})
	}
	// The exact crossing: 12 of 10 counted leaves 2 owed; the check passes
	// again once 3 units have refilled (18 s).
	l := serve(t, costConfig)
	ask := func(r *pb.RateLimitRequest) *pb.RateLimitResponse {
		resp, err := l.req(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if checks, reports := rounds(ask, "carol", 2, false); checks != "OK OK" || reports != "OK OVER_LIMIT" {
		t.Fatalf("checks %s, reports %s", checks, reports)
	}
	l.settle()
	l.clk.Advance(17 * time.Second)
	if c := ask(check("carol")).OverallCode; c != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("check at 17 s: %v", c)
	}
	l.clk.Advance(time.Second)
	if c := ask(check("carol")).OverallCode; c != pb.RateLimitResponse_OK {
		t.Fatalf("check at 18 s: %v", c)
	}
	// A plain request (no hits_addend) refused is still not counted: a
	// GCRA bucket has no window to forget it, so counting refusals would
	// keep a key under steady overload refused for good.
	l = serve(t, costConfig)
	if got := l.run(12, "llm", desc("user", "dave")); got != repeat("OK[OK]", 10)+" OVER_LIMIT[OVER_LIMIT] OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("plain: %s", got)
	}
	l.clk.Advance(6 * time.Second)
	if got := l.run(1, "llm", desc("user", "dave")); got != "OK[OK]" {
		t.Fatalf("plain after one interval: %s", got)
	}
}

// The same through the global limiter's Redis store (a throwaway
// redis-server), with three RLS replicas: the checks and reports go to
// each replica in turn (Envoy picks any), and each sees what the others
// counted, past the limit too (L2's bucket is overdrawn by it): every
// replica refuses checks until the bucket has refilled it (60 s), then
// passes them. The replicas and the lease script share a manual clock.
func TestCostReportsThroughRedis(t *testing.T) {
	rd := testsvc.StartRedis(t)
	domains, err := rls.ParseConfig([]byte(costConfig))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var (
		clients []pb.RateLimitServiceClient
		nodes   []*global.Node
	)
	for range 3 {
		st, err := redisglobal.Open(redisconn.Options{URL: "redis://" + rd.Addr()}, redisglobal.Config{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		// A budget no loaded machine misses: every decision is L2's.
		node, err := global.New(global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = node.Close() })
		nodes = append(nodes, node)
		tab, err := node.Table(1000)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := rls.New(tab, domains)
		if err != nil {
			t.Fatal(err)
		}
		gs := srv.GRPC()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = gs.Serve(ln) }()
		t.Cleanup(gs.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, pb.NewRateLimitServiceClient(conn))
	}
	// Each call waits for the replicas' round trips (the debits sent in
	// the background) before the next.
	settle := func() {
		deadline := time.Now().Add(30 * time.Second)
		for _, n := range nodes {
			for n.Stats().Pending != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("round trips still pending after 30 s: %+v", n.Stats())
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	var calls int
	askOn := func(i int, r *pb.RateLimitRequest) *pb.RateLimitResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := clients[i].ShouldRateLimit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		settle()
		return resp
	}
	ask := func(r *pb.RateLimitRequest) *pb.RateLimitResponse {
		calls++
		return askOn((calls-1)%len(clients), r)
	}
	checks, reports := rounds(ask, "alice", 5, false)
	if checks != wantChecks || reports != wantReports {
		t.Fatalf("checks %s\nreports %s\nwant %s\nand %s", checks, reports, wantChecks, wantReports)
	}
	// 30 counted, 10 fitted: the bucket is overdrawn by 9 (the bound),
	// on every replica.
	for _, at := range []time.Duration{6 * time.Second, 59 * time.Second} {
		clk.Set(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(at))
		for i := range clients {
			if c := askOn(i, check("alice")).OverallCode; c != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("replica %d at %v: %v", i, at, c)
			}
		}
	}
	clk.Set(time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC))
	for i := range clients {
		if r := askOn(i, check("alice")); r.OverallCode != pb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("replica %d at 60 s: %v", i, r)
		}
	}
}
