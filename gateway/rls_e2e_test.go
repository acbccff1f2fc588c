package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// rlsSetup writes an RLS domain file into dir and returns the cluster
// environment for a Redis at addr.
func rlsSetup(t *testing.T, dir, redisAddr string) func(string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ratelimit.yaml"), []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return env(EnvProfile, "cluster", EnvRedisURL, "redis://"+redisAddr+"/0", EnvPostgresURL, "postgres://u:p@127.0.0.1:1/db",
		EnvPostgresTLSMode, "disable", EnvPostgresAllowInsecure, "true").get
}

// loadIn writes text as dir/bulwark.yaml and loads it (names relative to dir).
func loadIn(t *testing.T, dir, text string, getenv func(string) string) (*Config, error) {
	t.Helper()
	p := filepath.Join(dir, "bulwark.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load(p, getenv)
}

// rlsAsk asks for hits on remote_address=value with metadata md.
func rlsAsk(conn *grpc.ClientConn, value string, hits uint32, md ...string) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge", HitsAddend: hits,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}}}}})
}

// An RLS beyond loopback without mutual TLS or a token is refused by
// check (Parse) and therefore by serve; either one makes it acceptable.
func TestRLSExposedAddrRefused(t *testing.T) {
	dir := t.TempDir()
	getenv := rlsSetup(t, dir, "127.0.0.1:1")
	tok := filepath.Join(dir, "rls.token")
	if err := os.WriteFile(tok, []byte("rls-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testsvc.NewCA(t, "rls-ca")
	srv, err := ca.Issue(dir, "server", true)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.ReplaceAll(oneRoute, "{{APP}}", "http://127.0.0.1:1")
	for _, tc := range []struct {
		rls  string
		want string // "" = accepted
	}{
		{"{addr: '0.0.0.0:8081', config_file: ratelimit.yaml}", "rls.addr"},
		{"{addr: ':8081', config_file: ratelimit.yaml}", "rls.addr"},
		{"{addr: '10.1.2.3:8081', config_file: ratelimit.yaml}", "rls.addr"},
		// TLS without a client CA authenticates the server only.
		{"{addr: '0.0.0.0:8081', config_file: ratelimit.yaml, tls: {cert_file: " + srv.CertFile + ", key_file: " + srv.KeyFile + "}}", "rls.addr"},
		{"{addr: '127.0.0.1:8081', config_file: ratelimit.yaml}", ""},
		{"{addr: '0.0.0.0:8081', config_file: ratelimit.yaml, token_file: rls.token}", ""},
		{"{addr: '0.0.0.0:8081', config_file: ratelimit.yaml, tls: {cert_file: " + srv.CertFile + ", key_file: " + srv.KeyFile + ", client_ca_file: " + ca.File + "}}", ""},
		{"{addr: '0.0.0.0:8081', config_file: ratelimit.yaml, token_file: missing.token}", "rls.token_file"},
		{"{addr: '127.0.0.1:8081', config_file: ratelimit.yaml, max_keys: 0}", "rls.max_keys"},
	} {
		_, err := loadIn(t, dir, base+"rls: "+tc.rls+"\n", getenv)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("rls: %s: refused: %v", tc.rls, err)
		case tc.want != "" && err == nil:
			t.Errorf("rls: %s: accepted, want a problem at %s", tc.rls, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("rls: %s: %v, want a problem at %s", tc.rls, err, tc.want)
		}
	}
}

// rls.token_file: calls without the token, or with another, are refused
// and count nothing; with it they are answered.
func TestRLSTokenThroughGateway(t *testing.T) {
	rd := testsvc.StartRedis(t)
	dir := t.TempDir()
	getenv := rlsSetup(t, dir, rd.Addr())
	const token = "rls-token-0123456789abcdef"
	if err := os.WriteFile(filepath.Join(dir, "rls.token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.ReplaceAll(oneRoute, "{{APP}}", "http://127.0.0.1:1") + "global: {budget: 50ms}\nrls: {addr: " + ln.Addr().String() + ", config_file: ratelimit.yaml, token_file: rls.token}\n"
	cfg, err := loadIn(t, dir, cfgText, getenv)
	if err != nil {
		t.Fatal(err)
	}
	startConfig(t, cfg, gwOpts{rls: ln})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, md := range [][]string{nil, {"authorization", "Bearer not-the-token-0123456789"}} {
		if _, err := rlsAsk(conn, "victim", 3, md...); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("metadata %q: %v, want Unauthenticated", md, err)
		}
	}
	resp, err := rlsAsk(conn, "victim", 1, "authorization", "Bearer "+token)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("with the token: %v, %d left; want OK, 2 left (the refused calls drained nothing)", resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
}

// rls.tls with client_ca_file: only clients holding a certificate of
// that CA are answered.
func TestRLSMutualTLSThroughGateway(t *testing.T) {
	rd := testsvc.StartRedis(t)
	dir := t.TempDir()
	getenv := rlsSetup(t, dir, rd.Addr())
	ca, other := testsvc.NewCA(t, "rls-ca"), testsvc.NewCA(t, "other-ca")
	srv, err := ca.Issue(dir, "server", true)
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.Issue(dir, "envoy", false)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := other.Issue(dir, "intruder", false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.ReplaceAll(oneRoute, "{{APP}}", "http://127.0.0.1:1") + "global: {budget: 50ms}\nrls:\n  addr: " + ln.Addr().String() +
		"\n  config_file: ratelimit.yaml\n  tls: {cert_file: " + srv.CertFile + ", key_file: " + srv.KeyFile + ", client_ca_file: " + ca.File + "}\n"
	cfg, err := loadIn(t, dir, cfgText, getenv)
	if err != nil {
		t.Fatal(err)
	}
	startConfig(t, cfg, gwOpts{rls: ln})
	dial := func(creds credentials.TransportCredentials) *grpc.ClientConn {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	withCert := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12})
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":      insecure.NewCredentials(),
		"no certificate": withCert(),
		"another CA's":   withCert(bad.Cert),
	} {
		if _, err := rlsAsk(dial(creds), "victim", 3); err == nil {
			t.Fatalf("%s: answered", name)
		}
	}
	resp, err := rlsAsk(dial(withCert(good.Cert)), "victim", 1)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("with a client certificate: %v, %d left; want OK, 2 left", resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
}

// RLS keys fill rls.max_keys and nothing else: after a flood of distinct
// descriptor values, a scope: global route still admits new clients.
func TestRLSKeysDoNotCrowdOutRoutes(t *testing.T) { engines(t, testRLSKeysDoNotCrowdOutRoutes) }

func testRLSKeysDoNotCrowdOutRoutes(t *testing.T) {
	rd := testsvc.StartRedis(t)
	up := echoUpstream(t, "app")
	dir := t.TempDir()
	getenv := rlsSetup(t, dir, rd.Addr())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const capacity = 16
	cfgText := fmt.Sprintf(`
upstreams:
  - {name: app, targets: ["%s"]}
routes:
  - name: api
    match: {path: /api}
    upstream: app
    rate_limit: {qps: 100, burst: 100, scope: global, key: client_ip}
global: {budget: 50ms, capacity: %d}
rls: {addr: %s, config_file: ratelimit.yaml, max_keys: %d}
`, up.URL, capacity, ln.Addr(), capacity)
	cfg, err := loadIn(t, dir, cfgText, getenv)
	if err != nil {
		t.Fatal(err)
	}
	tg := startConfig(t, cfg, gwOpts{rls: ln})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	over := 0
	for i := range 4 * capacity {
		resp, err := rlsAsk(conn, fmt.Sprintf("flood-%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != pb.RateLimitResponse_OK {
			over++
		}
	}
	if over < 2*capacity {
		t.Fatalf("rls.max_keys %d: only %d of %d new keys refused", capacity, over, 4*capacity)
	}
	// A new client of the global route (its first key in the table).
	if r := do(t, "GET", tg.url+"/api", nil); r.status != 200 {
		t.Fatalf("route after an RLS flood: %d %s", r.status, r.body)
	}
}
