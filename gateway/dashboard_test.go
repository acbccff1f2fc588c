package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// The Grafana dashboard (deploy/grafana/bulwark.json) is checked against
// what a running gateway exports: every metric a query names must be in a
// real scrape, and every label a query selects or groups by must be one
// of that metric's labels (or a target label Prometheus adds). A renamed
// metric or label fails here, not in an operator's empty panel.

const dashboardPath = "../deploy/grafana/bulwark.json"

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"job", "instance"}

// dashboard is the part of Grafana's dashboard JSON the test reads.
type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	SchemaVersion int              `json:"schemaVersion"`
	UID           string           `json:"uid"`
	Title         string           `json:"title"`
	Panels        []dashboardPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource json.RawMessage `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's panels
}

// dashboardQuery is one PromQL expression of the dashboard and where it
// is.
type dashboardQuery struct {
	where string
	expr  string
	// label is set for a template variable's label_values(expr, label).
	label string
}

func loadDashboard(t *testing.T, data []byte) (dashboard, []dashboardQuery) {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var qs []dashboardQuery
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, dashboardQuery{where: fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // the older plain-string form
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		qs = append(qs, dashboardQuery{where: "variable " + v.Name, expr: m[1], label: m[2]})
	}
	return d, qs
}

// TestDashboardShape: the dashboard imports as is into a current Grafana
// (an input for the Prometheus data source, which every panel, query and
// variable uses; unique panel ids; a layout), and has a query per panel.
func TestDashboardShape(t *testing.T) {
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	d, qs := loadDashboard(t, data)
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v, want one prometheus datasource input DS_PROMETHEUS", d.Inputs)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d: want a current Grafana's (>= 39)", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	const ds = `{"type":"prometheus","uid":"${DS_PROMETHEUS}"}`
	sameDS := func(raw json.RawMessage) bool {
		var a, b any
		return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(ds), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
	}
	ids := map[int]bool{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or repeated", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
			}
			if p.Type != "row" {
				if !sameDS(p.Datasource) {
					t.Errorf("panel %q: datasource %s, want %s", p.Title, p.Datasource, ds)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				for _, tg := range p.Targets {
					if !sameDS(tg.Datasource) || strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q target %s: datasource %s, expr %q", p.Title, tg.RefID, tg.Datasource, tg.Expr)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" && !sameDS(v.Datasource) {
			t.Errorf("variable %s: datasource %s", v.Name, v.Datasource)
		}
	}
	if len(qs) < 40 {
		t.Errorf("%d queries: the dashboard lost its panels", len(qs))
	}
}

// TestDashboardMetricsExist scrapes two real gateways, a standalone one
// with every standalone layer on (shield, route limits enforced and in
// shadow, login, lists, the XDP layer asked for on an interface that does
// not exist, so it serves without it and still exports its state) and a
// cluster one (Redis, global limits, the RLS server), sends the traffic
// that creates the labelled series, and checks every dashboard query
// against the union of the two scrapes.
func TestDashboardMetricsExist(t *testing.T) {
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	_, qs := loadDashboard(t, data)
	exported := scrapeGateways(t)
	problems := checkDashboard(qs, exported)
	for _, p := range problems {
		t.Error(p)
	}
	// What the dashboard does not show (for whoever extends it).
	used := map[string]bool{}
	for _, q := range qs {
		refs, _, _ := promqlRefs(q.expr)
		for _, r := range refs {
			used[familyOf(r.name, exported)] = true
		}
	}
	var unused []string
	for name := range exported {
		if strings.HasPrefix(name, "bulwark_") && !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("exported and not on the dashboard: %v", unused)

	// docs/observability.md lists every metric the gateway exports, and
	// no other (but those that appear only after their first event).
	doc, err := os.ReadFile(metricsDocPath)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := docTableRows(string(doc))
	for name := range exported {
		if _, ok := rows[name]; strings.HasPrefix(name, "bulwark_") && !ok {
			t.Errorf("%s does not document %s (%s)", metricsDocPath, name, exported[name].typ)
		}
	}
	for name := range rows {
		if _, ok := exported[name]; strings.HasPrefix(name, "bulwark_") && !ok {
			t.Errorf("%s documents %s, which the gateway does not export", metricsDocPath, name)
		}
	}
}

const metricsDocPath = "../docs/observability.md"

// TestDashboardCheckFails: the check catches a misspelled metric, a label
// the metric does not have, and a query that names no metric.
func TestDashboardCheckFails(t *testing.T) {
	exported := map[string]metricFamily{
		"bulwark_requests_total":           {typ: dto.MetricType_COUNTER, labels: []string{"route", "outcome"}},
		"bulwark_request_duration_seconds": {typ: dto.MetricType_HISTOGRAM, labels: []string{"route"}},
	}
	good := []dashboardQuery{
		{where: "ok1", expr: `sum by (route) (rate(bulwark_requests_total{job=~"$job",route=~"$route"}[$__rate_interval]))`},
		{where: "ok2", expr: `histogram_quantile(0.99, sum by (route, le) (rate(bulwark_request_duration_seconds_bucket{instance=~"$instance"}[5m])))`},
		{where: "ok3", expr: `bulwark_requests_total{outcome="rejected"}`, label: "route"},
	}
	if p := checkDashboard(good, exported); len(p) != 0 {
		t.Fatalf("good queries reported: %v", p)
	}
	for _, bad := range []dashboardQuery{
		{where: "misspelled", expr: `sum(rate(bulwark_request_total[5m]))`},
		{where: "histogram without suffix", expr: `rate(bulwark_request_duration_seconds[5m])`},
		{where: "unknown matcher label", expr: `rate(bulwark_requests_total{layer="shield"}[5m])`},
		{where: "unknown grouping label", expr: `sum by (layer) (rate(bulwark_requests_total[5m]))`},
		{where: "le off a bucket", expr: `sum by (le) (rate(bulwark_requests_total[5m]))`},
		{where: "no metric", expr: `vector(1)`},
		{where: "unknown variable label", expr: `bulwark_requests_total`, label: "upstream"},
	} {
		if p := checkDashboard([]dashboardQuery{bad}, exported); len(p) == 0 {
			t.Errorf("%s: %q passed the check", bad.where, bad.expr)
		}
	}
	// And on the real file: a misspelled copy fails.
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	_, qs := loadDashboard(t, []byte(strings.ReplaceAll(string(data), "bulwark_upstream_requests_total", "bulwark_upstream_request_total")))
	exported["bulwark_upstream_requests_total"] = metricFamily{typ: dto.MetricType_COUNTER, labels: []string{"upstream", "outcome"}}
	found := false
	for _, p := range checkDashboard(qs, exported) {
		found = found || strings.Contains(p, `"bulwark_upstream_request_total"`)
	}
	if !found {
		t.Error("a misspelled metric in the dashboard file is not reported")
	}
}

// TestPromQLRefs: the small PromQL reader finds the metric names and the
// labels a query uses, and nothing else.
func TestPromQLRefs(t *testing.T) {
	for _, c := range []struct {
		expr     string
		metrics  string // name{labels} ...
		grouping string
	}{
		{`sum by (route) (rate(bulwark_requests_total{job=~"$job",route=~"$route"}[$__rate_interval]))`, `bulwark_requests_total{job,route}`, "route"},
		{`histogram_quantile(0.99, sum by (route, le) (rate(a_bucket{x="}{"}[5m])))`, `a_bucket{x}`, "route le"},
		{`time() - max by (instance) (b{i="1"})`, `b{i}`, "instance"},
		{`max by (t, r) (e{j="a"} / c{j="a"})`, `e{j} c{j}`, "t r"},
		{`sum without(le) (rate(x[1m] offset 5m)) > bool 0 and on(instance) up`, `x{} up{}`, "le instance"},
		{`count by (version) (bulwark_build_info{job=~"$job"})`, `bulwark_build_info{job}`, "version"},
		{`max(f) == 1`, `f{}`, ""},
		{`topk(3, sum(rate(g[5m])) by (route))`, `g{}`, "route"},
		{`label_replace(h, "dst", "$1", "src", "(.*)")`, `h{}`, ""},
		{`sum(rate(i[5m:1m]))`, `i{}`, ""},
		{`{__name__="j", k!="v"}`, `j{k}`, ""},
		{`clamp_min(sum(rate(l[1m])), 1e-9) * 100`, `l{}`, ""},
	} {
		refs, grouping, err := promqlRefs(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.name+"{"+strings.Join(r.labels, ",")+"}")
		}
		if g := strings.Join(got, " "); g != c.metrics || strings.Join(grouping, " ") != c.grouping {
			t.Errorf("%s:\n got %s by %v\nwant %s by %s", c.expr, g, grouping, c.metrics, c.grouping)
		}
	}
	for _, bad := range []string{`rate(x[5m]`, `x{a="b"`, `"open`, `sum by (a (x)`} {
		if _, _, err := promqlRefs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// metricFamily is what a scrape says about one metric name.
type metricFamily struct {
	typ    dto.MetricType
	labels []string
}

// familyOf maps a series name to its family: x_bucket, x_sum and
// x_count of a histogram x are x.
func familyOf(name string, exported map[string]metricFamily) string {
	if _, ok := exported[name]; ok {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f, ok := exported[base]; ok && (f.typ == dto.MetricType_HISTOGRAM || f.typ == dto.MetricType_SUMMARY && suf != "_bucket") {
				return base
			}
		}
	}
	return ""
}

// seriesLabels returns the labels the series name carries, and whether
// the gateway exports that name: a histogram's samples are name_bucket
// (with le), name_sum and name_count, never name itself.
func seriesLabels(name string, exported map[string]metricFamily) ([]string, bool) {
	fam := familyOf(name, exported)
	if fam == "" {
		return nil, false
	}
	f := exported[fam]
	if fam == name && (f.typ == dto.MetricType_HISTOGRAM) {
		return nil, false
	}
	labels := append(append([]string(nil), f.labels...), targetLabels...)
	if name == fam+"_bucket" {
		labels = append(labels, "le")
	}
	if f.typ == dto.MetricType_SUMMARY && name == fam {
		labels = append(labels, "quantile")
	}
	return labels, true
}

// checkDashboard returns a line per problem.
func checkDashboard(qs []dashboardQuery, exported map[string]metricFamily) []string {
	var out []string
	for _, q := range qs {
		refs, grouping, err := promqlRefs(q.expr)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %q: %v", q.where, q.expr, err))
			continue
		}
		if len(refs) == 0 {
			out = append(out, fmt.Sprintf("%s: %q names no metric", q.where, q.expr))
		}
		var all []string
		for _, r := range refs {
			labels, ok := seriesLabels(r.name, exported)
			if !ok {
				out = append(out, fmt.Sprintf("%s: %q uses %q, which the gateway does not export", q.where, q.expr, r.name))
				continue
			}
			all = append(all, labels...)
			for _, l := range r.labels {
				if !slices.Contains(labels, l) {
					out = append(out, fmt.Sprintf("%s: %q selects label %q, which %s does not have (it has %v)", q.where, q.expr, l, r.name, labels))
				}
			}
		}
		if q.label != "" {
			grouping = append(grouping, q.label)
		}
		for _, l := range grouping {
			if len(all) > 0 && !slices.Contains(all, l) {
				out = append(out, fmt.Sprintf("%s: %q groups by %q, which none of its metrics has", q.where, q.expr, l))
			}
		}
	}
	return out
}

