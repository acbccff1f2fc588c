package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/internal/fieldname"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/ratelimit"
)

// Hard caps on list lengths.
const (
	maxUpstreams    = 256
	maxRouteAllow   = 256 // routes[].allow_clients
	maxRoutes       = 1024
	maxTokenLen     = 64 // methods and header names
	maxStripHeaders = 64
)

// FieldError is one invalid setting; see [conf.FieldError].
type FieldError = conf.FieldError

// FieldErrors is the error of a section's Validate method; see
// [conf.Errors].
type FieldErrors = conf.Errors

// sortByKeys orders es by the first key of their paths, in the order
// keys lists them (a section's declaration order), keeping the order
// within a key.
func sortByKeys(es FieldErrors, keys []string) {
	rank := func(e *FieldError) int {
		k := e.Path
		if i := strings.IndexAny(k, ".["); i >= 0 {
			k = k[:i]
		}
		if i := slices.Index(keys, k); i >= 0 {
			return i
		}
		return len(keys)
	}
	slices.SortStableFunc(es, func(a, b *FieldError) int { return rank(a) - rank(b) })
}

// Validate checks the whole configuration without reading any file or
// the environment: every section's Validate, nested under its key, and
// the rules that span sections (unique names, routes to known upstreams,
// no two routes with conflicting patterns, quotas only in the cluster
// profile, one budget per quota operation, distinct listener addresses).
// [Load] and [Parse] run it, and so does [New]: a configuration `bulwark
// check` accepts is one the gateway starts with. The error is a
// *yamlconf.Error; its problems carry the file's lines when c came from a
// file.
func (c *Config) Validate() error {
	if ps := c.problemsOf(c.fieldErrors()); len(ps) > 0 {
		return &yamlconf.Error{Problems: ps}
	}
	return nil
}

func (c *Config) fieldErrors() FieldErrors {
	var f conf.Check
	switch c.Profile {
	case Standalone, Cluster:
	default:
		f.Add("profile", "%q is not a profile (want standalone or cluster)", c.Profile)
	}
	c.validateListeners(&f)
	c.validateACME(&f)
	f.Sub("limits", c.Limits.Validate())
	c.validateGuards(&f)
	f.Sub("client_ip", c.ClientIP.Validate())
	f.Sub("request_headers", c.RequestHeaders.Validate())
	f.Sub("shield", c.Shield.Validate())
	ups := c.validateUpstreams(&f)
	f.Sub("front_controllers", c.FrontControllers.Validate())
	c.validateRoutes(&f, ups)
	f.Sub("ipsets", c.IPSets.Validate())
	f.Sub("xdp", c.XDP.Validate())
	f.Sub("redis", c.Redis.Validate())
	f.Sub("global", c.Global.Validate())
	f.Sub("rls", c.RLS.Validate())
	if c.RLS.Addr != "" {
		if c.Profile != Cluster {
			f.Add("rls.addr", "the RLS server decides on the global limiter and needs the cluster profile (Redis)")
		}
		others := []struct{ key, addr string }{{"metrics.addr", c.Metrics.Addr}, {"control.addr", c.Control.Addr}}
		if k := c.listenerAt(c.RLS.Addr); k != "" {
			others = append(others, struct{ key, addr string }{k, c.RLS.Addr})
		}
		for _, other := range others {
			if sameListener(c.RLS.Addr, other.addr) {
				f.Add("rls.addr", "same address as %s", other.key)
			}
		}
	}
	f.Sub("metrics", c.Metrics.Validate())
	f.Sub("access_log", c.AccessLog.Validate())
	if k := c.listenerAt(c.Metrics.Addr); k != "" {
		f.Add("metrics.addr", "same address as %s", k)
	}
	f.Sub("log", c.Log.Validate())
	f.Sub("tracing", c.Tracing.Validate())
	f.Sub("control", c.Control.Validate())
	if ct := c.Control; ct.Enabled {
		k := c.listenerAt(ct.Addr)
		switch {
		case k != "":
			f.Add("control.addr", "same address as %s", k)
		case sameListener(ct.Addr, c.Metrics.Addr):
			f.Add("control.addr", "same address as metrics.addr")
		}
	}
	return f.List()
}

