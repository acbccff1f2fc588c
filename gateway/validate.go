package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/shield"
)

// Hard ranges of every numeric setting. A value outside its range is a
// configuration error naming the key and the range; nothing is clamped.
var (
	rangeMaxURLBytes        = intRange{256, host.MaxMaxURLBytes}
	rangeMaxHeaderBytes     = intRange{4 << 10, host.MaxMaxHeaderBytes}
	rangeMaxHeaders         = intRange{1, host.MaxMaxHeaders}
	rangeMaxRequestsPerConn = intRange{1, host.MaxMaxRequestsPerConn}
	rangeMaxInFlight        = intRange{1, host.MaxMaxInFlight}
	rangeMaxBodyBytes       = intRange{1, host.MaxMaxBodyBytes}
	rangeRequestTimeout     = durRange{time.Millisecond, host.MaxRequestTimeout}
	rangeDrainTimeout       = durRange{time.Millisecond, host.MaxDrainTimeout}
	rangeReadHeaderTimeout  = durRange{time.Millisecond, host.MaxReadHeaderTimeout}
	rangeIdleTimeout        = durRange{time.Millisecond, host.MaxIdleTimeout}

	rangeShieldWindow   = durRange{shield.MinWindow, shield.HardMaxWindow}
	rangeShieldPerPeer  = intRange{1, shield.HardMaxPerPeer}
	rangeShieldGlobal   = intRange{1, shield.HardMaxGlobal}
	rangeShieldMaxPeers = intRange{1, shield.HardMaxPeers}
	rangeTrustedHops    = intRange{0, peer.MaxHops}

	rangeTimeout = durRange{proxy.MinTimeout, proxy.MaxTimeout}
	rangeRetries = intRange{0, proxy.MaxRetries}

	rangeQPS              = floatRange{0.001, 1_000_000}
	rangeBurst            = intRange{0, 1_000_000}
	rangeRateLimitStatus  = intRange{400, 599}
	rangeRateLimitMaxKeys = intRange{1, 10_000_000}

	rangeLoginLimit        = intRange{1, login.MaxLimit}
	rangeLoginWindow       = durRange{login.MinWindow, login.MaxWindow}
	rangeLoginMaxBodyBytes = intRange{1 << 10, 1 << 20}

	rangeQuotaLimit  = intRange{1, quota.MaxLimit}
	rangeQuotaWindow = durRange{quota.MinWindow, quota.MaxWindow}
	rangeAuthTimeout = durRange{10 * time.Millisecond, 30 * time.Second}
)

// Hard caps on list lengths.
const (
	maxUpstreams    = 256
	maxTargets      = proxy.MaxTargets
	maxRoutes       = 1024
	maxMethods      = 16
	maxTrustedCIDRs = peer.MaxTrustedCIDRs
	maxNameLen      = 64
)

type intRange struct{ lo, hi int64 }
type durRange struct{ lo, hi time.Duration }
type floatRange struct{ lo, hi float64 }

// fmtDuration prints d compactly: 1m rather than 1m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

type validator struct {
	d   *decoder
	cfg *Config
	dir string // directory of the config file, for relative TLS paths
}

func (v *validator) add(path, format string, args ...any) {
	v.d.add(v.d.line(path), path, format, args...)
}

func (v *validator) int(path string, x int64, r intRange) {
	if x < r.lo || x > r.hi {
		v.add(path, "%d out of range [%d, %d]", x, r.lo, r.hi)
	}
}

func (v *validator) dur(path string, x time.Duration, r durRange) {
	if x < r.lo || x > r.hi {
		v.add(path, "%s out of range [%s, %s]", fmtDuration(x), fmtDuration(r.lo), fmtDuration(r.hi))
	}
}

func (v *validator) float(path string, x float64, r floatRange) {
	if x < r.lo || x > r.hi || math.IsNaN(x) {
		v.add(path, "%s out of range [%s, %s]", fmtFloat(x), fmtFloat(r.lo), fmtFloat(r.hi))
	}
}

func (v *validator) wholeMillis(path string, d time.Duration) {
	if d%time.Millisecond != 0 {
		v.add(path, "%s is not a whole number of milliseconds", d)
	}
}

// validName accepts the names of routes and upstreams: they become metric
// label values and log fields, so they are short and plain.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validToken reports whether s is an RFC 9110 token (methods, header
// field names).
func validToken(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port")
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && !validHostname(host) {
			return errors.New("bad host")
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return errors.New("bad port")
	}
	return nil
}