// metricRef is a metric a query selects, with the labels its matchers name.
type metricRef struct {
	name   string
	labels []string
}

// promqlKeywords are the identifiers of PromQL that are not metric names
// when they are not followed by "(": aggregation operators (which may
// put "by (...)" before their parenthesis), binary and set operators,
// modifiers, and number literals.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// promqlRefs reads the metric names of a PromQL expression, the label
// names of each selector's matchers, and the label names of its by,
// without, on, ignoring and group_* clauses. It is not a PromQL parser:
// it reads enough to check names, and reports unbalanced brackets and
// unterminated strings.
func promqlRefs(expr string) (refs []metricRef, grouping []string, err error) {
	s := expr
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	ident := func() string {
		start := i
		for i < len(s) && isIdent(s[i]) {
			i++
		}
		return s[start:i]
	}
	skipString := func() error {
		q := s[i]
		i++
		for i < len(s) && s[i] != q {
			if s[i] == '\\' && q != '`' {
				i++
			}
			i++
		}
		if i >= len(s) {
			return fmt.Errorf("unterminated string")
		}
		i++
		return nil
	}
	// matchers reads {name op "value", ...} from s[i] == '{'.
	matchers := func() (labels []string, metric string, err error) {
		i++
		for {
			skipSpace()
			if i >= len(s) {
				return nil, "", fmt.Errorf("unterminated {")
			}
			if s[i] == '}' {
				i++
				return labels, metric, nil
			}
			if s[i] == ',' {
				i++
				continue
			}
			if !isIdentStart(s[i]) {
				return nil, "", fmt.Errorf("bad matcher at %d", i)
			}
			name := ident()
			skipSpace()
			if i+1 < len(s) && (s[i] == '=' && s[i+1] == '~' || s[i] == '!' && (s[i+1] == '=' || s[i+1] == '~')) {
				i += 2
			} else if i < len(s) && s[i] == '=' {
				i++
			} else {
				return nil, "", fmt.Errorf("bad matcher operator after %q", name)
			}
			skipSpace()
			if i >= len(s) || s[i] != '"' && s[i] != '\'' && s[i] != '`' {
				return nil, "", fmt.Errorf("matcher %q has no string value", name)
			}
			valStart := i
			if err := skipString(); err != nil {
				return nil, "", err
			}
			if name == "__name__" {
				metric = strings.Trim(s[valStart:i], "\"'`")
				continue
			}
			labels = append(labels, name)
		}
	}
	// labelList reads (a, b, c) from s[i] == '('.
	labelList := func() ([]string, error) {
		i++
		var out []string
		for {
			skipSpace()
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated label list")
			}
			switch {
			case s[i] == ')':
				i++
				return out, nil
			case s[i] == ',':
				i++
			case isIdentStart(s[i]):
				out = append(out, ident())
			default:
				return nil, fmt.Errorf("bad label list at %d", i)
			}
		}
	}
	depth := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, nil, err
			}
		case c == '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return nil, nil, fmt.Errorf("unterminated [")
			}
			i += end + 1
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, nil, fmt.Errorf("unbalanced )")
			}
			i++
		case c == '{':
			labels, metric, err := matchers()
			if err != nil {
				return nil, nil, err
			}
			if metric == "" {
				return nil, nil, fmt.Errorf("a selector without a metric name")
			}
			refs = append(refs, metricRef{name: metric, labels: labels})
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.' || (s[i] == '-' || s[i] == '+') && (s[i-1] == 'e' || s[i-1] == 'E')) {
				i++
			}
		case isIdentStart(c):
			name := ident()
			skipSpace()
			next := byte(0)
			if i < len(s) {
				next = s[i]
			}
			switch {
			case name == "by" || name == "without" || name == "on" || name == "ignoring" || name == "group_left" || name == "group_right":
				if next == '(' {
					ls, err := labelList()
					if err != nil {
						return nil, nil, err
					}
					grouping = append(grouping, ls...)
				}
			case next == '(' || promqlKeywords[name]:
				// A function or an operator.
			default:
				r := metricRef{name: name}
				if next == '{' {
					labels, metric, err := matchers()
					if err != nil {
						return nil, nil, err
					}
					if metric != "" {
						return nil, nil, fmt.Errorf("%s has a second name %q", name, metric)
					}
					r.labels = labels
				}
				refs = append(refs, r)
			}
		default:
			i++ // operators, commas
		}
	}
	if depth != 0 {
		return nil, nil, fmt.Errorf("unbalanced (")
	}
	return refs, grouping, nil
}

