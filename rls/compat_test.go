package rls_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/rls"
)

// dump renders domains one line per descriptor: path, limit and flags.
func dump(ds []rls.DomainConfig) string {
	var b strings.Builder
	var walk func(path string, ds []rls.Descriptor)
	walk = func(path string, ds []rls.Descriptor) {
		for _, d := range ds {
			p := path + "." + d.Key
			if d.Value != "" {
				p += "=" + d.Value
			}
			b.WriteString(p)
			if r := d.RateLimit; r != nil {
				switch {
				case r.Unlimited:
					b.WriteString(" unlimited")
				default:
					fmt.Fprintf(&b, " %d/%s", r.RequestsPerUnit, r.Unit)
				}
				if r.Name != "" {
					b.WriteString(" name=" + r.Name)
				}
				for _, rp := range r.Replaces {
					b.WriteString(" replaces=" + rp.Name)
				}
			}
			for _, f := range []struct {
				on   bool
				name string
			}{{d.ShadowMode, "shadow"}, {d.QuotaMode, "quota"}, {d.ShareThreshold, "share"}, {d.DetailedMetric, "detailed"}, {d.ValueToMetric, "value_to_metric"}} {
				if f.on {
					b.WriteString(" " + f.name)
				}
			}
			b.WriteString("\n")
			walk(p, d.Descriptors)
		}
	}
	for _, d := range ds {
		if d.Settings != nil {
			fmt.Fprintf(&b, "settings %+v\n", *d.Settings)
			continue
		}
		walk(d.Domain, d.Descriptors)
	}
	return b.String()
}

