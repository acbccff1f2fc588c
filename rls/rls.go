// Package rls serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from
// Bulwark's global limiter, so Envoy and Istio sidecars share the limits
// Bulwark enforces across replicas.
//
// Configuration follows envoyproxy/ratelimit (see [DomainConfig],
// [Load]): per domain, a tree of descriptors (key, optional value,
// nested descriptors) whose nodes carry rate_limit {unit,
// requests_per_unit, name, replaces} and optionally shadow_mode,
// quota_mode and share_threshold. For each request descriptor the
// entries walk the tree (an exact key+value child first, then a value
// prefix ending in '*', then the key alone), and the limit of the node
// reached by the last entry applies; each distinct sequence of request
// entries is counted separately (all the values of a share_threshold
// prefix as one). A descriptor that matches nothing, or an unknown
// domain, is answered OK without a limit, as envoyproxy/ratelimit does;
// a limit named in another applied limit's replaces is dropped; a
// descriptor's limit override (Envoy's dynamic limits) replaces the
// configured limit. Differences: limits are GCRA buckets (rate
// requests_per_unit/unit, burst requests_per_unit), not fixed windows,
// so duration_until_reset is the time until the bucket is full (OK) or
// the request could pass (OVER_LIMIT), not until a window ends; rates
// from 1 per year to 1,000,000 per second (every unit, year included);
// negative hits (refunds) are refused; detailed_metric keeps counters
// per configured descriptor ([Server.EachDescriptor]) named by the
// configuration, never by the clients' values, and value_to_metric is
// refused (it names statistics after the clients' descriptor values).
//
// hits_addend (request level, overridden per descriptor) is the cost; 0
// at request level means 1, 0 per descriptor is a check that consumes
// nothing and is answered OVER_LIMIT while the limit is spent (not one
// unit left, or units charged past it still owed: [global.Limiter.Peek]).
// A stated cost (hits_addend above 0) counts even where it does not fit,
// as envoyproxy/ratelimit counts every hit ([global.Limiter.ChargeN]):
// reports made after the fact (Envoy's apply_on_stream_done, an LLM
// response's tokens) are never dropped. A request without hits_addend
// that is refused is not counted (a GCRA bucket has no window to forget
// it). A shadow_mode descriptor is counted and reported but always
// answered OK; a quota_mode one too, its violation reported in the
// dynamic metadata. requests_per_unit 0 refuses every request and check. The
// response carries overall_code, one status per descriptor (code,
// current_limit with the configured name, limit_remaining —
// approximate, see [global.Limiter]; MaxUint32 for an unlimited
// descriptor — and duration_until_reset), and response_headers_to_add
// with the IETF RateLimit and RateLimit-Policy fields of the most
// restrictive descriptor (plus Retry-After when over the limit) unless
// [Settings.ResponseHeaders] is false.
//
// A malformed request (empty domain, no descriptors, an empty entry list
// or key, oversized keys or values, too many descriptors or entries,
// negative or excessive hits, a limit override Bulwark cannot enforce or
// one more than MaxOverrides) gets codes.InvalidArgument with a fixed
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
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
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

// MaxOverrides bounds the distinct limit overrides (requests_per_unit and
// unit) a server holds a limiter for; a request with one more is refused
// with InvalidArgument.
const MaxOverrides = 256

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

	ovMu      sync.Mutex
	overrides map[overrideKey]*rate

	// detailMu serialises reloads' rebuilding of the detailed_metric
	// counters (read lock-free through the snapshot).
	detailMu sync.Mutex
}

type counters struct {
	requests, invalid, unknownDomain, unmatched, unlimited, ok, overLimit, shadow, quota, replaced atomic.Uint64
}

// Stats are cumulative counters since New.
type Stats struct {
	// Requests counts calls; Invalid the malformed ones (nothing counted).
	Requests, Invalid uint64
	// UnknownDomain counts requests for a domain not configured;
	// Unmatched descriptors that matched no limit, Unlimited those whose
	// limit is unlimited.
	UnknownDomain, Unmatched, Unlimited uint64
	// OK and OverLimit count limited descriptors by outcome; Shadow those
	// over the limit in shadow mode (answered OK).
	OK, OverLimit, Shadow uint64
	// Quota counts descriptors over the limit in quota_mode (answered
	// OK); Replaced limits dropped by another's replaces. Each
	// descriptor of a valid request is counted once, in one of
	// Unmatched, Unlimited, OK, OverLimit, Shadow, Quota and Replaced.
	Quota, Replaced uint64
}

