package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bulwarkBin builds the real binary the way a release is built
// (scripts/build: static, trimmed, stamped with the test* stamps), once
// per test run.
func bulwarkBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		bin := filepath.Join(testStateDir, "bin", "bulwark")
		cmd := exec.Command("../../scripts/build", "-o", bin)
		cmd.Env = append(withoutEnv("VERSION", "COMMIT", "DATE"), "VERSION="+testVersion, "COMMIT="+testCommit, "DATE="+testDate)
		cmd.Stderr = os.Stderr
		if binErr = cmd.Run(); binErr == nil {
			binPath = bin
		}
	})
	if binErr != nil {
		t.Fatalf("scripts/build: %v", binErr)
	}
	return binPath
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// cleanEnv is the environment the binary runs with: no BULWARK_* from
// the developer's shell.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BULWARK_") {
			env = append(env, kv)
		}
	}
	return append(env, append([]string{"BULWARK_STATE_DIR=" + testStateDir}, extra...)...)
}

func TestMain(m *testing.M) {
	code := m.Run()
	os.RemoveAll(testStateDir) // the state and the built binary
	os.Exit(code)
}

// testStateDir is the state directory of every gateway and ctl the tests
// run (never the machine's /var/lib/bulwark).
var testStateDir = func() string {
	d, err := os.MkdirTemp("", "bulwark-state-")
	if err != nil {
		panic(err)
	}
	return d
}()

func runBin(t *testing.T, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := bulwarkBin(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("version", func(t *testing.T) {
		code, out, _ := runBin(t, bin, cleanEnv(), "version")
		if code != 0 || !strings.HasPrefix(out, "bulwark ") {
			t.Errorf("exit %d, %q", code, out)
		}
	})
	t.Run("usage", func(t *testing.T) {
		if code, _, _ := runBin(t, bin, cleanEnv()); code != 2 {
			t.Errorf("no command: exit %d", code)
		}
		if code, _, errOut := runBin(t, bin, cleanEnv(), "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
			t.Errorf("unknown command: exit %d %q", code, errOut)
		}
		if code, _, _ := runBin(t, bin, cleanEnv(), "check"); code != 2 {
			t.Errorf("check without --config: exit %d", code)
		}
	})
	t.Run("check ok", func(t *testing.T) {
		good := write("good.yaml", "upstreams: [{name: app, targets: [\"http://127.0.0.1:3000\"]}]\nroutes: [{name: all, match: {path: /}, upstream: app}]\n")
		code, out, errOut := runBin(t, bin, cleanEnv(), "check", "--config", good)
		if code != 0 || !strings.Contains(out, "ok (profile standalone, 1 upstreams, 1 routes)") {
			t.Errorf("exit %d stdout %q stderr %q", code, out, errOut)
		}
	})
	t.Run("check warns about basic_auth", func(t *testing.T) {
		y := "upstreams: [{name: app, targets: [\"http://127.0.0.1:3000\"]}]\n" +
			"routes: [{name: token, match: {path: /token, methods: [GET]}, upstream: app, login: {}}]\n"
		code, out, errOut := runBin(t, bin, cleanEnv(), "check", "--config", write("basic.yaml", y))
		if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errOut, "warning: ") ||
			!strings.Contains(errOut, "routes[0].login.basic_auth") || !strings.Contains(errOut, "basic_auth: true") {
			t.Errorf("exit %d stdout %q stderr %q, want ok and a basic_auth warning", code, out, errOut)
		}
		y = strings.Replace(y, "login: {}", "login: {basic_auth: true}", 1)
		if code, _, errOut := runBin(t, bin, cleanEnv(), "check", "--config", write("basic2.yaml", y)); code != 0 || errOut != "" {
			t.Errorf("with basic_auth: exit %d stderr %q, want no warning", code, errOut)
		}
	})
	t.Run("check standalone example", func(t *testing.T) {
		// It checks as is: no environment, no warning.
		code, out, errOut := runBin(t, bin, cleanEnv(), "check", "--config", "../../examples/standalone.yaml")
		if code != 0 || errOut != "" || !strings.Contains(out, "ok (profile standalone") {
			t.Errorf("examples/standalone.yaml: exit %d %q %q", code, out, errOut)
		}
	})
	t.Run("check example", func(t *testing.T) {
		env := cleanEnv("BULWARK_POSTGRES_URL=postgres://rt:pw@127.0.0.1:1/bulwark", "BULWARK_REDIS_URL=redis://127.0.0.1:1")
		if code, out, errOut := runBin(t, bin, env, "check", "--config", "../../examples/bulwark.yaml"); code != 0 {
			t.Errorf("examples/bulwark.yaml: exit %d %q %q", code, out, errOut)
		}
		// The same file without the cluster secrets fails, naming them.
		code, _, errOut := runBin(t, bin, cleanEnv(), "check", "--config", "../../examples/bulwark.yaml")
		if code != 1 || !strings.Contains(errOut, "BULWARK_POSTGRES_URL: required in the cluster profile") {
			t.Errorf("without secrets: exit %d %q", code, errOut)
		}
		// BULWARK_PROFILE=standalone overrides the file, and then the
		// quota route is the problem.
		code, _, errOut = runBin(t, bin, cleanEnv("BULWARK_PROFILE=standalone"), "check", "--config", "../../examples/bulwark.yaml")
		if code != 1 || !strings.Contains(errOut, "quota: quota needs PostgreSQL and is only available in the cluster profile") {
			t.Errorf("standalone override: exit %d %q", code, errOut)
		}
	})
	t.Run("check lists every problem", func(t *testing.T) {
		bad := write("bad.yaml", `limits:
  max_headers: 0
upstreams:
  - name: app
    targets: ["http://127.0.0.1:3000"]
    timeouts: {connect: soon}
routes:
  - name: a
    match: {path: /}
    upstream: nope
    rate_limit: {qps: 0}
  - name: a
    match: {path: /b}
    upstream: app
    colour: blue
`)
		code, out, errOut := runBin(t, bin, cleanEnv(), "check", "--config", bad)
		want := []string{
			bad + `:6: upstreams[0].timeouts.connect: bad duration "soon" (want e.g. 500ms, 30s, 5m, 1d)`,
			bad + `:15: routes[1].colour: unknown key (known keys: name, match, upstream, websocket, allow_clients, rate_limit, login, quota)`,
			bad + `:2: limits.max_headers: 0 out of range [1, 1000]`,
			bad + `:10: routes[0].upstream: unknown upstream "nope"`,
			bad + `:11: routes[0].rate_limit.qps: 0 out of range [0.001, 1000000]`,
			bad + `:12: routes[1].name: duplicate route name "a" (also routes[0])`,
			"6 problem(s)",
		}
		got := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 1 || out != "" || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("exit %d\ngot:\n%s\nwant:\n%s", code, errOut, strings.Join(want, "\n"))
		}
		if code, _, errOut := runBin(t, bin, cleanEnv(), "check", "--config", filepath.Join(dir, "absent.yaml")); code != 1 || !strings.Contains(errOut, "cannot read: no such file or directory") {
			t.Errorf("absent file: exit %d %q", code, errOut)
		}
	})
	t.Run("serve refuses a bad config", func(t *testing.T) {
		bad := write("bad-serve.yaml", "profile: cluster\nupstreams: [{name: app, targets: [\"http://127.0.0.1:3000\"]}]\nroutes: [{name: all, match: {path: /}, upstream: app}]\n")
		code, _, errOut := runBin(t, bin, cleanEnv(), "serve", "--config", bad)
		if code != 1 || !strings.Contains(errOut, "BULWARK_REDIS_URL: required in the cluster profile") {
			t.Errorf("exit %d %q", code, errOut)
		}
	})
	t.Run("quickstart serves 200 then 429, SIGTERM drains", func(t *testing.T) {
		quickstart(t, bin)
	})
}