func load(t *testing.T, path string) []rls.DomainConfig {
	t.Helper()
	ds, err := rls.Load(filepath.Join("testdata", "envoy", path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ds
}

// Every configuration file of envoyproxy/ratelimit's examples, README
// and integration tests loads, with the limits it writes.
func TestReferenceConfigs(t *testing.T) {
	want := map[string]string{
		"examples/example.yaml": `rl.category=account 4/minute replaces=bkthomps replaces=fake_name
rl.source_cluster=proxy
rl.source_cluster=proxy.destination_cluster=bkthomps 2/minute replaces=bkthomps
rl.source_cluster=proxy.destination_cluster=mock 1/minute
rl.source_cluster=proxy.destination_cluster=override 2/minute replaces=banned_limit
rl.source_cluster=proxy.destination_cluster=fake 2/minute name=fake_name
rl.foo 2/minute
rl.foo.bar 3/minute
rl.foo.bar=bkthomps 1/minute name=bkthomps
rl.foo.bar=banned 0/minute name=banned_limit
rl.foo.baz 1/second
rl.foo.baz=not-so-shady 3/minute
rl.foo.baz=shady 3/minute shadow
rl.foo.bay unlimited
rl.unspec 2/minute detailed
rl.qux unlimited
`,
		"examples/config.yaml":    "mongo_cps.database=users 500/second\nmongo_cps.database=default 500/second\n",
		"readme/example1.yaml":    "mongo_cps.database=users 500/second\nmongo_cps.database=default 500/second\n",
		"readme/example2.yaml":    "messaging.message_type=marketing\nmessaging.message_type=marketing.to_number 5/day\nmessaging.to_number 100/day\n",
		"readme/example3.yaml":    "edge_proxy_per_ip.remote_address 10/second\nedge_proxy_per_ip.remote_address=50.0.0.5 0/second\n",
		"readme/example4-a.yaml":  "example4.key=value 300/second\n",
		"readme/example4-b.yaml":  "example4.key=value\nexample4.key=value.subkey 300/second\n",
		"readme/example5.yaml":    "internal.ldap unlimited\ninternal.azure 100/minute\n",
		"readme/example6.yaml":    "example6.service\nexample6.service.user=user-a 10/second shadow\nexample6.service.user=user-b 20/second\n",
		"readme/example7.yaml":    "example7.key_1=value_1\nexample7.key_1=value_1.user=bkthomps 5/second name=specific_limit\nexample7.key_2=value_2\nexample7.key_2=value_2.user=bkthomps 10/second replaces=specific_limit\n",
		"readme/example8.yaml":    "example8.key1 10/minute detailed\nexample8.key1=value1 20/minute\n",
		"readme/example9.yaml":    "example9.key1=value* 20/minute\n",
		"readme/example11-a.yaml": "example11.files=files/* 10/hour share\nexample11.files_no_share=files_no_share/* 10/hour\n",
		// The integration tests' runtime directory, loaded as a directory.
		"integration/config": "another.key2 20/minute\nanother.key3 10/hour\nanother.key2_local 20/minute\nanother.key3_local 10/hour\n" +
			"another.key4 20/day\nanother.key4_local 20/day\n" +
			"basic.key1 50/second\nbasic.key1_local 50/second\nbasic.one_per_minute 1/minute\n" +
			"share-threshold-test.files=files/* 10/hour share\nshare-threshold-test.files_no_share=files_no_share/* 10/hour\n",
		"integration/reload/reload.yaml": "reload.key1 50/second\nreload.block 0/second\nreload.one_per_minute 1/minute\n",
		"config/shadowmode_config.yaml":  "",
		"config/wildcard.yaml": "test-domain.wild=foo* 20/minute\ntest-domain.noWild=foo 20/minute\ntest-domain.noVal 20/minute\n" +
			"test-domain.midWild=bar*b 20/minute\ntest-domain.nestedWild=val1\ntest-domain.nestedWild=val1.wild=goo* 20/minute\n",
		"config/basic_config.yaml":      "",
		"config/merge_domain_key1.yaml": "test-domain.key1=value1 10/minute\n",
		"config/merge_domain_key2.yaml": "test-domain.key2=value2 20/minute\n",
	}
	names := make([]string, 0, len(want))
	for k := range want {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		got := dump(load(t, name))
		if want[name] != "" && got != want[name] {
			t.Errorf("%s:\n%s\nwant:\n%s", name, got, want[name])
		}
		if got == "" {
			t.Errorf("%s: nothing parsed", name)
		}
	}
	// value_to_metric is refused, naming it: it puts the requests'
	// descriptor values (the clients') into statistics names.
	refused := map[string]string{
		"readme/example10-a.yaml":     "line 4: domain: example10: descriptors[0].value_to_metric: ",
		"readme/example10-b.yaml":     "line 4: domain: example10_wildcard: descriptors[0].value_to_metric: ",
		"readme/example11-b.yaml":     "line 6: domain: example11_metrics: descriptors[0].value_to_metric: ",
		"config/share_threshold.yaml": "line 34: domain: test-domain: descriptors[3].value_to_metric: ",
	}
	for name, msg := range refused {
		_, err := rls.Load(filepath.Join("testdata", "envoy", name))
		const why = "not supported: it names statistics after the values of the requests' descriptors, which clients choose, and Bulwark keeps client values out of metrics (remove it: no limit depends on it)"
		if err == nil || err.Error() != "rls: invalid config: "+msg+why {
			t.Errorf("%s: %v\nwant: %s", name, err, msg+why)
		}
	}
	// Every file of those directories is covered above.
	for _, dir := range []string{"examples", "readme", "integration/reload"} {
		files, _ := os.ReadDir(filepath.Join("testdata", "envoy", dir))
		for _, f := range files {
			if _, ok := refused[dir+"/"+f.Name()]; ok {
				continue
			}
			if _, ok := want[dir+"/"+f.Name()]; !ok {
				t.Errorf("%s/%s: not checked", dir, f.Name())
			}
		}
	}
}

// The configurations envoyproxy/ratelimit refuses (its loader's test
// inputs) are refused too, named in the file's terms.
func TestReferenceConfigErrors(t *testing.T) {
	for name, want := range map[string]string{
		"bad_limit_unit.yaml":      `line 6: domain: test-domain: descriptors[0].rate_limit.unit: "foo" is not a unit: second, minute, hour, day, week, month or year`,
		"bad_yaml.yaml":            `document 1: line 2: found unexpected end of stream`,
		"duplicate_key.yaml":       `line 6: domain: test-domain: descriptors[1]: same key and value as descriptors[0] (key "key1", value "value1")`,
		"empty_domain.yaml":        `line 1: document 1: domain: required: a domain name of 1 to 128 bytes`,
		"empty_key.yaml":           `line 3: domain: test-domain: descriptors[0].key: must be 1 to 128 bytes without control characters`,
		"misspelled_key.yaml":      `line 5: domain: test-domain: descriptors[0].ratelimit: unknown key (known keys: key, value, rate_limit, shadow_mode, descriptors, quota_mode, share_threshold, detailed_metric, value_to_metric)`,
		"misspelled_key2.yaml":     `line 7: domain: test-domain: descriptors[0].rate_limit.requestsperunit: unknown key (known keys: unit, requests_per_unit, unlimited, name, replaces)`,
		"non_map_list.yaml":        `line 3: domain: test-domain: descriptors[0]: want a mapping, got "a"`,
		"non_string_key.yaml":      `line 1: document 1: 0.25: unknown key (known keys: domain, descriptors, settings)`,
		"replaces_empty.yaml":      `line 10: domain: test-domain: descriptors[0].descriptors[0].rate_limit.replaces[0].name: must not be empty`,
		"replaces_self.yaml":       `line 10: domain: test-domain: descriptors[0].descriptors[0].rate_limit.replaces[0].name: "self" is this limit's own name`,
		"unlimited_with_unit.yaml": `line 6: domain: test-domain: descriptors[0].rate_limit.unit: must not be set when unlimited is true`,
	} {
		_, err := rls.Load(filepath.Join("testdata", "envoy", "config", name))
		var ce *rls.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, rls.ErrConfig) || err.Error() != "rls: invalid config: "+want {
			t.Errorf("%s: %v\nwant: %s", name, err, want)
		}
	}
}

// newTable returns a table of a node on an in-process store with a
// manual clock (decisions never wait out a budget; time moves only when
// the test moves it).
func newTable(t *testing.T) *global.Table {
	t.Helper()
	tab, _ := newTableClock(t)
	return tab
}

func newTableClock(t *testing.T) (*global.Table, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := global.NewMemoryStore(10_000, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	node, err := global.New(global.Config{Store: st, Clock: clk, Budget: global.MaxBudget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	tab, err := node.Table(10_000)
	if err != nil {
		t.Fatal(err)
	}
	return tab, clk
}

// local serves text (or the reference file at testdata/envoy/path when
// text starts with '@') in process.
type local struct {
	t   *testing.T
	srv *rls.Server
	clk *clock.Manual
	tab *global.Table
}

// settle waits until the node has answered every round trip it was
// asked for (refills, and debits sent in the background), so that a
// test moving the clock next moves it after them.
func (l *local) settle() {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.tab.Node().Stats().Pending != 0 {
		if time.Now().After(deadline) {
			l.t.Fatalf("round trips still pending after 30 s: %+v", l.tab.Node().Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func serve(t *testing.T, text string) *local {
	t.Helper()
	var ds []rls.DomainConfig
	if strings.HasPrefix(text, "@") {
		ds = load(t, text[1:])
	} else {
		var err error
		if ds, err = rls.ParseConfig([]byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	tab, clk := newTableClock(t)
	srv, err := rls.New(tab, ds)
	if err != nil {
		t.Fatal(err)
	}
	return &local{t: t, srv: srv, clk: clk, tab: tab}
}

func (l *local) req(r *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return l.srv.ShouldRateLimit(context.Background(), r)
}

func (l *local) ask(domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitResponse {
	l.t.Helper()
	r, err := l.req(&pb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}

// run asks n times and returns the codes, "OK[OK]" style, joined by " ".
func (l *local) run(n int, domain string, ds ...*rlv3.RateLimitDescriptor) string {
	l.t.Helper()
	var out []string
	for range n {
		out = append(out, codesOf(l.ask(domain, ds...)))
	}
	return strings.Join(out, " ")
}

func repeat(s string, n int) string { return strings.TrimSpace(strings.Repeat(s+" ", n)) }

// README example 7 and examples/example.yaml: a limit named in another
// matched limit's replaces is neither applied nor counted.
func TestReplaces(t *testing.T) {
	l := serve(t, "@readme/example7.yaml")
	one := desc("key_1", "value_1", "user", "bkthomps")
	two := desc("key_2", "value_2", "user", "bkthomps")
	// Both: only the replacing 10/s applies; the replaced one reports no
	// limit.
	r := l.ask("example7", one, two)
	if codesOf(r) != "OK[OK,OK]" || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Fatalf("both: %v %v", codesOf(r), r.Statuses)
	}
	if got := l.run(9, "example7", one, two); got != repeat("OK[OK,OK]", 9) {
		t.Fatalf("both, 2nd to 10th: %s", got)
	}
	if got := l.run(1, "example7", one, two); got != "OVER_LIMIT[OK,OVER_LIMIT]" {
		t.Fatalf("both, 11th: %s", got)
	}
	// The replaced limit was never counted: 5 of 5 alone.
	if got := l.run(6, "example7", one); got != repeat("OK[OK]", 5)+" OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("replaced limit alone: %s", got)
	}
	if s := l.srv.Stats(); s.Replaced != 11 {
		t.Fatalf("stats %+v", s)
	}

	// example.yaml: foo=*,bar=banned is 0/minute (banned_limit), replaced by
	// source_cluster=proxy,destination_cluster=override.
	l = serve(t, "@examples/example.yaml")
	banned := desc("foo", "x", "bar", "banned")
	if got := l.run(1, "rl", banned); got != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("banned: %s", got)
	}
	if got := l.run(2, "rl", banned, desc("source_cluster", "proxy", "destination_cluster", "override")); got != "OK[OK,OK] OK[OK,OK]" {
		t.Fatalf("banned, replaced: %s", got)
	}
}

// requests_per_unit 0 (or absent) refuses every request (README example
// 3's blocked address), and a check (0 hits) is over the limit too: not
// one unit is left (envoyproxy/ratelimit answers it OK, its counter not
// being above 0; a request admitted on that answer would then report its
// cost past a limit meant to refuse everything).
func TestRefuseAll(t *testing.T) {
	l := serve(t, "@readme/example3.yaml")
	r := l.ask("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	st := r.Statuses[0]
	if codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND || st.LimitRemaining != 0 {
		t.Fatalf("blocked address: %v %v", codesOf(r), st)
	}
	if got := l.run(10, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")); got != repeat("OK[OK]", 10) {
		t.Fatalf("another address: %s", got)
	}
	q := desc("remote_address", "50.0.0.5")
	q.HitsAddend = wrapperspb.UInt64(0)
	if got := codesOf(l.ask("edge_proxy_per_ip", q)); got != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("query: %s", got)
	}
	l = serve(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour}\n")
	if got := l.run(2, "d", desc("k", "v")); got != "OVER_LIMIT[OVER_LIMIT] OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("no requests_per_unit: %s", got)
	}
}

// A value ending in '*' matches by prefix, each value its own bucket; a
// '*' elsewhere is literal (envoyproxy/ratelimit's test/config/wildcard.yaml
// and README example 9).
func TestWildcards(t *testing.T) {
	l := serve(t, "@config/wildcard.yaml")
	const d = "test-domain"
	for _, c := range []struct {
		d    *rlv3.RateLimitDescriptor
		want bool
	}{
		{desc("wild", "foo1"), true},
		{desc("wild", "foo"), true},
		{desc("wild", "bar"), false},
		{desc("noWild", "foo1"), false},
		{desc("noVal", "anything"), true},
		{desc("midWild", "barab"), false},
		{desc("midWild", "bar*b"), true},
		{desc("nestedWild", "val1", "wild", "goo2"), true},
		{desc("nestedWild", "val2", "wild", "goo2"), false},
	} {
		r := l.ask(d, c.d)
		if got := r.Statuses[0].CurrentLimit != nil; got != c.want {
			t.Errorf("%v: limited %v, want %v", c.d.Entries, got, c.want)
		}
	}
	// Each value matched by a prefix has a bucket of its own.
	if got := l.run(19, d, desc("wild", "foo1")); got != repeat("OK[OK]", 19) {
		t.Fatalf("foo1: %s", got)
	}
	if got := l.run(1, d, desc("wild", "foo1")); got != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("foo1, 21st: %s", got)
	}
	if got := l.run(1, d, desc("wild", "foo2")); got != "OK[OK]" {
		t.Fatalf("foo2: %s", got)
	}
	l = serve(t, "@readme/example9.yaml")
	if r := l.ask("example9", desc("key1", "value_1")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 20 {
		t.Fatalf("example 9: %v", r.Statuses[0])
	}
}

// share_threshold: every value a prefix matches shares one bucket
// (README example 11).
func TestShareThreshold(t *testing.T) {
	l := serve(t, "@readme/example11-a.yaml")
	const d = "example11"
	got := l.run(5, d, desc("files", "files/a.pdf")) + " " + l.run(5, d, desc("files", "files/b.csv")) + " " + l.run(1, d, desc("files", "files/c.txt"))
	if got != repeat("OK[OK]", 10)+" OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("shared: %s", got)
	}
	got = l.run(10, d, desc("files_no_share", "files_no_share/a.pdf")) + " " + l.run(1, d, desc("files_no_share", "files_no_share/b.csv"))
	if got != repeat("OK[OK]", 11) {
		t.Fatalf("not shared: %s", got)
	}
	// Nested below a shared prefix (README example 11's second file): the
	// prefix's entry is shared, the nested one counted per value (without
	// its value_to_metric, which is refused).
	l = serve(t, "domain: example11_metrics\ndescriptors:\n  - key: route\n    value: api/*\n    share_threshold: true\n"+
		"    descriptors:\n      - key: method\n        rate_limit: {unit: minute, requests_per_unit: 60}\n")
	got = l.run(30, "example11_metrics", desc("route", "api/v1", "method", "GET")) + " " + l.run(30, "example11_metrics", desc("route", "api/v2", "method", "GET"))
	if got != repeat("OK[OK]", 60) {
		t.Fatalf("nested: %s", got)
	}
	if got := l.run(1, "example11_metrics", desc("route", "api/v3", "method", "GET")); got != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("nested, 61st: %s", got)
	}
	if got := l.run(1, "example11_metrics", desc("route", "api/v3", "method", "POST")); got != "OK[OK]" {
		t.Fatalf("nested, another method: %s", got)
	}
}

// month is 30 days, as in envoyproxy/ratelimit.
func TestMonth(t *testing.T) {
	l := serve(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 30}\n")
	if got := l.run(30, "d", desc("k", "v")); got != repeat("OK[OK]", 30) {
		t.Fatalf("30 of 30: %s", got)
	}
	r := l.ask("d", desc("k", "v"))
	if codesOf(r) != "OVER_LIMIT[OVER_LIMIT]" || r.Statuses[0].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MONTH {
		t.Fatalf("31st: %v %v", codesOf(r), r.Statuses[0])
	}
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != 24*time.Hour {
		t.Fatalf("retry in %v, want a day (one of 30 per 30 days)", d)
	}
}

// unlimited reports no current limit and MaxUint32 remaining; a limit's
// current_limit.name is its configured name, empty when none is.
func TestUnlimitedAndNames(t *testing.T) {
	l := serve(t, config)
	r := l.ask("edge", desc("internal", "x"), desc("remote_address", "192.0.2.1"), desc("path", "/login"))
	if st := r.Statuses[0]; st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Fatalf("unlimited: %v", st)
	}
	if n := r.Statuses[1].CurrentLimit.GetName(); n != "" {
		t.Fatalf("unnamed limit reported as %q", n)
	}
	if n := r.Statuses[2].CurrentLimit.GetName(); n != "login" {
		t.Fatalf("named limit reported as %q", n)
	}
	// The RateLimit-Policy field still names an unnamed limit, by path.
	r = l.ask("edge", desc("remote_address", "192.0.2.1"))
	if h := header(r, "RateLimit-Policy"); !strings.HasPrefix(h, `"edge.remote_address";`) {
		t.Fatalf("RateLimit-Policy %q", h)
	}
}

func override(d *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// A descriptor's limit override (Envoy's dynamic limits) replaces the
// configured limit, or applies where none matches, in a known domain.
func TestLimitOverride(t *testing.T) {
	l := serve(t, config)
	over := func(v string, rpu uint32) *rlv3.RateLimitDescriptor {
		return override(desc("remote_address", v), rpu, typev3.RateLimitUnit_MINUTE)
	}
	r := l.ask("edge", over("192.0.2.1", 2))
	if st := r.Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.GetName() != "" || st.LimitRemaining != 1 {
		t.Fatalf("override: %v", st)
	}
	if got := l.run(2, "edge", over("192.0.2.1", 2)); got != "OK[OK] OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("override 2/min: %s", got)
	}
	// Unmatched by the configuration: the override still applies.
	if got := l.run(2, "edge", override(desc("nothing", "here"), 1, typev3.RateLimitUnit_HOUR)); got != "OK[OK] OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("override, unmatched: %s", got)
	}
	// 0 refuses; an unknown domain has no limits at all.
	if got := l.run(1, "edge", over("192.0.2.9", 0)); got != "OVER_LIMIT[OVER_LIMIT]" {
		t.Fatalf("override 0: %s", got)
	}
	if r := l.ask("nowhere", over("192.0.2.1", 1)); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain: %v", r.Statuses[0])
	}
	// Overrides Bulwark cannot enforce, or one too many, are refused
	// before anything is counted.
	good := desc("remote_address", "192.0.2.50")
	for _, bad := range []*rlv3.RateLimitDescriptor{
		override(desc("k", "v"), 1, typev3.RateLimitUnit_UNKNOWN),
		override(desc("k", "v"), 1, typev3.RateLimitUnit(99)),
		override(desc("k", "v"), 2_000_000, typev3.RateLimitUnit_SECOND),
	} {
		if _, err := l.req(&pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good, bad}}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("override %v: %v", bad.Limit, err)
		}
	}
	for i := range rls.MaxOverrides {
		if _, err := l.req(&pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{override(desc("k", "v"), uint32(100+i), typev3.RateLimitUnit_SECOND)}}); err != nil && i < rls.MaxOverrides-3 {
			t.Fatalf("override %d: %v", i, err)
		}
	}
	if _, err := l.req(&pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{good, override(desc("k", "v"), 99, typev3.RateLimitUnit_SECOND)}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("one override too many: %v", err)
	}
	if r := l.ask("edge", good); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("refused requests counted: %v", r.Statuses[0])
	}
}

