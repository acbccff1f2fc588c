//go:build linux

package xdp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
)

// The integration test: two network namespaces joined by a veth pair,
// created and removed by the test. The server side ("a") runs the
// program on its veth; the client side ("b") pings, connects and floods.

const (
	addrA = "10.77.0.1"
	addrB = "10.77.0.2"
)

type netnsPair struct {
	a, b   string // namespace names
	va, vb string // veth names (va in a, vb in b)
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newNetnsPair(t *testing.T) *netnsPair {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("xdp: the ip command (iproute2) is missing; run scripts/install-test-deps")
	}
	var r [3]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	p := &netnsPair{a: "bwx" + id + "a", b: "bwx" + id + "b", va: "bwx" + id + "a", vb: "bwx" + id + "b"}
	ipCmd(t, "netns", "add", p.a)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.a).Run() })
	ipCmd(t, "netns", "add", p.b)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.b).Run() })
	ipCmd(t, "link", "add", p.va, "netns", p.a, "type", "veth", "peer", "name", p.vb, "netns", p.b)
	ipCmd(t, "-n", p.a, "addr", "add", addrA+"/24", "dev", p.va)
	ipCmd(t, "-n", p.b, "addr", "add", addrB+"/24", "dev", p.vb)
	for _, c := range [][]string{{p.a, p.va}, {p.b, p.vb}} {
		ipCmd(t, "-n", c[0], "link", "set", "lo", "up")
		ipCmd(t, "-n", c[0], "link", "set", c[1], "up")
	}
	// A server has a default route: the kernel answers a SYN (and so
	// arms its listener for cookie ACKs) only when it can route the reply.
	ipCmd(t, "-n", p.a, "route", "add", "default", "via", addrB)
	if err := inNS(p.a, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/tcp_syncookies", []byte("2"), 0o644)
	}); err != nil {
		t.Fatalf("net.ipv4.tcp_syncookies=2 in %s: %v", p.a, err)
	}
	return p
}

