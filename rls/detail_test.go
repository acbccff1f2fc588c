package rls_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/rls"
)

const detailConfig = `
domain: edge
descriptors:
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 198.51.100.7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /login
    descriptors:
      - key: user
        detailed_metric: true
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// details returns the server's detailed_metric counters as
// "domain descriptor result=n" lines.
func details(s *rls.Server) map[string]uint64 {
	out := map[string]uint64{}
	s.EachDescriptor(func(d *rls.Detail) {
		d.Each(func(r string, n uint64) { out[d.Domain+" "+d.Descriptor+" "+r] = n })
	})
	return out
}

// detailed_metric counts per configured descriptor, under labels made of
// the configuration only: no request value (an address, a username)
// and no configured address ever appears, a descriptor without it has
// no series, and a reload keeping the descriptor keeps its counts.
func TestDetailedMetric(t *testing.T) {
	e := startWith(t, detailConfig)
	for _, a := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		e.ask(t, "edge", 0, desc("remote_address", a))
	}
	e.ask(t, "edge", 0, desc("remote_address", "198.51.100.7"))
	e.ask(t, "edge", 0, desc("remote_address", "198.51.100.7"))
	e.ask(t, "edge", 0, desc("path", "/login", "user", "alice"))
	e.ask(t, "edge", 0, desc("path", "/login", "user", "alice"))
	e.ask(t, "edge", 3, desc("path", "/login", "user", "bob"))
	e.ask(t, "edge", 0, desc("plain", "x"))
	got := details(e.srv)
	want := map[string]uint64{
		// 192.0.2.1: 2 OK then 1 over; 192.0.2.2: OK.
		"edge remote_address ok": 3, "edge remote_address over_limit": 1, "edge remote_address hits": 4,
		"edge remote_address shadow": 0, "edge remote_address quota": 0,
		"edge remote_address=<ip> ok": 1, "edge remote_address=<ip> over_limit": 1, "edge remote_address=<ip> hits": 2,
		"edge remote_address=<ip> shadow": 0, "edge remote_address=<ip> quota": 0,
		// alice: OK, then over in shadow; bob: a cost of 3 over a limit of 1, in shadow.
		"edge path=/login.user ok": 1, "edge path=/login.user shadow": 2, "edge path=/login.user hits": 5,
		"edge path=/login.user over_limit": 0, "edge path=/login.user quota": 0,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("detailed counters\n got %v\nwant %v", got, want)
	}
	for k := range got {
		for _, secret := range []string{"192.0.2", "198.51.100", "alice", "bob", "plain"} {
			if strings.Contains(k, secret) {
				t.Errorf("label %q shows %q", k, secret)
			}
		}
	}
	// A reload that keeps a descriptor keeps its counts; one that drops
	// detailed_metric drops its series.
	cfg, err := rls.ParseConfig([]byte(strings.Replace(detailConfig, `    value: /login
    descriptors:
      - key: user
        detailed_metric: true`, `    value: /login
    descriptors:
      - key: user`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	e.ask(t, "edge", 0, desc("remote_address", "192.0.2.3"))
	got = details(e.srv)
	if got["edge remote_address ok"] != 4 || got["edge remote_address hits"] != 5 {
		t.Errorf("after a reload: %v, want the counts kept (ok 4, hits 5)", got)
	}
	if _, ok := got["edge path=/login.user ok"]; ok {
		t.Errorf("after a reload without detailed_metric: %v still has its series", got)
	}
}
