package gateway

import (
	"net"
	"strings"
	"testing"
)

// publicListener is a loopback listener that reports the unspecified
// address, as a listener bound to every interface does (tests talk to
// loopback only).
type publicListener struct{ net.Listener }

func (l publicListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4zero, Port: l.Listener.Addr().(*net.TCPAddr).Port}
}

const addrCapsConfig = `
upstreams:
  - {name: app, targets: ["http://127.0.0.1:1"]}
routes:
  - {name: all, match: {path: /}, upstream: app}
control: {enabled: false}
`

// A listener other hosts reach, with the guards' per-address caps on
// (the default), logs once at start that the caps count the address
// that connects (pointing to the PROXY protocol), naming the caps; not
// again on a reload, and not at all on loopback, without guards or with
// listen.proxy_protocol (the caps then count the client it names).
func TestAddrCapsLoggedOnceForPublicListener(t *testing.T) {
	public := func(ln net.Listener) net.Listener { return publicListener{ln} }
	tg := startGateway(t, addrCapsConfig, nil, gwOpts{wrap: public})
	cfg, err := Parse("test.yaml", []byte(addrCapsConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	logs := tg.logs.String()
	if n := strings.Count(logs, "per-address connection caps"); n != 1 {
		t.Fatalf("the per-address caps logged %d times, want once:\n%s", n, logs)
	}
	for _, want := range []string{`"level":"INFO"`, "PROXY protocol", `"accept_rate_per_addr":300`, `"max_per_addr":256`} {
		line := logs[strings.Index(logs[:strings.Index(logs, "per-address connection caps")], "\n")+1:]
		line = line[:strings.Index(line, "\n")]
		if !strings.Contains(line, want) {
			t.Errorf("the log line lacks %s: %s", want, line)
		}
	}

	// Behind a trusted proxy: a warning.
	lb := startGateway(t, addrCapsConfig+"client_ip: {trusted_proxies: {cidrs: [10.0.0.0/8], hops: 1}}\n", nil, gwOpts{wrap: public})
	if logs := lb.logs.String(); !strings.Contains(logs, `"level":"WARN","msg":"guards: the per-address connection caps`) {
		t.Errorf("behind trusted proxies, want a warning:\n%s", logs)
	}

	// Loopback, or no guards: nothing to say.
	for name, tg := range map[string]*testGateway{
		"loopback":       startGateway(t, addrCapsConfig, nil, gwOpts{}),
		"no guards":      startGateway(t, addrCapsConfig+"guards: {enabled: false}\n", nil, gwOpts{wrap: public}),
		"proxy protocol": startGateway(t, addrCapsConfig+"listen: {proxy_protocol: {trusted: [10.0.0.0/8]}}\n", nil, gwOpts{wrap: public}),
	} {
		if logs := tg.logs.String(); strings.Contains(logs, "per-address connection caps") {
			t.Errorf("%s: logged the per-address caps:\n%s", name, logs)
		}
	}
}
