package route

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/canon"
	"github.com/bulwarkhq/bulwark/conf"
)

// testMatcher is a Matcher with its patterns, to name what matched.
type testMatcher struct {
	*Matcher
	patterns []Pattern
}

func buildMatcher(t testing.TB, patterns []Pattern) testMatcher {
	t.Helper()
	mt, err := Compile(patterns, DefaultFrontControllers())
	if err != nil {
		t.Fatal(err)
	}
	return testMatcher{mt, patterns}
}

// lookup returns the name of the pattern matching a request, "none" or
// "invalid".
func lookup(t testing.TB, mt testMatcher, method, host, target string) string {
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
	m, err := mt.Lookup(strings.ToUpper(method), canon.Host(host), p, query)
	if err != nil {
		return "invalid"
	}
	if m.Index < 0 {
		return "none"
	}
	return mt.patterns[m.Index].Name
}

// collisions returns the collisions Compile reports for patterns.
func collisions(t *testing.T, patterns []Pattern, fc FrontControllers) Collisions {
	t.Helper()
	_, err := Compile(patterns, fc)
	var cs Collisions
	if err != nil && !errors.As(err, &cs) {
		t.Fatalf("%v: %v, want collisions", patterns, err)
	}
	return cs
}

func TestMatchVariants(t *testing.T) {
	mt := buildMatcher(t, []Pattern{
		{Name: "login", Path: "/login", Methods: []string{"POST"}},
		{Name: "admin", Path: "/", Host: "admin.example.com"},
		{Name: "exports", Path: "/api/exports"},
		{Name: "api", Path: "/api/"},
		{Name: "item", Path: "/items/{id}"},
		{Name: "files", Path: "/files/{p...}"},
		{Name: "root", Path: "/{$}"},
		{Name: "strict", Path: "/Exact", CaseSensitive: true, StrictSlash: true},
		{Name: "all", Path: "/"},
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
	mt := buildMatcher(t, []Pattern{
		{Name: "exact", Path: "/a", StrictSlash: true},
		{Name: "dir", Path: "/a/", StrictSlash: true},
		{Name: "root", Path: "/{$}", StrictSlash: true},
	})
	for target, want := range map[string]string{"/a": "exact", "/A": "exact", "/a/": "dir", "/a/b": "dir", "/": "root", "/b": "none"} {
		if got := lookup(t, mt, "GET", "", target); got != want {
			t.Errorf("%s → %s, want %s", target, got, want)
		}
	}
}

func TestMatchMethods(t *testing.T) {
	mt := buildMatcher(t, []Pattern{
		{Name: "get", Path: "/r", Methods: []string{"GET"}},
		{Name: "post", Path: "/r", Methods: []string{"POST", "PUT"}},
		{Name: "any", Path: "/r/x"},
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
	base := []Pattern{
		{Name: "a", Path: "/"},
		{Name: "b", Path: "/api/"},
		{Name: "c", Path: "/api/v1/"},
		{Name: "d", Path: "/api/v1/{id}"},
		{Name: "e", Path: "/api/v1/special"},
		{Name: "f", Path: "/api/v1/special", Methods: []string{"POST"}},
		{Name: "g", Path: "/", Host: "h.example"},
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
	perm := append([]Pattern(nil), base...)
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
	for _, c := range [][]Pattern{
		{{Name: "a", Path: "/login"}, {Name: "b", Path: "/LOGIN"}},
		{{Name: "a", Path: "/login"}, {Name: "b", Path: "/login/{$}"}},
		{{Name: "a", Path: "/items/{id}"}, {Name: "b", Path: "/items/{name}"}},
		{{Name: "a", Path: "/{x}/b"}, {Name: "b", Path: "/a/{y}"}},
		{{Name: "a", Path: "/x", Methods: []string{"GET", "POST"}}, {Name: "b", Path: "/x", Methods: []string{"POST", "PUT"}}},
	} {
		if bad := collisions(t, c, DefaultFrontControllers()); len(bad) != 1 {
			t.Errorf("%v: %d collisions reported, want 1", c, len(bad))
		}
	}
	// Not collisions: one is more specific, or they are disjoint.
	for _, c := range [][]Pattern{
		{{Name: "a", Path: "/login", CaseSensitive: true}, {Name: "b", Path: "/login"}},
		{{Name: "a", Path: "/x", StrictSlash: true}, {Name: "b", Path: "/x/", StrictSlash: true}},
		{{Name: "a", Path: "/x", Methods: []string{"GET"}}, {Name: "b", Path: "/x", Methods: []string{"POST"}}},
		{{Name: "a", Path: "/x", Methods: []string{"GET"}}, {Name: "b", Path: "/x"}},
		{{Name: "a", Path: "/", Host: "h"}, {Name: "b", Path: "/api/"}},
		{{Name: "a", Path: "/x"}, {Name: "b", Path: "/x", StrictSlash: true}},
	} {
		if bad := collisions(t, c, DefaultFrontControllers()); len(bad) != 0 {
			t.Errorf("%v: unexpected collisions %v", c, bad)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, p := range []string{"", "login", "/a//b", "/a/./b", "/a/../b", "/a%2Fb", "/a;b", "/a\\b", "/{x", "/x{y}", "/{x}/{x}", "/{p...}/z", "/{$}/x", "/{9}", "/a b"} {
		_, err := Compile([]Pattern{{Name: "ok", Path: "/"}, {Name: "r", Path: p}}, FrontControllers{})
		var pe *PatternError
		if !errors.As(err, &pe) || pe.Index != 1 || pe.Name != "r" || pe.Path != p || pe.Reason == "" {
			t.Errorf("pattern %q: %v, want a *PatternError naming it", p, err)
		}
	}
}

// fiftyRoutes is a realistic API surface for the benchmark.
func fiftyRoutes() []Pattern {
	var rs []Pattern
	for i := 0; i < 24; i++ {
		rs = append(rs, Pattern{Name: fmt.Sprintf("r%d", i), Path: fmt.Sprintf("/api/v1/resource%d/{id}", i)})
		rs = append(rs, Pattern{Name: fmt.Sprintf("c%d", i), Path: fmt.Sprintf("/api/v1/resource%d", i), Methods: []string{"POST"}})
	}
	rs = append(rs, Pattern{Name: "login", Path: "/login", Methods: []string{"POST"}}, Pattern{Name: "all", Path: "/"})
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
				if m, _ := mt.Lookup("GET", canon.Host("api.example.com"), p, ""); m.Index < 0 {
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
		if m, _ := mt.Lookup("GET", canon.Host("api.example.com:443"), p, "x=1"); m.Index < 0 {
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
	mt := buildMatcher(t, []Pattern{{Name: "keys", Path: "/keys/{id}"}, {Name: "all", Path: "/"}})
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
	mt := buildMatcher(t, []Pattern{
		{Name: "login", Path: "/login", Methods: []string{"POST"}},
		{Name: "item", Path: "/items/{id}"},
		{Name: "blog-login", Path: "/blog/login"},
		{Name: "export", Path: "/export", StrictFormat: true},
		{Name: "legacy", Path: "/legacy", StrictFrontController: true},
		{Name: "php-admin", Path: "/index.php/admin", StrictFrontController: true},
		{Name: "root", Path: "/{$}"},
		{Name: "all", Path: "/"},
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
		routes []Pattern
		want   string // "" = accepted
	}{
		{[]Pattern{{Name: "a", Path: "/login"}, {Name: "b", Path: "/login.json"}}, "StrictFormat"},
		{[]Pattern{{Name: "a", Path: "/api/login.json"}, {Name: "b", Path: "/api/LOGIN"}}, "StrictFormat"},
		{[]Pattern{{Name: "a", Path: "/login", StrictFormat: true}, {Name: "b", Path: "/login.json"}}, ""},
		{[]Pattern{{Name: "a", Path: "/login", Methods: []string{"GET"}}, {Name: "b", Path: "/login.json", Methods: []string{"POST"}}}, ""},
		{[]Pattern{{Name: "a", Path: "/index.php/login"}}, "StrictFrontController"},
		{[]Pattern{{Name: "a", Path: "/login"}, {Name: "b", Path: "/index.php/login", StrictFrontController: true}}, "front controller"},
		{[]Pattern{{Name: "a", Path: "/"}, {Name: "b", Path: "/index.php/login", StrictFrontController: true}}, ""},
		{[]Pattern{{Name: "a", Path: "/login", StrictFrontController: true}, {Name: "b", Path: "/index.php/login", StrictFrontController: true}}, ""},
	} {
		bad := collisions(t, c.routes, DefaultFrontControllers())
		switch {
		case c.want == "" && len(bad) > 0:
			t.Errorf("%v: unexpected %v", c.routes, bad)
		case c.want != "" && (len(bad) != 1 || !strings.Contains(bad[0].Error(), c.want)):
			t.Errorf("%v: %v, want one collision naming %q", c.routes, bad, c.want)
		}
	}
	// Without front controllers configured, a script is a plain segment.
	if bad := collisions(t, []Pattern{{Name: "a", Path: "/index.php/login"}}, FrontControllers{}); len(bad) != 0 {
		t.Errorf("no scripts configured: %v", bad)
	}
}

// Every collision names both patterns by index and says what kind it is;
// errors.As finds one *Collision in the Collisions too.
func TestCollisionKinds(t *testing.T) {
	for _, c := range []struct {
		patterns []Pattern
		want     Collision
	}{
		{[]Pattern{{Name: "a", Path: "/login"}, {Name: "b", Path: "/LOGIN"}}, Collision{Kind: Equal, A: 0, B: 1, NameA: "a", NameB: "b"}},
		{[]Pattern{{Name: "a", Path: "/{x}/b"}, {Name: "b", Path: "/a/{y}"}}, Collision{Kind: Overlap, A: 0, B: 1, NameA: "a", NameB: "b"}},
		{[]Pattern{{Path: "/x"}, {Name: "a", Path: "/login.json"}, {Name: "b", Path: "/login"}}, Collision{Kind: FormatSuffix, A: 1, B: 2, NameA: "a", NameB: "b"}},
		{[]Pattern{{Name: "a", Path: "/login"}, {Path: "/index.php/login", StrictFrontController: true}}, Collision{Kind: FrontController, A: 0, B: 1, NameA: "a", NameB: "/index.php/login"}},
		{[]Pattern{{Name: "a", Path: "/Index.php/login"}}, Collision{Kind: NamesScript, A: 0, B: 0, Script: "Index.php", NameA: "a", NameB: "a"}},
	} {
		_, err := Compile(c.patterns, DefaultFrontControllers())
		cs, ok := errors.AsType[Collisions](err)
		if !ok || len(cs) != 1 || *cs[0] != c.want {
			t.Errorf("%v: %v, want %+v", c.patterns, err, c.want)
			continue
		}
		if one, ok := errors.AsType[*Collision](err); !ok || one != cs[0] {
			t.Errorf("%v: errors.As finds %v, want the collision", c.patterns, one)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "route: ") || !strings.Contains(msg, c.want.NameA) {
			t.Errorf("%v: message %q", c.patterns, msg)
		}
	}
	// Several collisions are all reported, the message counting the rest.
	_, err := Compile([]Pattern{{Path: "/a"}, {Path: "/A"}, {Path: "/{x}/b"}, {Path: "/a/{y}"}}, FrontControllers{})
	if cs, ok := errors.AsType[Collisions](err); !ok || len(cs) != 2 || !strings.HasSuffix(err.Error(), "(and 1 more)") {
		t.Errorf("two collisions: %v", err)
	}
}

// Compile keeps its own copy of the front controller lists: a caller
// changing its slices afterwards changes nothing.
func TestCompileCopiesFrontControllers(t *testing.T) {
	fc := DefaultFrontControllers()
	mt := buildMatcher(t, []Pattern{{Name: "login", Path: "/login"}, {Name: "all", Path: "/"}})
	mt.Matcher, _ = Compile(mt.patterns, fc)
	fc.Scripts[0], fc.QueryParams[0] = "other.php", "other"
	for target, want := range map[string]string{"/index.php/login": "login", "/index.php?route=/login": "login"} {
		if got := lookup(t, mt, "GET", "", target); got != want {
			t.Errorf("%s → %s, want %s", target, got, want)
		}
	}
}

// A lookup reports the flags of the path it matched on: the request's
// own, and those of the path a front controller routes to.
func TestLookupFlags(t *testing.T) {
	mt := buildMatcher(t, []Pattern{{Name: "login", Path: "/login"}, {Name: "all", Path: "/"}})
	for _, c := range []struct {
		target    string
		ambiguous bool
	}{
		{"/login", false},
		{"/login%2F", true},
		{"/nowhere%5C", true},
		{"/index.php?route=/login%5C", true}, // a backslash, after decoding
		{"/index.php?route=/login", false},
	} {
		raw, query, _ := strings.Cut(c.target, "?")
		p, err := canon.Path(raw)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mt.Lookup("GET", "", p, query)
		if err != nil || m.Index < 0 {
			t.Fatalf("%s: %+v, %v", c.target, m, err)
		}
		if got := m.Flags&canon.Ambiguous != 0; got != c.ambiguous {
			t.Errorf("%s: flags %v, ambiguous %v, want %v", c.target, m.Flags, got, c.ambiguous)
		}
	}
}

// BenchmarkLookup is the lookup alone among 50 patterns, on paths
// already canonical: it does not allocate.
func BenchmarkLookup(b *testing.B) {
	mt := buildMatcher(b, fiftyRoutes())
	for _, c := range []struct{ name, target string }{
		{"first", "/api/v1/resource0/42"},
		{"last", "/api/v1/resource23/42"},
		{"fallthrough", "/static/app.js"},
	} {
		p, err := canon.Path(c.target)
		if err != nil {
			b.Fatal(err)
		}
		host := canon.Host("api.example.com")
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m, _ := mt.Lookup("GET", host, p, ""); m.Index < 0 {
					b.Fatal("no match")
				}
			}
		})
	}
}

// FrontControllers.Validate names every bad entry by its key, with the
// package's kind; Compile refuses what Validate refuses.
func TestFrontControllersValidate(t *testing.T) {
	if err := DefaultFrontControllers().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	many := make([]string, canon.MaxScripts+1)
	for i := range many {
		many[i] = fmt.Sprintf("s%d.php", i)
	}
	for _, c := range []struct {
		fc    FrontControllers
		paths []string
	}{
		{FrontControllers{Scripts: []string{"index.php", "a/b.php", "INDEX.PHP", "..", ""}}, []string{"scripts[1]", "scripts[2]", "scripts[3]", "scripts[4]"}},
		{FrontControllers{QueryParams: []string{"route", "a=b", "x.y", strings.Repeat("p", 65), "ROUTE"}}, []string{"query_params[1]", "query_params[2]", "query_params[3]", "query_params[4]"}},
		{FrontControllers{Scripts: many}, []string{"scripts"}},
	} {
		err := c.fc.Validate()
		if !errors.Is(err, ErrInvalidFrontControllers) {
			t.Errorf("%+v: %v, want ErrInvalidFrontControllers", c.fc, err)
			continue
		}
		var paths []string
		for _, fe := range err.(conf.Errors) {
			paths = append(paths, fe.Path)
		}
		if fmt.Sprint(paths) != fmt.Sprint(c.paths) {
			t.Errorf("%+v: problems at %v, want %v", c.fc, paths, c.paths)
		}
		if _, err := Compile(nil, c.fc); !errors.Is(err, ErrInvalidFrontControllers) {
			t.Errorf("Compile with %+v: %v", c.fc, err)
		}
	}
}

// Pattern.Validate checks a pattern as written and names every bad field
// by its key, with ErrInvalidPattern as the kind.
func TestPatternValidate(t *testing.T) {
	if err := (Pattern{Path: "/api/{id}", Methods: []string{"GET", "POST"}, Host: "api.example.com"}).Validate(); err != nil {
		t.Fatalf("a good pattern: %v", err)
	}
	many := make([]string, MaxMethods+1)
	for i := range many {
		many[i] = fmt.Sprintf("M%d", i)
	}
	for _, c := range []struct {
		p    Pattern
		want []string
	}{
		{Pattern{}, []string{`path: required`}},
		{Pattern{Path: "/a b"}, []string{`path: "/a b": no spaces (put methods in match.methods and the host in match.host)`}},
		{Pattern{Path: "login"}, []string{`path: "login": want a path pattern starting with /`}},
		{Pattern{Path: "/x", Methods: []string{"get", "GET", "GET", "G T"}, Host: "Example.com:80"}, []string{
			`methods[0]: "get": want an upper-case method such as GET`,
			`methods[2]: duplicate method "GET"`,
			`methods[3]: "G T": want an upper-case method such as GET`,
			`host: "Example.com:80": want a lower-case host name without port`,
		}},
		{Pattern{Path: "/x", Methods: many}, []string{fmt.Sprintf("methods: %d methods, at most %d", MaxMethods+1, MaxMethods)}},
		{Pattern{Path: "/x", Methods: []string{strings.Repeat("A", MaxMethodBytes+1)}}, []string{
			fmt.Sprintf("methods[0]: %q: want an upper-case method such as GET", strings.Repeat("A", MaxMethodBytes+1))}},
	} {
		err := c.p.Validate()
		if !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("%+v: %v, want ErrInvalidPattern", c.p, err)
			continue
		}
		var es conf.Errors
		errors.As(err, &es)
		var got []string
		for _, e := range es {
			got = append(got, e.Path+": "+e.Msg)
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%+v:\ngot  %q\nwant %q", c.p, got, c.want)
		}
	}
}
