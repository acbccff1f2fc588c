package peer

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/conf"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // the whole error, "" for valid
	}{
		{"defaults", DefaultConfig(), ""},
		{"proxies", Config{TrustedProxies: ProxyConfig{CIDRs: []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.1"}, Hops: MaxHops, Header: HeaderForwarded}, IPv6Prefix: MaxIPv6Prefix}, ""},
		{"zero is not the default", Config{},
			`peer: invalid trusted proxies: trusted_proxies.header: "": want x-forwarded-for or forwarded; ipv6_prefix: 0 out of range [48, 128]`},
		{"ipv6 prefix", Config{TrustedProxies: ProxyConfig{Header: HeaderXForwardedFor}, IPv6Prefix: 32},
			"peer: invalid trusted proxies: ipv6_prefix: 32 out of range [48, 128]"},
		{"every proxy setting", Config{TrustedProxies: ProxyConfig{CIDRs: []string{"10.0.0.0/8", "10.0.0.0/33", "::ffff:10.0.0.0/104"}, Hops: 17, Header: "x-real-ip"}, IPv6Prefix: 64},
			`peer: invalid trusted proxies: trusted_proxies.hops: 17 out of range [0, 16]; trusted_proxies.header: "x-real-ip": want x-forwarded-for or forwarded; ` +
				`trusted_proxies.cidrs[1]: "10.0.0.0/33": not an address or CIDR prefix; trusted_proxies.cidrs[2]: "::ffff:10.0.0.0/104": IPv4-mapped IPv6 prefix; write it in IPv4 form`},
		{"cidrs without hops", Config{TrustedProxies: ProxyConfig{CIDRs: []string{"10.0.0.0/8"}, Header: HeaderXForwardedFor}, IPv6Prefix: 64},
			"peer: invalid trusted proxies: trusted_proxies: cidrs and hops are set together (trusting forwarded addresses needs both the proxies and the hop count)"},
		{"hops without cidrs", Config{TrustedProxies: ProxyConfig{Hops: 1, Header: HeaderXForwardedFor}, IPv6Prefix: 64},
			"peer: invalid trusted proxies: trusted_proxies: cidrs and hops are set together"},
		{"too many cidrs", Config{TrustedProxies: ProxyConfig{CIDRs: make([]string, MaxTrustedCIDRs+1), Hops: 1, Header: HeaderXForwardedFor}, IPv6Prefix: 64},
			"peer: invalid trusted proxies: trusted_proxies.cidrs: 257 entries, at most 256; trusted_proxies.cidrs[0]: "},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		var es conf.Errors
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.Is(err, ErrInvalidProxies) || !errors.As(err, &es) {
			t.Errorf("%s: Validate = %v\n  want %s", tt.name, err, tt.want)
		}
	}
}

// TestNewAppliesDefaults checks that New fills the zero fields (the
// header, the IPv6 grouping) and refuses what Validate refuses.
func TestNewAppliesDefaults(t *testing.T) {
	r, err := New(Config{TrustedProxies: ProxyConfig{CIDRs: []string{"10.0.0.0/8"}, Hops: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req := &http.Request{RemoteAddr: "10.1.2.3:5", Header: http.Header{"X-Forwarded-For": {"2001:db8:1:2:3:4:5:6"}}}
	if a, ok := r.ClientAddr(req); !ok || a != netip.MustParseAddr("2001:db8:1:2::") {
		t.Fatalf("ClientAddr = %v, %v", a, ok)
	}
	if _, err := New(Config{TrustedProxies: ProxyConfig{CIDRs: []string{"10.0.0.0/8"}}}); !errors.Is(err, ErrInvalidProxies) {
		t.Fatalf("cidrs without hops: %v", err)
	}
}

func TestProxyConfigTrustedProxies(t *testing.T) {
	if tp := (ProxyConfig{Header: HeaderForwarded}).TrustedProxies(); tp != nil {
		t.Fatalf("no cidrs: %+v", tp)
	}
	tp := ProxyConfig{CIDRs: []string{"10.1.2.3/8", "192.0.2.1", "2001:db8::1/32"}, Hops: 2, Header: HeaderForwarded}.TrustedProxies()
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/32")}
	if tp == nil || tp.Hops != 2 || tp.Header != Forwarded || len(tp.CIDRs) != 3 || tp.CIDRs[0] != want[0] || tp.CIDRs[1] != want[1] || tp.CIDRs[2] != want[2] {
		t.Fatalf("TrustedProxies = %+v", tp)
	}
	if err := tp.Validate(); err != nil {
		t.Fatal(err)
	}
	if tp := (ProxyConfig{CIDRs: []string{"10.0.0.0/8"}, Hops: 1, Header: HeaderXForwardedFor}).TrustedProxies(); tp.Header != XForwardedFor {
		t.Fatalf("header = %v", tp.Header)
	}
}
