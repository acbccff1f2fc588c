package gateway

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// rls.config_file: check (Load) refuses what serve could not start (a
// week limit below 1 per day used to pass the check and stop serve; now
// a rate above the fastest is the one refused), and what check accepts
// serves, a directory of files included, with a yearly limit.
func TestRLSConfigCheckEqualsServe(t *testing.T) {
	rd := testsvc.StartRedis(t)
	dir := t.TempDir()
	getenv := rlsSetup(t, dir, rd.Addr())
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const edge = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: %s}\n"
	write("fast.yaml", strings.ReplaceAll(edge, "%s", "second, requests_per_unit: 2000000"))
	write("limits.d/edge.yaml", strings.ReplaceAll(edge, "%s", "year, requests_per_unit: 1"))
	write("limits.d/more/other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 30}\n")
	base := strings.ReplaceAll(oneRoute, "{{APP}}", "http://127.0.0.1:1")

	_, err := loadIn(t, dir, base+"rls: {addr: '127.0.0.1:8081', config_file: fast.yaml}\n", getenv)
	const want = "rls.config_file: fast.yaml: invalid config: line 4: domain: edge: descriptors[0].rate_limit: 2000000 per second is above the fastest rate Bulwark enforces, 1000000 per second and 1000000000 at once"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("check of a 2000000/s limit: %v\nwant a problem: %s", err, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadIn(t, dir, base+"global: {budget: 50ms}\nrls: {addr: "+ln.Addr().String()+", config_file: limits.d}\n", getenv)
	if err != nil {
		t.Fatal(err)
	}
	startConfig(t, cfg, gwOpts{rls: ln})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsAsk(conn, "192.0.2.1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.Statuses[0].CurrentLimit; resp.OverallCode != pb.RateLimitResponse_OK || l.GetRequestsPerUnit() != 1 || l.GetUnit() != pb.RateLimitResponse_RateLimit_YEAR {
		t.Fatalf("from the directory: %v %v", resp.OverallCode, resp.Statuses[0])
	}
	// One per year: the second request is over the limit.
	if resp, err = rlsAsk(conn, "192.0.2.1", 1); err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second request of 1/year: %v %v", resp, err)
	}
}