func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func (v *validator) validate() {
	c := v.cfg
	switch c.Profile {
	case Standalone, Cluster:
	default:
		v.add("profile", "%q is not a profile (want standalone or cluster)", c.Profile)
	}
	v.listen()
	v.limits()
	v.shield()
	ups := v.upstreams()
	v.routes(ups)
	v.ipsets()
	if c.Metrics.Addr != "" {
		if err := validHostPort(c.Metrics.Addr); err != nil {
			v.add("metrics.addr", "%q: %v", c.Metrics.Addr, err)
		} else if c.Metrics.Addr == c.Listen.Addr {
			v.add("metrics.addr", "same address as listen.addr")
		}
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		v.add("log.format", "%q: want json or text", c.Log.Format)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		v.add("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
}

func (v *validator) listen() {
	l := &v.cfg.Listen
	if err := validHostPort(l.Addr); err != nil {
		v.add("listen.addr", "%q: %v", l.Addr, err)
	}
	if l.TLS == nil {
		return
	}
	if l.H2C {
		v.add("listen.h2c", "h2c is cleartext HTTP/2 and cannot be combined with listen.tls (TLS negotiates HTTP/2 itself)")
	}
	ok := true
	for _, f := range []struct {
		key  string
		name *string
	}{{"listen.tls.cert_file", &l.TLS.CertFile}, {"listen.tls.key_file", &l.TLS.KeyFile}} {
		if *f.name == "" {
			v.add(f.key, "required when listen.tls is set")
			ok = false
			continue
		}
		p := *f.name
		if !filepath.IsAbs(p) && v.dir != "" {
			p = filepath.Join(v.dir, p)
		}
		if _, err := os.ReadFile(p); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			v.add(f.key, "cannot read %q: %v", *f.name, err)
			ok = false
			continue
		}
		*f.name = p
	}
	if ok {
		cert, err := tls.LoadX509KeyPair(l.TLS.CertFile, l.TLS.KeyFile)
		if err != nil {
			v.add("listen.tls", "bad certificate or key: %v", strings.TrimPrefix(err.Error(), "tls: "))
			return
		}
		v.cfg.tlsCert = &cert
	}
}

func (v *validator) limits() {
	l := v.cfg.Limits
	v.int("limits.max_url_bytes", int64(l.MaxURLBytes), rangeMaxURLBytes)
	v.int("limits.max_header_bytes", int64(l.MaxHeaderBytes), rangeMaxHeaderBytes)
	v.int("limits.max_headers", int64(l.MaxHeaders), rangeMaxHeaders)
	v.int("limits.max_requests_per_conn", int64(l.MaxRequestsPerConn), rangeMaxRequestsPerConn)
	v.int("limits.max_in_flight", int64(l.MaxInFlight), rangeMaxInFlight)
	v.int("limits.max_body_bytes", l.MaxBodyBytes, rangeMaxBodyBytes)
	v.dur("limits.request_timeout", l.RequestTimeout, rangeRequestTimeout)
	v.dur("limits.drain_timeout", l.DrainTimeout, rangeDrainTimeout)
	v.dur("limits.read_header_timeout", l.ReadHeaderTimeout, rangeReadHeaderTimeout)
	v.dur("limits.idle_timeout", l.IdleTimeout, rangeIdleTimeout)
}

func (v *validator) shield() {
	s := &v.cfg.Shield
	v.dur("shield.window", s.Window, rangeShieldWindow)
	v.int("shield.per_peer", s.PerPeer, rangeShieldPerPeer)
	v.int("shield.global", s.Global, rangeShieldGlobal)
	v.int("shield.max_peers", int64(s.MaxPeers), rangeShieldMaxPeers)
	tp := s.TrustedProxies
	v.int("shield.trusted_proxies.hops", int64(tp.Hops), rangeTrustedHops)
	switch tp.Header {
	case "x-forwarded-for", "forwarded":
	default:
		v.add("shield.trusted_proxies.header", "%q: want x-forwarded-for or forwarded", tp.Header)
	}
	if len(tp.CIDRs) > maxTrustedCIDRs {
		v.add("shield.trusted_proxies.cidrs", "%d entries, at most %d", len(tp.CIDRs), maxTrustedCIDRs)
	}
	for i, c := range tp.CIDRs {
		if _, err := parsePrefix(c); err != nil {
			v.add(fmt.Sprintf("shield.trusted_proxies.cidrs[%d]", i), "%q: %v", c, err)
		}
	}
	if (len(tp.CIDRs) == 0) != (tp.Hops == 0) {
		v.add("shield.trusted_proxies", "cidrs and hops are set together (trusting forwarded addresses needs both the proxies and the hop count)")
	}
}

// parsePrefix accepts a CIDR prefix or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, errors.New("not an address or CIDR prefix")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, errors.New("IPv4-mapped IPv6 prefix; write it in IPv4 form")
	}
	return p.Masked(), nil
}