// quota_mode answers OK over the limit and reports the violation in the
// response metadata (settings.response_metadata).
func TestQuotaModeAndMetadata(t *testing.T) {
	const text = `
domain: q
descriptors:
  - key: tokens
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
---
settings: {response_metadata: true}
`
	l := serve(t, text)
	l.ask("q", desc("tokens", "a"))
	r, err := l.req(&pb.RateLimitRequest{Domain: "q", HitsAddend: 1, Descriptors: []*rlv3.RateLimitDescriptor{desc("plain", "p"), desc("tokens", "a")}})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Statuses[1]
	if codesOf(r) != "OK[OK,OK]" || st.CurrentLimit.GetRequestsPerUnit() != 1 || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
		t.Fatalf("quota mode over the limit: %v %v", codesOf(r), st)
	}
	md, _ := json.Marshal(r.DynamicMetadata)
	const want = `{"descriptors":[{"entries":["plain=p"]},{"entries":["tokens=a"]}],"domain":"q","hitsAddend":1,"quotaModeEnabled":true,"quotaModeViolations":[1]}`
	if string(md) != want {
		t.Fatalf("metadata %s\nwant     %s", md, want)
	}
	if s := l.srv.Stats(); s.Quota != 1 || s.OverLimit != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Without the setting, no metadata.
	l = serve(t, strings.Split(text, "---")[0])
	if r := l.ask("q", desc("tokens", "a")); r.DynamicMetadata != nil {
		t.Fatalf("metadata without the setting: %v", r.DynamicMetadata)
	}
}

