package deptest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
)

// The race detector changes what some tests can assert: sync.Pool drops
// items on purpose (allocation counts), memory figures grow, and every
// goroutine runs several times slower (tight time bounds). Such a test
// is meaningful only without -race, and the CI run (scripts/test) is
// race-enabled, except for one pass that runs the tests named
// TestNoRace... without it. The convention is checked here, so that no
// such test can hide from that pass:
//
//   - a test that calls testing.AllocsPerRun, or reads raceEnabled /
//     RaceEnabled (to skip, or to drop an assertion, under -race), directly
//     or through a helper of its package, is named TestNoRace...;
//   - a test file with a build constraint on race declares no other tests;
//   - library code (non-test files) does not call testing.AllocsPerRun.
//
// A read of raceEnabled that only loosens a budget and still asserts (the
// race detector makes a long proof slower, not wrong) is exempt when its
// line, or the comment right above it, says "race-ok:" with the reason.
const (
	noRacePrefix = "TestNoRace"
	raceOKMarker = "race-ok:"
)

func TestRaceSensitiveTestsAreNamedNoRace(t *testing.T) {
	root := moduleRoot(t)
	vs, nTests, err := checkNoRace(os.DirFS(root))
	if err != nil {
		t.Fatal(err)
	}
	if nTests == 0 {
		t.Fatal("found no race-sensitive tests; the check checked nothing")
	}
	t.Logf("%d race-sensitive tests, all named %s...", nTests, noRacePrefix)
	for _, v := range vs {
		t.Error(v)
	}
}

// The checker itself, on a synthetic module: each way of hiding a test
// from the pass without -race is found, and the allowed forms pass.
func TestRaceConventionCheckerFindsViolations(t *testing.T) {
	files := map[string]string{
		"a/a_test.go": `package a
import "testing"
func TestDirect(t *testing.T) { _ = testing.AllocsPerRun(1, func() {}) }
func TestNoRaceDirect(t *testing.T) { _ = testing.AllocsPerRun(1, func() {}) }
func TestViaHelper(t *testing.T) { modes(t, helper) }
func modes(t *testing.T, f func(*testing.T)) { f(t) }
func helper(t *testing.T) {
	if raceEnabled {
		t.Skip("no")
	}
}
func TestWeakened(t *testing.T) {
	if !raceEnabled {
		t.Fatal("bound")
	}
}
func TestMethod(t *testing.T) { var f fix; f.measure() }
type fix struct{}
func (fix) measure() { _ = testing.AllocsPerRun(1, func() {}) }
func TestExempt(t *testing.T) {
	// race-ok: a bigger budget, still asserted
	if raceEnabled {
		_ = 1
	}
}
func TestClean(t *testing.T) {}
`,
		"a/race_test.go":       "//go:build race\n\npackage a\n\nconst raceEnabled = true\n",
		"b/b_test.go":          "//go:build !race\n\npackage b\n\nimport \"testing\"\n\nfunc TestHidden(t *testing.T) {}\nfunc TestNoRaceOK(t *testing.T) {}\n",
		"c/c.go":               "package c\n\nimport \"testing\"\n\nfunc Measure() float64 { return testing.AllocsPerRun(1, func() {}) }\n",
		"d/testdata/x_test.go": "package x\nimport \"testing\"\nfunc TestIgnored(t *testing.T) { _ = testing.AllocsPerRun(1, nil) }\n",
	}
	fsys := fstest.MapFS{}
	for name, src := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(src)}
	}
	vs, n, err := checkNoRace(fsys)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(vs, "\n")
	for _, want := range []string{"TestDirect", "TestViaHelper", "TestWeakened", "TestMethod", "b/b_test.go:7: TestHidden", "c/c.go: library code calls testing.AllocsPerRun"} {
		if !strings.Contains(got, want) {
			t.Errorf("violation %q not found in:\n%s", want, got)
		}
	}
	for _, bad := range []string{"TestNoRaceDirect", "TestExempt", "TestClean", "TestNoRaceOK", "TestIgnored"} {
		if strings.Contains(got, bad+" ") || strings.Contains(got, bad+":") {
			t.Errorf("%s reported:\n%s", bad, got)
		}
	}
	if len(vs) != 6 || n != 7 {
		t.Errorf("%d violations, %d race-sensitive tests; want 6 and 7:\n%s", len(vs), n, got)
	}
}

