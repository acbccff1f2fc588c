package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/bulwarkhq/bulwark"

// Packages of the module that are not library code and may import
// anything: the daemon and its composition, examples, and test support.
var notLibrary = anyOf(
	tree(module+"/cmd"),
	tree(module+"/gateway"),
	tree(module+"/examples"),
	tree(module+"/internal/testsvc"),
	tree(module+"/internal/deptest"),
)

// The rules every library package obeys, for its own code and everything
// that code pulls in (test files are not checked: they may start real
// servers through internal/testsvc). A dependency matching forbid is a
// violation unless the library package matches allowIn.
var rules = []rule{
	{
		forbid: tree(module + "/gateway"),
		why:    "the gateway composes the library, never the reverse",
	},
	{
		forbid: tree(module + "/cmd"),
		why:    "commands are thin mains on top of the library",
	},
	{
		forbid:  tree(module + "/control"),
		allowIn: anyOf(tree(module+"/control"), tree(module+"/console")),
		why:     "the control API is the operator's, above every layer; only the operator console builds on it",
	},
	{
		forbid: exact(module + "/host"),
		in:     tree(module + "/control/internal/jsonapi"),
		why:    "the control API's JSON mode runs under any server: the host's admission contract is internal/admission, not host",
	},
	{
		forbid: tree("github.com/prometheus"),
		why:    "libraries expose hooks and events; Prometheus metrics live in the gateway",
	},
	{
		forbid: tree("go.opentelemetry.io"),
		why:    "libraries expose hooks and decisions; OpenTelemetry tracing lives in the gateway",
	},
	{
		forbid:  tree("github.com/jackc/pgx"),
		allowIn: tree(module + "/quota/pgquota"),
		why:     "the PostgreSQL driver lives only in its adapter package",
	},
	{
		forbid:  tree("github.com/cilium/ebpf"),
		allowIn: tree(module + "/xdp"),
		why:     "the eBPF library lives only in the xdp package tree",
	},
	{
		forbid:  tree("github.com/redis/go-redis"),
		allowIn: contains("redis"),
		why:     "the Redis driver lives only in Redis adapter packages (global/redisglobal, login/redisstore, redisconn)",
	},
	{
		forbid: anyOf(tree("github.com/caddyserver/certmagic"), tree("github.com/mholt/acmez"), tree("go.uber.org/zap")),
		why:    "ACME (certmagic, its ACME client and its logger) lives in the gateway and cmd; host sees only a tls.Config",
	},
	{
		forbid:  anyOf(tree("google.golang.org/grpc"), tree("github.com/envoyproxy/go-control-plane")),
		allowIn: tree(module + "/rls"),
		why:     "gRPC and the Envoy stubs live only in the RLS server package",
	},
	{
		forbid: tree("github.com/cloudflare/tableflip"),
		why:    "the listening-socket hand-off of an upgrade (tableflip) is bulwark serve's, in cmd/bulwark: never in host or another library package",
	},
}

func TestLibraryDependencies(t *testing.T) {
	pkgs := goList(t)
	var libs []string
	for path, p := range pkgs {
		if p.Module != nil && p.Module.Path == module && !notLibrary.match(path) {
			libs = append(libs, path)
		}
		if p.Error != nil {
			t.Logf("go list: %s: %s", path, p.Error.Err)
		}
	}
	sort.Strings(libs)
	if len(libs) == 0 {
		t.Fatal("go list found no library packages; the rules checked nothing")
	}
	t.Logf("checked %d library packages against %d rules", len(libs), len(rules))
	for _, v := range check(pkgs, libs) {
		t.Error(v)
	}
}