// settings.response_headers: false leaves response_headers_to_add empty.
func TestResponseHeadersSetting(t *testing.T) {
	const text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	for _, c := range []struct {
		settings string
		want     int
	}{{"", 2}, {"---\nsettings: {response_headers: true}\n", 2}, {"---\nsettings: {response_headers: false}\n", 0}} {
		l := serve(t, text+c.settings)
		if r := l.ask("d", desc("k", "v")); len(r.ResponseHeadersToAdd) != c.want {
			t.Errorf("%q: OK answer with %d headers, want %d", c.settings, len(r.ResponseHeadersToAdd), c.want)
		}
		if r := l.ask("d", desc("k", "v")); len(r.ResponseHeadersToAdd) != c.want*3/2 {
			t.Errorf("%q: OVER_LIMIT answer with %d headers, want %d", c.settings, len(r.ResponseHeadersToAdd), c.want*3/2)
		}
	}
}

// settings.stop_counting_over_limit: a request refused by one descriptor
// counts nothing on its others.
func TestStopCountingOverLimit(t *testing.T) {
	const text = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	for _, c := range []struct {
		settings string
		left     uint32
	}{{"", 10 - 5}, {"---\nsettings: {stop_counting_over_limit: true}\n", 10 - 1}} {
		l := serve(t, text+c.settings)
		if got := l.run(5, "d", desc("user", "u"), desc("tenant", "t")); got != "OK[OK,OK] "+repeat("OVER_LIMIT[OVER_LIMIT,OK]", 4) {
			t.Fatalf("%q: %s", c.settings, got)
		}
		q := desc("tenant", "t")
		q.HitsAddend = wrapperspb.UInt64(0)
		if r := l.ask("d", q); r.Statuses[0].LimitRemaining != c.left {
			t.Errorf("%q: tenant has %d left, want %d", c.settings, r.Statuses[0].LimitRemaining, c.left)
		}
	}
}