// scrapeGateways starts the two gateways, sends traffic through them and
// returns every metric family their /metrics listeners serve.
func scrapeGateways(t *testing.T) map[string]metricFamily {
	t.Helper()
	up := echoUpstream(t, "app")
	standalone := startGateway(t, `
shield: {enabled: true, per_peer: 5, global: 100000, max_peers: 64}
upstreams:
  - {name: app, targets: ["{{APP}}"], health: {passive: {}}}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 0.001, burst: 1, per_client: {qps: 100}}
  - name: trial
    match: {path: /trial/}
    upstream: app
    rate_limit: {qps: 0.001, burst: 1, mode: shadow}
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 1}
ipsets:
  deny: [203.0.113.0/24]
access_log: {max_per_second: 1}
guards:
  conns: {max_per_addr: 1, max_incomplete_per_addr: 1}
xdp:
  mode: auto
  interface: bwdash0
  no_pin: true
  score_entries: 1024
  conntrack_entries: 1024
`, map[string]string{"APP": up.URL}, gwOpts{source: func() (*Config, error) {
		return nil, fmt.Errorf("no file")
	}})
	get := func(c *http.Client, url string) {
		t.Helper()
		res, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	post := func(c *http.Client, url, body string) {
		t.Helper()
		res, err := c.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	a, b, c := keepAliveClient("127.0.90.1"), keepAliveClient("127.0.90.2"), keepAliveClient("127.0.90.3")
	get(a, standalone.url+"/api/x") // ok
	get(a, standalone.url+"/api/x") // rate_limit over_limit
	get(b, standalone.url+"/trial/x")
	get(b, standalone.url+"/trial/x") // would reject
	get(b, standalone.url+"/nowhere") // router not_found
	post(c, standalone.url+"/login", `{"username":"u"}`)
	post(c, standalone.url+"/login", `{"username":"u"}`) // login over the limit
	flood := keepAliveClient("127.0.90.4")
	for range 6 { // the shield's per-peer budget (5), then a refusal, which closes the connection
		get(flood, standalone.url+"/api/y")
	}
	// A second connection from one address: refused at accept by the
	// guards (max_per_addr 1).
	addr := strings.TrimPrefix(standalone.url, "http://")
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.90.6")}}
	first, err := dialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if second, err := dialer.Dial("tcp", addr); err == nil {
		second.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = second.Read(make([]byte, 1)) // reset by the guard
		second.Close()
	}
	// Events no test traffic here causes (a slow client, an HTTP/2 flood,
	// an overload, a breaker transition, an XDP event) go through the
	// gateway's own event hooks, so their series exist with the names and
	// labels the gateway gives them.
	m := standalone.g.metrics
	m.guardEvent("slow", "header_timeout", "")
	m.guardEvent("h2_abuse", "rst_rate", "")
	m.guardEvent("shed", "", "")
	m.redirect("redir", redirectOK)
	m.xdpEvent("defense_on")
	// A failed reload counts bulwark_config_reloads_total{result="error"}.
	_ = standalone.g.ReloadFromSource(t.Context())

	// The cluster profile: Redis (login state, global limits, RLS); the
	// PostgreSQL URL names nothing, so the quota store is down and
	// bulwark_dependency_up says so.
	rd := testsvc.StartRedis(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ratelimit.yaml"), []byte("domain: edge\ndescriptors:\n  - {key: path, detailed_metric: true, rate_limit: {unit: second, requests_per_unit: 10}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	getenv := env(EnvProfile, "cluster", EnvRedisURL, "redis://"+rd.Addr()+"/0", EnvPostgresURL, "postgres://u:p@127.0.0.1:1/db",
		EnvPostgresTLSMode, "disable", EnvPostgresAllowInsecure, "true").get
	cfg, err := Parse("cluster.yaml", []byte(strings.ReplaceAll(`
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: search
    match: {path: /search}
    upstream: app
    rate_limit: {qps: 1000, burst: 1000, scope: global, key: route}
  - name: login
    match: {path: /login}
    upstream: app
    login: {limit: 5}
global: {budget: 50ms}
rls: {addr: "`+rlsLn.Addr().String()+`", config_file: "`+filepath.Join(dir, "ratelimit.yaml")+`"}
`, "{{APP}}", up.URL)), getenv)
	if err != nil {
		t.Fatal(err)
	}
	cluster := startConfig(t, cfg, gwOpts{rls: rlsLn})
	d := keepAliveClient("127.0.90.5")
	for range 3 {
		get(d, cluster.url+"/search")
	}
	post(d, cluster.url+"/login", `{"username":"u"}`)
	cluster.g.metrics.globalTransition("open", "test")

	// A TLS listener: its certificates' series.
	tlsDir := t.TempDir()
	writeTestCert(t, tlsDir, "site", testCert{serial: 1, cn: "dash.test", dns: []string{"dash.test"}})
	// With ACME too (a CA that does not answer: its counters exist from
	// the start).
	withTLS := startGateway(t, "listen: {tls: {cert_file: "+filepath.Join(tlsDir, "site.pem")+", key_file: "+filepath.Join(tlsDir, "site.key")+
		", acme: {domains: [acme.dash.test], ca: \"https://127.0.0.1:1/dir\", storage_dir: "+filepath.Join(tlsDir, "acme")+"}}}\n"+oneRoute,
		map[string]string{"APP": up.URL}, gwOpts{})

	exported := map[string]metricFamily{}
	for _, url := range []string{standalone.metrics, cluster.metrics, withTLS.metrics} {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := parser.TextToMetricFamilies(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("scrape %s: %v", url, err)
		}
		for name, mf := range mfs {
			f := exported[name]
			f.typ = mf.GetType()
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if !slices.Contains(f.labels, lp.GetName()) {
						f.labels = append(f.labels, lp.GetName())
					}
				}
			}
			exported[name] = f
		}
	}
	// The scrape saw the layers it was meant to see.
	for _, name := range []string{"bulwark_would_reject_total", "bulwark_shield_events_total", "bulwark_xdp_attached", "bulwark_global_redis_roundtrips_total",
		"bulwark_rls_requests_total", "bulwark_dependency_up", "bulwark_config_reloads_total", "bulwark_guard_connections_refused_total",
		"bulwark_tls_certificate_expiry_timestamp_seconds", "bulwark_tls_certificate_reload_failures_total",
		"bulwark_acme_failures_total", "bulwark_acme_certificates_obtained_total"} {
		if _, ok := exported[name]; !ok {
			t.Errorf("the scrape has no %s: the test traffic no longer creates it", name)
		}
	}
	return exported
}