// sameListener reports whether two listener addresses would collide: the
// same valid host:port, other than port 0 (each bind picks a free port).
func sameListener(a, b string) bool {
	if a != b || conf.HostPort(a) != nil {
		return false
	}
	_, port, _ := net.SplitHostPort(a)
	return port != "0"
}

// problemsOf turns field errors into problems with c's file and lines.
func (c *Config) problemsOf(es FieldErrors) []yamlconf.Problem {
	var ps []yamlconf.Problem
	for _, e := range es {
		if len(ps) == maxProblems {
			break
		}
		path := e.Path
		// A list entry written as a plain string (or without ip:) has no
		// "ip" key in the file: its address problems belong to the entry.
		if c.lines != nil && strings.HasPrefix(path, "ipsets.") && strings.HasSuffix(path, ".ip") {
			if _, ok := c.lines[path]; !ok {
				path = strings.TrimSuffix(path, ".ip")
			}
		}
		ps = append(ps, yamlconf.Problem{File: c.File, Line: c.lines.Of(path), Path: path, Msg: e.Msg})
	}
	return ps
}

func (c *Config) validateUpstreams(f *conf.Check) map[string]bool {
	ups := c.Upstreams
	names := make(map[string]bool, len(ups))
	if len(ups) > maxUpstreams {
		f.Add("upstreams", "%d upstreams, at most %d", len(ups), maxUpstreams)
	}
	first := firstNames{}
	for i, u := range ups {
		var uf conf.Check
		first.check(&uf, "upstream", u.Name, i) // name is the first key
		names[u.Name] = true
		uf.Sub("", u.Validate())
		f.Sub(fmt.Sprintf("upstreams[%d]", i), uf.Err())
	}
	return names
}

// firstNames maps each name of a list (upstreams, routes) to the index
// that first used it.
type firstNames map[string]int

// check reports item i's name at "name" if an earlier item of the list
// has it. (An invalid name is the item's own Validate's to report.)
func (n firstNames) check(f *conf.Check, list, name string, i int) {
	if !conf.Name(name) {
		return
	}
	if j, dup := n[name]; dup {
		f.Add("name", "duplicate %s name %q (also %ss[%d])", list, name, list, j)
		return
	}
	n[name] = i
}

func (c *Config) validateRoutes(f *conf.Check, upstreams map[string]bool) {
	rs := c.Routes
	if len(rs) == 0 && c.RLS.Addr == "" {
		f.Add("routes", "at least one route is required (or rls.addr: an RLS-only deployment)")
	}
	if len(rs) > maxRoutes {
		f.Add("routes", "%d routes, at most %d", len(rs), maxRoutes)
	}
	first := firstNames{}
	ops := map[string]int{} // quota operation → first route using it
	keys := yamlconf.Keys(reflect.TypeFor[Route]())
	headers := c.headerRules() // what step 1 removes, for header:NAME keys
	for i, r := range rs {
		var rf conf.Check
		first.check(&rf, "route", r.Name, i)
		if r.Upstream != "" && !upstreams[r.Upstream] {
			rf.Add("upstream", "unknown upstream %q", r.Upstream)
		}
		if rl := r.RateLimit; rl != nil && rl.Scope == "global" {
			if c.Profile != Cluster {
				rf.Add("rate_limit.scope", "global needs the cluster profile (the replicas share their budget in Redis)")
			}
			if rl.Sustained() > global.MaxRate {
				rf.Add("rate_limit", "%s a second: a global limit counts in microseconds, at most %s", conf.FormatFloat(rl.Sustained()), conf.FormatFloat(global.MaxRate))
			}
		}
		if rl := r.RateLimit; rl != nil {
			if k, err := ratelimit.ParseKey(rl.Key); err == nil && k.Kind == ratelimit.KeyHeader && headers.strips([]byte(k.Header)) {
				rf.Add("rate_limit.key", "%q: the gateway removes %s from every request before any policy (request_headers.strip, or a quota route's asserted header): the key would never be seen", rl.Key, strings.TrimPrefix(rl.Key, "header:"))
			}
		}
		if q := r.Quota; q != nil {
			if c.Profile == Standalone {
				rf.Add("quota", "quota needs PostgreSQL and is only available in the cluster profile")
			}
			if j, seen := ops[q.Operation]; seen {
				if o := rs[j].Quota; o.Limit != q.Limit || o.Window != q.Window || o.MaxReplays != q.MaxReplays {
					rf.Add("quota.operation", "%q is also used by route %q with a different limit, window or max_replays (an operation has one budget)", q.Operation, rs[j].Name)
				}
			} else {
				ops[q.Operation] = i
			}
		}
		rf.Sub("", r.Validate())
		sortByKeys(rf.List(), keys)
		f.Sub(fmt.Sprintf("routes[%d]", i), rf.Err())
	}
	if f.OK() {
		c.validatePatterns(f)
	}
}

