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
// week limit below 1 per day used to pass the check and stop serve), and
// what check accepts serves, a directory of files included.
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
	const week = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: week, requests_per_unit: %s}\n"
	write("week6.yaml", strings.ReplaceAll(week, "%s", "6"))
	write("limits.d/edge.yaml", strings.ReplaceAll(week, "%s", "7"))
	write("limits.d/more/other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 30}\n")
	base := strings.ReplaceAll(oneRoute, "{{APP}}", "http://127.0.0.1:1")

	_, err := loadIn(t, dir, base+"rls: {addr: '127.0.0.1:8081', config_file: week6.yaml}\n", getenv)
	const want = "rls.config_file: week6.yaml: invalid config: line 4: domain: edge: descriptors[0].rate_limit: 6 per week is below the slowest rate Bulwark enforces, 1 per day: use at least 7 per week"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("check of a 6/week limit: %v\nwant a problem: %s", err, want)
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
	if l := resp.Statuses[0].CurrentLimit; resp.OverallCode != pb.RateLimitResponse_OK || l.GetRequestsPerUnit() != 7 || l.GetUnit() != pb.RateLimitResponse_RateLimit_WEEK {
		t.Fatalf("from the directory: %v %v", resp.OverallCode, resp.Statuses[0])
	}
}