// Each calls f with every counter of s and its name as a metric label
// (a fixed word: requests, invalid, unknown_domain, unmatched,
// unlimited, ok, over_limit, shadow, quota, replaced).
func (s Stats) Each(f func(result string, n uint64)) {
	f("requests", s.Requests)
	f("invalid", s.Invalid)
	f("unknown_domain", s.UnknownDomain)
	f("unmatched", s.Unmatched)
	f("unlimited", s.Unlimited)
	f("ok", s.OK)
	f("over_limit", s.OverLimit)
	f("shadow", s.Shadow)
	f("quota", s.Quota)
	f("replaced", s.Replaced)
}

type snapshot struct {
	domains  map[string]*level
	settings Settings
	// details are the detailed_metric counters, in configuration
	// order, one per distinct (domain, descriptor) label.
	details []*Detail
}

// level is one level of a domain's tree.
type level struct {
	exact   map[string]*node // key + "\x00" + value
	anyVal  map[string]*node // key
	prefixs []*node          // values ending in '*', in file order
}

type node struct {
	key, value string // value without the trailing '*' for prefixes
	// pattern is the configured value ending in '*' of a share_threshold
	// node: the one value counted for all the values it matches.
	pattern string
	rate    *rate // nil: no rate_limit
	sub     *level
	detail  *Detail // detailed_metric: true
}

// rate is a limit as applied: a configured node's or a request's
// override.
type rate struct {
	lim       *global.Limiter // nil when unlimited or refusing all
	unlimited bool
	block     bool // requests_per_unit 0: every hit is refused
	shadow    bool
	quota     bool
	rpu       uint32
	unit      pb.RateLimitResponse_RateLimit_Unit
	window    time.Duration
	// name is the configured name (current_limit.name, replaces);
	// policy the RateLimit-Policy name (name, else the key path).
	name, policy string
	replaces     []string
}

// New returns a server for domains (see [Validate]) whose limiters keep
// their keys in tab, which the caller keeps owning (with its node). Give
// the server a table of its own ([global.Node.Table]): its clients pick
// the keys.
func New(tab *global.Table, domains []DomainConfig) (*Server, error) {
	s := &Server{tab: tab, health: health.NewServer(), overrides: map[overrideKey]*rate{}}
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
	domains, _ = mergeDomains(domains)
	if err := Validate(domains); err != nil {
		return err
	}
	s.detailMu.Lock()
	defer s.detailMu.Unlock()
	snap := &snapshot{domains: map[string]*level{}}
	b := builder{s: s, details: map[detailKey]*Detail{}}
	if old := s.cur.Load(); old != nil {
		b.kept = old.details
	}
	for _, d := range domains {
		if d.Settings != nil {
			snap.settings = *d.Settings
			continue
		}
		lv, err := b.build(d.Domain, d.Domain, d.Descriptors)
		if err != nil {
			return err
		}
		snap.domains[d.Domain] = lv
	}
	snap.details = b.order
	s.cur.Store(snap)
	return nil
}

// Detail counts the decisions of the configured descriptors that set
// detailed_metric and share one label: Domain and Descriptor, the
// descriptor's path in the configuration (keys and configured values
// joined as "key=value.key"; a configured value that is an IP address
// or prefix is written "<ip>", so that no address reaches a metric
// label). Request values never appear: every request value a wildcard
// or a key alone matches counts in its configured descriptor. The
// counters survive a reload that keeps the label; at most one per
// configured descriptor exists.
type Detail struct {
	Domain, Descriptor                 string
	ok, overLimit, shadow, quota, hits atomic.Uint64
}

// Each calls f with every counter of d and its result label (ok,
// over_limit, shadow, quota: descriptors decided, as in [Stats]; hits:
// the hits they asked for, checks counting 0).
func (d *Detail) Each(f func(result string, n uint64)) {
	f("ok", d.ok.Load())
	f("over_limit", d.overLimit.Load())
	f("shadow", d.shadow.Load())
	f("quota", d.quota.Load())
	f("hits", d.hits.Load())
}

// EachDescriptor calls f with the detailed_metric counters of the
// current configuration, in configuration order.
func (s *Server) EachDescriptor(f func(*Detail)) {
	for _, d := range s.cur.Load().details {
		f(d)
	}
}

type detailKey struct{ domain, descriptor string }

// builder builds a configuration's trees, reusing the detailed_metric
// counters of the configuration it replaces.
type builder struct {
	s       *Server
	kept    []*Detail
	details map[detailKey]*Detail
	order   []*Detail
}

