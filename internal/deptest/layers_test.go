package deptest

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// The layering of the module. Every package of the module has a tier,
// listed here by its exact import path (below the module), so that a new
// package fails TestLayering until someone decides where it belongs. A
// package imports (in its non-test files) only packages of lower tiers,
// or of its own tier where that tier allows it:
//
//	core      clock limit keyed canon conf conf/yamlconf internal/fieldname
//	          internal/tracectx redisconn
//	identity  peer ipset route proxyproto
//	wire      wire: the answers (problem details, Retry-After, RateLimit)
//	engine    h1 h2 internal/evloop internal/deadline internal/h2conn
//	          internal/admission host
//	layer     shield ratelimit login quota global proxy guard xdp rls (and
//	          their adapter packages): no layer imports another, except
//	          through a rule in layerRules, stated with its reason
//	operator  control (the control API)
//	ui        console (the operator UI over the control API)
//	outside   gateway, cmd, examples, tools and test support: they may
//	          import any library package; no library package imports them
//
// host is in the engine tier, not a layer of its own: it is the HTTP
// server the engines run in (net/http, the goroutine engine over h1, the
// event loops of internal/evloop), with its probes and admission; it
// imports only engine, wire and core packages, and the layers run inside
// it as handlers without importing it. What a handler needs of it
// without the server (the admission hold and its cancel causes) is
// internal/admission, which host re-exports.
//
// The dependency rules (deptest_test.go) add what tiers cannot say:
// drivers only in their adapters, no Prometheus, no gateway or cmd, and
// control/internal/jsonapi without host.
type tier int

const (
	tierCore tier = iota
	tierIdentity
	tierWire
	tierEngine
	tierLayer
	tierOperator
	tierUI
	tierOutside
)

var tierNames = [...]string{"core", "identity", "wire", "engine", "layer", "operator", "ui", "outside"}

func (t tier) String() string { return tierNames[t] }

// place is a package's position: its tier, and for a layer package the
// layer it belongs to (an adapter belongs to the layer it adapts).
type place struct {
	tier  tier
	layer string
}

func core() place             { return place{tier: tierCore} }
func identity() place         { return place{tier: tierIdentity} }
func engine() place           { return place{tier: tierEngine} }
func outside() place          { return place{tier: tierOutside} }
func layer(name string) place { return place{tier: tierLayer, layer: name} }

// places classifies every package of the module, by import path below
// the module.
var places = map[string]place{
	// Core: pure algorithms, state tables, vocabularies; no HTTP answers.
	"clock":              core(),
	"limit":              core(),
	"keyed":              core(),
	"canon":              core(),
	"conf":               core(),
	"conf/yamlconf":      core(), // the YAML walker every configuration file goes through
	"internal/fieldname": core(), // how lenient servers compare field names
	"internal/tracectx":  core(), // the W3C traceparent field, read and written
	"redisconn":          core(), // the Redis connection the Redis adapters share

	// Identity: who the client is, the address lists, and which route a
	// request is (matched on its canonical identity).
	"peer":  identity(),
	"ipset": identity(),
	"route": identity(),
	// The PROXY protocol: who the client behind an L4 balancer is, read
	// from the connection's first bytes.
	"proxyproto": identity(),

	"wire": {tier: tierWire},

	// The engine: HTTP/1.1 parsing, the native HTTP/2 server, event
	// loops, connection plumbing and the host that runs them.
	"h1":                 engine(),
	"h2":                 engine(),
	"internal/evloop":    engine(),
	"internal/deadline":  engine(),
	"internal/h2conn":    engine(),
	"internal/admission": engine(),
	"host":               engine(),

	// The protection layers, each with its adapters.
	"shield":             layer("shield"),
	"ratelimit":          layer("ratelimit"),
	"login":              layer("login"),
	"login/redisstore":   layer("login"),
	"quota":              layer("quota"),
	"quota/pgquota":      layer("quota"),
	"global":             layer("global"),
	"global/redisglobal": layer("global"),
	"proxy":              layer("proxy"),
	"guard":              layer("guard"),
	"xdp":                layer("xdp"),
	"rls":                layer("rls"),

	// The operator's API over the layers, and the UI over the API.
	"control":                  {tier: tierOperator},
	"control/internal/jsonapi": {tier: tierOperator},
	"console":                  {tier: tierUI},

	// Not library code: the composition, the commands, examples, tools
	// and test support.
	"gateway":              outside(),
	"cmd/bulwark":          outside(),
	"examples/loginserver": outside(),
	"internal/testsvc":     outside(),
	"internal/deptest":     outside(),
	"internal/hosttest":    outside(),
	"internal/benchplot":   outside(),
}

// layerRule allows one layer to import another, for a stated reason.
type layerRule struct {
	from, to string
	why      string
}

// layerRules are the only imports between two layers. Each must still be
// used: a rule whose import is gone is removed with it.
var layerRules = []layerRule{
	{"rls", "global", "the RLS server is the global limiter's front for Envoy: it answers ShouldRateLimit with global's decisions"},
}

func TestLayering(t *testing.T) {
	pkgs := goList(t)
	imports := map[string][]string{}
	for path, p := range pkgs {
		if p.Module != nil && p.Module.Path == module {
			imports[path] = p.Imports
		}
	}
	if len(imports) < 20 {
		t.Fatalf("go list found %d module packages; the layering checked nothing", len(imports))
	}
	vs, edges := checkLayers(imports, places, layerRules)
	t.Logf("checked %d packages and %d import edges inside the module", len(imports), edges)
	for _, v := range vs {
		t.Error(v)
	}
}

