package peer

import (
	"errors"
	"net/netip"

	"github.com/bulwarkhq/bulwark/conf"
)

// Header names of [ProxyConfig.Header], as a configuration file writes
// them.
const (
	HeaderXForwardedFor = "x-forwarded-for"
	HeaderForwarded     = "forwarded"
)

// ProxyConfig is the trusted-proxy contract in the text form a
// configuration file writes (the gateway's client_ip.trusted_proxies):
// CIDRs and Hops set together turn it on; both empty trust no forwarding
// header. [ProxyConfig.TrustedProxies] parses it into the form a
// [Resolver] uses.
type ProxyConfig struct {
	// CIDRs (cidrs) are the networks of your own proxies, each a CIDR
	// prefix or a single address (its full-length prefix); host bits are
	// cleared, IPv4-mapped IPv6 is refused. At most MaxTrustedCIDRs (256).
	CIDRs []string `yaml:"cidrs"`
	// Hops (hops) is the client's position from the right of the
	// forwarding header, [0, MaxHops] (16); 0 only without CIDRs.
	Hops int `yaml:"hops"`
	// Header (header) is HeaderXForwardedFor (the default) or
	// HeaderForwarded (RFC 7239).
	Header string `yaml:"header"`
}

// WithDefaults returns pc with an empty Header set to
// HeaderXForwardedFor.
func (pc ProxyConfig) WithDefaults() ProxyConfig {
	if pc.Header == "" {
		pc.Header = HeaderXForwardedFor
	}
	return pc
}

// Validate reports every invalid setting of pc by key, as it is: the
// hop count, the header, the number of CIDRs and each one, and that
// cidrs and hops are set together. The error is a conf.Errors wrapping
// ErrInvalidProxies.
func (pc ProxyConfig) Validate() error {
	f := conf.Check{Kind: ErrInvalidProxies}
	f.Int("hops", int64(pc.Hops), 0, MaxHops)
	f.OneOf("header", pc.Header, HeaderXForwardedFor, HeaderForwarded)
	if len(pc.CIDRs) > MaxTrustedCIDRs {
		f.Add("cidrs", "%d entries, at most %d", len(pc.CIDRs), MaxTrustedCIDRs)
	}
	for i, c := range pc.CIDRs {
		if _, err := parsePrefix(c); err != nil {
			f.Add(conf.Index("cidrs", i), "%q: %v", c, err)
		}
	}
	if (len(pc.CIDRs) == 0) != (pc.Hops == 0) {
		f.Add("", "cidrs and hops are set together (trusting forwarded addresses needs both the proxies and the hop count)")
	}
	return f.Err()
}

// Everyone returns the indexes of the CIDRs that hold every address of
// their family (0.0.0.0/0, ::/0). Such an entry is valid but trusts every
// client as a proxy: any client can then name its own address in the
// forwarding header, and every per-client limit and list is keyed by
// what the client wrote. The gateway warns about each one.
func (pc ProxyConfig) Everyone() []int {
	var idx []int
	for i, c := range pc.CIDRs {
		if p, err := parsePrefix(c); err == nil && p.Bits() == 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

// TrustedProxies returns the contract pc describes, or nil when it
// trusts no proxy (no CIDRs). Call it on a pc that validates: a CIDR
// that does not parse is left out.
func (pc ProxyConfig) TrustedProxies() *TrustedProxies {
	if len(pc.CIDRs) == 0 {
		return nil
	}
	tp := &TrustedProxies{Hops: pc.Hops}
	if pc.Header == HeaderForwarded {
		tp.Header = Forwarded
	}
	for _, c := range pc.CIDRs {
		if p, err := parsePrefix(c); err == nil {
			tp.CIDRs = append(tp.CIDRs, p)
		}
	}
	return tp
}

// parsePrefix parses a CIDR prefix or a single address (its full-length
// prefix), refusing IPv4-mapped IPv6, and returns it masked.
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
