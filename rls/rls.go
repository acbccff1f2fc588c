// Package rls serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from
// Bulwark's global limiter, so Envoy and Istio sidecars share the limits
// Bulwark enforces across replicas.
//
// Configuration follows envoyproxy/ratelimit: per domain, a tree of
// descriptors (key, optional value, nested descriptors) whose nodes carry
// rate_limit {unit, requests_per_unit} and optionally shadow_mode. For each
// request descriptor the entries walk the tree (an exact key+value child
// first, then a value prefix ending in '*', then the key alone), and the
// limit of the node reached by the last entry applies; each distinct
// sequence of request entries is counted separately. A descriptor that
// matches nothing, or an unknown domain, is answered OK without a limit,
// as envoyproxy/ratelimit does. Differences: limits are GCRA buckets (rate
// requests_per_unit/unit, burst requests_per_unit), not fixed windows;
// units are second to week; a request's per-descriptor limit override is
// ignored; negative hits (refunds) are refused.
//
// hits_addend (request level, overridden per descriptor) is the cost; 0
// at request level means 1, 0 per descriptor is a query that consumes
// nothing. A shadow_mode descriptor is counted and reported but always
// answered OK. The response carries overall_code, one status per
// descriptor (code, current_limit, limit_remaining — approximate, see
// [global.Limiter] — and duration_until_reset: time until full when OK,
// until the request could pass when over the limit) and
// response_headers_to_add with the IETF RateLimit and RateLimit-Policy
// fields of the most restrictive descriptor (plus Retry-After when over
// the limit).
//
// A malformed request (empty domain, no descriptors, an empty entry list
// or key, oversized keys or values, too many descriptors or entries,
// negative or excessive hits) gets codes.InvalidArgument with a fixed
// message and counts nothing.
//
// [Server.Reload] swaps configurations atomically; descriptors whose
// domain, path and limit are unchanged keep their state (same limiter),
// and a changed limit keeps the shared L2 bucket.
//
// The server's keys live in a [global.Table] of their own (see [New]):
// its clients choose the descriptor values, so a flood of distinct values
// may fill that table (new keys are then refused, fail closed) but never
// the table of the node's other limiters.
//
// The protocol has no authentication of its own. [CheckAddr] refuses a
// listener beyond loopback unless the caller secures it: mutual TLS
// (grpc.Creds with a client CA) or a bearer token ([RequireToken]).
package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/wire"
)

// MaxMessageBytes bounds a request message.
const MaxMessageBytes = 64 << 10

// ServiceName is the gRPC service the server registers (also its health
// service name).
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Server answers ShouldRateLimit from a [global.Node]. It is safe for
// concurrent use.
type Server struct {
	pb.UnimplementedRateLimitServiceServer
	tab    *global.Table
	cur    atomic.Pointer[snapshot]
	health *health.Server
	c      counters
}

type counters struct {
	requests, invalid, unknownDomain, unmatched, ok, overLimit, shadow atomic.Uint64
}

// Stats are cumulative counters since New.
type Stats struct {
	// Requests counts calls; Invalid the malformed ones (nothing counted).
	Requests, Invalid uint64
	// UnknownDomain counts requests for a domain not configured;
	// Unmatched descriptors that matched no limit (or an unlimited one).
	UnknownDomain, Unmatched uint64
	// OK and OverLimit count limited descriptors by outcome; Shadow those
	// over the limit in shadow mode (answered OK).
	OK, OverLimit, Shadow uint64
}

type snapshot struct{ domains map[string]*level }

// level is one level of a domain's tree.
type level struct {
	exact   map[string]*node // key + "\x00" + value
	anyVal  map[string]*node // key
	prefixs []*node          // values ending in '*'
}

type node struct {
	key, value string // value without the trailing '*' for prefixes
	lim        *global.Limiter
	unlimited  bool
	shadow     bool
	rpu        uint32
	unit       pb.RateLimitResponse_RateLimit_Unit
	window     time.Duration
	name       string
	sub        *level
}

