package rls_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/redisconn"
	"github.com/bulwarkhq/bulwark/rls"
)

const config = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2, name: login}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: database
    value: users
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
---
domain: other
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 100}
`

type env struct {
	srv    *rls.Server
	client pb.RateLimitServiceClient
	health healthpb.HealthClient
}

func start(t *testing.T) *env { t.Helper(); return startWith(t, config) }

// startWith serves the configuration text (see rls.ParseConfig) on a
// node backed by a throwaway redis-server.
func startWith(t *testing.T, text string) *env {
	t.Helper()
	rd := testsvc.StartRedis(t)
	st, err := redisglobal.Open(redisconn.Options{URL: "redis://" + rd.Addr()}, redisglobal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// A clock that never moves and the longest decision budget: the
	// tests count tokens call by call, and on a loaded machine the calls
	// may be seconds apart (a 3/min limit refills one token in 20 s) or a
	// refill may miss a short budget and be decided from the local share.
	node, err := global.New(global.Config{Store: st, Budget: global.MaxBudget, Clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	domains, err := rls.ParseConfig([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := node.Table(10_000)
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
	return &env{srv: srv, client: pb.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn)}
}

func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *env) ask(t *testing.T, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func codesOf(r *pb.RateLimitResponse) string {
	var s []string
	for _, st := range r.Statuses {
		s = append(s, st.Code.String())
	}
	return r.OverallCode.String() + "[" + strings.Join(s, ",") + "]"
}

func header(r *pb.RateLimitResponse, k string) string {
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == k {
			return h.Value
		}
	}
	return ""
}

func TestDescriptorTree(t *testing.T) {
	e := start(t)
	// A key without value: each address counted separately, 3 per minute.
	for i := range 3 {
		r := e.ask(t, "edge", 0, desc("remote_address", "192.0.2.1"))
		if codesOf(r) != "OK[OK]" || r.Statuses[0].LimitRemaining != uint32(2-i) ||
			r.Statuses[0].CurrentLimit.RequestsPerUnit != 3 || r.Statuses[0].CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("call %d: %v %v", i, codesOf(r), r.Statuses[0])
		}
	}
	r := e.ask(t, "edge", 0, desc("remote_address", "192.0.2.1"))
	if codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("4th: %v", codesOf(r))
	}
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > 20*time.Second {
		t.Fatalf("duration_until_reset %v", d)
	}
	if h := header(r, "RateLimit-Policy"); !strings.Contains(h, ";q=3;w=60") {
		t.Fatalf("RateLimit-Policy %q", h)
	}
	if h := header(r, "RateLimit"); !strings.Contains(h, ";r=0;t=") {
		t.Fatalf("RateLimit %q", h)
	}
	if h := header(r, "Retry-After"); h == "" || h == "0" {
		t.Fatalf("Retry-After %q", h)
	}
	if r := e.ask(t, "edge", 0, desc("remote_address", "192.0.2.2")); codesOf(r) != "OK[OK]" {
		t.Fatalf("another address: %v", codesOf(r))
	}
	// Nested: path=/login then user: the user node's limit (1/min) applies.
	if r := e.ask(t, "edge", 0, desc("path", "/login", "user", "alice")); codesOf(r) != "OK[OK]" || r.Statuses[0].CurrentLimit.RequestsPerUnit != 1 {
		t.Fatalf("nested 1: %v", codesOf(r))
	}
	if r := e.ask(t, "edge", 0, desc("path", "/login", "user", "alice")); codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("nested 2: %v", codesOf(r))
	}
	if r := e.ask(t, "edge", 0, desc("path", "/login", "user", "bob")); codesOf(r) != "OK[OK]" {
		t.Fatalf("nested, another user: %v", codesOf(r))
	}
	// The parent alone has its own limit (2/min) and name.
	r = e.ask(t, "edge", 0, desc("path", "/login"))
	if codesOf(r) != "OK[OK]" || r.Statuses[0].CurrentLimit.Name != "login" || !strings.HasPrefix(header(r, "RateLimit-Policy"), `"login";`) {
		t.Fatalf("parent: %v %v", codesOf(r), r.ResponseHeadersToAdd)
	}
	// Several descriptors: overall OVER_LIMIT if any is.
	r = e.ask(t, "edge", 0, desc("remote_address", "192.0.2.9"), desc("remote_address", "192.0.2.1"))
	if codesOf(r) != "OVER_LIMIT[OK,OVER_LIMIT]" {
		t.Fatalf("two descriptors: %v", codesOf(r))
	}
	// Prefix value.
	for range 5 {
		if r := e.ask(t, "edge", 0, desc("path", "/api/v1/items")); codesOf(r) != "OK[OK]" || r.Statuses[0].CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("prefix: %v", codesOf(r))
		}
	}
	if r := e.ask(t, "edge", 0, desc("path", "/api/v1/items")); codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("prefix 6th: %v", codesOf(r))
	}
	// Unmatched descriptor, an unlimited one, a walk that stops early.
	r = e.ask(t, "edge", 0, desc("path", "/other"), desc("internal", "x"), desc("remote_address", "192.0.2.1", "extra", "y"))
	if codesOf(r) != "OK[OK,OK,OK]" || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit != nil || r.Statuses[2].CurrentLimit != nil {
		t.Fatalf("unmatched: %v %v", codesOf(r), r.Statuses)
	}
	// Unknown domain: OK, no limit, like envoyproxy/ratelimit.
	if r := e.ask(t, "nowhere", 0, desc("remote_address", "192.0.2.1")); codesOf(r) != "OK[OK]" || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: %v", codesOf(r))
	}
	if s := e.srv.Stats(); s.UnknownDomain != 1 || s.OverLimit < 4 {
		t.Fatalf("stats %+v", s)
	}
}

func TestShadowModeAndHits(t *testing.T) {
	e := start(t)
	// Shadow: counted and reported, never OVER_LIMIT.
	for i := range 3 {
		r := e.ask(t, "edge", 0, desc("database", "users"))
		if codesOf(r) != "OK[OK]" {
			t.Fatalf("shadow %d: %v", i, codesOf(r))
		}
		if i > 0 && r.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("shadow %d: remaining %d", i, r.Statuses[0].LimitRemaining)
		}
	}
	if s := e.srv.Stats(); s.Shadow != 2 || s.OverLimit != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Request-level hits_addend: 3 of 3 at once, then nothing left.
	if r := e.ask(t, "edge", 3, desc("remote_address", "198.51.100.1")); codesOf(r) != "OK[OK]" || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("hits 3: %v %v", codesOf(r), r.Statuses[0])
	}
	if r := e.ask(t, "edge", 0, desc("remote_address", "198.51.100.1")); codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("after hits 3: %v", codesOf(r))
	}
	// A stated cost above what the limit can ever hold: over, and
	// counted (as envoyproxy/ratelimit counts it): the key is spent.
	if r := e.ask(t, "edge", 4, desc("remote_address", "198.51.100.2")); codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("hits 4 of 3: %v", codesOf(r))
	}
	q := desc("remote_address", "198.51.100.2")
	q.HitsAddend = wrapperspb.UInt64(0)
	if r := e.ask(t, "edge", 0, q); codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("check after hits 4 of 3: %v", codesOf(r))
	}
	// Per-descriptor hits_addend overrides the request's; 0 is a check.
	d := desc("remote_address", "198.51.100.3")
	d.HitsAddend = wrapperspb.UInt64(0)
	if r := e.ask(t, "edge", 3, d); codesOf(r) != "OK[OK]" || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("query: %v %v", codesOf(r), r.Statuses[0])
	}
	d.HitsAddend = wrapperspb.UInt64(2)
	if r := e.ask(t, "edge", 3, d); codesOf(r) != "OK[OK]" || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("descriptor hits 2: %v %v", codesOf(r), r.Statuses[0])
	}
}

// Malformed requests get InvalidArgument and count nothing, even for the
// valid descriptors they carry.
func TestMalformedRequests(t *testing.T) {
	e := start(t)
	good := desc("remote_address", "203.0.113.5")
	neg := desc("remote_address", "203.0.113.5")
	neg.IsNegativeHits = true
	long := strings.Repeat("v", rls.MaxValueLen+1)
	var many []*rlv3.RateLimitDescriptor
	for range rls.MaxReqDescriptors + 1 {
		many = append(many, desc("k", "v"))
	}
	for _, c := range []struct {
		name string
		req  *pb.RateLimitRequest
	}{
		{"empty domain", &pb.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{good}}},
		{"no descriptors", &pb.RateLimitRequest{Domain: "edge"}},
		{"no entries", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good, {}}}},
		{"empty key", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good, desc("", "x")}}},
		{"negative hits", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good, neg}}},
		{"long value", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good, desc("k", long)}}},
		{"too many descriptors", &pb.RateLimitRequest{Domain: "edge", Descriptors: many}},
		{"huge hits", &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good}, HitsAddend: rls.MaxHits + 1}},
	} {
		_, err := e.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "rls: ") {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	if r := e.ask(t, "edge", 0, good); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("malformed requests consumed tokens: remaining %d", r.Statuses[0].LimitRemaining)
	}
	if s := e.srv.Stats(); s.Invalid != 8 {
		t.Fatalf("stats %+v", s)
	}
	// A message above the size bound is refused by gRPC itself.
	big := &pb.RateLimitRequest{Domain: "edge"}
	for range 400 {
		big.Descriptors = append(big.Descriptors, desc("k", strings.Repeat("x", 200)))
	}
	if _, err := e.client.ShouldRateLimit(context.Background(), big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v", err)
	}
}

func TestHealthAndReload(t *testing.T) {
	e := start(t)
	h, err := e.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", h, err)
	}
	for range 3 {
		e.ask(t, "edge", 0, desc("remote_address", "192.0.2.77"))
	}
	domains, _ := rls.ParseConfig([]byte(config))
	if err := e.srv.Reload(domains); err != nil {
		t.Fatal(err)
	}
	if r := e.ask(t, "edge", 0, desc("remote_address", "192.0.2.77")); codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("after an identical reload the state was lost: %v", codesOf(r))
	}
	// A higher limit on the same node keeps the shared L2 bucket: its GCRA
	// state is a time (3 × 20 s of the 60 s tolerance used), and 5/min
	// keeps the 60 s tolerance, so the bucket is still empty; a fresh
	// bucket would pass 4 of 4.
	domains[0].Descriptors[0].RateLimit.RequestsPerUnit = 5
	if err := e.srv.Reload(domains); err != nil {
		t.Fatal(err)
	}
	got := 0
	for range 4 {
		if r := e.ask(t, "edge", 0, desc("remote_address", "192.0.2.77")); r.OverallCode == pb.RateLimitResponse_OK {
			got++
		}
	}
	if got != 0 {
		t.Fatalf("after raising the limit to 5/min, %d passed at once; the bucket's state was lost", got)
	}
	// A bad reload keeps the running configuration.
	bad := []rls.DomainConfig{{Domain: "edge", Descriptors: []rls.Descriptor{{Key: "k", RateLimit: &rls.RateLimit{Unit: "fortnight", RequestsPerUnit: 1}}}}}
	if err := e.srv.Reload(bad); !errors.Is(err, rls.ErrConfig) {
		t.Fatalf("bad reload: %v", err)
	}
	if r := e.ask(t, "other", 0, desc("k", "v")); r.Statuses[0].CurrentLimit == nil {
		t.Fatal("a failed reload replaced the configuration")
	}
	e.srv.Shutdown()
	h, err = e.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after shutdown %v %v", h, err)
	}
}

// Refusals name the line and the key in the file's terms, never a Go
// type, and refuse what Bulwark cannot enforce (so that check = serve).
func TestParseConfigErrors(t *testing.T) {
	const d = "domain: a\ndescriptors:\n  - key: k\n"
	for _, c := range []struct{ yaml, want string }{
		{d + "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `line 4: domain: a: descriptors[0].rate_limit.unit: "fortnight" is not a unit: second, minute, hour, day, week, month or year`},
		{d + "    rate_limit: {unit: second, requests_per_unit: 2000000}\n", `line 4: domain: a: descriptors[0].rate_limit: 2000000 per second is above the fastest rate Bulwark enforces, 1000000 per second and 1000000000 at once`},
		{d + "    rate_limit: {unit: second, requests_per_unit: -1}\n", `line 4: domain: a: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "-1"`},
		{d + "    rate_limit: {unit: second, requests_per_unit: ten}\n", `line 4: domain: a: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, got "ten"`},
		{d + "    shadow_mode: maybe\n", `line 4: domain: a: descriptors[0].shadow_mode: want true or false, got "maybe"`},
		{d + "    bogus: 1\n", `line 4: domain: a: descriptors[0].bogus: unknown key (known keys: key, value, rate_limit, shadow_mode, descriptors, quota_mode, share_threshold, detailed_metric, value_to_metric)`},
		{d + "    value: v\n    share_threshold: true\n", `line 5: domain: a: descriptors[0].share_threshold: applies only to a value ending in '*'`},
		{d + "    descriptors: {key: x}\n", `line 4: domain: a: descriptors[0].descriptors: want a list, got a mapping`},
		{d + "    key: again\n", `line 4: domain: a: descriptors[0].key: duplicate key (first set at line 3)`},
		{"domain: ''\n", `line 1: document 1: domain: required: a domain name of 1 to 128 bytes`},
		{"domain: a\n---\ndomain: a\n", `domain: a: defined twice (merge_domains in the settings merges them)`},
		{"domain: a\ndescriptors:\n  - key: k\n  - key: k\n", `line 4: domain: a: descriptors[1]: same key and value as descriptors[0] (key "k")`},
		{"domain: a\ndescriptors:\n  - key: ''\n", `line 3: domain: a: descriptors[0].key: must be 1 to 128 bytes without control characters`},
		{"settings: {response_headers: 1}\n", `line 1: document 1: settings.response_headers: want true or false, got "1"`},
		{"settings: {colour: red}\n", `line 1: document 1: settings.colour: unknown key (known keys: response_headers, stop_counting_over_limit, response_metadata, merge_domains)`},
		{"settings: {}\n---\nsettings: {}\n", `document 2: settings: defined twice`},
		{"domain: a\nsettings: {}\n", `domain: a: settings: belongs in a document of its own, without domain or descriptors`},
		{"[1, 2]\n", `line 1: document 1: want a mapping, got a list`},
	} {
		_, err := rls.ParseConfig([]byte(c.yaml))
		if !errors.Is(err, rls.ErrConfig) || err.Error() != "rls: invalid config: "+c.want {
			t.Errorf("%q:\n got: %v\nwant: %s", c.yaml, err, c.want)
		}
	}
	// What the parser accepts New accepts: the rates at the bounds.
	for _, text := range []string{
		d + "    rate_limit: {unit: year, requests_per_unit: 1}\n",
		d + "    rate_limit: {unit: YEAR, requests_per_unit: 1000000000}\n",
		d + "    rate_limit: {unit: year, requests_per_unit: 7}\n",
		d + "    rate_limit: {unit: week, requests_per_unit: 1}\n",
		d + "    rate_limit: {unit: month, requests_per_unit: 1}\n",
		d + "    rate_limit: {unit: week, requests_per_unit: 7}\n",
		d + "    rate_limit: {unit: month, requests_per_unit: 30}\n",
		d + "    rate_limit: {unit: month, requests_per_unit: 4294967}\n",
		d + "    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
		d + "    rate_limit: {unit: Second}\n", // no requests_per_unit: refuses all
		d + "    rate_limit: {unlimited: true, requests_per_unit: 5}\n",
		d + "    rate_limit: {name: 'a\"b', unit: second, requests_per_unit: 1}\n",
	} {
		ds, err := rls.ParseConfig([]byte(text))
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		if _, err := rls.New(newTable(t), ds); err != nil {
			t.Errorf("%q: parsed, but New: %v", text, err)
		}
	}
}

// TestParseDepth: descriptors nest MaxDepth deep, and no deeper (the
// error names the list too deep); an alias to an enclosing list ends at
// the walk's nesting bound; every problem names the key and its line.
func TestParseDepth(t *testing.T) {
	nested := func(n int) string {
		var b strings.Builder
		b.WriteString("domain: a\n")
		ind := ""
		for range n {
			b.WriteString(ind + "descriptors:\n" + ind + "  - key: k\n")
			ind += "    "
		}
		return b.String()
	}
	ds, err := rls.ParseConfig([]byte(nested(rls.MaxDepth)))
	if err != nil {
		t.Fatalf("%d levels: %v", rls.MaxDepth, err)
	}
	if _, err := rls.New(newTable(t), ds); err != nil {
		t.Fatalf("%d levels parsed, but New: %v", rls.MaxDepth, err)
	}
	want := "rls: invalid config: line 18: domain: a: " + strings.Repeat("descriptors[0].", rls.MaxDepth) + "descriptors: nested deeper than 8"
	if _, err := rls.ParseConfig([]byte(nested(rls.MaxDepth + 1))); err == nil || err.Error() != want {
		t.Fatalf("%d levels: %v\nwant %s", rls.MaxDepth+1, err, want)
	}
	_, err = rls.ParseConfig([]byte("domain: a\ndescriptors: &d [{key: k, descriptors: *d}]\n"))
	if !errors.Is(err, rls.ErrConfig) || !strings.HasPrefix(err.Error(), "rls: invalid config: line 2: domain: a: descriptors[0].descriptors[0].") || !strings.HasSuffix(err.Error(), "nested deeper than 100 levels") {
		t.Fatalf("alias cycle: %v", err)
	}
	for y, want := range map[string]string{
		"settings: ~\n":                             "",
		"domain: a\ndescriptors:\n  - ~\n":          "line 3: domain: a: descriptors[0]: want a mapping, got null",
		"domain: a\ndescriptors:\n  - {key: [k]}\n": "line 3: domain: a: descriptors[0].key: want a string, got a list",
		"domain: [a]\ndescriptors: [{key: b}]\n":    "line 1: document 1: domain: want a string, got a list",
		"domain: a\n---\nsettings: {merge_domains: true}\n---\ndomain: a\ndescriptors: [{key: b}, {key: c, bad: 1}]\n":                     "line 6: domain: a: descriptors[1].bad: unknown key (known keys: key, value, rate_limit, shadow_mode, descriptors, quota_mode, share_threshold, detailed_metric, value_to_metric)",
		"domain: a\ndescriptors: [{key: b}]\n---\nsettings: {merge_domains: true}\n---\ndomain: a\ndescriptors:\n  - key: c\n  - key: c\n": "line 9: domain: a: descriptors[2]: same key and value as descriptors[1] (key \"c\")",
	} {
		_, err := rls.ParseConfig([]byte(y))
		if want == "" && err != nil || want != "" && (err == nil || err.Error() != "rls: invalid config: "+want) {
			t.Errorf("%q: %v\nwant %s", y, err, want)
		}
	}
}

// FuzzParseConfig: any input is parsed or refused with a ConfigError
// (never a panic), and what is parsed passes Validate and starts a
// server (check = serve). Seeds: testdata/fuzz/FuzzParseConfig (the
// reference's files among them).
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(config))
	f.Add([]byte("domain: a\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: week, requests_per_unit: 70}\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := rls.ParseConfig(data)
		if err != nil {
			var ce *rls.ConfigError
			if !errors.Is(err, rls.ErrConfig) || !errors.As(err, &ce) {
				t.Fatalf("error not a ConfigError: %v", err)
			}
			if strings.Contains(err.Error(), "rls.") || strings.Contains(err.Error(), "uint32") {
				t.Fatalf("error names a Go type: %v", err)
			}
			return
		}
		if err := rls.Validate(ds); err != nil {
			t.Fatalf("parsed config fails Validate: %v", err)
		}
		if _, err := rls.New(newTable(t), ds); err != nil {
			t.Fatalf("parsed config refused by New: %v", err)
		}
	})
}
