package peer

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/bulwarkhq/bulwark/conf"
)

// Hard bounds of the trusted-proxy contract.
const (
	// MaxHops is the largest accepted [TrustedProxies.Hops].
	MaxHops = 16
	// MaxTrustedCIDRs is the largest accepted number of proxy networks.
	MaxTrustedCIDRs = 256
	// MaxChainBytes is how many bytes of forwarding header a [Resolver]
	// examines, counted from the right. A chain that does not yield the
	// wanted entry within it maps to the unknown peer.
	MaxChainBytes = 8 << 10
	// MaxChainLines is how many header lines (fields of the same name) a
	// [Resolver] examines, counted from the last one.
	MaxChainLines = 64
	// maxElementLen bounds one Forwarded element ("for=...;proto=...").
	maxElementLen = 256
)

// Header names the forwarding header a trusted proxy writes.
type Header int

const (
	// XForwardedFor is the de-facto "X-Forwarded-For: client, proxy1"
	// list. It is the zero value.
	XForwardedFor Header = iota
	// Forwarded is the RFC 7239 "Forwarded: for=client, for=proxy1"
	// list; only the for= parameter is used.
	Forwarded
)

// String returns the header's field name.
func (h Header) String() string {
	switch h {
	case XForwardedFor:
		return "X-Forwarded-For"
	case Forwarded:
		return "Forwarded"
	}
	return fmt.Sprintf("Header(%d)", int(h))
}

