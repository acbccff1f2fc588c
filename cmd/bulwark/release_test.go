package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/bulwarkhq/bulwark/gateway"
)

// Release stamps the tests build with (scripts/build reads them from the
// environment instead of git and the clock).
const (
	testVersion = "v0.0.0-releasetest"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	testDate    = "2026-01-02T03:04:05Z"
)

// TestReleaseBuild: scripts/build makes a static binary (no program
// interpreter, no shared library: it runs on distroless/static and
// scratch) that reports the version, commit and date it was stamped with.
func TestReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := bulwarkBin(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the release binary has a program interpreter (dynamically linked): build with CGO_ENABLED=0")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) != 0 {
		t.Errorf("the release binary needs shared libraries %v (%v)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Errorf("the release binary keeps its symbol table (-ldflags -s)")
	}

	code, out, _ := runBin(t, bin, cleanEnv(), "version")
	want := "bulwark " + testVersion + " (commit " + testCommit[:12] + ", built " + testDate + ", " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if code != 0 || out != want {
		t.Errorf("version: exit %d\n got %q\nwant %q", code, out, want)
	}
}

// TestBuildScriptStampsFromGit: without VERSION/COMMIT/DATE, scripts/build
// takes the commit from git, the version from a v* tag (else "dev") and
// the date from SOURCE_DATE_EPOCH.
func TestBuildScriptStampsFromGit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "bulwark")
	cmd := exec.Command("../../scripts/build", "-o", bin)
	cmd.Env = append(withoutEnv("VERSION", "COMMIT", "DATE"), "SOURCE_DATE_EPOCH=1767323045")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build: %v\n%s", err, out)
	}
	_, out, _ := runBin(t, bin, cleanEnv(), "version")
	re := regexp.MustCompile(`^bulwark (v\S+|dev) \(commit ` + string(head[:12]) + `, built 2026-01-02T03:04:05Z, `)
	if !re.MatchString(out) {
		t.Errorf("version %q, want the commit %.12s and the SOURCE_DATE_EPOCH date", out, head)
	}
}