// detail returns the counters labelled (domain, path).
func (b *builder) detail(domain, path string) *Detail {
	k := detailKey{domain, path}
	if d := b.details[k]; d != nil {
		return d
	}
	var d *Detail
	for _, old := range b.kept {
		if old.Domain == domain && old.Descriptor == path {
			d = old
			break
		}
	}
	if d == nil {
		d = &Detail{Domain: domain, Descriptor: path}
	}
	b.details[k] = d
	b.order = append(b.order, d)
	return d
}

// labelValue is a configured value as a metric label shows it.
func labelValue(v string) string {
	t := strings.TrimSuffix(v, "*")
	if _, err := netip.ParseAddr(t); err == nil {
		return "<ip>"
	}
	if _, err := netip.ParsePrefix(t); err == nil {
		return "<ip>"
	}
	return v
}

func (b *builder) build(domain, path string, ds []Descriptor) (*level, error) {
	return b.buildAt(domain, path, "", ds)
}

// buildAt builds one level; label is the parent's metric label.
func (b *builder) buildAt(domain, path, label string, ds []Descriptor) (*level, error) {
	s := b.s
	lv := &level{exact: map[string]*node{}, anyVal: map[string]*node{}}
	for _, d := range ds {
		n := &node{key: d.Key, value: d.Value}
		here := path + "." + d.Key
		lab := d.Key
		if label != "" {
			lab = label + "." + d.Key
		}
		if d.Value != "" {
			here += "=" + d.Value
			lab += "=" + labelValue(d.Value)
		}
		if d.DetailedMetric {
			n.detail = b.detail(domain, lab)
		}
		if r := d.RateLimit; r != nil {
			rt := &rate{unlimited: r.Unlimited, shadow: d.ShadowMode, quota: d.QuotaMode, name: r.Name, policy: r.Name}
			for _, rp := range r.Replaces {
				rt.replaces = append(rt.replaces, rp.Name)
			}
			if rt.policy == "" {
				rt.policy = here
			}
			if !r.Unlimited {
				u, _ := unitOf(r.Unit)
				rt.window, rt.unit, rt.rpu = u.d, u.pb, r.RequestsPerUnit
				if r.RequestsPerUnit == 0 {
					rt.block = true
				} else {
					g, msg := rateGCRA(r.RequestsPerUnit, strings.ToLower(r.Unit), u.d)
					if msg != "" {
						return nil, &ConfigError{Domain: domain, Path: here, Msg: msg}
					}
					// The limiter's name is a digest of the domain and the
					// node's path: stable across replicas and reloads.
					sum := sha256.Sum256([]byte(here))
					lim, err := s.tab.Limiter("rls."+hex.EncodeToString(sum[:12]), g)
					if err != nil {
						return nil, &ConfigError{Domain: domain, Path: here, Msg: err.Error()}
					}
					rt.lim = lim
				}
			}
			n.rate = rt
		}
		if len(d.Descriptors) > 0 {
			sub, err := b.buildAt(domain, here, lab, d.Descriptors)
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
			if d.ShareThreshold {
				n.pattern = d.Value
			}
			lv.prefixs = append(lv.prefixs, n)
		default:
			lv.exact[d.Key+"\x00"+d.Value] = n
		}
	}
	return lv, nil
}

// match walks entries down the tree and returns the node reached by the
// last entry, or nil when the walk stops early, and, when some entry was
// matched by a share_threshold prefix, the pattern each entry counts as
// ("" for its own value).
func (lv *level) match(entries []*rlv3.RateLimitDescriptor_Entry) (*node, []string) {
	var (
		n    *node
		pats []string
	)
	for i, e := range entries {
		if lv == nil {
			return nil, nil
		}
		n = lv.exact[e.Key+"\x00"+e.Value]
		if n == nil {
			for _, p := range lv.prefixs {
				if p.key == e.Key && strings.HasPrefix(e.Value, p.value) {
					n = p
					if p.pattern != "" {
						if pats == nil {
							pats = make([]string, len(entries))
						}
						pats[i] = p.pattern
					}
					break
				}
			}
		}
		if n == nil {
			n = lv.anyVal[e.Key]
		}
		if n == nil {
			return nil, nil
		}
		lv = n.sub
	}
	return n, pats
}

// overrideKey is a request's limit override.
type overrideKey struct {
	rpu  uint32
	unit pb.RateLimitResponse_RateLimit_Unit
}

