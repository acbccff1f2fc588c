package gateway

// How the configuration works, and how to add a setting
//
// A setting's truth lives in one place: the type of the layer that
// consumes it. host.Limits, shield.Config, login.Config and the others
// carry their YAML shape (a `yaml:"key"` tag per setting, `yaml:"-"` on
// what a file cannot set: a clock, a store, a hook) and a Validate method
// that checks every setting against the library's own bounds with a
// conf.Check, naming the key ("max_keys: 0 out of range [1, 10000000]").
// The gateway's Config composes those types; a section that adds
// gateway-only keys (shield.enabled, a mode) embeds the library's type
// with `yaml:",inline"`. Nothing is mirrored, converted back or bounded a
// second time here.
//
// A file becomes a running gateway in four steps, each in one place:
//
//  1. decode (decode.go, with conf/yamlconf's walker, which rls's files
//     share): yaml.v3 parses the file; a walk over the node
//     tree, guided by the yaml tags of Config, records the line of every
//     key path and reports unknown and duplicate keys, wrong kinds and
//     bad scalars with "file:line: key.path"; yaml.v3 then decodes in
//     strict mode (KnownFields). A key absent from the file takes its
//     default (fillDefaults): DefaultConfig for the sections, the element
//     defaults (DefaultUpstream, ratelimit.DefaultConfig, login.DefaultPolicy,
//     quota.DefaultConfig, elementDefault) for list items and optional
//     sections.
//     A key present in the file keeps the file's value, even zero.
//  2. environment (load.go, applyProfileGate): BULWARK_PROFILE first,
//     then the cluster secrets, only in the cluster profile.
//  3. Validate (validate.go): pure, no file or environment read. Each
//     section's Validate (the library's, for a library's type) returns
//     conf.Errors whose paths are relative to it; Config.Validate nests
//     them, adds the rules that span sections and maps paths to lines.
//     gateway.New calls the same Config.Validate, so `bulwark check` and
//     start-up cannot disagree.
//  4. Provision (load.go): reads what the configuration names (TLS
//     certificate and key, control token file or BULWARK_CONTROL_TOKEN)
//     and checks the store URLs with the parsers the stores use.
//
// To add a setting:
//
//   - Add the field, with a `yaml:"snake_case"` tag, to the type of the
//     layer that consumes it (or to the gateway's own section type for a
//     gateway-only setting). Supported kinds: string, bool, integers
//     (int8 to int64, uint to uint64), float64, time.Duration, a type
//     whose pointer implements encoding.TextUnmarshaler (one scalar),
//     a struct (a section), a pointer to a struct (an optional section,
//     nil when absent = off) and slices of those.
//     TestSchema fails on a field without a tag or of another kind.
//   - Check its range in that type's Validate with conf.Check (Int,
//     Duration, Float, OneOf) and the library's bound constants, naming
//     the key: "qps", not "QPS". Validate checks values as they are; a
//     zero that means "the default" is filled by the type's WithDefaults,
//     not accepted by Validate.
//   - Give it a default in DefaultConfig (top-level sections) or in the
//     element default of its list item or optional section (a library's
//     Default... function where it has one). A new list item or optional
//     section type with defaults gets a case in elementDefault. A default
//     that depends on another key (an upstream timeout lowered to its
//     total) goes in deriveDefaults.
//   - A new section is a field of Config with its tag, its defaults in
//     DefaultConfig and one f.Sub("key", c.Key.Validate()) line in
//     Config.fieldErrors. Rules that span sections go in
//     Config.fieldErrors too.
//   - Anything that reads a file or the environment goes in Provision.
//   - Document the key, its default and its range in
//     examples/bulwark.yaml (TestSchema fails otherwise) and add a fixture
//     to testdata/bad for each new rule, with "# want:" lines (and
//     "# env: NAME=VALUE" lines if it needs the environment);
//     TestBadConfigs and TestCheckEqualsStart pick it up.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/keyed"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/proxyproto"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/redisconn"
	"github.com/bulwarkhq/bulwark/rls"
	routematch "github.com/bulwarkhq/bulwark/route"
	"github.com/bulwarkhq/bulwark/shield"
	"github.com/bulwarkhq/bulwark/xdp"
)

// Profile selects where the gateway keeps shared state.
type Profile string