// listenPath is the key path of listener i: "listen" for a single
// listener written as a mapping (or built in Go), "listen[i]" in a list.
func (c *Config) listenPath(i int) string {
	if len(c.Listen) == 1 {
		if _, indexed := c.lines["listen[0]"]; !indexed {
			return "listen"
		}
	}
	return conf.Index("listen", i)
}

// listenerAt returns the key of the client listener bound to addr
// ("listen.addr", "listen[1].addr"), or "".
func (c *Config) listenerAt(addr string) string {
	for i, l := range c.Listen {
		if sameListener(addr, l.Addr) {
			return c.listenPath(i) + ".addr"
		}
	}
	return ""
}

// listenerByLabel returns the index of the listener labelled label
// (Listen.Label), or -1.
func (c *Config) listenerByLabel(label string) int {
	for i, l := range c.Listen {
		if l.Label() == label {
			return i
		}
	}
	return -1
}

// validateListeners checks every listener (Listen.Validate) and the
// rules between them: at least one and at most MaxListeners, distinct
// addresses and labels, redirect_to_https from a cleartext listener to a
// TLS one, a listener's own guards only with the guards on.
func (c *Config) validateListeners(f *conf.Check) {
	ls := c.Listen
	switch {
	case len(ls) == 0:
		f.Add("listen", "at least one listener is required")
	case len(ls) > MaxListeners:
		f.Add("listen", "%d listeners, at most %d", len(ls), MaxListeners)
	}
	hasTLS := slices.ContainsFunc(ls, func(l Listen) bool { return l.TLS != nil })
	for i, l := range ls {
		var lf conf.Check
		lf.Sub("", l.Validate())
		for j := range i {
			switch {
			case sameListener(l.Addr, ls[j].Addr):
				lf.Add("addr", "same address as %s.addr", c.listenPath(j))
			case l.Label() == ls[j].Label() && l.Name != "":
				lf.Add("name", "duplicate listener name %q (also %s)", l.Name, c.listenPath(j))
			case l.Label() == ls[j].Label():
				lf.Add("name", "required: %s has the same addr %q (listeners are told apart by name, or by addr)", c.listenPath(j), l.Addr)
			default:
				continue
			}
			break
		}
		if r := l.RedirectToHTTPS; r != "" {
			j := c.listenerByLabel(r)
			switch {
			case l.TLS != nil:
				lf.Add("redirect_to_https", "a TLS listener is HTTPS already: redirect from a cleartext listener")
			case !hasTLS:
				lf.Add("redirect_to_https", "%q: there is no TLS listener to redirect to (add one to listen with tls)", truncate(r))
			case j < 0:
				lf.Add("redirect_to_https", "%q names no listener (want the name, or the addr, of a listener with tls)", truncate(r))
			case ls[j].TLS == nil:
				lf.Add("redirect_to_https", "%q is not a TLS listener", truncate(r))
			}
		}
		if l.Guards != nil && !c.Guards.Enabled {
			lf.Add("guards", "a listener's own guards need guards.enabled")
		}
		f.Sub(c.listenPath(i), lf.Err())
	}
}