// override returns the rate of a request's limit override (Envoy's
// dynamic limits), with a limiter shared by every descriptor carrying
// the same override. At most MaxOverrides distinct overrides are held.
func (s *Server) override(o *rlv3.RateLimitDescriptor_RateLimitOverride) (*rate, error) {
	k := overrideKey{o.GetRequestsPerUnit(), pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())}
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	if r := s.overrides[k]; r != nil {
		return r, nil
	}
	if len(s.overrides) >= MaxOverrides {
		return nil, errInvalid("too many distinct limit overrides")
	}
	u, ok := pbUnit(k.unit)
	if !ok {
		return nil, errInvalid("limit override with an unknown unit")
	}
	name := strings.ToLower(k.unit.String())
	r := &rate{rpu: k.rpu, unit: k.unit, window: u.d, policy: fmt.Sprintf("override-%d-per-%s", k.rpu, name)}
	if k.rpu == 0 {
		r.block = true
	} else {
		g, msg := rateGCRA(k.rpu, name, u.d)
		if msg != "" {
			return nil, errInvalid("limit override: " + msg)
		}
		lim, err := s.tab.Limiter(fmt.Sprintf("rls.override.%d.%d", k.rpu, k.unit), g)
		if err != nil {
			return nil, errInvalid("limit override refused")
		}
		r.lim = lim
	}
	s.overrides[k] = r
	return r, nil
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
		Unmatched: c.unmatched.Load(), Unlimited: c.unlimited.Load(), OK: c.ok.Load(), OverLimit: c.overLimit.Load(), Shadow: c.shadow.Load(),
		Quota: c.quota.Load(), Replaced: c.replaced.Load()}
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

type result uint8

const (
	resOK result = iota
	resOver
	resShadow
	resQuota
)