// The checker itself: a synthetic import graph with one violation of each
// kind, and allowed uses that must pass.
func TestCheckerFindsViolations(t *testing.T) {
	const pgx, rds, prom, grpc = "github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9", "github.com/prometheus/client_golang/prometheus", "google.golang.org/grpc"
	const bpf, cm = "github.com/cilium/ebpf", "github.com/caddyserver/certmagic"
	const otel = "go.opentelemetry.io/otel/trace"
	pkgs := graph(map[string][]string{
		module + "/shield":                   {module + "/gateway"},          // direct import of the gateway
		module + "/login":                    {module + "/login/redisstore"}, // go-redis through an adapter
		module + "/login/redisstore":         {rds},                          // allowed: path contains redis
		module + "/global":                   {rds},                          // not allowed: the core of global
		module + "/global/redisglobal":       {rds},                          // allowed: path contains redis
		module + "/rls":                      {grpc},                         // allowed: the RLS server
		module + "/ipset":                    {grpc},                         // gRPC outside rls
		module + "/quota":                    {"fmt"},                        // clean
		module + "/quota/pgquota":            {pgx},                          // allowed
		module + "/quota/pgquota/more":       {pgx},                          // allowed: inside the adapter's tree
		module + "/peer":                     {pgx},                          // driver outside its adapter
		module + "/xdp":                      {bpf},                          // allowed: the xdp tree
		module + "/control":                  {bpf},                          // eBPF outside the xdp tree
		module + "/host":                     {module + "/host/metrics"},
		module + "/host/metrics":             {prom}, // Prometheus, indirectly for host
		module + "/guard":                    {module + "/cmd/bulwark"},
		module + "/console":                  {module + "/control"}, // allowed: the operator UI
		module + "/ratelimit":                {module + "/control"}, // a layer on the control API
		module + "/control/internal/jsonapi": {module + "/host"},    // the JSON mode on the host
		module + "/proxy":                    {cm, otel},            // ACME and tracing outside the gateway
		module + "/gateway":                  {prom, pgx, rds, cm, otel},
		module + "/cmd/bulwark":              {module + "/gateway"},
		pgx:                                  {pgx + "/internal/x"},
		pgx + "/internal/x":                  nil,
		rds:                                  nil,
		grpc:                                 nil,
		prom:                                 nil,
		bpf:                                  nil,
		cm:                                   nil,
		otel:                                 nil,
		"fmt":                                nil,
	})
	var libs []string
	for path := range pkgs {
		if strings.HasPrefix(path, module+"/") && !notLibrary.match(path) {
			libs = append(libs, path)
		}
	}
	got := map[string]bool{}
	for _, v := range check(pkgs, libs) {
		got[v.pkg+" -> "+v.dep] = true
	}
	want := []string{
		module + "/shield -> " + module + "/gateway",
		module + "/shield -> " + prom, // through the gateway
		module + "/shield -> " + pgx,
		module + "/shield -> " + rds,
		module + "/shield -> " + cm, // through the gateway
		module + "/proxy -> " + cm,
		module + "/shield -> " + otel, // through the gateway
		module + "/proxy -> " + otel,
		module + "/guard -> " + otel, // through cmd and the gateway
		module + "/login -> " + rds,
		module + "/global -> " + rds,
		module + "/ipset -> " + grpc,
		module + "/peer -> " + pgx,
		module + "/control -> " + bpf,
		module + "/host -> " + prom,
		module + "/host/metrics -> " + prom,
		module + "/guard -> " + module + "/cmd/bulwark",
		module + "/guard -> " + module + "/gateway",
		module + "/guard -> " + prom,
		module + "/guard -> " + pgx,
		module + "/guard -> " + rds,
		module + "/guard -> " + cm,
		module + "/ratelimit -> " + module + "/control",
		module + "/ratelimit -> " + bpf, // through control
		module + "/console -> " + bpf,   // through control (which is allowed)
		module + "/control/internal/jsonapi -> " + module + "/host",
		module + "/control/internal/jsonapi -> " + prom, // through host
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missed violation %s", w)
		}
		delete(got, w)
	}
	for extra := range got {
		t.Errorf("false violation %s", extra)
	}
}

// A rule forbids a set of import paths to library packages outside allowIn
// (to those in in, when in is set).
type rule struct {
	forbid  matcher
	allowIn matcher // nil: no library package may have the dependency
	in      matcher // nil: the rule applies to every library package
	why     string
}