// Profiles.
const (
	// Standalone keeps all state in process memory and reads no database
	// or cache secret. Quota policies are not available.
	Standalone Profile = "standalone"
	// Cluster keeps login throttling state in Redis and quotas in
	// PostgreSQL so that several replicas share them. It requires
	// BULWARK_REDIS_URL and BULWARK_POSTGRES_URL.
	Cluster Profile = "cluster"
)

// Config is a gateway configuration. Obtain one from [Load] or [Parse]:
// they decode strictly, set defaults, validate and provision, so a *Config
// they return is ready for [New]. A Config built in Go starts from
// [DefaultConfig] and needs [Config.Provision] before New. The yaml tags
// are the configuration keys; the annotated example under examples/
// documents each one with its default and range.
type Config struct {
	Profile Profile `yaml:"profile"`
	// Listen are the client-facing listeners: one mapping (one listener)
	// or a list of them. Listen[0] is the primary: serve --listen
	// replaces its address, and Gateway.Addr is its address.
	Listen         Listeners        `yaml:"listen"`
	Limits         host.Limits      `yaml:"limits"` // the host's bounds
	Guards         Guards           `yaml:"guards"`
	ClientIP       ClientIP         `yaml:"client_ip"`
	RequestHeaders RequestHeaders   `yaml:"request_headers"`
	Shield         Shield           `yaml:"shield"`
	Upstreams      []proxy.Upstream `yaml:"upstreams"` // proxied to
	Routes         []Route          `yaml:"routes"`
	// FrontControllers are the PHP front controllers route matching
	// sees through.
	FrontControllers FrontControllers  `yaml:"front_controllers"`
	Metrics          Metrics           `yaml:"metrics"`
	AccessLog        AccessLog         `yaml:"access_log"`
	Log              Log               `yaml:"log"`
	IPSets           ipset.ListsConfig `yaml:"ipsets"` // enforced as ipsets.go says
	XDP              xdp.Config        `yaml:"xdp"`    // the kernel layer; mode off by default
	Redis            redisconn.Options `yaml:"redis"`  // the URL is BULWARK_REDIS_URL
	Global           global.Config     `yaml:"global"` // the global limiter
	RLS              rls.Listener      `yaml:"rls"`    // Envoy's RLS server; cluster
	Control          Control           `yaml:"control"`
	Tracing          Tracing           `yaml:"tracing"`

	// File is the name the configuration was loaded from.
	File string `yaml:"-"`
	// Env holds what the profile gate read from the environment. Its
	// secret fields are never printed.
	Env Env `yaml:"-"`

	// lines maps key paths ("routes[1].rate_limit.qps") to the line that
	// set them; a path absent from it was not in the document.
	lines yamlconf.Lines
	// provisioned is set by a successful Provision.
	provisioned bool
	// acmeRoots is listen.tls.acme.ca_root, read by Provision.
	acmeRoots *x509.CertPool
	// rlsDomains is rls.config_file, parsed by Provision; rlsToken
	// rls.token_file, and rlsTLS the RLS listener's TLS settings.
	rlsDomains []rls.DomainConfig
	rlsToken   string
	rlsTLS     *tls.Config
	// token is the control API's bearer token (from control.token_file
	// or BULWARK_CONTROL_TOKEN). A pointer, so that printing a Config
	// never prints it.
	token *controlToken
}

type controlToken struct{ v string }

// controlToken returns the loaded control token, or "".
func (c *Config) controlToken() string {
	if c.token == nil {
		return ""
	}
	return c.token.v
}

// Listeners are the client-facing listeners (the listen key). A file
// writes one listener as a mapping, several as a list of mappings; every
// listener serves the same routes through the same layers, with its own
// address, TLS, engine, connection guards and, for a cleartext one, an
// optional redirect to HTTPS. At most MaxListeners.
type Listeners []Listen

// MaxListeners bounds the listen list.
const MaxListeners = 16