// checkNoRace returns the violations of the convention in the Go files
// of fsys (testdata and hidden directories skipped), and how many tests
// it found race-sensitive.
func checkNoRace(fsys fs.FS) (violations []string, sensitive int, err error) {
	type fn struct {
		name, pos string
		test      bool     // a top-level TestXxx function
		refs      []string // every identifier its body mentions
		tainted   string   // why it is race-sensitive ("" if not)
	}
	byDir := map[string][]*fn{}
	fset := token.NewFileSet()
	err = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(path, "_test.go")
		lines := strings.Split(string(src), "\n")
		exempt := func(p token.Pos) bool {
			l := fset.Position(p).Line - 1 // 0-based
			if strings.Contains(lines[l], raceOKMarker) {
				return true
			}
			for l--; l >= 0 && strings.HasPrefix(strings.TrimSpace(lines[l]), "//"); l-- {
				if strings.Contains(lines[l], raceOKMarker) {
					return true
				}
			}
			return false
		}
		raceTagged := false
		for _, cg := range f.Comments {
			if cg.Pos() > f.Package {
				break
			}
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "//go:build") && strings.Contains(c.Text, "race") {
					raceTagged = true
				}
			}
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			pos := fset.Position(fd.Pos())
			x := &fn{name: fd.Name.Name, pos: fmt.Sprintf("%s:%d", path, pos.Line)}
			x.test = fd.Recv == nil && isTestName(fd.Name.Name)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && id.Name == "testing" && n.Sel.Name == "AllocsPerRun" && x.tainted == "" {
						x.tainted = "calls testing.AllocsPerRun"
					}
				case *ast.Ident:
					if (n.Name == "raceEnabled" || n.Name == "RaceEnabled") && !exempt(n.Pos()) && x.tainted == "" {
						x.tainted = "reads " + n.Name
					}
					x.refs = append(x.refs, n.Name)
				}
				return true
			})
			if !isTest {
				if x.tainted == "calls testing.AllocsPerRun" {
					violations = append(violations, fmt.Sprintf("%s: library code calls testing.AllocsPerRun (call it from a %s test)", path, noRacePrefix))
				}
				continue
			}
			if raceTagged && x.test && x.tainted == "" {
				x.tainted = "is in a file with a race build constraint"
			}
			dir := filepath.Dir(path)
			byDir[dir] = append(byDir[dir], x)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		fns := byDir[d]
		// A function (or method, by name) that mentions a race-sensitive
		// one, as a call or as a value, is race-sensitive too.
		for changed := true; changed; {
			changed = false
			tainted := map[string]string{}
			for _, x := range fns {
				if x.tainted != "" {
					tainted[x.name] = x.name
				}
			}
			for _, x := range fns {
				if x.tainted != "" {
					continue
				}
				for _, r := range x.refs {
					if via, ok := tainted[r]; ok && r != x.name {
						x.tainted = "uses " + via
						changed = true
						break
					}
				}
			}
		}
		for _, x := range fns {
			if !x.test || x.tainted == "" {
				continue
			}
			sensitive++
			if !strings.HasPrefix(x.name, noRacePrefix) {
				violations = append(violations, fmt.Sprintf("%s: %s %s, so it means something only without -race: name it %s... so that scripts/test runs it without -race", x.pos, x.name, x.tainted, noRacePrefix))
			}
		}
	}
	return violations, sensitive, nil
}

// isTestName reports whether name is a test function's name for go test.
func isTestName(name string) bool {
	if !strings.HasPrefix(name, "Test") {
		return false
	}
	rest := name[len("Test"):]
	return rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z')
}
