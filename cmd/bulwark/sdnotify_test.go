package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listenNotify opens the unixgram socket a service manager would listen
// on, at path (or an abstract name with a leading '@').
func listenNotify(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(b[:n])
}

// TestSdNotify: sdNotify sends its state as one datagram to the socket
// $NOTIFY_SOCKET names, a path or an abstract name; without it, it does
// nothing; a relative name is an error.
func TestSdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	c := listenNotify(t, path)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NOTIFY_SOCKET" {
				return v
			}
			return ""
		}
	}
	if err := sdNotify(env(path), "READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, c); got != "READY=1" {
		t.Errorf("got %q", got)
	}
	abstract := fmt.Sprintf("@bulwark-test-%d", os.Getpid())
	ac := listenNotify(t, abstract)
	if err := sdNotify(env(abstract), "STOPPING=1"); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, ac); got != "STOPPING=1" {
		t.Errorf("abstract: got %q", got)
	}
	if err := sdNotify(env(""), "READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
	if err := sdNotify(env("relative.sock"), "READY=1"); err == nil {
		t.Error("a relative NOTIFY_SOCKET was accepted")
	}
	// A process started by an upgrade claims the main PID, so that
	// systemd follows it when its predecessor exits.
	if s := readyState(true, 4242); s != "MAINPID=4242\nREADY=1\nSTATUS=serving (upgraded)" {
		t.Errorf("upgraded ready state %q", s)
	}
	if s := readyState(false, 4242); s != "READY=1\nSTATUS=serving" {
		t.Errorf("ready state %q", s)
	}
}

// TestBinarySdNotify: `bulwark serve` under a notify socket sends
// READY=1 once it serves (/readyz answers 200 by then) and STOPPING=1
// when SIGTERM starts the drain, as systemd's Type=notify expects.
func TestBinarySdNotify(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := bulwarkBin(t)
	path := filepath.Join(t.TempDir(), "notify.sock")
	c := listenNotify(t, path)
	s := startServe(t, bin, cleanEnv("NOTIFY_SOCKET="+path), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0")
	if got := readNotify(t, c); got != "READY=1\nSTATUS=serving" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	res, err := http.Get(s.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("/readyz after READY=1: %d", res.StatusCode)
	}
	s.stop(t)
	if got := readNotify(t, c); got != "STOPPING=1\nSTATUS=stopping" {
		t.Errorf("notification at SIGTERM %q, want STOPPING=1", got)
	}
}