// served is a running `bulwark serve` process.
type served struct {
	cmd                    *exec.Cmd
	base, metrics, control string // http://host:port of each listener
	done                   chan error
	mu                     sync.Mutex
	logs                   bytes.Buffer
}

func (s *served) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// waitLog waits until a log line with msg (and, if given, containing
// sub) appeared, and returns it.
func (s *served) waitLog(t *testing.T, msg, sub string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(s.log(), "\n") {
			if strings.Contains(line, `"msg":"`+msg+`"`) && strings.Contains(line, sub) {
				return line
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log line %q with %q:\n%s", msg, sub, s.log())
	return ""
}

// stop sends SIGTERM and waits for a clean exit.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve exit after SIGTERM: %v\n%s", err, s.log())
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("serve did not stop after SIGTERM:\n%s", s.log())
	}
	if !strings.Contains(s.log(), `"msg":"gateway stopped"`) {
		t.Errorf("no clean stop logged:\n%s", s.log())
	}
}

// startServe runs `bulwark serve args...` (JSON logs) and waits until it
// is ready. The addresses come from the "gateway ready" log line.
func startServe(t *testing.T, bin string, env []string, args ...string) *served {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--log-format", "json"}, args...)...)
	cmd.Env = env
	return startCmd(t, cmd)
}