// A configuration directory is read as envoyproxy/ratelimit reads its
// runtime directory; a domain in two files is refused unless
// merge_domains merges them (MERGE_DOMAIN_CONFIG).
func TestConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "envoy", "config", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, ".swap.yaml"), []byte("not: [yaml"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "README"), []byte("not yaml"), 0o600)
	_, err := rls.Load(dir)
	if want := "rls: invalid config: domain: test-domain: defined twice (merge_domains in the settings merges them)"; err == nil || err.Error() != want {
		t.Fatalf("without merge_domains: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "settings.yml"), []byte("settings:\n  merge_domains: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := rls.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dump(ds), "test-domain.key1=value1 10/minute\ntest-domain.key2=value2 20/minute\nsettings {ResponseHeaders:<nil> StopCountingOverLimit:false ResponseMetadata:false MergeDomains:true}\n"; got != want {
		t.Fatalf("merged:\n%s\nwant:\n%s", got, want)
	}
	// A duplicate across merged files is refused, naming the file and line.
	if err := os.WriteFile(filepath.Join(dir, "z.yaml"), []byte("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = rls.Load(dir)
	if want := `rls: invalid config: z.yaml:3: domain: test-domain: descriptors[2]: same key and value as descriptors[0] (key "key1", value "value1")`; err == nil || err.Error() != want {
		t.Fatalf("duplicate across files: %v\nwant %s", err, want)
	}
	if _, err := rls.Load(filepath.Join(dir, "missing")); err == nil || errors.Is(err, rls.ErrConfig) {
		t.Fatalf("missing path: %v", err)
	}
}

// YAML the reference's parser reads the same way: rate_limit: ~ is no
// limit, YAML 1.1 booleans, numbers as string values.
func TestReferenceYAMLReadings(t *testing.T) {
	ds, err := rls.ParseConfig([]byte("domain: 8080\ndescriptors:\n  - key: k\n    value: 1.50\n    rate_limit: ~\n    shadow_mode: yes\n    descriptors:\n      - key: sub\n        rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dump(ds), "8080.k=1.50 shadow\n8080.k=1.50.sub 1/second\n"; got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	// A domain merged from Go (Reload) as from files.
	merged := []rls.DomainConfig{
		{Domain: "d", Descriptors: []rls.Descriptor{{Key: "a"}}},
		{Domain: "d", Descriptors: []rls.Descriptor{{Key: "b"}}},
		{Settings: &rls.Settings{MergeDomains: true}},
	}
	if err := rls.Validate(merged); err != nil {
		t.Fatal(err)
	}
	if _, err := rls.New(newTable(t), merged); err != nil {
		t.Fatal(err)
	}
}
