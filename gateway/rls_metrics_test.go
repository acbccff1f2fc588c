package gateway

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/rls"
)

// bulwark_rls_requests_total has a series for every outcome the RLS
// server counts: quota_mode violations, replaced limits and unlimited
// descriptors included (they were missing, or counted as unmatched).
func TestRLSRequestsTotalEveryResult(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := global.NewMemoryStore(100, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	node, err := global.New(global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	tab, err := node.Table(100)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := rls.ParseConfig([]byte(`
domain: d
descriptors:
  - key: qm
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: un
    rate_limit: {unlimited: true}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: a}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: a}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(tab, ds)
	if err != nil {
		t.Fatal(err)
	}
	one := func(k string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: "x"}}}
	}
	for _, ds := range [][]*rlv3.RateLimitDescriptor{{one("qm")}, {one("qm")}, {one("un")}, {one("a"), one("b")}} {
		if _, err := srv.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newRLSCollector(srv))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{}
	srv.Stats().Each(func(r string, n uint64) { want[r] = float64(n) })
	if len(got) != len(want) {
		t.Fatalf("exported %v, want %v", got, want)
	}
	for r, n := range want {
		if v, ok := got[r]; !ok || v != n {
			t.Errorf("result %q: %v (exported: %v), want %v", r, v, ok, n)
		}
	}
	for _, r := range []string{"quota", "replaced", "unlimited"} {
		if got[r] != 1 {
			t.Errorf("result %q = %v, want 1", r, got[r])
		}
	}
}

// bulwark_rls_descriptor_total exports the detailed_metric counters by
// configured path; two configured addresses share the "<ip>" label (one
// series set, so the registry stays consistent) and no address is shown.
func TestRLSDescriptorTotal(t *testing.T) {
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := global.NewMemoryStore(100, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	node, err := global.New(global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	tab, err := node.Table(100)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := rls.ParseConfig([]byte(`
domain: d
descriptors:
  - {key: qm, detailed_metric: true, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: addr, value: 203.0.113.9, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: addr, value: 2001:db8::1, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(tab, ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range [][2]string{{"qm", "x"}, {"qm", "x"}, {"addr", "203.0.113.9"}, {"addr", "2001:db8::1"}, {"addr", "2001:db8::1"}} {
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: e[0], Value: e[1]}}}
		if _, err := srv.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newRLSCollector(srv))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "bulwark_rls_descriptor_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["domain"]+" "+l["descriptor"]+" "+l["result"]] = m.GetCounter().GetValue()
		}
	}
	for k, v := range map[string]float64{"d qm ok": 1, "d qm quota": 1, "d qm hits": 2, "d addr=<ip> ok": 2, "d addr=<ip> over_limit": 1, "d addr=<ip> hits": 3} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != 10 {
		t.Errorf("%d series, want 10 (two descriptors × 5 results): %v", len(got), got)
	}
}