// startCmd is startServe for a command made by the caller (its user,
// for one).
func startCmd(t *testing.T, cmd *exec.Cmd) *served {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var metrics string
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			switch m["msg"] {
			case "metrics listening":
				metrics, _ = m["addr"].(string)
			case "gateway ready":
				m["metrics_addr"] = metrics
				ready <- m
			}
		}
		s.done <- cmd.Wait()
	}()
	select {
	case m := <-ready:
		str := func(k string) string {
			if v, _ := m[k].(string); v != "" {
				return "http://" + v
			}
			return ""
		}
		s.base, s.control = str("addr"), str("control_addr")
		if v, _ := m["metrics_addr"].(string); v != "" {
			s.metrics = "http://" + v + "/metrics"
		}
	case err := <-s.done:
		t.Fatalf("serve exited early: %v\n%s", err, s.log())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve never became ready:\n%s", s.log())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

// quickstart runs `bulwark serve` without a config (ports overridden so
// the test never collides with anything on the default ports).
func quickstart(t *testing.T, bin string) {
	s := startServe(t, bin, cleanEnv(), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0")
	base, metricsURL := s.base, s.metrics

	var codes []int
	for range 20 {
		res, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		codes = append(codes, res.StatusCode)
	}
	if codes[0] != 200 || codes[len(codes)-1] != 429 {
		t.Errorf("status codes %v: want 200 first and 429 by the 20th", codes)
	}
	res, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `bulwark_rejections_total{layer="rate_limit",reason="over_limit",route=`) {
		t.Errorf("metrics do not show the rejections")
	}

	// The quickstart has no file to re-read: reload is unsupported, and
	// SIGHUP is logged, not fatal.
	var out, errb bytes.Buffer
	t.Setenv("BULWARK_STATE_DIR", testStateDir) // the generated token's file
	if code := run([]string{"ctl", "--addr", s.control, "reload"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "501 reload_unsupported") {
		t.Errorf("ctl reload on the quickstart: exit %d %q", code, errb.String())
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "reload not possible", "embedded quickstart")
	s.stop(t)
}

// TestRunInProcess covers the dispatch without building the binary.
func TestRunInProcess(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "bulwark ") {
		t.Errorf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: bulwark") {
		t.Errorf("help: %d", code)
	}
	if code := run([]string{"serve", "--listen", "nonsense"}, &out, &errb); code == 0 {
		t.Errorf("serve with a bad --listen succeeded")
	}
}

// refusedFrom reports whether a connection from src to addr is refused
// at accept: without sending anything, the client reads no byte, only a
// reset or EOF (a served connection would wait for a request).
func refusedFrom(t *testing.T, src, addr string) bool {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return errors.Is(err, syscall.ECONNRESET)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(make([]byte, 64))
	return n == 0 && (err == io.EOF || errors.Is(err, syscall.ECONNRESET))
}

func getFrom(t *testing.T, src, u string) int {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	res, err := c.Get(u)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestBinaryControl runs the real binary: `bulwark ctl block` against a
// running `bulwark serve` refuses the blocked source at connect; SIGHUP
// reloads the file (limiter state and runtime entries kept, static
// entries replaced), and an invalid file is rejected problem by problem
// while the running configuration keeps serving.
func TestBinaryControl(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := bulwarkBin(t)
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ReadHeaderTimeout: 5 * time.Second}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(uln)
	t.Cleanup(func() { up.Close() })

	dir := t.TempDir()
	const token = "binary-test-token-0123456789"
	os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600)
	path := filepath.Join(dir, "bulwark.yaml")
	write := func(extraRoute, deny, qps string) {
		y := `listen: {addr: "127.0.0.1:0"}
metrics: {addr: ""}
control: {addr: "127.0.0.1:0", token_file: token}
upstreams: [{name: app, targets: ["http://` + uln.Addr().String() + `"]}]
routes:
  - {name: api, match: {path: /api/}, upstream: app, rate_limit: {qps: ` + qps + `, burst: 2}}
  - {name: all, match: {path: /}, upstream: app}
` + extraRoute + `ipsets: {deny: [` + deny + `]}
`
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("", "127.0.50.1", "0.001")
	s := startServe(t, bin, cleanEnv(), "--config", path)
	addr := strings.TrimPrefix(s.base, "http://")
	ctlEnv := cleanEnv("BULWARK_CONTROL_TOKEN="+token, "BULWARK_CONTROL_ADDR="+s.control)

	code, out, errOut := runBin(t, bin, ctlEnv, "ctl", "block", "127.0.51.0/24", "--ttl", "10m", "--reason", "manual")
	if code != 0 || !strings.HasPrefix(out, "blocked 127.0.51.0/24 (expires ") {
		t.Fatalf("ctl block: exit %d %q %q", code, out, errOut)
	}
	if !refusedFrom(t, "127.0.51.4", addr) || !refusedFrom(t, "127.0.51.200", addr) {
		t.Error("a blocked source was not refused at connect")
	}
	if !refusedFrom(t, "127.0.50.1", addr) {
		t.Error("the static deny entry was not refused")
	}
	if st := getFrom(t, "127.0.52.1", s.base+"/"); st != 200 {
		t.Errorf("another source: %d", st)
	}
	if code, _, errOut := runBin(t, bin, cleanEnv("BULWARK_CONTROL_ADDR="+s.control), "ctl", "status"); code != 1 || !strings.Contains(errOut, "401 unauthorized") {
		t.Errorf("ctl without a token: exit %d %q", code, errOut)
	}
	// Exhaust the route.
	for i, want := range []int{200, 200, 429} {
		if st := getFrom(t, "127.0.0.1", s.base+"/api/x"); st != want {
			t.Fatalf("/api/x #%d: %d, want %d", i, st, want)
		}
	}

	// SIGHUP with an unrelated change and a new static deny list.
	write("  - {name: other, match: {path: /other}, upstream: app}\n", "127.0.50.2", "0.001")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "configuration reloaded", "")
	if st := getFrom(t, "127.0.0.1", s.base+"/api/x"); st != 429 {
		t.Errorf("after SIGHUP the route limit state was lost: %d", st)
	}
	if st := getFrom(t, "127.0.0.1", s.base+"/other"); st != 200 {
		t.Errorf("the new route: %d", st)
	}
	if st := getFrom(t, "127.0.50.1", s.base+"/"); st != 200 {
		t.Errorf("the removed static entry still blocks: %d", st)
	}
	if !refusedFrom(t, "127.0.50.2", addr) || !refusedFrom(t, "127.0.51.4", addr) {
		t.Error("after SIGHUP: the new static entry or the runtime entry does not block")
	}

	// SIGHUP with an invalid file.
	write("  - {name: other, match: {path: /other}, upstream: app}\n", "127.0.50.2, 10.0.0.1/8", "0")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitLog(t, "reload rejected; the previous configuration keeps serving", "ipsets.deny[1]")
	line := s.waitLog(t, "reload rejected; the previous configuration keeps serving", "rate_limit.qps")
	if !strings.Contains(line, path+":6: routes[0].rate_limit.qps: 0 out of range [0.001, 1000000]") {
		t.Errorf("problem line %s", line)
	}
	if st := getFrom(t, "127.0.0.1", s.base+"/other"); st != 200 {
		t.Errorf("the previous configuration stopped serving: %d", st)
	}
	if !refusedFrom(t, "127.0.50.2", addr) {
		t.Error("the previous static entry stopped blocking")
	}
	// `ctl reload` reports the same problems.
	code, _, errOut = runBin(t, bin, ctlEnv, "ctl", "reload")
	if code != 1 || !strings.Contains(errOut, "422 invalid_config") || !strings.Contains(errOut, "routes[0].rate_limit.qps: 0 out of range") ||
		!strings.Contains(errOut, `ipsets.deny[1]: "10.0.0.1/8" has host bits set`) {
		t.Errorf("ctl reload: exit %d %q", code, errOut)
	}
	code, out, _ = runBin(t, bin, ctlEnv, "ctl", "--json", "status")
	var st struct {
		State  string `json:"state"`
		Config struct {
			OK   int `json:"reloads_ok"`
			Fail int `json:"reloads_failed"`
		} `json:"config"`
		Lists map[string]struct{ Entries, Static int } `json:"lists"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.State != "ready" || st.Config.OK != 1 || st.Config.Fail != 2 ||
		st.Lists["deny"].Entries != 2 || st.Lists["deny"].Static != 1 {
		t.Errorf("ctl status: exit %d %s", code, out)
	}
	// The audit line names the blocked prefix (the operator's input);
	// the refused clients' addresses appear nowhere.
	if strings.Contains(s.log(), token) || strings.Contains(s.log(), "127.0.51.4") || strings.Contains(s.log(), "127.0.51.200") {
		t.Errorf("the logs carry the token or a client address:\n%s", s.log())
	}
	s.stop(t)
}

// TestHelpAndUnknownFlags: --help (and -h) of every subcommand prints its
// usage to stdout and exits 0; an unknown flag prints the problem to
// stderr and exits 2, on every subcommand.
func TestHelpAndUnknownFlags(t *testing.T) {
	for _, cmd := range []string{"serve", "check", "ctl", "migrate", "version", "health"} {
		for _, help := range []string{"--help", "-h"} {
			var out, errb bytes.Buffer
			if code := run([]string{cmd, help}, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: bulwark "+cmd) {
				t.Errorf("bulwark %s %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", cmd, help, code, out.String(), errb.String())
			}
		}
		var out, errb bytes.Buffer
		if code := run([]string{cmd, "--no-such-flag"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no-such-flag") || out.Len() != 0 {
			t.Errorf("bulwark %s --no-such-flag: exit %d, stdout %q, stderr %q; want 2 and the problem on stderr", cmd, code, out.String(), errb.String())
		}
	}
}