// TestGoInstallAtVersion runs what a user runs,
//
//	go install github.com/bulwarkhq/bulwark/cmd/bulwark@VERSION
//
// against a module proxy made in a temporary directory from this checkout
// (the module zip holds what git tracks; the dependencies come from the
// local module cache, so nothing leaves the machine), and checks that the
// installed binary reports VERSION from its build information. It fails
// when the module cannot be installed that way: a replace directive, a
// module path that does not match, a file a zip may not hold.
func TestGoInstallAtVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	listing, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("no git checkout to make a module zip from: %v", err)
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	const modPath = "github.com/bulwarkhq/bulwark"
	const version = "v0.0.1-installtest"
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(gomod, []byte("module "+modPath+"\n")) {
		t.Fatalf("go.mod does not start with %q", "module "+modPath)
	}

	tmp := t.TempDir()
	dir := filepath.Join(tmp, "proxy", modPath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []modzip.File
	seen := map[string]bool{}
	for _, p := range strings.Split(strings.TrimRight(string(listing), "\x00"), "\x00") {
		if seen[p] {
			continue // listed once per stage while a merge is unresolved
		}
		seen[p] = true
		if fi, err := os.Lstat(filepath.Join(root, p)); err == nil && fi.Mode().IsRegular() {
			files = append(files, repoFile{root, p})
		}
	}
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := modzip.Create(zf, module.Version{Path: modPath, Version: version}, files); err != nil {
		t.Fatalf("module zip: %v", err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	for name, data := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": gomod} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	gobin := filepath.Join(tmp, "bin")
	cache := filepath.Join(tmp, "modcache")
	env := append(withoutEnv("GOFLAGS", "GOPROXY", "GOMODCACHE", "GOBIN", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOTOOLCHAIN", "CGO_ENABLED"),
		"GOPROXY=file://"+filepath.Join(tmp, "proxy")+",file://"+filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"),
		"GOMODCACHE="+cache,
		"GOBIN="+gobin,
		"GOSUMDB=off", // offline; the dependencies are checked against the module's go.sum
		"GOTOOLCHAIN=local",
		// The flags scripts/build uses, so the dependencies come from the
		// build cache the release build filled.
		"CGO_ENABLED=0", "GOFLAGS=-trimpath",
	)
	t.Cleanup(func() {
		clean := exec.Command("go", "clean", "-modcache")
		clean.Env = env
		clean.Dir = tmp
		if out, err := clean.CombinedOutput(); err != nil {
			t.Logf("go clean -modcache: %v %s", err, out)
		}
	})
	install := exec.Command("go", "install", modPath+"/cmd/bulwark@"+version)
	install.Env, install.Dir = env, tmp
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install %s/cmd/bulwark@%s: %v\n%s", modPath, version, err, out)
	}
	_, out, _ := runBin(t, filepath.Join(gobin, "bulwark"), cleanEnv(), "version")
	if !strings.HasPrefix(out, "bulwark "+version+" (") {
		t.Errorf("the installed binary says %q, want version %s", out, version)
	}
}

// TestBuildInfoFallback: without stamps, the version comes from the
// module's build information and the commit and date from the VCS
// settings; stamps win over both.
func TestBuildInfoFallback(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "feedfacefeedfacefeedface"}, {Key: "vcs.time", Value: "2026-03-04T05:06:07Z"},
	}}
	for _, c := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  buildInfo
	}{
		{"nothing", "", "", "", nil, buildInfo{Version: "dev"}},
		{"devel", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, buildInfo{Version: "dev"}},
		{"go install", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, buildInfo{Version: "v1.4.0"}},
		{"checkout", "", "", "", bi, buildInfo{"v1.4.0", "feedfacefeedfacefeedface", "2026-03-04T05:06:07Z"}},
		{"stamped", "v2.0.0", "abc", "2026-12-01T00:00:00Z", bi, buildInfo{"v2.0.0", "abc", "2026-12-01T00:00:00Z"}},
	} {
		if got := buildInfoFrom(c.version, c.commit, c.date, c.bi); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	s := buildInfo{"v1.4.0", "feedfacefeedfacefeedface", "2026-03-04T05:06:07Z"}.String()
	if !strings.HasPrefix(s, "bulwark v1.4.0 (commit feedfacefeed, built 2026-03-04T05:06:07Z, go") {
		t.Errorf("String() = %q", s)
	}
	if s := (buildInfo{Version: "dev"}).String(); !strings.HasPrefix(s, "bulwark dev (go") {
		t.Errorf("String() = %q", s)
	}
}

// repoFile is a file of the checkout, for the module zip.
type repoFile struct{ root, path string }

func (f repoFile) Path() string                 { return f.path }
func (f repoFile) Lstat() (os.FileInfo, error)  { return os.Lstat(filepath.Join(f.root, f.path)) }
func (f repoFile) Open() (io.ReadCloser, error) { return os.Open(filepath.Join(f.root, f.path)) }

