package rls_test

import (
	"context"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/rls"
)

// BenchmarkShouldRateLimit decides one request of two descriptors (a
// nested path and a per-address key) over 10,000 keys, in process on an
// in-memory store: the server's own cost, without gRPC or Redis.
func BenchmarkShouldRateLimit(b *testing.B) {
	st, err := global.NewMemoryStore(100_000, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	node, err := global.New(global.Config{Store: st, Budget: global.MaxBudget})
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	tab, err := node.Table(100_000)
	if err != nil {
		b.Fatal(err)
	}
	ds, err := rls.ParseConfig([]byte(config))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := rls.New(tab, ds)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*pb.RateLimitRequest, 10_000)
	for i := range reqs {
		v := "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		reqs[i] = &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: v}}},
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/login"}, {Key: "user", Value: v}}},
		}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := srv.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}
