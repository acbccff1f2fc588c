package gateway

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNginxUpstreamMisbehaviour replays the misbehaving-upstream corpus
// (TestUpstreamMisbehaviour) through nginx configured to stream as
// Bulwark does (proxy_request_buffering off, proxy_buffering off,
// proxy_http_version 1.1, a keepalive upstream) and logs what each
// client got: a comparison for the record, not a gate (set
// BULWARK_NGINX=1; it needs nginx on PATH).
func TestNginxUpstreamMisbehaviour(t *testing.T) {
	if os.Getenv("BULWARK_NGINX") == "" {
		t.Skip("a comparison with nginx, not a gate: set BULWARK_NGINX=1")
	}
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx not installed")
	}
	_, upURL := startScriptedUpstream(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	conf := fmt.Sprintf(`
worker_processes 1;
daemon off;
user root;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  upstream app {
    server %[2]s;
    keepalive 2;
  }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 5s;
    }
  }
}
`, dir, strings.TrimPrefix(upURL, "http://"), addr)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i == 200 {
			t.Fatal("nginx did not start")
		}
		time.Sleep(10 * time.Millisecond) // waiting for another process to listen
	}
	for i, m := range append(misbehaviours, misbehaviour{mode: "cl-te", method: "GET"}) {
		var mu sync.Mutex
		var attackers, leaks, errs []string
		attack := func(rc *rawClient1, marker string) {
			body := ""
			if m.body != nil {
				body = m.body(marker)
			}
			a := rc.do(m.method, "/"+m.mode+"/"+marker, body, m.chunked)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case a.err != nil:
				attackers = append(attackers, "error")
			case strings.Contains(a.body, "LEAK"):
				attackers = append(attackers, fmt.Sprintf("%d+leak", a.status))
			default:
				attackers = append(attackers, fmt.Sprint(a.status))
			}
		}
		victim := func(rc *rawClient1, marker string) {
			a := rc.do("GET", "/ok/"+marker, "", false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case a.err != nil:
				errs = append(errs, a.err.Error())
			case a.body != marker:
				leaks = append(leaks, a.body)
			}
		}
		rc := &rawClient1{addr: addr}
		for j := range 3 {
			attack(rc, fmt.Sprintf("a%d-%d", i, j))
			victim(rc, fmt.Sprintf("v%d-%d", i, j))
		}
		rc.close()
		var wg sync.WaitGroup
		for k := range 4 {
			wg.Go(func() {
				rc := &rawClient1{addr: addr}
				defer rc.close()
				for j := range 6 {
					if (j+k)%2 == 0 {
						attack(rc, fmt.Sprintf("a%d-%d-%d", i, k, j))
					} else {
						victim(rc, fmt.Sprintf("v%d-%d-%d", i, k, j))
					}
				}
			})
		}
		wg.Wait()
		name := m.mode + " " + m.method
		if m.chunked {
			name += " chunked"
		}
		if m.body != nil && len(m.body("")) > 64<<10 {
			name += " 70KiB"
		}
		t.Logf("nginx | %-28s | attacker answers %v | victims given another's bytes: %d %q | victim errors: %d",
			name, counts(attackers), len(leaks), leaks, len(errs))
	}
}

func counts(xs []string) map[string]int {
	m := map[string]int{}
	for _, x := range xs {
		m[x]++
	}
	return m
}