// withoutEnv is the test's environment without the named variables.
func withoutEnv(names ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// dockerInstr is one Dockerfile instruction: its keyword (upper case) and
// its arguments, continuation lines joined.
type dockerInstr struct{ cmd, args string }

// parseDockerfile splits a Dockerfile into stages of instructions (the
// first instruction of each stage is its FROM). Comments, blank lines and
// the ARGs before the first FROM are kept in stage 0's prelude.
func parseDockerfile(t *testing.T, text string) (prelude []dockerInstr, stages [][]dockerInstr) {
	t.Helper()
	var logical []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		logical = append(logical, cur+trimmed)
		cur = ""
	}
	for _, l := range logical {
		cmd, args, _ := strings.Cut(l, " ")
		in := dockerInstr{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")}
		switch {
		case in.cmd == "FROM":
			stages = append(stages, []dockerInstr{in})
		case len(stages) == 0:
			prelude = append(prelude, in)
		default:
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	return prelude, stages
}

// TestDockerfile checks what can be checked of the image without Docker
// (which this machine cannot run): a build stage on the Go version of
// go.mod that runs scripts/build (so the image holds the same static,
// stamped binary TestReleaseBuild checks); a final stage on
// distroless/static or scratch, as a non-root numeric user, with
// BULWARK_STATE_DIR on a volume owned by that user; the default command
// listening on all interfaces on the default listen and metrics ports,
// which it exposes, and a HEALTHCHECK running `bulwark health` on that
// listener; and a .dockerignore that keeps .git and build outputs
// out of the context but not what the build needs.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	prelude, stages := parseDockerfile(t, string(data))
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("no go directive in go.mod")
	}
	if !slicesContains(prelude, dockerInstr{"ARG", "GO_VERSION=" + string(goVersion[1])}) {
		t.Errorf("no ARG GO_VERSION=%s before the first FROM (go.mod's go version); prelude %v", goVersion[1], prelude)
	}

	build := stages[0]
	if !regexp.MustCompile(`^(--platform=\S+ )?golang:\$\{GO_VERSION\}\S* AS build$`).MatchString(build[0].args) {
		t.Errorf("first stage %q, want FROM golang:${GO_VERSION}... AS build", build[0].args)
	}
	runsBuild := false
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "scripts/build -o /out/bulwark") {
			runsBuild = true
			if strings.Contains(in.args, "CGO_ENABLED=1") {
				t.Errorf("the build stage turns cgo on: %q", in.args)
			}
		}
	}
	if !runsBuild {
		t.Error("the build stage does not run scripts/build -o /out/bulwark (the one place the release flags live)")
	}

	final := stages[len(stages)-1]
	base := final[0].args
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("runtime stage FROM %q, want distroless/static or scratch", base)
	}
	get := func(cmd string) []string {
		var out []string
		for _, in := range final {
			if in.cmd == cmd {
				out = append(out, in.args)
			}
		}
		return out
	}
	users := get("USER")
	if len(users) != 1 || !regexp.MustCompile(`^[1-9][0-9]*(:[1-9][0-9]*)?$`).MatchString(users[0]) {
		t.Errorf("USER %q, want one numeric non-root user (a name cannot be checked by Kubernetes' runAsNonRoot)", users)
	}
	uid := ""
	if len(users) == 1 {
		uid, _, _ = strings.Cut(users[0], ":")
	}
	const state = "/var/lib/bulwark"
	if env := get("ENV"); !slicesContains(env, "BULWARK_STATE_DIR="+state) {
		t.Errorf("ENV %q, want BULWARK_STATE_DIR=%s", env, state)
	}
	if v := get("VOLUME"); len(v) != 1 || !strings.Contains(v[0], `"`+state+`"`) {
		t.Errorf("VOLUME %q, want %s (the only place the gateway writes)", v, state)
	}
	copies := get("COPY")
	if !slicesContains(copies, "--from=build /out/bulwark /usr/local/bin/bulwark") {
		t.Errorf("COPY %q: the binary is not copied from the build stage", copies)
	}
	if !slicesContains(copies, "--from=build --chown="+uid+":"+uid+" /out/state "+state) {
		t.Errorf("COPY %q: the state directory is not owned by the runtime user %s", copies, uid)
	}
	if e := get("ENTRYPOINT"); len(e) != 1 || e[0] != `["/usr/local/bin/bulwark"]` {
		t.Errorf("ENTRYPOINT %q", e)
	}
	def := gateway.DefaultConfig()
	_, listenPort, _ := net.SplitHostPort(def.Listen[0].Addr)
	_, metricsPort, _ := net.SplitHostPort(def.Metrics.Addr)
	wantCmd := `["serve", "--listen", "0.0.0.0:` + listenPort + `", "--metrics-listen", "0.0.0.0:` + metricsPort + `"]`
	if c := get("CMD"); len(c) != 1 || c[0] != wantCmd {
		t.Errorf("CMD %q, want %s (the quickstart on the default ports, on all interfaces)", c, wantCmd)
	}
	wantHealth := `CMD ["/usr/local/bin/bulwark", "health", "--addr", "127.0.0.1:` + listenPort + `"]`
	if h := get("HEALTHCHECK"); len(h) != 1 || !strings.HasSuffix(h[0], wantHealth) {
		t.Errorf("HEALTHCHECK %q, want one ending in %s (the default command's listener)", h, wantHealth)
	}
	if e := get("EXPOSE"); len(e) != 1 || e[0] != listenPort+" "+metricsPort {
		t.Errorf("EXPOSE %q, want %s %s", e, listenPort, metricsPort)
	}

	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]bool{}
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns[strings.TrimPrefix(l, "/")] = true
		}
	}
	for _, p := range []string{".git", "bulwark", "*.test"} {
		if !patterns[p] {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "scripts", "scripts/build", "cmd", "*", "*.go", "**/*.go"} {
		if patterns[p] {
			t.Errorf(".dockerignore excludes %s, which the build needs", p)
		}
	}
}