// Validate checks one client listener: a plain name if any, a host:port
// address, and with TLS both file names and no h2c. (The files are read
// by Provision; the rules between listeners are Config.Validate's.)
func (l Listen) Validate() error {
	var f conf.Check
	if l.Name != "" {
		f.Name("name", l.Name)
	}
	if err := conf.HostPort(l.Addr); err != nil {
		f.Add("addr", "%q: %v", l.Addr, err)
	}
	switch l.Engine {
	case EngineAuto, EngineGoroutine, EngineNetHTTP:
	default:
		f.Add("engine", "%q: want %s, %s or %s", l.Engine, EngineAuto, EngineGoroutine, EngineNetHTTP)
	}
	switch l.HTTP2Engine {
	case "", HTTP2EngineNetHTTP:
	case HTTP2EngineNative:
		if l.H2C && l.Engine == EngineNetHTTP {
			f.Add("http2_engine", "native with h2c needs engine %s or %s (the fast engine takes the cleartext connections)", EngineAuto, EngineGoroutine)
		}
	default:
		f.Add("http2_engine", "%q: want %s or %s", l.HTTP2Engine, HTTP2EngineNetHTTP, HTTP2EngineNative)
	}
	if l.TLS != nil {
		if l.H2C {
			f.Add("h2c", "h2c is cleartext HTTP/2 and cannot be combined with listen.tls (TLS negotiates HTTP/2 itself)")
		}
		f.Sub("tls", l.TLS.Validate())
	}
	if l.ProxyProtocol != nil {
		f.Sub("proxy_protocol", l.ProxyProtocol.Validate())
	}
	return f.Err()
}

// Validate checks that the section names at least one certificate (or
// acme), each with both its files, and at most maxCertificates, the
// watch interval (0, off, or 1s to 24h) and the acme section.
func (t TLS) Validate() error {
	var f conf.Check
	if t.CertFile != "" || t.KeyFile != "" || len(t.Certificates) == 0 && t.ACME == nil {
		why := "required when listen.tls is set without certificates"
		if t.CertFile != "" || t.KeyFile != "" {
			why = "required with the other of cert_file and key_file"
		}
		if t.CertFile == "" {
			f.Add("cert_file", "%s", why)
		}
		if t.KeyFile == "" {
			f.Add("key_file", "%s", why)
		}
	}
	if t.WatchInterval != 0 {
		f.Duration("watch_interval", t.WatchInterval, minWatchInterval, maxWatchInterval)
	}
	if n := len(t.Certificates); n > maxCertificates {
		f.Add("certificates", "%d certificates: at most %d", n, maxCertificates)
	}
	for i, c := range t.Certificates {
		p := conf.Index("certificates", i)
		if c.CertFile == "" {
			f.Add(p+".cert_file", "required")
		}
		if c.KeyFile == "" {
			f.Add(p+".key_file", "required")
		}
	}
	if t.ACME != nil {
		f.Sub("acme", t.ACME.Validate())
	}
	return f.Err()
}

// Validate checks the mode and the shield's own settings
// (shield.Config.Validate). The shield is validated even when it is
// disabled, so that enabling it never reveals a mistake.
func (s Shield) Validate() error {
	var f conf.Check
	f.OneOf("mode", s.Mode, "enforce", "shadow")
	f.Sub("", s.Config.Validate())
	return f.Err()
}

// Validate checks the resolver's settings (peer.Config.Validate) and the
// per-network budget (keyed.NetworkBudget.Validate).
func (c ClientIP) Validate() error {
	var f conf.Check
	f.Sub("", c.Config.Validate())
	f.Sub("networks", c.Networks.Validate())
	return f.Err()
}

