package xdp

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The committed objects were compiled by this clang major version; other
// versions emit different (valid) bytes, so the check needs this one.
const clangMajor = "14"

// TestGeneratedUpToDate recompiles bpf/bulwark.c with the go:generate
// command of gen.go into a temporary directory and fails when the result
// differs from the committed objects and bindings: a change to the C
// source must come with regenerated files. It uses the pinned clang
// (Debian's clang-14 and llvm-14, /usr/lib/llvm-14/bin, which
// scripts/install-test-deps installs), else clang from PATH. Another
// major version fails the test (its bytes differ); a missing clang skips
// it only when not root (CI runs as root and installs it).
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("xdp: -short skips regenerating the BPF objects")
	}
	path := os.Getenv("PATH")
	if dir := "/usr/lib/llvm-" + clangMajor + "/bin"; fileExists(filepath.Join(dir, "clang")) {
		path = dir + string(os.PathListSeparator) + path // clang and llvm-strip of the pinned version
	}
	clang, err := lookPathIn("clang", path)
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatalf("xdp: clang %s is not installed; scripts/install-test-deps installs it (apt-get install clang-%s llvm-%s)", clangMajor, clangMajor, clangMajor)
		}
		t.Skipf("xdp: clang is not installed; cannot check the generated BPF objects (apt-get install clang-%s llvm-%s)", clangMajor, clangMajor)
	}
	out, err := exec.Command(clang, "--version").Output()
	if err != nil {
		t.Fatalf("clang --version: %v", err)
	}
	if m := regexp.MustCompile(`clang version (\d+)\.`).FindSubmatch(out); m == nil || string(m[1]) != clangMajor {
		t.Fatalf("xdp: the objects were generated with clang %s; %s is %s (install clang-%s llvm-%s)", clangMajor, clang, strings.SplitN(string(out), "\n", 2)[0], clangMajor, clangMajor)
	}
	args := generateArgs(t)
	dir := t.TempDir()
	// bpf2go's flags come before its two positional arguments.
	args = append([]string{"tool", "bpf2go", "-output-dir", dir}, args...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=xdp", "GOFILE=gen.go", "PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, name := range []string{"bulwark_bpfel.go", "bulwark_bpfel.o", "bulwark_bpfeb.go", "bulwark_bpfeb.o"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%s is not committed: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./xdp (with clang %s) and commit the result", name, clangMajor)
		}
	}
}

// generateArgs returns bpf2go's arguments from gen.go's go:generate line,
// splitting on spaces outside double quotes.
func generateArgs(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "//go:generate go tool bpf2go "
	for _, line := range strings.Split(string(src), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		var args []string
		var cur strings.Builder
		quoted, have := false, false
		for _, r := range rest {
			switch {
			case r == '"':
				quoted, have = !quoted, true
			case r == ' ' && !quoted:
				if have {
					args = append(args, cur.String())
				}
				cur.Reset()
				have = false
			default:
				cur.WriteRune(r)
				have = true
			}
		}
		if have {
			args = append(args, cur.String())
		}
		return args
	}
	t.Fatal("gen.go has no go:generate bpf2go line")
	return nil
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// lookPathIn is exec.LookPath over the directories of path.
func lookPathIn(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