// matcher is a set of import paths with a readable name.
type matcher struct {
	name  string
	match func(path string) bool
}

// tree matches root and every package below it.
func tree(root string) matcher {
	return matcher{root + "/...", func(p string) bool { return p == root || strings.HasPrefix(p, root+"/") }}
}

// exact matches one package.
func exact(path string) matcher {
	return matcher{path, func(p string) bool { return p == path }}
}

// contains matches module packages whose path below the module contains s.
func contains(s string) matcher {
	return matcher{"*" + s + "*", func(p string) bool {
		rel, ok := strings.CutPrefix(p, module+"/")
		return ok && strings.Contains(rel, s)
	}}
}

func anyOf(ms ...matcher) matcher {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return matcher{strings.Join(names, " or "), func(p string) bool {
		for _, m := range ms {
			if m.match(p) {
				return true
			}
		}
		return false
	}}
}

type violation struct {
	pkg, dep string
	via      []string // import chain from pkg to dep
	rule     rule
}

func (v violation) String() string {
	allowed := ""
	if v.rule.allowIn.match != nil {
		allowed = " (allowed only in " + v.rule.allowIn.name + ")"
	}
	if v.rule.in.match != nil {
		allowed = " (forbidden in " + v.rule.in.name + ")"
	}
	return v.pkg + " depends on " + v.dep + allowed + ": " + v.rule.why +
		"\n\timport chain: " + strings.Join(v.via, " -> ")
}

// pkg is the part of `go list -json` output the rules need.
type pkg struct {
	ImportPath string
	Module     *struct{ Path string }
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

// check returns the rule violations of the library packages libs, whose
// transitive dependencies (Deps) and direct imports (Imports) pkgs holds.
func check(pkgs map[string]*pkg, libs []string) []violation {
	var out []violation
	for _, lib := range libs {
		p := pkgs[lib]
		if p == nil {
			continue
		}
		for _, r := range rules {
			if r.allowIn.match != nil && r.allowIn.match(lib) || r.in.match != nil && !r.in.match(lib) {
				continue
			}
			// One report per package and rule: the forbidden dependency
			// reached by the shortest import chain (a driver brings many
			// packages of its own).
			var worst *violation
			for _, dep := range p.Deps {
				if r.forbid.match(dep) {
					v := violation{pkg: lib, dep: dep, via: chain(pkgs, lib, dep), rule: r}
					if worst == nil || len(v.via) < len(worst.via) {
						worst = &v
					}
				}
			}
			if worst != nil {
				out = append(out, *worst)
			}
		}
	}
	return out
}

// chain finds a shortest import path from -> ... -> to, for the message.
func chain(pkgs map[string]*pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := to; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return path
		}
		if p := pkgs[cur]; p != nil {
			for _, next := range p.Imports {
				if _, seen := prev[next]; !seen {
					prev[next] = cur
					queue = append(queue, next)
				}
			}
		}
	}
	return []string{from, "...", to}
}

// graph builds a package set from direct imports, computing Deps.
func graph(imports map[string][]string) map[string]*pkg {
	pkgs := map[string]*pkg{}
	for path, imps := range imports {
		pkgs[path] = &pkg{ImportPath: path, Imports: imps}
	}
	for _, p := range pkgs {
		seen := map[string]bool{}
		var visit func(string)
		visit = func(path string) {
			if q := pkgs[path]; q != nil {
				for _, imp := range q.Imports {
					if !seen[imp] {
						seen[imp] = true
						visit(imp)
					}
				}
			}
		}
		visit(p.ImportPath)
		for d := range seen {
			p.Deps = append(p.Deps, d)
		}
	}
	return pkgs
}

// goList runs `go list -e -deps -json ./...` at the module root.
func goList(t *testing.T) map[string]*pkg {
	t.Helper()
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,Module,Imports,Deps,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", root, err, stderr.Bytes())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}