// checkLayers returns the layering violations of a module import graph
// (import path → direct non-test imports), and how many edges inside the
// module it checked.
func checkLayers(imports map[string][]string, places map[string]place, rules []layerRule) (vs []string, edges int) {
	rel := func(p string) (string, bool) { return strings.CutPrefix(p, module+"/") }
	used := make([]bool, len(rules))
	var paths []string
	for p := range imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		from, _ := rel(path)
		pf, ok := places[from]
		if !ok {
			vs = append(vs, fmt.Sprintf("%s is not classified: give it a tier in places (internal/deptest/layers_test.go)", from))
			continue
		}
		for _, imp := range imports[path] {
			to, ok := rel(imp)
			if !ok {
				continue // outside the module: the dependency rules' business
			}
			edges++
			pt, ok := places[to]
			if !ok {
				continue // reported as unclassified on its own
			}
			switch {
			case pt.tier == tierOutside && pf.tier != tierOutside:
				vs = append(vs, fmt.Sprintf("%s (%s) imports %s (outside the library): no library package imports the gateway, the commands, examples, tools or test support", from, pf.tier, to))
			case pf.tier == tierOutside:
				// The composition and its helpers may use any package.
			case pt.tier > pf.tier:
				vs = append(vs, fmt.Sprintf("%s (%s) imports %s (%s): a package imports only lower tiers (core < identity < wire < engine < layer < operator < ui)", from, pf.tier, to, pt.tier))
			case pf.tier == tierLayer && pt.tier == tierLayer && pf.layer != pt.layer:
				i := ruleFor(rules, pf.layer, pt.layer)
				if i < 0 {
					vs = append(vs, fmt.Sprintf("%s (layer %s) imports %s (layer %s): a layer imports no other layer except through a stated rule in layerRules", from, pf.layer, to, pt.layer))
					break
				}
				used[i] = true
			}
		}
	}
	for i, r := range rules {
		if !used[i] {
			vs = append(vs, fmt.Sprintf("layer rule %s → %s (%s) is not used by any import: remove it", r.from, r.to, r.why))
		}
	}
	return vs, edges
}

func ruleFor(rules []layerRule, from, to string) int {
	for i, r := range rules {
		if r.from == from && r.to == to {
			return i
		}
	}
	return -1
}

// The checker itself, on a synthetic module: one violation of each kind
// is reported with both packages and the rule, and the allowed imports
// pass.
func TestLayerCheckerFindsViolations(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	imports := map[string][]string{
		m("clock"):              nil,
		m("limit"):              {m("clock"), "time"}, // core → core; std ignored
		m("peer"):               {m("limit")},         // identity → core
		m("keyed"):              {m("peer")},          // core → identity: upward
		m("wire"):               {m("limit")},
		m("h1"):                 {m("wire")},
		m("quota"):              {m("wire"), m("h1")},        // layer → wire, engine
		m("quota/pgquota"):      {m("quota")},                // an adapter → its own layer
		m("shield"):             {m("quota")},                // another layer, no rule
		m("rls"):                {m("global")},               // another layer, by rule
		m("global"):             {m("limit")},                //
		m("control"):            {m("xdp"), m("quota")},      // operator → layers
		m("xdp"):                {m("control")},              // layer → operator: upward
		m("console"):            {m("control")},              // ui → operator
		m("ipset"):              {m("gateway")},              // library → outside
		m("gateway"):            {m("console"), m("shield")}, // outside → anything
		m("newpkg"):             {m("clock")},                // not classified
		m("wire/extra"):         {m("newpkg")},               // not classified either
		m("internal/testsvc"):   nil,
		m("internal/admission"): {m("internal/testsvc")}, // engine → test support
	}
	ps := map[string]place{
		"clock": core(), "limit": core(), "keyed": core(), "peer": identity(),
		"wire": {tier: tierWire}, "h1": engine(), "internal/admission": engine(),
		"quota": layer("quota"), "quota/pgquota": layer("quota"), "shield": layer("shield"),
		"rls": layer("rls"), "global": layer("global"), "xdp": layer("xdp"),
		"control": {tier: tierOperator}, "console": {tier: tierUI}, "ipset": identity(),
		"gateway": outside(), "internal/testsvc": outside(),
	}
	rules := []layerRule{
		{"rls", "global", "used"},
		{"login", "quota", "stale"},
	}
	vs, _ := checkLayers(imports, ps, rules)
	want := []string{
		"internal/admission (engine) imports internal/testsvc (outside the library)",
		"ipset (identity) imports gateway (outside the library)",
		"keyed (core) imports peer (identity): a package imports only lower tiers",
		"newpkg is not classified",
		"shield (layer shield) imports quota (layer quota): a layer imports no other layer except through a stated rule",
		"wire/extra is not classified",
		"xdp (layer) imports control (operator): a package imports only lower tiers",
		"layer rule login → quota (stale) is not used",
	}
	if len(vs) != len(want) {
		t.Errorf("got %d violations, want %d:\n%s", len(vs), len(want), strings.Join(vs, "\n"))
	}
	for i, w := range want {
		if i >= len(vs) || !strings.HasPrefix(vs[i], w) {
			got := "(none)"
			if i < len(vs) {
				got = vs[i]
			}
			t.Errorf("violation %d = %s\nwant prefix %s", i, got, w)
		}
	}
}

// Every classified package exists: a removed or renamed package leaves
// no stale entry behind.
func TestPlacesExist(t *testing.T) {
	pkgs := goList(t)
	for rel := range places {
		if p, ok := pkgs[module+"/"+rel]; !ok || p.Module == nil || p.Module.Path != module {
			t.Errorf("places lists %s, which is not a package of the module: remove it", rel)
		}
	}
}