// Listen is one client-facing listener. Per-listener settings of other
// features belong here: they then apply per listener.
type Listen struct {
	// Name names the listener in metrics and logs, and for
	// redirect_to_https; default "" (the listener is then named by its
	// addr). A plain name (conf.Name), unique among the listeners.
	Name string `yaml:"name"`
	// Addr is host:port; default 127.0.0.1:8080 (loopback: exposing the
	// gateway is a deliberate choice).
	Addr string `yaml:"addr"`
	// TLS, when set, serves HTTPS (HTTP/2 negotiated by ALPN).
	TLS *TLS `yaml:"tls"`
	// H2C serves HTTP/2 over cleartext (prior knowledge or upgrade) as
	// well as HTTP/1.1. Not allowed together with TLS.
	H2C bool `yaml:"h2c"`
	// Engine is how cleartext HTTP/1.1 is served: "auto" (the default)
	// with the fast engine on event loops (Linux; a goroutine per
	// connection elsewhere), handing every other protocol, upgrade and
	// unusual request to net/http on the same listener; "goroutine" with
	// the fast engine on a goroutine per connection; "nethttp" with
	// net/http alone. With TLS, net/http serves everything.
	Engine string `yaml:"engine"`
	// HTTP2Engine is how HTTP/2 (TLS, h2c) is served: "nethttp" (the
	// default, also "") with x/net's HTTP/2 server; "native" with Bulwark's own
	// (package h2), each stream served by the fast engine like an
	// HTTP/1.1 request. Opt-in while it is new. With h2c, native needs
	// engine auto or goroutine.
	HTTP2Engine string `yaml:"http2_engine"`
	// RedirectToHTTPS, on a cleartext listener, names a TLS listener
	// (by its name, or its addr when it has none): every request but the
	// probes is answered 308 with the https URL of the same host, path
	// and query on that listener's port. Default "" (off).
	RedirectToHTTPS string `yaml:"redirect_to_https"`
	// Guards, when set, gives this listener its own connection guards:
	// accept caps, slow-client deadlines, TLS handshake and HTTP/2
	// limits counted for its connections alone; a key left out (or 0)
	// takes the guards section's value. Nil (the default): the listener
	// shares the guards section's. The overload manager stays the
	// process's (guards.overload).
	Guards *ListenGuards `yaml:"guards"`
	// ProxyProtocol, when set, reads a PROXY protocol header (v1 or v2)
	// at the start of every connection from its trusted networks (the
	// L4 balancers in front), under its timeout: the client it names is
	// then the client for every layer (see proxyproto.go). A connection
	// from a trusted network without a valid header, or with a header
	// from anyone else, is refused. Default nil (off).
	ProxyProtocol *proxyproto.Config `yaml:"proxy_protocol"`
}

// ListenGuards are a listener's own connection guards: the guards
// section's conns, slowloris, tls and h2 keys, each 0 or left out taking
// the guards section's value.
type ListenGuards struct {
	Conns guard.ConnConfig `yaml:"conns"`
	Slow  guard.SlowConfig `yaml:"slowloris"`
	TLS   guard.TLSConfig  `yaml:"tls"`
	H2    guard.H2Config   `yaml:"h2"`
}

// Label names the listener in metrics, logs and redirect_to_https: its
// name, or its addr.
func (l Listen) Label() string {
	if l.Name != "" {
		return l.Name
	}
	return l.Addr
}

// Primary returns the first listener (a zero Listen when there is none).
func (ls Listeners) Primary() Listen {
	if len(ls) == 0 {
		return Listen{}
	}
	return ls[0]
}

// DefaultListen returns the defaults of a listener: 127.0.0.1:8080
// (loopback: exposing the gateway is a deliberate choice), engine auto,
// http2_engine nethttp.
func DefaultListen() Listen {
	return Listen{Addr: "127.0.0.1:8080", Engine: EngineAuto, HTTP2Engine: HTTP2EngineNetHTTP}
}

// Engines of listen.engine.
const (
	EngineAuto      = "auto"
	EngineGoroutine = "goroutine"
	EngineNetHTTP   = "nethttp"
)

// HTTP/2 engines of listen.http2_engine.
const (
	HTTP2EngineNetHTTP = "nethttp"
	HTTP2EngineNative  = "native"
)

// TLS is a listener's HTTPS: its certificates, PEM files read at start
// and again on every reload (SIGHUP, POST /v1/reload), one chosen per
// handshake by the name the client asks for (SNI). With acme, certificates
// are also obtained from an ACME CA (acme.go). See certs.go.
type TLS struct {
	// CertFile and KeyFile name one certificate and its key, relative
	// to the configuration file. With Certificates as well, this pair
	// comes first: it is the default.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Certificates are further certificates (or all of them), in order;
	// the first listed is the default, served to a client whose name
	// (SNI) no certificate names.
	Certificates []CertFiles `yaml:"certificates"`
	// WatchInterval is how often the certificate files are read again
	// to serve them when they changed (a renewal that sends no signal,
	// a Kubernetes secret); 0 turns it off (a reload still reads them).
	// Default 1m, range 1s to 24h.
	WatchInterval time.Duration `yaml:"watch_interval"`
	// ACME, when set, obtains and renews the certificates of its domains
	// from an ACME CA (acme.go); the files, if any, serve the other names.
	ACME *ACME `yaml:"acme"`

	// loaded is what Provision read from the files, in order.
	loaded []*certEntry
}

