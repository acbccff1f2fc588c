package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/canon"
)

// testFC are the default front controllers.
var testFC = frontControllers{scripts: DefaultFrontControllerScripts, params: DefaultFrontControllerParams}

type testRoute struct {
	name, path, host string
	methods          []string
	opt              matchOptions
}

func buildMatcher(t testing.TB, routes []testRoute) *matcher {
	t.Helper()
	rules := make([]*matchRule, len(routes))
	for i, r := range routes {
		m, err := compileMatch(i, r.name, r.path, r.host, r.methods, r.opt)
		if err != nil {
			t.Fatalf("route %s: %v", r.name, err)
		}
		rules[i] = m
	}
	mt, bad := newMatcher(rules, testFC)
	if len(bad) > 0 {
		t.Fatalf("collisions: %v", bad)
	}
	return mt
}

func lookup(t testing.TB, mt *matcher, method, host, target string) string {
	t.Helper()
	raw, auth := canon.Target(target)
	if auth != "" {
		host = auth
	}
	p, err := canon.Path(raw)
	if err != nil {
		return "invalid"
	}
	_, query, _ := strings.Cut(target, "?")
	r, _, err := mt.find(strings.ToUpper(method), canon.Host(host), p, query)
	if err != nil {
		return "invalid"
	}
	if r == nil {
		return "none"
	}
	return r.name
}

func TestMatchVariants(t *testing.T) {
	mt := buildMatcher(t, []testRoute{
		{name: "login", path: "/login", methods: []string{"POST"}},
		{name: "admin", path: "/", host: "admin.example.com"},
		{name: "exports", path: "/api/exports"},
		{name: "api", path: "/api/"},
		{name: "item", path: "/items/{id}"},
		{name: "files", path: "/files/{p...}"},
		{name: "root", path: "/{$}"},
		{name: "strict", path: "/Exact", opt: matchOptions{caseSensitive: true, strictSlash: true}},
		{name: "all", path: "/"},
	})
	for _, c := range []struct{ method, host, target, want string }{
		{"POST", "x", "/login", "login"},
		{"POST", "x", "/LOGIN", "login"},
		{"POST", "x", "/login/", "login"},
		{"POST", "x", "/login%2F", "login"},
		{"POST", "x", "/login;jsessionid=1", "login"},
		{"POST", "x", "/a/../login", "login"},
		{"POST", "x", "//login", "login"},
		{"post", "x", "/login", "login"},
		{"POST", "x", "/login?username=alice", "login"},
		{"POST", "x", "http://x/Login/", "login"},
		{"GET", "x", "/login", "all"},
		{"GET", "admin.example.com", "/login", "admin"},
		{"GET", "ADMIN.example.com", "/x", "admin"},
		{"GET", "admin.example.com.", "/x", "admin"},
		{"GET", "admin.example.com:8443", "/x", "admin"},
		{"GET", "other", "http://ADMIN.EXAMPLE.COM./y", "admin"},
		{"POST", "x", "/api%2Fexports", "exports"},
		{"POST", "x", "/API/Exports/", "exports"},
		{"GET", "x", "/api", "api"},
		{"GET", "x", "/api/other", "api"},
		{"GET", "x", "/items/42", "item"},
		{"GET", "x", "/items/42/", "item"},
		{"GET", "x", "/items/42/x", "all"},
		{"GET", "x", "/items", "all"},
		{"GET", "x", "/files", "files"},
		{"GET", "x", "/files/a/b/c", "files"},
		{"GET", "x", "/", "root"},
		{"GET", "x", "/Exact", "strict"},
		{"GET", "x", "/exact", "all"},
		{"GET", "x", "/Exact/", "all"},
		{"HEAD", "x", "/items/1", "item"},
	} {
		if got := lookup(t, mt, c.method, c.host, c.target); got != c.want {
			t.Errorf("%s %s %s → %s, want %s", c.method, c.host, c.target, got, c.want)
		}
	}
}

func TestMatchStrictSlash(t *testing.T) {
	mt := buildMatcher(t, []testRoute{
		{name: "exact", path: "/a", opt: matchOptions{strictSlash: true}},
		{name: "dir", path: "/a/", opt: matchOptions{strictSlash: true}},
		{name: "root", path: "/{$}", opt: matchOptions{strictSlash: true}},
	})
	for target, want := range map[string]string{"/a": "exact", "/A": "exact", "/a/": "dir", "/a/b": "dir", "/": "root", "/b": "none"} {
		if got := lookup(t, mt, "GET", "", target); got != want {
			t.Errorf("%s → %s, want %s", target, got, want)
		}
	}
}