// count adds one to d's counter of res (nothing when d is nil: the
// descriptor has no detailed_metric).
func (d *Detail) count(res result) {
	if d == nil {
		return
	}
	switch res {
	case resOK:
		d.ok.Add(1)
	case resOver:
		d.overLimit.Add(1)
	case resShadow:
		d.shadow.Add(1)
	case resQuota:
		d.quota.Add(1)
	}
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

// appendKey appends a descriptor's entries, length-prefixed, to b as
// the limiter key; an entry matched by a share_threshold prefix counts
// as its pattern.
func appendKey(b []byte, entries []*rlv3.RateLimitDescriptor_Entry, pats []string) []byte {
	for i, e := range entries {
		v := e.Value
		if pats != nil && pats[i] != "" {
			v = pats[i]
		}
		b = strconv.AppendInt(b, int64(len(e.Key)), 10)
		b = append(b, ':')
		b = append(b, e.Key...)
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return b
}

// target is what one request descriptor is decided against.
type target struct {
	r    *rate // nil: no limit
	n    *node // the configured node, nil for an override
	pats []string
	hits int64
	// cost: the caller stated the hits (hits_addend), so they count even
	// over the limit (a report of a cost already incurred).
	cost     bool
	replaced bool
	key      string
}

// ShouldRateLimit implements the RateLimitService.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	s.c.requests.Add(1)
	if err := validate(req); err != nil {
		s.c.invalid.Add(1)
		return nil, err
	}
	snap := s.cur.Load()
	lv := snap.domains[req.Domain]
	if lv == nil {
		s.c.unknownDomain.Add(1)
	}
	// Resolve every descriptor's limit first: nothing is counted for a
	// request refused here.
	ts := make([]target, len(req.Descriptors))
	var replacing map[string]bool
	for i, desc := range req.Descriptors {
		t := &ts[i]
		switch {
		case lv == nil:
			// An unknown domain has no limits, overrides included.
		case desc.Limit != nil:
			r, err := s.override(desc.Limit)
			if err != nil {
				s.c.invalid.Add(1)
				return nil, err
			}
			t.r = r
		default:
			t.n, t.pats = lv.match(desc.Entries)
			if t.n != nil {
				t.r = t.n.rate
			}
		}
		if t.r != nil && len(t.r.replaces) > 0 {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			for _, name := range t.r.replaces {
				replacing[name] = true
			}
		}
		t.hits = 1
		if req.HitsAddend > 0 {
			t.hits, t.cost = int64(req.HitsAddend), true
		}
		if h := desc.HitsAddend; h != nil {
			t.hits, t.cost = int64(h.Value), true
		}
	}
	var buf []byte
	for i := range ts {
		t := &ts[i]
		if t.r != nil && t.r.name != "" && replacing[t.r.name] {
			t.r, t.replaced = nil, true // neither counted nor reported
			s.c.replaced.Add(1)
		}
		if t.r != nil && t.r.lim != nil {
			buf = buf[:0]
			if t.n == nil { // overrides share limiters across domains
				buf = append(strconv.AppendInt(buf, int64(len(req.Domain)), 10), ':')
				buf = append(buf, req.Domain...)
			}
			buf = appendKey(buf, req.Descriptors[i].Entries, t.pats)
			t.key = string(buf)
		}
	}
	// With stop_counting_over_limit, a request that some descriptor
	// refuses counts nothing on the others: each bucket is asked first
	// (what this replica last heard), and only those that cannot take
	// their hits are charged (and refuse).
	var refusing []bool
	if snap.settings.StopCountingOverLimit {
		refusing = make([]bool, len(ts))
		any := false
		for i := range ts {
			t := &ts[i]
			switch {
			case t.r == nil || t.r.unlimited:
			case t.r.block:
				refusing[i], any = true, true
			case t.hits <= 0:
				if !t.r.lim.Peek(t.key).Allowed {
					refusing[i], any = true, true
				}
			default:
				if q := t.r.lim.AllowN(t.key, 0); q.Remaining < t.hits {
					refusing[i], any = true, true
				}
			}
		}
		if !any {
			refusing = nil
		}
	}
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(ts))}
	type pick struct {
		r    *rate
		d    limit.Decision
		over bool
	}
	var (
		tight      *pick
		violations []int
	)
	for i := range ts {
		t := &ts[i]
		switch {
		case t.r == nil:
			if !t.replaced {
				s.c.unmatched.Add(1)
			}
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			continue
		case t.r.unlimited:
			// As envoyproxy/ratelimit: OK, no current limit, the most
			// that can remain.
			s.c.unlimited.Add(1)
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		}
		r := t.r
		var d limit.Decision
		switch {
		case r.block:
			// requests_per_unit 0: every hit is over the limit, and so is
			// a check (0 hits): not one unit is left.
			d = limit.Decision{RetryAfter: r.window, ResetAfter: r.window}
		case t.hits <= 0:
			// A check: over the limit once it is spent.
			d = r.lim.Peek(t.key)
		case refusing != nil && !refusing[i]:
			d = r.lim.AllowN(t.key, 0) // asked, not counted
		case t.cost:
			// A stated cost counts even where it does not fit, as
			// envoyproxy/ratelimit counts every hit: a report after the
			// fact (apply_on_stream_done, an LLM response's tokens) was
			// spent whatever the answer.
			d = r.lim.ChargeN(t.key, t.hits)
		default:
			d = r.lim.AllowN(t.key, t.hits)
		}
		st := &pb.RateLimitResponse_DescriptorStatus{
			Code:           pb.RateLimitResponse_OK,
			CurrentLimit:   &pb.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: r.rpu, Unit: r.unit},
			LimitRemaining: uint32(min(max(d.Remaining, 0), int64(r.rpu))),
		}
		over := !d.Allowed
		if over {
			st.LimitRemaining = 0
		}
		reset := d.ResetAfter
		if over {
			reset = min(d.RetryAfter, 365*24*time.Hour) // InfDuration: hits above the limit
		}
		st.DurationUntilReset = durationpb.New(reset)
		var det *Detail
		if t.n != nil {
			det = t.n.detail
		}
		if det != nil {
			det.hits.Add(uint64(max(t.hits, 0)))
		}
		switch {
		case !over:
			s.c.ok.Add(1)
			det.count(resOK)
		case r.shadow:
			s.c.shadow.Add(1)
			det.count(resShadow)
			over = false
		case r.quota:
			// quota_mode: OK, the violation reported in the metadata.
			s.c.quota.Add(1)
			det.count(resQuota)
			over = false
			violations = append(violations, i)
			st.DurationUntilReset = nil
		default:
			s.c.overLimit.Add(1)
			det.count(resOver)
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = st
		p := &pick{r: r, d: d, over: over}
		switch {
		case tight == nil:
			tight = p
		case p.over && (!tight.over || p.d.RetryAfter > tight.d.RetryAfter):
			tight = p
		case !p.over && !tight.over && p.d.Remaining < tight.d.Remaining:
			tight = p
		}
	}
	if tight != nil && (snap.settings.ResponseHeaders == nil || *snap.settings.ResponseHeaders) {
		h := http.Header{}
		rem := tight.d.Remaining
		reset := tight.d.ResetAfter
		if tight.over {
			rem = 0
			reset = tight.d.RetryAfter
		}
		wire.SetRateLimit(h, wire.RateLimit{Policy: tight.r.policy, Limit: int64(tight.r.rpu), Remaining: rem, Window: tight.r.window, Reset: min(reset, tight.r.window)})
		if tight.over {
			h.Set("Retry-After", fmt.Sprint(limit.CeilSeconds(min(tight.d.RetryAfter, tight.r.window))))
		}
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := h.Get(k); v != "" {
				resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
			}
		}
	}
	if snap.settings.ResponseMetadata {
		resp.DynamicMetadata = responseMetadata(req, ts, violations)
	}
	return resp, nil
}