func (v *validator) upstreams() map[string]bool {
	ups := v.cfg.Upstreams
	names := make(map[string]bool, len(ups))
	if len(ups) > maxUpstreams {
		v.add("upstreams", "%d upstreams, at most %d", len(ups), maxUpstreams)
	}
	first := map[string]int{}
	for i := range ups {
		u := &ups[i]
		p := fmt.Sprintf("upstreams[%d]", i)
		if !validName(u.Name) {
			v.add(p+".name", "%q: want 1 to %d of a-z 0-9 . _ -", u.Name, maxNameLen)
		} else if j, dup := first[u.Name]; dup {
			v.add(p+".name", "duplicate upstream name %q (also upstreams[%d])", u.Name, j)
		} else {
			first[u.Name] = i
		}
		names[u.Name] = true
		if len(u.Targets) == 0 {
			v.add(p+".targets", "at least one target URL is required")
		} else if len(u.Targets) > maxTargets {
			v.add(p+".targets", "%d targets, at most %d", len(u.Targets), maxTargets)
		}
		for j, t := range u.Targets {
			tu, err := url.Parse(t)
			if err != nil || (tu.Scheme != "http" && tu.Scheme != "https") || tu.Host == "" || tu.User != nil || tu.RawQuery != "" || tu.Fragment != "" {
				v.add(fmt.Sprintf("%s.targets[%d]", p, j), "%q: want an http or https URL with a host and no user info, query or fragment", redactURL(t))
			}
		}
		// A timeout left at its default never exceeds total.
		for key, f := range map[string]*time.Duration{"connect": &u.Timeouts.Connect, "response_header": &u.Timeouts.ResponseHeader, "per_try": &u.Timeouts.PerTry} {
			if _, set := v.d.lines[p+".timeouts."+key]; !set && u.Timeouts.Total > 0 {
				*f = min(*f, u.Timeouts.Total)
			}
		}
		t := u.Timeouts
		v.dur(p+".timeouts.total", t.Total, rangeTimeout)
		hi := rangeTimeout
		if t.Total >= rangeTimeout.lo && t.Total < hi.hi {
			hi.hi = t.Total
		}
		v.dur(p+".timeouts.connect", t.Connect, hi)
		v.dur(p+".timeouts.response_header", t.ResponseHeader, hi)
		v.dur(p+".timeouts.per_try", t.PerTry, hi)
		v.int(p+".retries", int64(u.Retries), rangeRetries)
	}
	return names
}