func slicesContains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestReadOnlyRoot runs the release binary as the image runs it: every
// mount read-only (docker run --read-only) but a tmpfs on the state
// directory (--tmpfs /var/lib/bulwark). The quickstart starts, writes its
// generated control token into the tmpfs, and serves. Without the tmpfs
// the start fails, naming the state directory: the gateway writes nowhere
// else. Linux, as root (a private mount namespace through unshare).
func TestReadOnlyRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs Linux and root for a private mount namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	bin := bulwarkBin(t)
	// wrapper makes a read-only view of every mount (but /proc, /sys,
	// /dev, as Docker does) in a new mount namespace, a tmpfs on $STATE
	// when tmpfs is set, proves the root is read-only, then runs bin.
	wrapper := func(state string, tmpfs bool) string {
		mountState := ""
		if tmpfs {
			mountState = `mount -t tmpfs -o mode=0700,size=1m tmpfs "$STATE"`
		}
		script := `#!/bin/sh
exec unshare --mount --propagation private -- /bin/sh -c '
set -e
for m in $(awk "{print \$2}" /proc/self/mounts | sort -u); do
	case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
if touch /bulwark-rw-probe 2>/dev/null || touch "$STATE/rw-probe" 2>/dev/null; then echo "read-only root not in effect" >&2; exit 97; fi
` + mountState + `
exec "$BIN" "$@"
' sh "$@"
`
		p := filepath.Join(t.TempDir(), "readonly-bulwark")
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	state := t.TempDir()
	env := append(cleanEnv(), "BIN="+bin, "STATE="+state)
	env = slicesReplaceEnv(env, "BULWARK_STATE_DIR", state)
	args := []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0"}

	s := startServe(t, wrapper(state, true), env, args...)
	res, err := http.Get(s.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("GET / on a read-only root: %d", res.StatusCode)
	}
	// The token went into the tmpfs: visible through the process's own
	// root, not on the real directory underneath.
	inside, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(s.cmd.Process.Pid), "root", state, "control-*.token"))
	outside, _ := filepath.Glob(filepath.Join(state, "*"))
	if len(inside) != 1 || len(outside) != 0 {
		t.Errorf("token files in the tmpfs %v, under it %v: want one in the tmpfs only", inside, outside)
	}
	s.stop(t)

	// No tmpfs: the state directory is read-only too, and the start fails.
	cmd := exec.Command(wrapper(state, false), append([]string{"serve", "--log-format", "json"}, args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "read-only file system") {
		t.Errorf("serve with a read-only state directory: %v\n%s", err, out)
	}
}

