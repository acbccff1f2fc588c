package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bulwarkhq/bulwark/wire"
)

// TestHealthCommand: `bulwark health` exits 0 when /readyz answers 200,
// 1 when it answers anything else (naming the problem's code) or cannot
// be reached, 2 on a usage error; --addr asks http://HOST:PORT/readyz,
// with an unspecified host on loopback.
func TestHealthCommand(t *testing.T) {
	var ready atomic.Bool
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if ready.Load() {
			_, _ = w.Write([]byte("{\"status\":\"ready\"}\n"))
			return
		}
		wire.Write(w, wire.New(wire.CodeUpstreamUnhealthy))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	health := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"health"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	if code, _, errs := health("--addr", "0.0.0.0:"+port); code != 1 || !strings.Contains(errs, "not ready: 503 upstream_unhealthy") {
		t.Errorf("not ready: exit %d %q", code, errs)
	}
	ready.Store(true)
	if code, out, errs := health("--addr", "0.0.0.0:"+port); code != 0 || out != "ready\n" {
		t.Errorf("ready: exit %d %q %q", code, out, errs)
	}
	if code, _, errs := health("--url", srv.URL+"/readyz", "--timeout", "2s"); code != 0 {
		t.Errorf("--url: exit %d %q", code, errs)
	}
	mu.Lock()
	if len(paths) != 3 || paths[0] != "/readyz" || paths[1] != "/readyz" {
		t.Errorf("paths asked: %q", paths)
	}
	mu.Unlock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if code, _, errs := health("--addr", closed); code != 1 || !strings.Contains(errs, "not ready") {
		t.Errorf("nothing listening: exit %d %q", code, errs)
	}
	for _, bad := range [][]string{
		{"--addr", "no-port"},
		{"--url", "ftp://x/"},
		{"--addr", "127.0.0.1:1", "--url", "http://127.0.0.1:1/readyz"},
		{"--timeout", "0s"},
		{"extra"},
	} {
		if code, _, _ := health(bad...); code != 2 {
			t.Errorf("health %q: exit %d, want 2", bad, code)
		}
	}
}