// Validate checks the strip list: header names, at most 64, no name twice
// (in any spelling).
func (h RequestHeaders) Validate() error {
	var f conf.Check
	if len(h.Strip) > maxStripHeaders {
		f.Add("strip", "%d entries, at most %d", len(h.Strip), maxStripHeaders)
	}
	for i, name := range h.Strip {
		p := fmt.Sprintf("strip[%d]", i)
		if !validToken(name) {
			f.Add(p, "%q is not a header name", name)
			continue
		}
		for j := 0; j < i; j++ {
			if fieldname.Equal(h.Strip[j], name) {
				f.Add(p, "%q repeats strip[%d]", name, j)
				break
			}
		}
		switch {
		case fieldname.Equal(name, "Host"), fieldname.Equal(name, "Content-Length"), fieldname.Equal(name, "Transfer-Encoding"):
			f.Add(p, "%q frames the request and cannot be stripped", name)
		}
	}
	return f.Err()
}

// Validate checks a route: its name, that it names an upstream, its
// match and each policy it has. (Config.Validate checks that the name is
// unique, that the upstream exists, that the patterns do not conflict
// and the quota's profile and budget.)
func (r Route) Validate() error {
	var f conf.Check
	f.Name("name", r.Name)
	if r.Upstream == "" {
		f.Add("upstream", "required")
	}
	f.Sub("match", r.Match.Validate())
	if len(r.AllowClients) > maxRouteAllow {
		f.Add("allow_clients", "%d entries, at most %d", len(r.AllowClients), maxRouteAllow)
	}
	for i, s := range r.AllowClients {
		if _, err := ipset.ParsePrefix(s); err != nil {
			f.Add(conf.Index("allow_clients", i), "%s", strings.TrimPrefix(err.Error(), ipset.ErrInvalid.Error()+": "))
		}
	}
	if r.RateLimit != nil {
		f.Sub("rate_limit", r.RateLimit.Validate())
	}
	if r.Login != nil {
		f.Sub("login", r.Login.Validate())
	}
	if r.Quota != nil {
		f.Sub("quota", r.Quota.Validate())
	}
	return f.Err()
}

// headerRules is the gateway-wide header policy cfg asks for:
// request_headers.strip and every quota route's asserted headers.
func (c *Config) headerRules() *headerRules {
	var asserted []string
	for _, r := range c.Routes {
		if q := r.Quota; q != nil {
			asserted = append(asserted, q.Auth.ProjectHeader, q.Auth.SubjectHeader)
		}
	}
	return newHeaderRules(c.RequestHeaders.Strip, asserted)
}

// Validate checks the access log's mode, sample and rate bound.
func (a AccessLog) Validate() error {
	var f conf.Check
	switch a.Mode {
	case "off", "rejections", "all":
	default:
		f.Add("mode", "%q: want off, rejections or all", a.Mode)
	}
	f.Float("sample", a.Sample, 0, 1)
	f.Int("max_per_second", int64(a.MaxPerSecond), 1, 1_000_000)
	return f.Err()
}

// Validate checks the metrics listener's address ("" turns it off).
func (m Metrics) Validate() error {
	var f conf.Check
	if m.Addr != "" {
		if err := conf.HostPort(m.Addr); err != nil {
			f.Add("addr", "%q: %v", m.Addr, err)
		}
	}
	return f.Err()
}

// Validate checks the log format and level.
func (l Log) Validate() error {
	var f conf.Check
	switch l.Format {
	case "json", "text":
	default:
		f.Add("format", "%q: want json or text", l.Format)
	}
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		f.Add("level", "%q: want debug, info, warn or error", l.Level)
	}
	return f.Err()
}