// ClientIP decides who the client of a request is, for every layer at
// once: the allow and deny lists, the shield, client_ip rate-limit keys
// and the login throttle all see the same client. Its keys are peer's
// (trusted_proxies, ipv6_prefix: peer.Config) and keyed's (networks:
// keyed.NetworkBudget).
type ClientIP struct {
	// Config is the resolver's: the opt-in trusted-proxy contract (empty,
	// the default, means the socket peer is the client; when it is set,
	// the allow and deny lists are also checked against the resolved
	// client of every request, 403 blocked, besides the socket peer at
	// accept) and the IPv6 grouping (a /64 by default).
	peer.Config `yaml:",inline"`
	// Networks bounds the share of every fail-closed table keyed by
	// client (the shield's peers, client_ip rate limits, the login
	// throttle and lockout) that the clients of one network may fill with
	// new keys, so that one /48 cannot lock everyone else out. Within one
	// entry lifetime, the clients of one network (of the resolved client)
	// may add at most Share of a table's capacity; beyond it their new
	// keys are refused like a full table (reason capacity) while other
	// networks' still get in.
	Networks keyed.NetworkBudget `yaml:"networks"`
}

// RequestHeaders are the gateway-wide rules for request headers, applied
// on every route before any policy.
type RequestHeaders struct {
	// Strip lists headers removed from every client request, in any
	// letter case and with "_" for "-". The default names the headers
	// that claim a client address (X-Real-IP, True-Client-IP, ...). The
	// forward-auth headers of every quota route and Idempotency-Replay
	// are always removed as well.
	Strip []string `yaml:"strip"`
}

// Shield configures the pre-authentication overload shield. It is off by
// default: its budgets are per process and sized for pre-authentication
// traffic. The client is decided by client_ip. The budgets are the
// shield's own (shield.Config: window, per_peer, global, max_peers);
// enabled, mode and refund_on_login are the gateway's wiring of it.
type Shield struct {
	Enabled bool `yaml:"enabled"`
	// Mode is enforce (default) or shadow: decisions are made, counted
	// (bulwark_would_reject_total) and logged, but nothing is refused.
	Mode          string `yaml:"mode"`
	shield.Config `yaml:",inline"`
	// RefundOnLogin gives back the unit a request took from the shield
	// (its client's and the global window) when it was a login attempt
	// with a password and the login route's upstream answered 2xx, so
	// that users behind one shared address are not starved by their own
	// successful logins.
	RefundOnLogin bool `yaml:"refund_on_login"`
}

// Route maps matching requests to an upstream through its policies.
// A nil policy is off.
type Route struct {
	Name     string `yaml:"name"` // unique; a metric label
	Match    Match  `yaml:"match"`
	Upstream string `yaml:"upstream"`
	// WebSocket forwards WebSocket upgrades on this route (default
	// false). Every other upgrade, h2c included, is always removed.
	WebSocket bool `yaml:"websocket"`
	// AllowClients (allow_clients) restricts the route to these clients
	// (addresses or CIDR prefixes, at most maxRouteAllow): any other
	// client, or one whose address is unknown, is answered 403 blocked
	// before the route's policies. The client is the one every layer
	// sees (the socket peer, or the trusted proxies' answer). Empty:
	// every client. For admin paths.
	AllowClients []string          `yaml:"allow_clients"`
	RateLimit    *ratelimit.Config `yaml:"rate_limit"` // the route's rate limit
	Login        *login.Policy     `yaml:"login"`      // the login throttle
	Quota        *quota.Config     `yaml:"quota"`      // the forward-auth quota
}

