package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bulwarkBin builds the real binary once per test run.
func bulwarkBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bulwark")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// cleanEnv is the environment the binary runs with: no BULWARK_* from
// the developer's shell.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BULWARK_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

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
	t.Run("check example", func(t *testing.T) {
		env := cleanEnv("BULWARK_POSTGRES_URL=postgres://rt:pw@db.internal/bulwark", "BULWARK_REDIS_URL=redis://cache.internal:6379")
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
			bad + `:6: upstreams[0].timeouts.connect: bad duration "soon" (want e.g. 500ms, 30s, 5m)`,
			bad + `:15: routes[1].colour: unknown key (known keys: name, match, upstream, rate_limit, login, quota)`,
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

// quickstart runs `bulwark serve` without a config (ports overridden so
// the test never collides with anything on 8080/9090).
func quickstart(t *testing.T, bin string) {
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var logs bytes.Buffer
	addrs := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var listen, metrics string
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			switch m["msg"] {
			case "host: listening":
				listen, _ = m["addr"].(string)
			case "metrics listening":
				metrics, _ = m["addr"].(string)
			case "gateway ready":
				addrs <- [2]string{listen, metrics}
			}
		}
		done <- cmd.Wait()
	}()
	var base, metricsURL string
	select {
	case a := <-addrs:
		base, metricsURL = "http://"+a[0], "http://"+a[1]+"/metrics"
	case err := <-done:
		t.Fatalf("serve exited early: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve never became ready:\n%s", logs.String())
	}

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
	if !strings.Contains(string(body), `bulwark_rejections_total{layer="rate_limit",reason="over_limit"}`) {
		t.Errorf("metrics do not show the rejections")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve did not stop after SIGTERM:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"gateway stopped"`) {
		t.Errorf("no clean stop logged:\n%s", logs.String())
	}
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
