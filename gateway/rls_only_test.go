package gateway

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// An RLS-only deployment is examples/rls-only.yaml: just redis and rls,
// no routes, no upstreams, no PostgreSQL (its URL is never read), no
// profile key. check accepts it and serve starts it (a real
// redis-server); a gRPC ShouldRateLimit call is answered from the limits
// file. Before, check refused it: routes were required, rls needed the
// cluster profile, and the cluster profile needed PostgreSQL.
func TestRLSOnlyDeployment(t *testing.T) {
	rd := testsvc.StartRedis(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rls-only.yaml", "rls-limits.yaml"} {
		data, err := os.ReadFile(filepath.Join("../examples", name))
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "rls-only.yaml":
			// A budget no loaded machine misses, so that every decision
			// is Redis's.
			data = []byte(strings.Replace(string(data), "addr: 127.0.0.1:8081", "addr: "+ln.Addr().String(), 1) + "global: {budget: 1s}\n")
		case "rls-limits.yaml":
			// Limits that do not refill while the test runs.
			data = []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := env(EnvRedisURL, "redis://"+rd.Addr()+"/0")
	cfg, err := Load(filepath.Join(dir, "rls-only.yaml"), e.get)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != Cluster || len(cfg.Routes) != 0 || len(cfg.Upstreams) != 0 {
		t.Fatalf("profile %s, %d routes, %d upstreams", cfg.Profile, len(cfg.Routes), len(cfg.Upstreams))
	}
	if slices.Contains(e.read, EnvPostgresURL) {
		t.Fatalf("%s read by an RLS-only deployment", EnvPostgresURL)
	}
	tg := startConfig(t, cfg, gwOpts{rls: ln, stateDir: t.TempDir()})

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ask := func() pb.RateLimitResponse_Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if c := ask(); c != want {
			t.Fatalf("request %d of a limit of 3: %v", i+1, c)
		}
	}
	// The HTTP listener has no route: 404.
	resp, err := http.Get(tg.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("HTTP without routes: %d", resp.StatusCode)
	}
}