func TestMatchMethods(t *testing.T) {
	mt := buildMatcher(t, []testRoute{
		{name: "get", path: "/r", methods: []string{"GET"}},
		{name: "post", path: "/r", methods: []string{"POST", "PUT"}},
		{name: "any", path: "/r/x"},
	})
	for _, c := range []struct{ m, want string }{{"GET", "get"}, {"HEAD", "get"}, {"POST", "post"}, {"put", "post"}, {"DELETE", "none"}} {
		if got := lookup(t, mt, c.m, "", "/r"); got != c.want {
			t.Errorf("%s /r → %s, want %s", c.m, got, c.want)
		}
	}
}

// Precedence is the most specific route whatever the configuration
// order: every permutation of a set of nested routes answers the same.
func TestMatchOrderIndependent(t *testing.T) {
	base := []testRoute{
		{name: "a", path: "/"},
		{name: "b", path: "/api/"},
		{name: "c", path: "/api/v1/"},
		{name: "d", path: "/api/v1/{id}"},
		{name: "e", path: "/api/v1/special"},
		{name: "f", path: "/api/v1/special", methods: []string{"POST"}},
		{name: "g", path: "/", host: "h.example"},
	}
	want := map[string]string{}
	mt := buildMatcher(t, base)
	probes := []string{"/", "/x", "/api", "/api/x", "/api/v1", "/api/v1/9", "/api/v1/special", "/api/v1/9/z"}
	for _, p := range probes {
		want["GET "+p] = lookup(t, mt, "GET", "", p)
		want["POST "+p] = lookup(t, mt, "POST", "", p)
		want["GET h "+p] = lookup(t, mt, "GET", "h.example", p)
	}
	if want["POST /api/v1/special"] != "f" || want["GET /api/v1/special"] != "e" || want["GET /api/v1/9"] != "d" || want["GET h /api/x"] != "g" {
		t.Fatalf("unexpected precedence: %v", want)
	}
	perm := append([]testRoute(nil), base...)
	for k := 0; k < 50; k++ {
		// A deterministic shuffle.
		for i := range perm {
			j := (i*7 + k*3) % len(perm)
			perm[i], perm[j] = perm[j], perm[i]
		}
		mt := buildMatcher(t, perm)
		for _, p := range probes {
			for key, got := range map[string]string{
				"GET " + p:   lookup(t, mt, "GET", "", p),
				"POST " + p:  lookup(t, mt, "POST", "", p),
				"GET h " + p: lookup(t, mt, "GET", "h.example", p),
			} {
				if got != want[key] {
					t.Fatalf("permutation %d: %s → %s, want %s", k, key, got, want[key])
				}
			}
		}
	}
}

func TestMatchCollisions(t *testing.T) {
	for _, c := range [][]testRoute{
		{{name: "a", path: "/login"}, {name: "b", path: "/LOGIN"}},
		{{name: "a", path: "/login"}, {name: "b", path: "/login/{$}"}},
		{{name: "a", path: "/items/{id}"}, {name: "b", path: "/items/{name}"}},
		{{name: "a", path: "/{x}/b"}, {name: "b", path: "/a/{y}"}},
		{{name: "a", path: "/x", methods: []string{"GET", "POST"}}, {name: "b", path: "/x", methods: []string{"POST", "PUT"}}},
	} {
		var rules []*matchRule
		for i, r := range c {
			m, err := compileMatch(i, r.name, r.path, r.host, r.methods, r.opt)
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, m)
		}
		if _, bad := newMatcher(rules, testFC); len(bad) != 1 {
			t.Errorf("%v: %d collisions reported, want 1", c, len(bad))
		}
	}
	// Not collisions: one is more specific, or they are disjoint.
	for _, c := range [][]testRoute{
		{{name: "a", path: "/login", opt: matchOptions{caseSensitive: true}}, {name: "b", path: "/login"}},
		{{name: "a", path: "/x", opt: matchOptions{strictSlash: true}}, {name: "b", path: "/x/", opt: matchOptions{strictSlash: true}}},
		{{name: "a", path: "/x", methods: []string{"GET"}}, {name: "b", path: "/x", methods: []string{"POST"}}},
		{{name: "a", path: "/x", methods: []string{"GET"}}, {name: "b", path: "/x"}},
		{{name: "a", path: "/", host: "h"}, {name: "b", path: "/api/"}},
		{{name: "a", path: "/x"}, {name: "b", path: "/x", opt: matchOptions{strictSlash: true}}},
	} {
		var rules []*matchRule
		for i, r := range c {
			m, _ := compileMatch(i, r.name, r.path, r.host, r.methods, r.opt)
			rules = append(rules, m)
		}
		if _, bad := newMatcher(rules, testFC); len(bad) != 0 {
			t.Errorf("%v: unexpected collisions %v", c, bad)
		}
	}
}

