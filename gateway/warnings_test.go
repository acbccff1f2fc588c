package gateway

import (
	"strings"
	"testing"
)

// TestTrustEveryoneWarning: trusted_proxies 0.0.0.0/0 or ::/0 is valid
// but trusts every client to name its own address; check and serve warn
// about each such entry by key, and about no other.
func TestTrustEveryoneWarning(t *testing.T) {
	const y = `
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
client_ip:
  trusted_proxies: {cidrs: ["10.0.0.0/8", "0.0.0.0/0", "::/0", "192.0.2.7"], hops: 1}
`
	cfg, err := Parse("test.yaml", []byte(y), env().get)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range cfg.Warnings() {
		got = append(got, w.String())
	}
	if len(got) != 2 || !strings.Contains(got[0], "test.yaml:5: client_ip.trusted_proxies.cidrs[1]: 0.0.0.0/0 trusts every client") ||
		!strings.Contains(got[1], "client_ip.trusted_proxies.cidrs[2]: ::/0 trusts every client") || !strings.Contains(got[0], "x-forwarded-for") {
		t.Fatalf("warnings:\n%s", strings.Join(got, "\n"))
	}
}