// New returns a server for domains (see [Validate]) whose limiters keep
// their keys in tab, which the caller keeps owning (with its node). Give
// the server a table of its own ([global.Node.Table]): its clients pick
// the keys.
func New(tab *global.Table, domains []DomainConfig) (*Server, error) {
	s := &Server{tab: tab, health: health.NewServer()}
	if err := s.Reload(domains); err != nil {
		return nil, err
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// Reload validates domains and swaps them in atomically. On error the
// current configuration stays.
func (s *Server) Reload(domains []DomainConfig) error {
	if err := Validate(domains); err != nil {
		return err
	}
	snap := &snapshot{domains: map[string]*level{}}
	for _, d := range domains {
		lv, err := s.build(d.Domain, d.Domain, d.Descriptors)
		if err != nil {
			return err
		}
		snap.domains[d.Domain] = lv
	}
	s.cur.Store(snap)
	return nil
}

func (s *Server) build(domain, path string, ds []Descriptor) (*level, error) {
	lv := &level{exact: map[string]*node{}, anyVal: map[string]*node{}}
	for _, d := range ds {
		n := &node{key: d.Key, value: d.Value, shadow: d.ShadowMode}
		here := path + "." + d.Key
		if d.Value != "" {
			here += "=" + d.Value
		}
		if r := d.RateLimit; r != nil {
			if r.Unlimited {
				n.unlimited = true
			} else {
				unit := strings.ToLower(r.Unit)
				n.window = units[unit]
				n.unit = pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)])
				n.rpu = r.RequestsPerUnit
				n.name = r.Name
				if n.name == "" {
					n.name = strings.ReplaceAll(strings.ReplaceAll(here, `"`, "'"), `\`, "/")
				}
				// The limiter's name is a digest of the domain and the
				// node's path: stable across replicas and reloads.
				sum := sha256.Sum256([]byte(here))
				g := limit.GCRA{Rate: float64(r.RequestsPerUnit) / n.window.Seconds(), Burst: int64(r.RequestsPerUnit)}
				lim, err := s.tab.Limiter("rls."+hex.EncodeToString(sum[:12]), g)
				if err != nil {
					return nil, fmt.Errorf("%w: %s: %v", ErrConfig, here, err)
				}
				n.lim = lim
			}
		}
		if len(d.Descriptors) > 0 {
			sub, err := s.build(domain, here, d.Descriptors)
			if err != nil {
				return nil, err
			}
			n.sub = sub
		}
		switch {
		case d.Value == "":
			lv.anyVal[d.Key] = n
		case strings.HasSuffix(d.Value, "*"):
			n.value = strings.TrimSuffix(d.Value, "*")
			lv.prefixs = append(lv.prefixs, n)
		default:
			lv.exact[d.Key+"\x00"+d.Value] = n
		}
	}
	return lv, nil
}

// match walks entries down the tree and returns the node reached by the
// last entry, or nil when the walk stops early.
func (lv *level) match(entries []*rlv3.RateLimitDescriptor_Entry) *node {
	var n *node
	for _, e := range entries {
		if lv == nil {
			return nil
		}
		n = lv.exact[e.Key+"\x00"+e.Value]
		if n == nil {
			for _, p := range lv.prefixs {
				if p.key == e.Key && strings.HasPrefix(e.Value, p.value) {
					n = p
					break
				}
			}
		}
		if n == nil {
			n = lv.anyVal[e.Key]
		}
		if n == nil {
			return nil
		}
		lv = n.sub
	}
	return n
}

// Health returns the gRPC health server (SERVING while the server runs;
// the RLS keeps answering from the local share when L2 is down).
func (s *Server) Health() *health.Server { return s.health }

// Shutdown sets every health status to NOT_SERVING.
func (s *Server) Shutdown() { s.health.Shutdown() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	c := &s.c
	return Stats{Requests: c.requests.Load(), Invalid: c.invalid.Load(), UnknownDomain: c.unknownDomain.Load(),
		Unmatched: c.unmatched.Load(), OK: c.ok.Load(), OverLimit: c.overLimit.Load(), Shadow: c.shadow.Load()}
}

// GRPC returns a gRPC server with the rate limit and health services
// registered and bounded: messages up to MaxMessageBytes, 1024 streams
// per connection, a 5 s handshake, keepalive pings at most every 10 s.
// opts are appended (and win).
func (s *Server) GRPC(opts ...grpc.ServerOption) *grpc.Server {
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(1024),
		grpc.ConnectionTimeout(5 * time.Second),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	gs := grpc.NewServer(append(base, opts...)...)
	pb.RegisterRateLimitServiceServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
	return gs
}

// errInvalid answers a malformed request.
func errInvalid(msg string) error { return status.Error(codes.InvalidArgument, "rls: "+msg) }

// validate checks a request before anything is counted.
func validate(req *pb.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return errInvalid("domain must not be empty")
	}
	if len(req.Domain) > MaxNameLen {
		return errInvalid("domain too long")
	}
	if len(req.Descriptors) == 0 {
		return errInvalid("descriptor list must not be empty")
	}
	if len(req.Descriptors) > MaxReqDescriptors {
		return errInvalid("too many descriptors")
	}
	if req.HitsAddend > MaxHits {
		return errInvalid("hits_addend too large")
	}
	for _, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return errInvalid("descriptor without entries")
		}
		if len(d.Entries) > MaxReqEntries {
			return errInvalid("too many entries in a descriptor")
		}
		if d.IsNegativeHits {
			return errInvalid("negative hits are not supported")
		}
		if h := d.HitsAddend; h != nil && h.Value > MaxHits {
			return errInvalid("hits_addend too large")
		}
		for _, e := range d.Entries {
			if e == nil || e.Key == "" {
				return errInvalid("descriptor entry with an empty key")
			}
			if len(e.Key) > MaxNameLen || len(e.Value) > MaxValueLen {
				return errInvalid("descriptor entry too long")
			}
		}
	}
	return nil
}

// entriesKey encodes a descriptor's entries, length-prefixed, as the
// limiter key.
func entriesKey(entries []*rlv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(e.Key), e.Key, len(e.Value), e.Value)
	}
	return b.String()
}

// ShouldRateLimit implements the RateLimitService.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	s.c.requests.Add(1)
	if err := validate(req); err != nil {
		s.c.invalid.Add(1)
		return nil, err
	}
	lv := s.cur.Load().domains[req.Domain]
	if lv == nil {
		s.c.unknownDomain.Add(1)
	}
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	type pick struct {
		n    *node
		d    limit.Decision
		over bool
	}
	var tight *pick
	for i, desc := range req.Descriptors {
		n := lv.match(desc.Entries)
		if n == nil || n.unlimited || n.lim == nil {
			s.c.unmatched.Add(1)
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			continue
		}
		hits := int64(1)
		if req.HitsAddend > 0 {
			hits = int64(req.HitsAddend)
		}
		if h := desc.HitsAddend; h != nil {
			hits = int64(h.Value)
		}
		d := n.lim.AllowN(entriesKey(desc.Entries), hits)
		st := &pb.RateLimitResponse_DescriptorStatus{
			Code:           pb.RateLimitResponse_OK,
			CurrentLimit:   &pb.RateLimitResponse_RateLimit{Name: n.name, RequestsPerUnit: n.rpu, Unit: n.unit},
			LimitRemaining: uint32(min(max(d.Remaining, 0), int64(n.rpu))),
		}
		over := !d.Allowed
		reset := d.ResetAfter
		if over {
			reset = min(d.RetryAfter, 365*24*time.Hour) // InfDuration: hits above the limit
		}
		st.DurationUntilReset = durationpb.New(reset)
		switch {
		case !over:
			s.c.ok.Add(1)
		case n.shadow:
			s.c.shadow.Add(1)
			over = false
		default:
			s.c.overLimit.Add(1)
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
		p := &pick{n: n, d: d, over: over}
		switch {
		case tight == nil:
			tight = p
		case p.over && (!tight.over || p.d.RetryAfter > tight.d.RetryAfter):
			tight = p
		case !p.over && !tight.over && p.d.Remaining < tight.d.Remaining:
			tight = p
		}
	}
	if tight != nil {
		h := http.Header{}
		rem := tight.d.Remaining
		reset := tight.d.ResetAfter
		if tight.over {
			rem = 0
			reset = tight.d.RetryAfter
		}
		wire.SetRateLimit(h, wire.RateLimit{Policy: tight.n.name, Limit: int64(tight.n.rpu), Remaining: rem, Window: tight.n.window, Reset: min(reset, tight.n.window)})
		if tight.over {
			h.Set("Retry-After", fmt.Sprint(limit.CeilSeconds(min(tight.d.RetryAfter, tight.n.window))))
		}
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := h.Get(k); v != "" {
				resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
			}
		}
	}
	return resp, nil
}