// redactURL drops user info from a URL before it is echoed in a message.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func (v *validator) routes(upstreams map[string]bool) {
	rs := v.cfg.Routes
	if len(rs) == 0 {
		v.add("routes", "at least one route is required")
	}
	if len(rs) > maxRoutes {
		v.add("routes", "%d routes, at most %d", len(rs), maxRoutes)
	}
	first := map[string]int{}
	ops := map[string]int{} // quota operation → first route using it
	for i := range rs {
		r := &rs[i]
		p := fmt.Sprintf("routes[%d]", i)
		if !validName(r.Name) {
			v.add(p+".name", "%q: want 1 to %d of a-z 0-9 . _ -", r.Name, maxNameLen)
		} else if j, dup := first[r.Name]; dup {
			v.add(p+".name", "duplicate route name %q (also routes[%d])", r.Name, j)
		} else {
			first[r.Name] = i
		}
		switch {
		case r.Upstream == "":
			v.add(p+".upstream", "required")
		case !upstreams[r.Upstream]:
			v.add(p+".upstream", "unknown upstream %q", r.Upstream)
		}
		v.match(p+".match", &r.Match)
		if rl := r.RateLimit; rl != nil {
			q := p + ".rate_limit"
			v.float(q+".qps", rl.QPS, rangeQPS)
			v.int(q+".burst", rl.Burst, rangeBurst)
			v.int(q+".status", int64(rl.Status), rangeRateLimitStatus)
			v.int(q+".max_keys", int64(rl.MaxKeys), rangeRateLimitMaxKeys)
			if _, err := parseKey(rl.Key); err != nil {
				v.add(q+".key", "%v", err)
			}
		}
		if l := r.Login; l != nil {
			q := p + ".login"
			if l.UsernameField == "" || len(l.UsernameField) > maxNameLen {
				v.add(q+".username_field", "want 1 to %d characters", maxNameLen)
			}
			v.int(q+".limit", int64(l.Limit), rangeLoginLimit)
			v.dur(q+".window", l.Window, rangeLoginWindow)
			v.wholeMillis(q+".window", l.Window)
			v.int(q+".max_body_bytes", l.MaxBodyBytes, rangeLoginMaxBodyBytes)
		}
		if qt := r.Quota; qt != nil {
			q := p + ".quota"
			if v.cfg.Profile == Standalone {
				v.add(q, "quota needs PostgreSQL and is only available in the cluster profile")
			}
			if !validName(qt.Operation) {
				v.add(q+".operation", "%q: want 1 to %d of a-z 0-9 . _ -", qt.Operation, maxNameLen)
			}
			v.int(q+".limit", int64(qt.Limit), rangeQuotaLimit)
			v.dur(q+".window", qt.Window, rangeQuotaWindow)
			v.wholeMillis(q+".window", qt.Window)
			if j, seen := ops[qt.Operation]; seen {
				o := rs[j].Quota
				if o.Limit != qt.Limit || o.Window != qt.Window {
					v.add(q+".operation", "%q is also used by route %q with a different limit or window (an operation has one budget)", qt.Operation, rs[j].Name)
				}
			} else {
				ops[qt.Operation] = i
			}
			a := qt.Auth
			au, err := url.Parse(a.URL)
			if a.URL == "" {
				v.add(q+".auth.url", "required")
			} else if err != nil || (au.Scheme != "http" && au.Scheme != "https") || au.Host == "" || au.User != nil || au.Fragment != "" {
				v.add(q+".auth.url", "%q: want an http or https URL with a host and no user info", redactURL(a.URL))
			}
			if !validToken(a.ProjectHeader) {
				v.add(q+".auth.project_header", "%q is not a header name", a.ProjectHeader)
			}
			if !validToken(a.SubjectHeader) {
				v.add(q+".auth.subject_header", "%q is not a header name", a.SubjectHeader)
			}
			if !validName(a.SubjectType) {
				v.add(q+".auth.subject_type", "%q: want 1 to %d of a-z 0-9 . _ -", a.SubjectType, maxNameLen)
			}
			v.dur(q+".auth.timeout", a.Timeout, rangeAuthTimeout)
		}
	}
	if len(v.d.problems) == 0 {
		v.patterns()
	}
}

func (v *validator) match(p string, m *Match) {
	if m.Path == "" {
		v.add(p+".path", "required")
	} else if !strings.HasPrefix(m.Path, "/") {
		v.add(p+".path", "%q: want a path pattern starting with /", m.Path)
	} else if strings.ContainsAny(m.Path, " \t") {
		v.add(p+".path", "%q: no spaces (put methods in match.methods and the host in match.host)", m.Path)
	} else if err := patternError(m.Path); err != "" {
		v.add(p+".path", "%q: %s", m.Path, err)
	}
	if len(m.Methods) > maxMethods {
		v.add(p+".methods", "%d methods, at most %d", len(m.Methods), maxMethods)
	}
	seen := map[string]bool{}
	for i, meth := range m.Methods {
		mp := fmt.Sprintf("%s.methods[%d]", p, i)
		switch {
		case !validToken(meth) || strings.ToUpper(meth) != meth:
			v.add(mp, "%q: want an upper-case method such as GET", meth)
		case seen[meth]:
			v.add(mp, "duplicate method %q", meth)
		}
		seen[meth] = true
	}
	if m.Host != "" && !validHostname(m.Host) {
		v.add(p+".host", "%q: want a lower-case host name without port", m.Host)
	}
}

// patternError returns why ServeMux rejects path as a pattern, or "".
func patternError(path string) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
			if i := strings.Index(msg, "parsing"); i >= 0 {
				msg = msg[i:]
				if j := strings.Index(msg, ": "); j >= 0 {
					msg = msg[j+2:]
				}
			}
			msg = "invalid pattern: " + msg
		}
	}()
	http.NewServeMux().Handle(path, http.NotFoundHandler())
	return ""
}

// patterns registers every route in a ServeMux, as the router will, and
// reports routes whose patterns collide (same pattern, or two patterns
// where neither is more specific).
func (v *validator) patterns() {
	mux := http.NewServeMux()
	type reg struct {
		route   int
		pattern string
	}
	var done []reg
	for i, r := range v.cfg.Routes {
		for _, pat := range routePatterns(r.Match) {
			if register(mux, pat) {
				done = append(done, reg{i, pat})
				continue
			}
			other := -1
			for _, d := range done {
				m := http.NewServeMux()
				register(m, d.pattern)
				if !register(m, pat) {
					other = d.route
					break
				}
			}
			p := fmt.Sprintf("routes[%d].match", i)
			if other >= 0 {
				v.add(p, "%q conflicts with route %q (%s): neither is more specific", pat, v.cfg.Routes[other].Name, fmt.Sprintf("routes[%d]", other))
			} else {
				v.add(p, "%q conflicts with another route", pat)
			}
			break
		}
	}
}

