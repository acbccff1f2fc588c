//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestUpgradeUnderLoad: SIGUSR2 hands every listening socket to a new
// process while a load of about 1,000 requests a second (keep-alive
// clients, as a balancer's) goes through the client listener: not one
// request fails, the process serving changes (the control API's status
// names the new PID, reached through the handed-over control socket; the
// PID file follows), the old process exits cleanly, and the new one
// answers every request after it. Bounded: BULWARK_UPGRADE_REQUESTS
// requests (default 3,000) plus 500 after the last upgrade, at most four
// times that, BULWARK_UPGRADES upgrades (default 2: a process started
// by an upgrade is upgraded too), within generous deadlines;
// scripts/test-long runs a longer one.
func TestUpgradeUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	total, upgrades := envInt(t, "BULWARK_UPGRADE_REQUESTS", 3000), envInt(t, "BULWARK_UPGRADES", 2)
	bin := bulwarkBin(t)

	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ReadHeaderTimeout: 5 * time.Second}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(uln)
	t.Cleanup(func() { up.Close() })

	dir := t.TempDir()
	const token = "upgrade-test-token-0123456789"
	os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600)
	cfgPath, pidPath, logPath := filepath.Join(dir, "bulwark.yaml"), filepath.Join(dir, "bulwark.pid"), filepath.Join(dir, "serve.log")
	// Two client listeners (the event loops and net/http), metrics and
	// control: every socket is handed over.
	os.WriteFile(cfgPath, []byte(`listen:
  - {name: loops, addr: "127.0.0.1:0"}
  - {name: nethttp, addr: "127.0.0.1:0", engine: nethttp}
metrics: {addr: "127.0.0.1:0"}
control: {addr: "127.0.0.1:0", token_file: token}
upstreams: [{name: app, targets: ["http://`+uln.Addr().String()+`"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
`), 0o600)
	// Every process of the chain writes to this file (the new one
	// inherits the old one's stderr): a file, not a pipe, so that the
	// first process's Wait does not wait for its successor.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }

	cmd := exec.Command(bin, "serve", "--log-format", "json", "--config", cfgPath, "--pid-file", pidPath)
	cmd.Env, cmd.Stdout, cmd.Stderr = cleanEnv(), logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- cmd.Wait() }()
	// The processes of the chain not yet seen gone, killed at cleanup
	// if the test failed halfway (never a PID seen gone: it may be
	// another process's by now).
	var pidsMu sync.Mutex
	pids := []int{cmd.Process.Pid}
	alive := map[int]bool{cmd.Process.Pid: true}
	setAlive := func(pid int, v bool) {
		pidsMu.Lock()
		defer pidsMu.Unlock()
		if v {
			pids = append(pids, pid)
			alive[pid] = true
		} else {
			delete(alive, pid)
		}
	}
	t.Cleanup(func() {
		pidsMu.Lock()
		defer pidsMu.Unlock()
		for p := range alive {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs())
		}
	})

	ready := waitLine(t, logs, "gateway ready", 1, 30*time.Second)
	control := "http://" + ready["control_addr"]
	bases := []string{"http://" + ready["listeners.loops"], "http://" + ready["listeners.nethttp"]}
	metricsURL := "http://" + waitLine(t, logs, "metrics listening", 1, 30*time.Second)["addr"] + "/metrics"
	if pid := statusPID(t, control, token); pid != cmd.Process.Pid {
		t.Fatalf("status pid %d, want %d", pid, cmd.Process.Pid)
	}

	// The load: a pacer releases request i at start + i ms; 32 workers
	// on one keep-alive client send them.
	const workers = 32
	tr := &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	var ok, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string
	jobs := make(chan int, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				why := ""
				res, err := client.Get(bases[i%2] + "/load/" + strconv.Itoa(i))
				if err != nil {
					why = err.Error()
				} else {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != 200 || string(b) != "ok" {
						why = fmt.Sprintf("%d %q", res.StatusCode, b)
					}
				}
				if why == "" {
					ok.Add(1)
					continue
				}
				failed.Add(1)
				failMu.Lock()
				if len(failures) < 10 {
					failures = append(failures, fmt.Sprintf("request %d: %s", i, why))
				}
				failMu.Unlock()
			}
		}()
	}

	// The upgrades, one after another, each once a share of the load
	// went through.
	var upgraded atomic.Int64 // upgrades completed: the old process gone
	var afterLast atomic.Int64
	upgradeAt := make(chan struct{}, upgrades)
	ctlDone := make(chan string, 1)
	go func() {
		cur := cmd.Process.Pid
		for range upgrades {
			<-upgradeAt
			if err := syscall.Kill(cur, syscall.SIGUSR2); err != nil {
				ctlDone <- err.Error()
				return
			}
			next, why := waitNewPID(control, token, cur, 60*time.Second)
			if why != "" {
				ctlDone <- why
				return
			}
			setAlive(next, true)
			if !waitGone(cur, 60*time.Second) {
				ctlDone <- fmt.Sprintf("the old process %d did not exit", cur)
				return
			}
			setAlive(cur, false)
			if b, _ := os.ReadFile(pidPath); strings.TrimSpace(string(b)) != strconv.Itoa(next) {
				ctlDone <- fmt.Sprintf("PID file %q after the upgrade, want %d", b, next)
				return
			}
			cur = next
			upgraded.Add(1)
		}
		ctlDone <- ""
	}()

	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	issued, sent := 0, 0
	for ; issued < 4*total && time.Now().Before(deadline); issued++ {
		if sent < upgrades && issued == (sent+1)*total/(upgrades+1) {
			upgradeAt <- struct{}{}
			sent++
		}
		if int(upgraded.Load()) == upgrades {
			if afterLast.Add(1) > 500 && issued >= total {
				break
			}
		}
		if d := time.Until(start.Add(time.Duration(issued) * time.Millisecond)); d > 2*time.Millisecond {
			time.Sleep(d)
		}
		jobs <- issued
	}
	elapsed := time.Since(start)
	close(jobs)
	wg.Wait()

	var ctlErr string
	select {
	case ctlErr = <-ctlDone:
	case <-time.After(time.Minute):
		ctlErr = "the upgrades did not finish"
	}
	t.Logf("%d requests in %v (%.0f/s), %d ok, %d failed, %d upgrades, %d requests after the last one",
		issued, elapsed.Round(time.Millisecond), float64(issued)/elapsed.Seconds(), ok.Load(), failed.Load(), upgraded.Load(), afterLast.Load())
	if ctlErr != "" {
		t.Fatalf("upgrade: %s", ctlErr)
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed through the upgrade, e.g.:\n%s", n, strings.Join(failures, "\n"))
	}
	if int(upgraded.Load()) != upgrades || afterLast.Load() <= 500 {
		t.Errorf("%d of %d upgrades done, %d requests after the last: the load ended first", upgraded.Load(), upgrades, afterLast.Load())
	}
	select {
	case err := <-firstDone:
		if err != nil {
			t.Errorf("the first process exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the first process did not exit")
	}

	// The last process stops on SIGTERM; every process logged a clean
	// stop and a hand-over.
	pidsMu.Lock()
	last := pids[len(pids)-1]
	pidsMu.Unlock()
	if pid := statusPID(t, control, token); pid != last {
		t.Errorf("status pid %d, want the last process %d", pid, last)
	}
	// The metrics listener answers on its address from the start.
	if res, err := statusClient.Get(metricsURL); err != nil || res.StatusCode != 200 {
		t.Errorf("metrics after the upgrades: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	syscall.Kill(last, syscall.SIGTERM)
	if !waitGone(last, 60*time.Second) {
		t.Fatal("the last process did not stop on SIGTERM")
	}
	setAlive(last, false)
	l := logs()
	if n := strings.Count(l, `"msg":"gateway stopped"`); n != upgrades+1 {
		t.Errorf("%d clean stops logged, want %d", n, upgrades+1)
	}
	if n := strings.Count(l, `"msg":"upgrade: the new process is ready; handing over"`); n != upgrades {
		t.Errorf("%d hand-overs logged, want %d", n, upgrades)
	}
	// Each new process took every socket over (none bound afresh: the
	// same addresses, port 0 or not).
	for i := 1; i <= upgrades+1; i++ {
		r := waitLine(t, logs, "gateway ready", i, time.Second)
		if r["listeners.loops"] != ready["listeners.loops"] || r["listeners.nethttp"] != ready["listeners.nethttp"] || r["control_addr"] != ready["control_addr"] {
			t.Errorf("process %d serves on %v, want the first one's %v", i, r, ready)
		}
	}
	if n := strings.Count(l, `"sockets_taken_over":["listen","listen","metrics","control"]`); n != upgrades {
		t.Errorf("%d processes took the four sockets over, want %d", n, upgrades)
	}
	if strings.Contains(l, `"level":"ERROR"`) {
		t.Error("an error was logged")
	}
}

// waitLine waits for the nth JSON log line with msg and returns its
// string fields, those of a group as "group.key".
func waitLine(t *testing.T, logs func() string, msg string, nth int, within time.Duration) map[string]string {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		n := 0
		for _, line := range strings.Split(logs(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
				continue
			}
			if n++; n < nth {
				continue
			}
			out := map[string]string{}
			for k, v := range m {
				switch v := v.(type) {
				case string:
					out[k] = v
				case map[string]any:
					for k2, v2 := range v {
						if s, ok := v2.(string); ok {
							out[k+"."+k2] = s
						}
					}
				}
			}
			return out
		}
	}
	t.Fatalf("no log line %q number %d", msg, nth)
	return nil
}

// statusPID returns the pid of the control API's status document.
func statusPID(t *testing.T, control, token string) int {
	t.Helper()
	pid, err := fetchPID(control, token)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// statusClient opens a connection per call: a kept-alive one would stay
// with the process that accepted it.
var statusClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func fetchPID(control, token string) (int, error) {
	req, _ := http.NewRequest("GET", control+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := statusClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var doc struct{ PID int }
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil || res.StatusCode != 200 {
		return 0, fmt.Errorf("status: %d %v", res.StatusCode, err)
	}
	return doc.PID, nil
}

// waitNewPID polls the status until another process than old answers.
func waitNewPID(control, token string, old int, within time.Duration) (int, string) {
	var last error
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		pid, err := fetchPID(control, token)
		if err == nil && pid != old {
			return pid, ""
		}
		last = err
	}
	return 0, fmt.Sprintf("no other process than %d answered the status (last error %v)", old, last)
}

// waitGone waits until process pid no longer runs (gone, or a zombie
// its parent has not reaped yet).
func waitGone(pid int, within time.Duration) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		// pid (comm) state ...: the state follows the last ')'.
		if i := strings.LastIndexByte(line, ')'); i >= 0 && i+2 < len(line) && line[i+2] == 'Z' {
			return true
		}
	}
	return false
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