// MarshalText implements encoding.TextMarshaler with the field name.
func (h Header) MarshalText() ([]byte, error) {
	if h != XForwardedFor && h != Forwarded {
		return nil, fmt.Errorf("%w: unknown header %d", ErrInvalidProxies, int(h))
	}
	return []byte(h.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler so configuration
// files can name the header: "X-Forwarded-For" or "Forwarded" (any case).
func (h *Header) UnmarshalText(text []byte) error {
	switch s := string(text); {
	case strings.EqualFold(s, "X-Forwarded-For"):
		*h = XForwardedFor
	case strings.EqualFold(s, "Forwarded"):
		*h = Forwarded
	default:
		return fmt.Errorf("%w: header %s, must be X-Forwarded-For or Forwarded", ErrInvalidProxies, strconv.Quote(cut(s, 32)))
	}
	return nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// TrustedProxies is the opt-in contract for deployments behind reverse
// proxies. It is off unless a [Resolver] is built from a non-nil value.
//
// A request is attributed to a forwarded client only when its socket peer
// lies inside one of CIDRs. The client is then the entry exactly Hops
// positions from the right of the forwarding list named by Header (all
// fields of that name joined in order, empty list elements skipped): with
// one proxy in front of the service Hops is 1 (the entry that proxy
// appended), with a CDN in front of that proxy it is 2, and so on. Entries
// further left were written by the client and are never read. A list that
// is shorter than Hops, or whose examined part is malformed, maps to the
// unknown peer; so does a Forwarded entry of "unknown" or an obfuscated
// identifier. Every proxy in the chain must be configured to append to the
// same header; a proxy that overwrites or forwards it unchanged breaks the
// count.
type TrustedProxies struct {
	// CIDRs are the networks of the proxies directly in front of the
	// service. 1 to MaxTrustedCIDRs entries; IPv4-mapped IPv6 prefixes are
	// rejected (write them in IPv4 form).
	CIDRs []netip.Prefix
	// Hops is the fixed number of entries counted from the right,
	// 1 to MaxHops.
	Hops int
	// Header selects the list to read; the zero value is X-Forwarded-For.
	Header Header
}

// ErrInvalidProxies is wrapped by every error of [TrustedProxies.Validate].
var ErrInvalidProxies = errors.New("peer: invalid trusted proxies")

// Validate reports whether tp can be used. The error names the setting
// and the allowed range.
func (tp *TrustedProxies) Validate() error {
	if n := len(tp.CIDRs); n < 1 || n > MaxTrustedCIDRs {
		return fmt.Errorf("%w: CIDRs has %d entries, must be 1 to %d", ErrInvalidProxies, n, MaxTrustedCIDRs)
	}
	for i, p := range tp.CIDRs {
		if !p.IsValid() {
			return fmt.Errorf("%w: CIDRs[%d] is not a valid prefix", ErrInvalidProxies, i)
		}
		if p.Addr().Is4In6() {
			return fmt.Errorf("%w: CIDRs[%d] is an IPv4-mapped IPv6 prefix, write it in IPv4 form", ErrInvalidProxies, i)
		}
	}
	if tp.Hops < 1 || tp.Hops > MaxHops {
		return fmt.Errorf("%w: Hops is %d, must be 1 to %d", ErrInvalidProxies, tp.Hops, MaxHops)
	}
	if tp.Header != XForwardedFor && tp.Header != Forwarded {
		return fmt.Errorf("%w: Header is %v, must be XForwardedFor or Forwarded", ErrInvalidProxies, tp.Header)
	}
	return nil
}

// IPv6 grouping bounds.
const (
	// DefaultIPv6Prefix is the prefix length IPv6 clients are grouped by:
	// one /64 is what a single subscriber, VM or container usually gets,
	// and it holds 2^64 addresses, so counting each /128 separately would
	// hand one client unlimited budgets.
	DefaultIPv6Prefix = 64
	// MinIPv6Prefix and MaxIPv6Prefix bound Config.IPv6Prefix.
	MinIPv6Prefix = 48
	MaxIPv6Prefix = 128
)

// Config configures a [Resolver]. Its yaml tags are the keys of the
// gateway's client_ip section (whose networks key is keyed's). Zero
// fields mean the defaults once [Config.WithDefaults] is applied, which
// New does; [Config.Validate] checks the values as they are.
type Config struct {
	// TrustedProxies (trusted_proxies) is the trusted-proxy contract;
	// empty (the default) trusts no forwarding header: the socket peer
	// is the client. See [TrustedProxies] for what it means.
	TrustedProxies ProxyConfig `yaml:"trusted_proxies"`
	// IPv6Prefix (ipv6_prefix) is the prefix length IPv6 clients are
	// grouped by for limiting (see [Resolver.ClientAddr]): every address
	// of one /64 (the default, DefaultIPv6Prefix) is one client. Range
	// [48, 128] (MinIPv6Prefix, MaxIPv6Prefix). IPv4 clients are never
	// grouped.
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// DefaultConfig returns the defaults: no trusted proxy (header
// x-forwarded-for when one is set) and DefaultIPv6Prefix.
func DefaultConfig() Config {
	return Config{TrustedProxies: ProxyConfig{Header: HeaderXForwardedFor}, IPv6Prefix: DefaultIPv6Prefix}
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.IPv6Prefix == 0 {
		c.IPv6Prefix = DefaultIPv6Prefix
	}
	c.TrustedProxies = c.TrustedProxies.WithDefaults()
	return c
}

// Validate reports every invalid setting of c by key, as it is; the
// error is a conf.Errors wrapping ErrInvalidProxies.
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrInvalidProxies}
	f.Sub("trusted_proxies", c.TrustedProxies.Validate())
	f.Int("ipv6_prefix", int64(c.IPv6Prefix), MinIPv6Prefix, MaxIPv6Prefix)
	return f.Err()
}

// Resolver finds the client address of a request. A nil *Resolver uses
// the socket peer only and groups IPv6 by DefaultIPv6Prefix. A Resolver is
// immutable and safe for concurrent use.
type Resolver struct {
	cidrs  []netip.Prefix
	hops   int
	header string
	parse  func(lines []string, hops int) (netip.Addr, bool)
	v6bits int // 0 in a nil or legacy resolver: DefaultIPv6Prefix
}

// NewResolver returns a resolver for the given contract with the default
// IPv6 grouping. With tp == nil it trusts no header at all. The CIDRs are
// copied. Errors name the setting and its range.
func NewResolver(tp *TrustedProxies) (*Resolver, error) {
	return newResolver(tp, DefaultIPv6Prefix)
}

// New returns a resolver for cfg, its zero fields set to the defaults.
// The error is [Config.Validate]'s.
func New(cfg Config) (*Resolver, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newResolver(cfg.TrustedProxies.TrustedProxies(), cfg.IPv6Prefix)
}

func newResolver(tp *TrustedProxies, bits int) (*Resolver, error) {
	if tp == nil {
		return &Resolver{v6bits: bits}, nil
	}
	if err := tp.Validate(); err != nil {
		return nil, err
	}
	r := &Resolver{
		cidrs:  make([]netip.Prefix, len(tp.CIDRs)),
		hops:   tp.Hops,
		header: tp.Header.String(),
		parse:  fromXForwardedFor,
		v6bits: bits,
	}
	for i, p := range tp.CIDRs {
		r.cidrs[i] = p.Masked()
	}
	if tp.Header == Forwarded {
		r.parse = fromForwarded
	}
	return r, nil
}

// Client returns the normalized client address of req, or ok == false
// for the shared unknown peer. Without a trusted-proxy contract, or when
// the socket peer is not inside the trusted networks, it is
// Normalize(req.RemoteAddr) and no header is looked at. The address is
// exact (not grouped): use it for allow and deny lists.
func (r *Resolver) Client(req *http.Request) (netip.Addr, bool) {
	a, ok := Normalize(req.RemoteAddr)
	if r == nil || len(r.cidrs) == 0 || !ok || !r.trusts(a) {
		return a, ok
	}
	return r.parse(req.Header[r.header], r.hops)
}

// ClientAddr is Client grouped for limiting (see [Resolver.Group]): every
// IPv6 address of one /64 (by default) is the same client. Limiters key on
// this address, so one subscriber cannot hold many budgets.
func (r *Resolver) ClientAddr(req *http.Request) (netip.Addr, bool) {
	a, ok := r.Client(req)
	if !ok {
		return a, ok
	}
	return r.Group(a), true
}

// Group returns the address limiters count a client by: an IPv4 address
// unchanged, an IPv6 address masked to the configured prefix length.
// It does not allocate.
func (r *Resolver) Group(a netip.Addr) netip.Addr {
	bits := DefaultIPv6Prefix
	if r != nil && r.v6bits != 0 {
		bits = r.v6bits
	}
	if !a.Is6() || bits >= 128 {
		return a
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a
	}
	return p.Addr()
}

// IPv6Prefix returns the prefix length IPv6 clients are grouped by.
func (r *Resolver) IPv6Prefix() int {
	if r == nil || r.v6bits == 0 {
		return DefaultIPv6Prefix
	}
	return r.v6bits
}

// TrustsPeer reports whether req's socket peer is one of the trusted
// proxies, i.e. whether its forwarding headers are read. A proxy in front
// of the upstream uses it to append to forwarding headers only when they
// come from a trusted proxy, and to replace them otherwise.
func (r *Resolver) TrustsPeer(req *http.Request) bool {
	if r == nil || len(r.cidrs) == 0 {
		return false
	}
	a, ok := Normalize(req.RemoteAddr)
	return ok && r.trusts(a)
}

// TrustsAddr reports whether the socket peer a is one of the trusted
// proxies (TrustsPeer for an address already parsed).
func (r *Resolver) TrustsAddr(a netip.Addr) bool {
	if r == nil || len(r.cidrs) == 0 || !a.IsValid() {
		return false
	}
	return r.trusts(canonical(a))
}

// trusts reports whether a lies inside one of the trusted networks.
func (r *Resolver) trusts(a netip.Addr) bool {
	for _, p := range r.cidrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromXForwardedFor returns the entry hops positions from the right of the
// X-Forwarded-For list made of lines, scanning right to left and never
// beyond MaxChainBytes / MaxChainLines. Each entry examined must be an
// address (with or without port); empty list elements are skipped.
func fromXForwardedFor(lines []string, hops int) (netip.Addr, bool) {
	found, budget := 0, MaxChainBytes
	for li, n := len(lines)-1, 0; li >= 0; li, n = li-1, n+1 {
		if n == MaxChainLines {
			return netip.Addr{}, false
		}
		line := lines[li]
		end := len(line)
		for i := len(line) - 1; i >= -1; i-- {
			if i >= 0 {
				if budget--; budget < 0 {
					return netip.Addr{}, false
				}
				if line[i] != ',' {
					continue
				}
			}
			elem := trimOWS(line[i+1 : end])
			end = i
			if elem == "" {
				continue
			}
			a, ok := Normalize(elem)
			if !ok {
				return netip.Addr{}, false
			}
			if found++; found == hops {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// fromForwarded is fromXForwardedFor for the RFC 7239 Forwarded list. Each
// element examined must be well formed and carry exactly one for=
// parameter; quoted-pair escapes are not accepted in the examined part.
func fromForwarded(lines []string, hops int) (netip.Addr, bool) {
	found, budget := 0, MaxChainBytes
	for li, n := len(lines)-1, 0; li >= 0; li, n = li-1, n+1 {
		if n == MaxChainLines {
			return netip.Addr{}, false
		}
		line := lines[li]
		end := len(line)
		inQuote := false
		for i := len(line) - 1; i >= -1; i-- {
			if i >= 0 {
				if budget--; budget < 0 {
					return netip.Addr{}, false
				}
				switch c := line[i]; {
				case c == '"':
					inQuote = !inQuote
					continue
				case c == '\\':
					return netip.Addr{}, false
				case c != ',' || inQuote:
					continue
				}
			} else if inQuote {
				return netip.Addr{}, false
			}
			elem := trimOWS(line[i+1 : end])
			end = i
			if elem == "" {
				continue
			}
			a, ok, valid := forwardedFor(elem)
			if !valid {
				return netip.Addr{}, false
			}
			if found++; found == hops {
				return a, ok
			}
		}
	}
	return netip.Addr{}, false
}

// forwardedFor parses one Forwarded element (pairs separated by ';') and
// returns its for= node. valid is false when the element is malformed or
// has no or several for= parameters; ok is false when the node is not an
// address ("unknown", an obfuscated identifier).
func forwardedFor(elem string) (a netip.Addr, ok, valid bool) {
	if len(elem) > maxElementLen {
		return netip.Addr{}, false, false
	}
	var node string
	seen := false
	for len(elem) > 0 {
		// Cut the next pair at a ';' outside quotes.
		j, inQuote := 0, false
		for ; j < len(elem); j++ {
			if elem[j] == '"' {
				inQuote = !inQuote
			} else if elem[j] == ';' && !inQuote {
				break
			}
		}
		if inQuote {
			return netip.Addr{}, false, false
		}
		pair := trimOWS(elem[:j])
		if j < len(elem) {
			elem = elem[j+1:]
		} else {
			elem = ""
		}
		if pair == "" {
			continue
		}
		eq := 0
		for eq < len(pair) && pair[eq] != '=' {
			eq++
		}
		if eq == 0 || eq == len(pair) || !isToken(pair[:eq]) {
			return netip.Addr{}, false, false
		}
		value, isValue := forwardedValue(pair[eq+1:])
		if !isValue {
			return netip.Addr{}, false, false
		}
		if asciiEqualFold(pair[:eq], "for") {
			if seen {
				return netip.Addr{}, false, false
			}
			seen, node = true, value
		}
	}
	if !seen {
		return netip.Addr{}, false, false
	}
	a, ok = forwardedNode(node)
	return a, ok, true
}

// forwardedValue unquotes a token or quoted-string value. Quoted-pair
// escapes were rejected by the caller.
func forwardedValue(v string) (string, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
		for i := 0; i < len(v); i++ {
			if c := v[i]; c == '"' || (c < ' ' && c != '\t') || c == 0x7f {
				return "", false
			}
		}
		return v, true
	}
	return v, isToken(v)
}

// forwardedNode parses an RFC 7239 node: IPv4 or "[IPv6]", optionally with
// a numeric or obfuscated port. "unknown" and obfuscated identifiers are
// valid but not addresses.
func forwardedNode(n string) (netip.Addr, bool) {
	if n == "" {
		return netip.Addr{}, false
	}
	host, port := n, ""
	if n[0] == '[' {
		end := 1
		for end < len(n) && n[end] != ']' {
			end++
		}
		if end == len(n) {
			return netip.Addr{}, false
		}
		host, port = n[1:end], n[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || !validNodePort(port) {
			return netip.Addr{}, false
		}
		return canonical(a), true
	}
	for i := 0; i < len(n); i++ {
		if n[i] == ':' {
			host, port = n[:i], n[i:]
			break
		}
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() || !validNodePort(port) {
		return netip.Addr{}, false
	}
	return a, true
}

// validNodePort accepts "", ":1234" (1 to 5 digits, at most 65535) or an obfuscated port
// ":_abc" (ALPHA / DIGIT / "." / "_" / "-").
func validNodePort(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != ':' || len(p) < 2 {
		return false
	}
	p = p[1:]
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	if len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) {
			continue
		}
		switch c {
		case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
			continue
		}
		return false
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func asciiEqualFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