func TestCompileMatchErrors(t *testing.T) {
	for _, p := range []string{"", "login", "/a//b", "/a/./b", "/a/../b", "/a%2Fb", "/a;b", "/a\\b", "/{x", "/x{y}", "/{x}/{x}", "/{p...}/z", "/{$}/x", "/{9}", "/a b"} {
		if _, err := compileMatch(0, "r", p, "", nil, matchOptions{}); err == nil {
			t.Errorf("pattern %q accepted", p)
		}
	}
}

// fiftyRoutes is a realistic API surface for the benchmark.
func fiftyRoutes() []testRoute {
	var rs []testRoute
	for i := 0; i < 24; i++ {
		rs = append(rs, testRoute{name: fmt.Sprintf("r%d", i), path: fmt.Sprintf("/api/v1/resource%d/{id}", i)})
		rs = append(rs, testRoute{name: fmt.Sprintf("c%d", i), path: fmt.Sprintf("/api/v1/resource%d", i), methods: []string{"POST"}})
	}
	rs = append(rs, testRoute{name: "login", path: "/login", methods: []string{"POST"}}, testRoute{name: "all", path: "/"})
	return rs
}

// The whole identity step of a request: canonical path and host, then the
// route lookup, for 50 routes.
func BenchmarkMatch50(b *testing.B) {
	mt := buildMatcher(b, fiftyRoutes())
	for _, c := range []struct{ name, target string }{
		{"canonical", "/api/v1/resource23/42"},
		{"variant", "/API/v1/./resource23;x=1/42/"},
		{"fallthrough", "/static/app.js"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				raw, _ := canon.Target(c.target)
				p, _ := canon.Path(raw)
				if r, _, _ := mt.find("GET", canon.Host("api.example.com"), p, ""); r == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

func TestNoRaceMatchCanonicalNoAlloc(t *testing.T) {
	mt := buildMatcher(t, fiftyRoutes())
	n := testing.AllocsPerRun(200, func() {
		raw, _ := canon.Target("/api/v1/resource23/42?x=1")
		p, _ := canon.Path(raw)
		if r, _, _ := mt.find("GET", canon.Host("api.example.com:443"), p, "x=1"); r == nil {
			panic("no match")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocs per canonical lookup, want 0", n)
	}
}

// Unicode case variants that Java's equalsIgnoreCase (and Go's
// EqualFold) treat as equal to an ASCII letter still match: "ſ" (long s)
// folds to "s", "K" (Kelvin sign) to "k".
func TestMatchUnicodeFold(t *testing.T) {
	mt := buildMatcher(t, []testRoute{{name: "keys", path: "/keys/{id}"}, {name: "all", path: "/"}})
	for _, target := range []string{"/keys/1", "/KEYS/1", "/\u212Aey\u017F/1", "/%E2%84%AAeys/1"} {
		if got := lookup(t, mt, "GET", "", target); got != "keys" {
			t.Errorf("%q → %s, want keys", target, got)
		}
	}
}

// Spellings frameworks route to one handler: Rails' (and Spring's legacy)
// ".format" suffix, and a PHP front controller's path info and routing
// query parameters. Each route opts out on its own.
func TestMatchFrameworkEquivalences(t *testing.T) {
	mt := buildMatcher(t, []testRoute{
		{name: "login", path: "/login", methods: []string{"POST"}},
		{name: "item", path: "/items/{id}"},
		{name: "blog-login", path: "/blog/login"},
		{name: "export", path: "/export", opt: matchOptions{strictFormat: true}},
		{name: "legacy", path: "/legacy", opt: matchOptions{strictScript: true}},
		{name: "php-admin", path: "/index.php/admin", opt: matchOptions{strictScript: true}},
		{name: "root", path: "/{$}"},
		{name: "all", path: "/"},
	})
	for _, c := range []struct{ method, target, want string }{
		{"POST", "/login", "login"},
		{"POST", "/login.json", "login"},
		{"POST", "/LOGIN.XML/", "login"},
		{"POST", "/login.", "all"},         // no format
		{"POST", "/.json", "all"},          // no name
		{"POST", "/login.json.xml", "all"}, // Rails: the format has no dot
		{"POST", "/index.php/login", "login"},
		{"POST", "/INDEX.PHP/login.json", "login"},
		{"POST", "/app_dev.php/login", "login"},
		{"POST", "/index.php?route=/login", "login"},
		{"POST", "/index.php?route=login", "login"},
		{"POST", "/index.php/?r=login", "login"},
		{"POST", "/?q=login&destination=x", "login"},
		{"POST", "/?/login", "login"},
		{"POST", "/index.php?rest.route=/login", "login"},
		{"POST", "/?r=site%2Flogin", "all"},
		{"POST", "/index.php?route=/a&r=/login", "invalid"},
		{"POST", "/login?route=/other", "login"}, // the query routes only at a script or "/"
		{"GET", "/items/5.json", "item"},
		{"GET", "/blog/index.php/login", "blog-login"},
		{"GET", "/blog/index.php?route=login", "blog-login"},
		{"GET", "/export.csv", "all"},
		{"GET", "/export", "export"},
		{"GET", "/index.php/legacy", "all"},
		{"GET", "/legacy", "legacy"},
		{"GET", "/index.php/admin", "php-admin"},
		{"GET", "/?page=2", "root"},
		{"GET", "/", "root"},
	} {
		if got := lookup(t, mt, c.method, "", c.target); got != c.want {
			t.Errorf("%s %s → %s, want %s", c.method, c.target, got, c.want)
		}
	}
}

// Two routes whose identities overlap only through an equivalence are
// reported, with what to do about it.
func TestMatchEquivalenceCollisions(t *testing.T) {
	for _, c := range []struct {
		routes []testRoute
		want   string // "" = accepted
	}{
		{[]testRoute{{name: "a", path: "/login"}, {name: "b", path: "/login.json"}}, "strict_format"},
		{[]testRoute{{name: "a", path: "/api/login.json"}, {name: "b", path: "/api/LOGIN"}}, "strict_format"},
		{[]testRoute{{name: "a", path: "/login", opt: matchOptions{strictFormat: true}}, {name: "b", path: "/login.json"}}, ""},
		{[]testRoute{{name: "a", path: "/login", methods: []string{"GET"}}, {name: "b", path: "/login.json", methods: []string{"POST"}}}, ""},
		{[]testRoute{{name: "a", path: "/index.php/login"}}, "strict_front_controller"},
		{[]testRoute{{name: "a", path: "/login"}, {name: "b", path: "/index.php/login", opt: matchOptions{strictScript: true}}}, "front controller"},
		{[]testRoute{{name: "a", path: "/"}, {name: "b", path: "/index.php/login", opt: matchOptions{strictScript: true}}}, ""},
		{[]testRoute{{name: "a", path: "/login", opt: matchOptions{strictScript: true}}, {name: "b", path: "/index.php/login", opt: matchOptions{strictScript: true}}}, ""},
	} {
		var rules []*matchRule
		for i, r := range c.routes {
			m, err := compileMatch(i, r.name, r.path, r.host, r.methods, r.opt)
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, m)
		}
		_, bad := newMatcher(rules, testFC)
		switch {
		case c.want == "" && len(bad) > 0:
			t.Errorf("%v: unexpected %v", c.routes, bad)
		case c.want != "" && (len(bad) != 1 || !strings.Contains(bad[0].Error(), c.want)):
			t.Errorf("%v: %v, want one collision naming %q", c.routes, bad, c.want)
		}
	}
	// Without front controllers configured, a script is a plain segment.
	m, _ := compileMatch(0, "a", "/index.php/login", "", nil, matchOptions{})
	if _, bad := newMatcher([]*matchRule{m}, frontControllers{}); len(bad) != 0 {
		t.Errorf("no scripts configured: %v", bad)
	}
}