// Validate checks the control API's address when it is enabled. Whether
// a non-loopback address has a token is checked by Provision, which reads
// the token.
func (c Control) Validate() error {
	var f conf.Check
	if c.Enabled {
		if err := conf.HostPort(c.Addr); err != nil {
			f.Add("addr", "%q: %v", c.Addr, err)
		} else if _, err := control.HostCheck(c.Addr, c.AllowedHosts, true); err != nil {
			// The control package's own rules (the token is checked
			// with the token file, at provisioning).
			f.Add("allowed_hosts", "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), "control: "), "allowed_hosts"))
		}
	}
	return f.Err()
}

// validToken reports whether s is an RFC 9110 token (methods, header
// field names).
func validToken(s string) bool { return len(s) <= maxTokenLen && fieldname.Token(s) }

// Warnings lists what the configuration accepts but looks wrong: a login
// route that takes only GET, HEAD or OPTIONS (so the username can come
// only from the query string or an Authorization header) while
// login.basic_auth is off, which leaves HTTP Basic logins uncounted.
// `bulwark check` prints them and `serve` logs them at start and on
// reload; they never refuse the configuration.
func (c *Config) Warnings() []yamlconf.Problem {
	var ws []yamlconf.Problem
	for i, r := range c.Routes {
		if r.Login == nil || r.Login.BasicAuth || len(r.Match.Methods) == 0 {
			continue
		}
		bodyless := true
		for _, m := range r.Match.Methods {
			switch strings.ToUpper(m) {
			case "GET", "HEAD", "OPTIONS":
			default:
				bodyless = false
			}
		}
		if bodyless {
			path := fmt.Sprintf("routes[%d].login", i)
			ws = append(ws, yamlconf.Problem{File: c.File, Line: c.Line(path), Path: path + ".basic_auth",
				Msg: "off, and the route takes only " + strings.Join(r.Match.Methods, ", ") +
					": a login sent with HTTP Basic credentials passes uncounted. Set basic_auth: true if the handler accepts Basic " +
					"(a different username in the query is then 400 ambiguous_credentials); leave it off when Basic " +
					"authentication sits in front of the login page (every login would be ambiguous)"})
		}
	}
	for _, i := range c.ClientIP.TrustedProxies.Everyone() {
		path := fmt.Sprintf("client_ip.trusted_proxies.cidrs[%d]", i)
		ws = append(ws, yamlconf.Problem{File: c.File, Line: c.Line(path), Path: path,
			Msg: fmt.Sprintf("%s trusts every client as a proxy: any client can then choose its own address in %s, and every "+
				"list, limit and lockout keyed by client follows what it wrote. Name your load balancers' networks instead",
				c.ClientIP.TrustedProxies.CIDRs[i], c.ClientIP.TrustedProxies.WithDefaults().Header)})
	}
	for li, l := range c.Listen {
		pp := l.ProxyProtocol
		if pp == nil {
			continue
		}
		for _, i := range pp.Everyone() {
			path := fmt.Sprintf("%s.proxy_protocol.trusted[%d]", c.listenPath(li), i)
			ws = append(ws, yamlconf.Problem{File: c.File, Line: c.Line(path), Path: path,
				Msg: fmt.Sprintf("%s trusts every client as a load balancer: any client can then send a PROXY protocol header "+
					"naming any address, and every list, limit and connection cap follows what it wrote. Name your balancers' networks instead",
					pp.Trusted[i])})
		}
	}
	if w, ok := c.localPostgresWarning(); ok {
		ws = append(ws, w)
	}
	return ws
}

// localPostgresWarning warns that the cluster profile connects to a
// PostgreSQL on this machine with TLS verify-full (the default): a local
// server usually has no TLS, and then every connection is refused and
// serve logs "postgres unavailable ... reason=tls_refused".
func (c *Config) localPostgresWarning() (yamlconf.Problem, bool) {
	if c.Profile != Cluster || c.Env.PostgresURL == "" || c.Env.PostgresTLSMode != "verify-full" || len(quotaOperations(c)) == 0 {
		return yamlconf.Problem{}, false
	}
	u, err := url.Parse(c.Env.PostgresURL)
	if err != nil {
		return yamlconf.Problem{}, false
	}
	h := u.Hostname()
	if a, err := netip.ParseAddr(h); !(h == "localhost" || err == nil && a.IsLoopback()) {
		return yamlconf.Problem{}, false
	}
	return yamlconf.Problem{Path: EnvPostgresURL,
		Msg: fmt.Sprintf("the server is on this machine and TLS is verify-full (the default): a local PostgreSQL without TLS "+
			"refuses every connection (serve then logs \"postgres unavailable\" with reason tls_refused and answers quota routes 503). "+
			"Give the server a certificate for %s, or set %s=disable and %s=true", h, EnvPostgresTLSMode, EnvPostgresAllowInsecure)}, true
}