// Match selects requests. Path uses net/http.ServeMux pattern syntax
// ("/api/", "/items/{id}", "/files/{path...}", "/{$}") and is matched
// against the canonical form of the request path (decoded, dot segments
// resolved, ";" parameters dropped); the most specific matching route
// wins. By default letter case and a trailing slash do not matter, as in
// many frameworks, so a route's policies cover every spelling that
// reaches the same handler.
type Match struct {
	// The path pattern and its matching switches: package route's keys
	// and Validate.
	routematch.Pattern `yaml:",inline"`
	// AllowUnsafeEncoding lets this route serve paths holding %2F, %5C,
	// a raw backslash, %00 or another control byte, or a double encoding
	// (%252F); otherwise such a path is answered 400 invalid_path.
	AllowUnsafeEncoding bool `yaml:"allow_unsafe_encoding"`
}

// Metrics is the Prometheus listener.
type Metrics struct {
	// Addr is host:port of the /metrics listener; "" disables it.
	Addr string `yaml:"addr"`
}

// AccessLog is one structured line per request ("access" in the log):
// route, the layer that answered and why, status, duration, upstream, and
// a keyed client fingerprint (AES under the gateway's key, kept across
// restarts and shared by a cluster's replicas: the same client gets the
// same fingerprint in every line, only the gateway can turn it back into
// an address, to block it; see fingerprint.go). Never the address, the
// path, a username or a header value.
type AccessLog struct {
	// Mode is rejections (default: every answer a layer gave instead of
	// the upstream, shadow decisions included), all, or off.
	Mode string `yaml:"mode"`
	// Sample is the fraction of the other requests logged in mode all.
	Sample float64 `yaml:"sample"`
	// MaxPerSecond bounds the lines; the excess is dropped and counted
	// in bulwark_access_log_dropped_total.
	MaxPerSecond int `yaml:"max_per_second"`
}

// Log selects the log format and level.
type Log struct {
	Format string `yaml:"format"` // json or text
	Level  string `yaml:"level"`  // debug, info, warn or error
}

