package rls_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/rls"
)

const authConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// memNode is a node on an in-memory store with a frozen clock.
func memNode(t *testing.T, capacity int) *global.Node {
	t.Helper()
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := global.NewMemoryStore(100_000, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	node, err := global.New(global.Config{Store: st, Clock: clk, Capacity: capacity, Budget: global.MaxBudget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	return node
}

// serveRLS serves authConfig from a table of capacity keys of node on a
// loopback listener with opts and returns its address.
func serveRLS(t *testing.T, node *global.Node, capacity int, opts ...grpc.ServerOption) string {
	t.Helper()
	domains, err := rls.ParseConfig([]byte(authConfig))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := node.Table(capacity)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(tab, domains)
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.GRPC(opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// call asks for hits on remote_address=value, with md as metadata.
func call(conn *grpc.ClientConn, value string, hits uint32, md ...string) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", value)}, HitsAddend: hits})
}

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		secured bool
		ok      bool
	}{
		{"127.0.0.1:8081", false, true},
		{"[::1]:8081", false, true},
		{"localhost:8081", false, true},
		{"0.0.0.0:8081", false, false},
		{":8081", false, false},
		{"10.0.0.5:8081", false, false},
		{"[2001:db8::1]:8081", false, false},
		{"rls.internal:8081", false, false},
		{"0.0.0.0:8081", true, true},
		{":8081", true, true},
		{"nonsense", true, false},
	} {
		err := rls.CheckAddr(tc.addr, tc.secured)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAddr(%q, %v) = %v, want ok=%v", tc.addr, tc.secured, err, tc.ok)
		}
		if !tc.ok && !tc.secured && !errors.Is(err, rls.ErrExposed) {
			t.Errorf("CheckAddr(%q) = %v, want ErrExposed", tc.addr, err)
		}
	}
}

// A token-protected server refuses calls without the token, or with
// another one, before counting anything; the health service answers
// without it.
func TestRequireToken(t *testing.T) {
	const token = "rls-token-0123456789abcdef"
	addr := serveRLS(t, memNode(t, 1000), 1000, rls.RequireToken(token)...)
	conn := dial(t, addr, insecure.NewCredentials())
	for _, md := range [][]string{
		nil,
		{"authorization", "Bearer wrong-token-0123456789abcdef"},
		{"authorization", "Bearer " + token + "x"},
		{"authorization", token},
		{"authorization", "Basic " + token},
		{"authorization", "Bearer " + token, "authorization", "Bearer " + token},
	} {
		// Three hits would drain the limit of 3: refused calls count nothing.
		_, err := call(conn, "victim", 3, md...)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("metadata %q: got %v, want Unauthenticated", md, err)
		}
	}
	resp, err := call(conn, "victim", 1, "authorization", "Bearer "+token)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("with the token: %v remaining %d, want OK with 2 left (refused calls counted nothing)", resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	if _, err := call(conn, "victim", 1, "authorization", "bearer "+token); err != nil {
		t.Fatalf("scheme is case-insensitive: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v %v", h, err)
	}
}

// With mutual TLS, a client without a certificate from the configured CA
// gets no answer; one with it does.
func TestMutualTLS(t *testing.T) {
	ca, other := testsvc.NewCA(t, "rls-ca"), testsvc.NewCA(t, "other-ca")
	dir := t.TempDir()
	issue := func(ca *testsvc.CA, name string, server bool) tls.Certificate {
		is, err := ca.Issue(dir, name, server)
		if err != nil {
			t.Fatal(err)
		}
		return is.Cert
	}
	srvCert := issue(ca, "server", true)
	good, bad := issue(ca, "client", false), issue(other, "intruder", false)
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	})
	addr := serveRLS(t, memNode(t, 1000), 1000, grpc.Creds(creds))
	client := func(certs ...tls.Certificate) *grpc.ClientConn {
		return dial(t, addr, credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12}))
	}
	for name, conn := range map[string]*grpc.ClientConn{
		"no certificate": client(),
		"another CA's":   client(bad),
		"plaintext":      dial(t, addr, insecure.NewCredentials()),
	} {
		if _, err := call(conn, "victim", 3); err == nil {
			t.Fatalf("%s: the call was answered", name)
		}
	}
	resp, err := call(client(good), "victim", 1)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("remaining %d, want 2: refused connections counted", resp.Statuses[0].LimitRemaining)
	}
}

// RLS clients choose the keys: a flood of distinct descriptor values
// fills the server's own table and no other. The node's limiters (the
// gateway's scope: global routes) keep admitting new keys.
func TestOwnTable(t *testing.T) {
	const capacity = 64
	node := memNode(t, capacity)
	route, err := node.Limiter("r/api", limit.GCRA{Rate: 10, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, serveRLS(t, node, capacity), insecure.NewCredentials())
	refused := 0
	for i := range 4 * capacity {
		resp, err := call(conn, fmt.Sprintf("flood-%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != pb.RateLimitResponse_OK {
			refused++
		}
	}
	if refused < 2*capacity {
		t.Fatalf("the RLS table of %d keys refused only %d of %d new keys: it is not bounded", capacity, refused, 4*capacity)
	}
	for i := range capacity {
		if d := route.Allow(fmt.Sprintf("client-%d", i)); !d.Allowed {
			t.Fatalf("route key %d refused after an RLS flood: %+v", i, d)
		}
	}
}

// TestListenerValidate: the rls section's own check names every problem
// by its key (ErrConfig), and an empty addr is off, not an error.
func TestListenerValidate(t *testing.T) {
	if err := (rls.Listener{}).Validate(); err != nil {
		t.Fatalf("off: %v", err)
	}
	ok := rls.Listener{Addr: "127.0.0.1:8081", ConfigFile: "r.yaml", MaxKeys: 10}
	if err := ok.Validate(); err != nil {
		t.Fatalf("loopback: %v", err)
	}
	err := rls.Listener{Addr: "0.0.0.0:99999", MaxKeys: -1, TLS: &rls.ListenerTLS{}}.Validate()
	var es conf.Errors
	if !errors.As(err, &es) || !errors.Is(err, rls.ErrConfig) {
		t.Fatalf("Validate: %v, want conf.Errors of ErrConfig", err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	if want := []string{"addr", "config_file", "max_keys", "tls.cert_file", "tls.key_file", "addr"}; !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v (%v)", paths, want, err)
	}
	if got := es[0].Error(); got != `rls: invalid config: addr: "0.0.0.0:99999": bad port` {
		t.Fatalf("first error %q", got)
	}
}