// inNS runs fn on a thread inside namespace ns. The thread is locked and
// never unlocked, so it dies with the goroutine instead of returning to
// Go's pool in the wrong namespace. Sockets fn creates stay in ns.
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// attachPass attaches an XDP_PASS program to the client's veth in native
// mode: a veth only receives the frames its peer sends with XDP_TX when
// it runs XDP itself.
func attachPass(t *testing.T, p *netnsPair) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
		License:      "Dual BSD/GPL",
	})
	if err != nil {
		skipIfRefused(t, err)
	}
	t.Cleanup(func() { prog.Close() })
	err = inNS(p.b, func() error {
		ifc, err := net.InterfaceByName(p.vb)
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	if err != nil {
		t.Fatalf("attaching XDP_PASS to the client veth: %v", err)
	}
}

func (p *netnsPair) ping(t *testing.T) bool {
	t.Helper()
	return exec.Command("ip", "netns", "exec", p.b, "ping", "-c", "1", "-W", "1", "-q", addrA).Run() == nil
}

// httpGet fetches url from namespace b on a new connection.
func (p *netnsPair) httpGet(url string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := inNS(p.b, func() error {
				var err error
				d := net.Dialer{Timeout: timeout}
				conn, err = d.DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "served" {
		return fmt.Errorf("status %d body %q", resp.StatusCode, b)
	}
	return nil
}

// udpEcho sends one datagram from b to the echo server and waits for it.
func (p *netnsPair) udpEcho(addr string) error {
	var conn net.Conn
	if err := inNS(p.b, func() error {
		var err error
		conn, err = net.Dial("udp4", addr)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 16)
	n, err := conn.Read(b)
	if err != nil {
		return err
	}
	if string(b[:n]) != "ping" {
		return fmt.Errorf("echo %q", b[:n])
	}
	return nil
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mountBPFFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("xdp: cannot mount a BPF filesystem for the pinning test: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

type lists struct {
	allow, deny *ipset.Set
	m           *Manager
}

func newLists(t *testing.T, capacity int) *lists {
	l := &lists{}
	on := func(c ipset.Change) { l.m.OnChange(c) }
	var err error
	if l.allow, err = ipset.New(ipset.Config{Name: "allow", Capacity: capacity, OnChange: on}); err != nil {
		t.Fatal(err)
	}
	if l.deny, err = ipset.New(ipset.Config{Name: "deny", Capacity: capacity, OnChange: on}); err != nil {
		t.Fatal(err)
	}
	return l
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestNetnsIntegration(t *testing.T) {
	p := newNetnsPair(t)
	attachPass(t, p)
	pin := mountBPFFS(t)

	// Servers in namespace a: HTTP and a UDP echo.
	var hl net.Listener
	var uc net.PacketConn
	if err := inNS(p.a, func() error {
		var err error
		if hl, err = net.Listen("tcp4", addrA+":0"); err != nil {
			return err
		}
		uc, err = net.ListenPacket("udp4", addrA+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") })}
	go srv.Serve(hl)
	defer srv.Close()
	go func() {
		b := make([]byte, 64)
		for {
			n, from, err := uc.ReadFrom(b)
			if err != nil {
				return
			}
			uc.WriteTo(b[:n], from)
		}
	}()
	defer uc.Close()
	url := "http://" + hl.Addr().String() + "/"
	httpPort := hl.Addr().(*net.TCPAddr).Port

	// The lists, a static entry from "the configuration", the control API
	// over them, and the manager in native mode.
	l := newLists(t, 1024)
	l.deny.Add(netip.MustParsePrefix("10.77.9.0/24"), 0, DefaultStaticReason)
	var logs logBuf
	var evMu sync.Mutex
	var events []Event
	cfg := Config{
		Interface: p.va, Mode: ModeNative, Required: true, Allow: l.allow, Deny: l.deny, PinPath: pin + "/" + p.va,
		ScoreEntries: 1 << 16, ConntrackEntries: 1 << 16, RingBytes: 1 << 20,
		K: 3, MinRate: 2000, Warmup: 10, EnterSamples: 2, ExitHold: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnEvent: func(e Event) {
			evMu.Lock()
			events = append(events, e)
			evMu.Unlock()
		},
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.m = m
	if err := inNS(p.a, func() error { return m.Start(context.Background()) }); err != nil {
		skipIfRefused(t, err)
	}
	defer m.Stop()
	st := m.Status()
	if st.Attached != AttachedNative || st.Syncookies != 2 || st.Pinned == "" || len(st.Warnings) != 0 {
		t.Fatalf("status after start: %+v", st)
	}
	ctl, err := control.New(control.Config{Allow: l.allow, Deny: l.deny})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(ctl)
	defer api.Close()
	client := &control.Client{BaseURL: api.URL}
	ctx := context.Background()

	t.Run("traffic passes", func(t *testing.T) {
		if !p.ping(t) {
			t.Error("ping failed")
		}
		if err := p.httpGet(url, 2*time.Second); err != nil {
			t.Errorf("http: %v", err)
		}
		if err := p.udpEcho(uc.LocalAddr().String()); err != nil {
			t.Errorf("udp: %v", err)
		}
	})

	t.Run("a denied /24 is dropped, and lifted", func(t *testing.T) {
		before := m.Status().Counters.Deny
		if _, err := client.Add(ctx, "blocklist", "10.77.0.0/24", 0, "test"); err != nil {
			t.Fatal(err)
		}
		if p.ping(t) {
			t.Error("ping passed a denied /24")
		}
		if err := p.httpGet(url, 500*time.Millisecond); err == nil {
			t.Error("http passed a denied /24")
		}
		if err := p.udpEcho(uc.LocalAddr().String()); err == nil {
			t.Error("udp passed a denied /24")
		}
		if err := client.Remove(ctx, "blocklist", "10.77.0.0/24"); err != nil {
			t.Fatal(err)
		}
		if !p.ping(t) {
			t.Error("ping failed after unblock")
		}
		if err := p.httpGet(url, 2*time.Second); err != nil {
			t.Errorf("http after unblock: %v", err)
		}
		eventually(t, time.Second, "deny counter", func() bool { return m.Status().Counters.Deny > before })
	})

	t.Run("a TTL lifts", func(t *testing.T) {
		if _, err := client.Add(ctx, "blocklist", addrB, 1500*time.Millisecond, "ttl"); err != nil {
			t.Fatal(err)
		}
		if p.ping(t) {
			t.Error("ping passed within the TTL")
		}
		eventually(t, 4*time.Second, "the TTL did not lift", func() bool { return p.ping(t) })
	})

	t.Run("a SYN flood trips defense mode and the proxy serves", func(t *testing.T) {
		if _, err := exec.LookPath("hping3"); err != nil {
			t.Fatal("xdp: hping3 is missing; run scripts/install-test-deps")
		}
		// Let the baseline learn an idle rate first.
		eventually(t, 5*time.Second, "warm-up", func() bool { return m.Status().Samples >= uint64(cfg.Warmup) })
		before, _ := m.readCounters()
		// hping3 --flood ignores -c: the flood is bounded in time, by
		// killing its process group once the requests are done or after
		// 8 s, and by timeout(1) after 10 s should this process die.
		flood := exec.Command("ip", "netns", "exec", p.b, "timeout", "-s", "KILL", "10",
			"hping3", "--flood", "-q", "-S", "--rand-source", "-p", fmt.Sprint(httpPort), addrA)
		flood.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := flood.Start(); err != nil {
			t.Fatal(err)
		}
		stopFlood := sync.OnceFunc(func() {
			// timeout(1) passes SIGTERM on to hping3 and reaps it; the
			// group kill is the fallback.
			syscall.Kill(flood.Process.Pid, syscall.SIGTERM)
			done := make(chan struct{})
			go func() { flood.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				syscall.Kill(-flood.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
		defer stopFlood()
		watchdog := time.AfterFunc(8*time.Second, stopFlood)
		defer watchdog.Stop()
		eventually(t, 5*time.Second, "defense mode did not start", func() bool { return m.Status().Defense })
		// New connections from the flooding namespace's real address, one
		// every 200 ms, while defense mode lasts.
		inDefense, served := 0, 0
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			if m.Status().Defense {
				inDefense++
			}
			if err := p.httpGet(url, 3*time.Second); err != nil {
				t.Errorf("http during the flood: %v", err)
			} else {
				served++
			}
		}
		during, _ := m.readCounters()
		st := m.Status()
		stopFlood()
		t.Logf("flood: %d SYNs seen, %d SYN-ACKs sent, %d kernel SYNs, %d cookie ACKs, %d flow-cache hits, rate %.0f/s (threshold %.0f), %d of 5 requests served (%d in defense mode)",
			during.SYN-before.SYN, during.TX-before.TX, during.KernelSYN-before.KernelSYN,
			during.CookieOK-before.CookieOK, during.FlowHit-before.FlowHit, st.SYNRate, st.Threshold, served, inDefense)
		if inDefense < 5 {
			t.Errorf("defense mode was on for %d of the 5 requests", inDefense)
		}
		if during.TX-before.TX < 1000 {
			t.Errorf("only %d cookie SYN-ACKs during the flood", during.TX-before.TX)
		}
		if during.CookieOK-before.CookieOK < 3 {
			t.Errorf("%d cookie ACKs: the requests did not go through the SYN proxy", during.CookieOK-before.CookieOK)
		}
		eventually(t, 6*time.Second, "defense mode did not end", func() bool { return !m.Status().Defense })
		evMu.Lock()
		var kinds []EventKind
		for _, e := range events {
			kinds = append(kinds, e.Kind)
		}
		evMu.Unlock()
		if !strings.Contains(fmt.Sprint(kinds), "defense_on") || !strings.Contains(fmt.Sprint(kinds), "defense_off") {
			t.Errorf("events %v, want defense_on and defense_off", kinds)
		}
		if err := p.httpGet(url, 2*time.Second); err != nil {
			t.Errorf("http after the flood: %v", err)
		}
	})

	t.Run("restart keeps the deny list; generic mode", func(t *testing.T) {
		if _, err := client.Add(ctx, "blocklist", addrB, 10*time.Minute, "runtime"); err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command("ip", "-n", p.a, "link", "show", p.va).CombinedOutput()
		if strings.Contains(string(out), "xdp") {
			t.Errorf("program still attached after Stop:\n%s", out)
		}
		if !p.ping(t) {
			t.Error("ping failed with the program detached")
		}
		// A new process: fresh lists holding only the configuration's
		// entries (the static /24 was dropped from it).
		l2 := newLists(t, 1024)
		cfg2 := cfg
		cfg2.Allow, cfg2.Deny, cfg2.Mode, cfg2.OnEvent = l2.allow, l2.deny, ModeGeneric, nil
		m2, err := New(cfg2)
		if err != nil {
			t.Fatal(err)
		}
		l2.m = m2
		if err := inNS(p.a, func() error { return m2.Start(context.Background()) }); err != nil {
			t.Fatal(err)
		}
		defer m2.Stop()
		st := m2.Status()
		if st.Attached != AttachedGeneric || st.Restored != 1 {
			t.Errorf("after restart: attached %s restored %d, want generic and 1", st.Attached, st.Restored)
		}
		e, ok := l2.deny.Get(netip.MustParsePrefix(addrB + "/32"))
		if !ok || e.Reason != "restored" || time.Until(e.Expires) < 9*time.Minute {
			t.Errorf("restored entry %+v %v, want reason restored and about 10 min left", e, ok)
		}
		if _, ok := l2.deny.Get(netip.MustParsePrefix("10.77.9.0/24")); ok {
			t.Error("a static entry the configuration dropped came back")
		}
		if p.ping(t) {
			t.Error("ping passed the restored deny entry")
		}
		l2.deny.Remove(netip.MustParsePrefix(addrB + "/32"))
		if !p.ping(t) {
			t.Error("ping failed after removing the restored entry (generic mode)")
		}
	})
	if t.Failed() {
		t.Logf("manager log:\n%s", logs.String())
	}
}