// slicesReplaceEnv sets name=value in env.
func slicesReplaceEnv(env []string, name, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// unitFile is a systemd unit: section → key → values, in order.
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: bad line %q", path, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// TestSystemdUnit: the unit runs the gateway as a transient user with a
// state directory, a read-only system, no privilege but binding low
// ports, a system call filter; reload is SIGHUP; stop is SIGTERM with a
// stop timeout above the default drain timeout. The XDP drop-in adds
// exactly what the XDP layer needs. systemd-analyze, when installed,
// verifies both and rates the unit's exposure.
func TestSystemdUnit(t *testing.T) {
	const dir = "../../deploy/systemd/"
	u := parseUnit(t, dir+"bulwark.service")
	svc := u["Service"]
	for k, want := range map[string]string{
		"Type":                    "notify",
		"NotifyAccess":            "all",
		"ExecStart":               "/usr/local/bin/bulwark serve --config /etc/bulwark/bulwark.yaml",
		"ExecStartPre":            "/usr/local/bin/bulwark check --config /etc/bulwark/bulwark.yaml",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"KillSignal":              "SIGTERM",
		"DynamicUser":             "yes",
		"StateDirectory":          "bulwark",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"NoNewPrivileges":         "yes",
		"CapabilityBoundingSet":   "CAP_NET_BIND_SERVICE",
		"AmbientCapabilities":     "CAP_NET_BIND_SERVICE",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"SystemCallArchitectures": "native",
		"MemoryDenyWriteExecute":  "yes",
	} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s=%q, want %q", k, got, want)
		}
	}
	if f := svc["SystemCallFilter"]; len(f) != 2 || f[0] != "@system-service" || f[1] != "~@privileged" {
		t.Errorf("SystemCallFilter=%q, want @system-service then ~@privileged", f)
	}
	stop, err := time.ParseDuration(strings.Join(svc["TimeoutStopSec"], ""))
	if drain := gateway.DefaultConfig().Limits.DrainTimeout; err != nil || stop < drain+10*time.Second {
		t.Errorf("TimeoutStopSec=%q: want at least the default drain timeout %v plus 10s (%v)", svc["TimeoutStopSec"], drain, err)
	}
	if u["Install"]["WantedBy"] == nil {
		t.Error("no [Install] WantedBy")
	}

	x := parseUnit(t, dir+"bulwark-xdp.conf")["Service"]
	for k, want := range map[string]string{
		"CapabilityBoundingSet":   "CAP_NET_BIND_SERVICE CAP_BPF CAP_NET_ADMIN",
		"AmbientCapabilities":     "CAP_NET_BIND_SERVICE CAP_BPF CAP_NET_ADMIN",
		"SystemCallFilter":        "bpf",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
		"ReadWritePaths":          "/sys/fs/bpf",
	} {
		if got := x[k]; len(got) != 1 || got[0] != want {
			t.Errorf("bulwark-xdp.conf %s=%q, want %q", k, got, want)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the unit is not verified")
		return
	}
	if testing.Short() {
		return
	}
	bin := bulwarkBin(t)
	unit, err := os.ReadFile(dir + "bulwark.service")
	if err != nil {
		t.Fatal(err)
	}
	xdpConf, err := os.ReadFile(dir + "bulwark-xdp.conf")
	if err != nil {
		t.Fatal(err)
	}
	// verify needs the binary the unit names to exist: point it at the
	// one just built. The drop-in is checked appended to the unit (a
	// second [Service] section reads the same as a drop-in's).
	for _, c := range []struct {
		name        string
		text        string
		maxExposure float64
	}{
		{"bulwark.service", string(unit), 2.0},
		{"bulwark.service+xdp", string(unit) + "\n" + string(xdpConf), 2.5},
	} {
		tmp := t.TempDir()
		text := strings.ReplaceAll(c.text, "/usr/local/bin/bulwark", bin)
		if err := os.WriteFile(filepath.Join(tmp, "bulwark.service"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		verify := exec.Command(analyze, "verify", "./bulwark.service")
		verify.Dir = tmp
		if out, err := verify.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("%s: systemd-analyze verify: %v\n%s", c.name, err, out)
		}
		sec := exec.Command(analyze, "security", "--offline=true", "--no-pager", "./bulwark.service")
		sec.Dir = tmp
		out, err := sec.CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for bulwark\.service: (\d+\.\d+)`).FindSubmatch(out)
		if err != nil && m == nil {
			t.Logf("%s: systemd-analyze security --offline is not available here (%v)", c.name, err)
			continue
		}
		if m == nil {
			t.Errorf("%s: no exposure level in:\n%s", c.name, out)
			continue
		}
		level, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("%s: systemd-analyze security exposure %.1f", c.name, level)
		if level > c.maxExposure {
			t.Errorf("%s: exposure %.1f, want at most %.1f:\n%s", c.name, level, c.maxExposure, out)
		}
	}
}
