package gateway

import "testing"

// TestUnresolvedClientHasItsOwnReason: behind a trusted proxy, with the
// lists in use, a request from the balancer that names no client (no
// X-Forwarded-For) is refused as before (403 blocked, fail closed), but
// counted under its own reason, unresolved_client, not under deny_client,
// the reason of a client really on the deny list.
func TestUnresolvedClientHasItsOwnReason(t *testing.T) {
	engines(t, testUnresolvedClientHasItsOwnReason)
}

func testUnresolvedClientHasItsOwnReason(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, `
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
client_ip:
  trusted_proxies: {cidrs: ["127.0.0.0/8"], hops: 1}
ipsets: {deny: ["203.0.113.0/24"]}
`, map[string]string{"APP": up.URL}, gwOpts{})
	if r := do(t, "GET", tg.url+"/", nil); r.status != 403 || r.code(t) != "blocked" {
		t.Fatalf("no X-Forwarded-For: %d %s, want 403 blocked", r.status, r.body)
	}
	if r := do(t, "GET", tg.url+"/", nil, "X-Forwarded-For", "203.0.113.9"); r.status != 403 {
		t.Fatalf("denied client: %d", r.status)
	}
	if r := do(t, "GET", tg.url+"/", nil, "X-Forwarded-For", "198.51.100.9"); r.status != 200 {
		t.Fatalf("other client: %d", r.status)
	}
	un := tg.counter(t, "bulwark_rejections_total", "layer", "ipset", "reason", "unresolved_client")
	den := tg.counter(t, "bulwark_rejections_total", "layer", "ipset", "reason", "deny_client")
	if un != 1 || den != 1 {
		t.Fatalf("rejections: unresolved_client %v, deny_client %v; want 1 and 1", un, den)
	}
}
