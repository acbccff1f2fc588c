package proxyproto

import (
	"errors"
	"net/netip"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
)

// ErrInvalidConfig is the kind of every error [Config.Validate] and
// [New] return: a conf.Errors whose paths are the keys below
// (trusted, timeout).
var ErrInvalidConfig = errors.New("proxyproto: invalid config")

// Bounds of Config.
const (
	// DefaultTimeout is Config.Timeout's default: a balancer sends its
	// header with the connection's first bytes, so a few seconds is
	// already generous.
	DefaultTimeout = 3 * time.Second
	// MinTimeout and MaxTimeout bound Config.Timeout.
	MinTimeout = 10 * time.Millisecond
	MaxTimeout = 30 * time.Second
	// MaxTrusted bounds the entries of Config.Trusted.
	MaxTrusted = 256
)

// Config is the PROXY protocol policy of a listener. The yaml tags are
// the configuration keys (the gateway's listen.proxy_protocol).
type Config struct {
	// Trusted (trusted) are the networks of the balancers that send
	// PROXY protocol headers: CIDR prefixes or single addresses, at
	// least one and at most MaxTrusted. A connection from one of them
	// must start with a valid header; a header from anyone else is
	// refused.
	Trusted []string `yaml:"trusted"`
	// Timeout (timeout) bounds the wait for a trusted connection's
	// header, from accept. Default 3 s, range [10 ms, 30 s].
	Timeout time.Duration `yaml:"timeout"`
}

// WithDefaults returns c with a zero Timeout set to DefaultTimeout.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports every invalid setting of c (defaults applied) by
// key. The error is a conf.Errors wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.WithDefaults()
	f := conf.Check{Kind: ErrInvalidConfig}
	f.Duration("timeout", c.Timeout, MinTimeout, MaxTimeout)
	switch {
	case len(c.Trusted) == 0:
		f.Add("trusted", "is required: the networks of the balancers that send the header")
	case len(c.Trusted) > MaxTrusted:
		f.Add("trusted", "%d entries, at most %d", len(c.Trusted), MaxTrusted)
	}
	for i, s := range c.Trusted {
		if _, err := parsePrefix(s); err != nil {
			f.Add(conf.Index("trusted", i), "%q: %v", s, err)
		}
	}
	return f.Err()
}

// Everyone returns the indexes of the Trusted entries that hold every
// address of their family (0.0.0.0/0, ::/0): valid, but then any client
// may name any address in a header of its own.
func (c Config) Everyone() []int {
	var idx []int
	for i, s := range c.Trusted {
		if p, err := parsePrefix(s); err == nil && p.Bits() == 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

// parsePrefix parses a CIDR prefix or a single address (its full-length
// prefix), refusing IPv4-mapped IPv6 and zones, and returns it masked.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("not an address or CIDR prefix")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, errors.New("IPv4-mapped IPv6 prefix; write it in IPv4 form")
	}
	return p.Masked(), nil
}