// Control is the control-plane API listener (allow/deny lists, status,
// reload). See package control.
//
// It stays the gateway's own section: it is wiring, not a layer's
// settings. enabled and addr are a listener the gateway opens (checked
// with the other listeners), token_file is read at provisioning, console
// mounts package console on the same listener, and addr and
// allowed_hosts go to both control.Config and console.Config, whose
// rules (control.HostCheck) Validate applies rather than repeats.
// control.Config itself is the handler's run-time configuration (the
// lists, the token, hooks, a clock): embedding it would put the token in
// a struct that is printed, and no file key maps to most of it.
type Control struct {
	// Enabled starts the API; default true.
	Enabled bool `yaml:"enabled"`
	// Addr is host:port; default 127.0.0.1:7922. A non-loopback address
	// needs a token.
	Addr string `yaml:"addr"`
	// TokenFile holds the bearer token (relative to the configuration
	// file). BULWARK_CONTROL_TOKEN is the alternative; not both.
	TokenFile string `yaml:"token_file"`
	// Console serves the operator console under /ui/ on this listener
	// (package console); default true. It needs a token (configured or
	// generated) and logs in with it.
	Console bool `yaml:"console"`
	// AllowedHosts are further names accepted in the Host header of the
	// API and the console (the machine's DNS name, a tunnel's), besides
	// loopback names and addr itself: "name" (no port, or addr's port) or
	// "name:port". At most 64; they need a token (token_file or
	// BULWARK_CONTROL_TOKEN). Reloadable.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// DefaultConfig returns the configuration every file starts from: each
// key a file leaves out takes the value here. It has no upstream and no
// route, so it does not validate as it is. The reasons for the numbers
// are in examples/bulwark.yaml, which documents every key.
func DefaultConfig() *Config {
	return &Config{
		Profile: Standalone,
		// Loopback: exposing the gateway is a deliberate choice.
		Listen: Listeners{DefaultListen()},
		Limits: host.Limits{
			MaxURLBytes:        host.DefaultMaxURLBytes,
			MaxHeaderBytes:     host.DefaultMaxHeaderBytes,
			MaxHeaders:         host.DefaultMaxHeaders,
			MaxRequestsPerConn: host.DefaultMaxRequestsPerConn,
			MaxInFlight:        4096,     // a proxy holds many slow requests
			MaxBodyBytes:       10 << 20, // uploads pass through
			RequestTimeout:     60 * time.Second,
			DrainTimeout:       host.DefaultDrainTimeout,
			ReadHeaderTimeout:  host.DefaultReadHeaderTimeout,
			IdleTimeout:        host.DefaultIdleTimeout,
			MaxResponseBytes:   host.DefaultMaxResponseBytes, // not a key
		},
		Guards: defaultGuards(),
		ClientIP: ClientIP{
			Config: peer.DefaultConfig(),
			// One network may take 1/16 of a table: one /48 full of
			// clients leaves 15/16 to everyone else.
			Networks: keyed.NetworkBudget{Share: keyed.DefaultNetworkShare, IPv4Prefix: keyed.DefaultIPv4Prefix, IPv6Prefix: keyed.DefaultIPv6Prefix},
		},
		RequestHeaders: RequestHeaders{Strip: append([]string(nil), DefaultStripHeaders...)},
		// Off: the shield's budgets are per process and sized for
		// pre-authentication traffic, not for a whole site.
		FrontControllers: routematch.DefaultFrontControllers(),
		Shield: Shield{
			Enabled:       false,
			Mode:          "enforce",
			Config:        shield.DefaultConfig(),
			RefundOnLogin: true,
		},
		Metrics:   Metrics{Addr: "127.0.0.1:7921"},
		AccessLog: AccessLog{Mode: "rejections", Sample: 1, MaxPerSecond: 1000},
		Log:       Log{Format: "json", Level: "info"},
		Tracing:   defaultTracing(),
		IPSets:    ipset.DefaultListsConfig(),
		Redis:     redisconn.Options{}.WithDefaults(),
		Global:    global.DefaultConfig(),
		RLS:       rls.Listener{MaxKeys: global.DefaultCapacity},
		XDP:       xdpOff(),
		Control:   Control{Enabled: true, Addr: control.DefaultAddr, Console: true},
	}
}

// DefaultUpstream returns the defaults of an upstreams item: the proxy's
// timeouts, one retry and 256 idle connections per target (a gateway
// keeps more than the proxy's default). Name and Targets have no default.
// In a file, a timeout left out is also lowered to the upstream's total
// when that is smaller.
func DefaultUpstream() proxy.Upstream {
	return proxy.Upstream{
		Timeouts:            proxy.Timeouts{}.WithDefaults(),
		Retries:             1,
		MaxIdleConnsPerHost: 256,
	}
}

// defaultReason is the reason of a static list entry that gives none.
const defaultReason = "config"

// Line returns the line of the configuration file that set the key at
// path (e.g. "routes[1].rate_limit"), of its nearest parent, or 0.
func (c *Config) Line(path string) int {
	return c.lines.Of(path)
}

// Override replaces the first listener's address (listen.addr, or
// listen[0].addr) and metrics.addr from the command line ("" keeps the
// configured value; metrics "off" disables the listener).
func (c *Config) Override(listen, metrics string) error {
	if listen != "" {
		if err := conf.HostPort(listen); err != nil {
			return fmt.Errorf("gateway: --listen %q: %v", truncate(listen), err)
		}
		if len(c.Listen) == 0 {
			c.Listen = Listeners{DefaultListen()}
		}
		c.Listen[0].Addr = listen
	}
	switch metrics {
	case "":
	case "off":
		c.Metrics.Addr = ""
	default:
		if err := conf.HostPort(metrics); err != nil {
			return fmt.Errorf("gateway: --metrics-listen %q: %v", truncate(metrics), err)
		}
		c.Metrics.Addr = metrics
	}
	return nil
}

// OverrideControl replaces control.addr from the command line: "" keeps
// the configured value, "off" disables the API. An address needs the API
// enabled in the file (its token was read only then), and a non-loopback
// one needs a token.
func (c *Config) OverrideControl(addr string) error {
	switch addr {
	case "":
		return nil
	case "off":
		c.Control.Enabled = false
		return nil
	}
	if err := conf.HostPort(addr); err != nil {
		return fmt.Errorf("gateway: --control-listen %q: %v", truncate(addr), err)
	}
	if !c.Control.Enabled {
		return fmt.Errorf("gateway: --control-listen: control.enabled is false in the configuration")
	}
	if control.CheckAddr(addr, c.controlToken() != "") != nil {
		return fmt.Errorf("gateway: --control-listen %q is not a loopback address; set control.token_file or %s to expose the API", truncate(addr), EnvControlToken)
	}
	c.Control.Addr = addr
	return nil
}