// routePatterns turns a Match into ServeMux patterns, one per method.
func routePatterns(m Match) []string {
	if len(m.Methods) == 0 {
		return []string{m.Host + m.Path}
	}
	out := make([]string, len(m.Methods))
	for i, meth := range m.Methods {
		out[i] = meth + " " + m.Host + m.Path
	}
	return out
}

func register(mux *http.ServeMux, pattern string) bool {
	return registerHandler(mux, pattern, http.NotFoundHandler())
}

// registerHandler is mux.Handle that reports a conflict instead of
// panicking.
func registerHandler(mux *http.ServeMux, pattern string, h http.Handler) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	mux.Handle(pattern, h)
	return true
}

var rangeListCapacity = intRange{1, ipset.MaxCapacity}

// ipsets validates the static lists: every entry parses, no prefix
// appears twice in a list, and the static entries fit the capacity.
func (v *validator) ipsets() {
	s := &v.cfg.IPSets
	v.int("ipsets.allow_capacity", int64(s.AllowCapacity), rangeListCapacity)
	v.int("ipsets.deny_capacity", int64(s.DenyCapacity), rangeListCapacity)
	for _, l := range []struct {
		name     string
		entries  []ListEntry
		capacity int
	}{{"allow", s.Allow, s.AllowCapacity}, {"deny", s.Deny, s.DenyCapacity}} {
		base := "ipsets." + l.name
		if len(l.entries) > l.capacity && l.capacity >= 1 {
			v.add(base, "%d static entries exceed ipsets.%s_capacity %d", len(l.entries), l.name, l.capacity)
		}
		first := make(map[netip.Prefix]int, len(l.entries))
		for i := range l.entries {
			e := &l.entries[i]
			p := fmt.Sprintf("%s[%d]", base, i)
			ip := p
			if _, long := v.d.lines[p+".ip"]; long {
				ip = p + ".ip"
			}
			if e.IP == "" {
				v.add(ip, "an address or CIDR prefix is required")
				continue
			}
			if !ipset.ValidReason(e.Reason) {
				v.add(p+".reason", "want at most %d bytes of printable ASCII", ipset.MaxReasonBytes)
			}
			pfx, err := ipset.ParsePrefix(e.IP)
			if err != nil {
				v.add(ip, "%s", strings.TrimPrefix(err.Error(), ipset.ErrInvalid.Error()+": "))
				continue
			}
			if j, dup := first[pfx]; dup {
				v.add(ip, "%s duplicates %s[%d]", pfx, base, j)
				continue
			}
			first[pfx] = i
			e.prefix = pfx
		}
	}
}

// control validates the control API listener and loads its token. The
// token is read (BULWARK_CONTROL_TOKEN or control.token_file) only when
// the API is enabled.
func (v *validator) control(getenv func(string) string) {
	c := &v.cfg.Control
	if !c.Enabled {
		return
	}
	if err := validHostPort(c.Addr); err != nil {
		v.add("control.addr", "%q: %v", c.Addr, err)
		return
	}
	if _, port, _ := net.SplitHostPort(c.Addr); port != "0" {
		switch c.Addr {
		case v.cfg.Listen.Addr:
			v.add("control.addr", "same address as listen.addr")
		case v.cfg.Metrics.Addr:
			v.add("control.addr", "same address as metrics.addr")
		}
	}
	file := c.TokenFile
	if file != "" && !filepath.IsAbs(file) && v.dir != "" {
		file = filepath.Join(v.dir, file)
	}
	tok, err := control.LoadToken(file, getenv)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "control: ")
		msg = strings.TrimPrefix(msg, "control.token_file: ")
		if c.TokenFile == "" {
			v.d.problems = append(v.d.problems, Problem{Path: EnvControlToken, Msg: msg})
		} else {
			v.add("control.token_file", "%s", msg)
		}
		return
	}
	if control.CheckAddr(c.Addr, tok != "") != nil {
		v.add("control.addr", "%q is not a loopback address: set control.token_file or %s to expose the API", c.Addr, EnvControlToken)
		return
	}
	c.TokenFile = file
	v.cfg.token = &controlToken{v: tok}
}
