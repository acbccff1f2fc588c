package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cloudflare/tableflip"
)

// The upgrade without a dropped request (SIGUSR2).
//
// serve binds every listening socket (client, metrics, control, RLS)
// through an upgrader, which keeps a duplicate of each. On SIGUSR2 it
// starts the binary again (the same path and arguments: a new binary
// installed at that path, a changed configuration file) with those
// sockets as inherited descriptors; the new process takes each socket
// whose name and address it still has instead of binding it, starts,
// and once its admission is open tells the old one, which then stops
// accepting on every listener (the sockets stay open in the new
// process: connections queued on them are the new process's), serves
// the connections it has without keep-alive and drains as on SIGTERM
// (gateway.Gateway.Handover). Between the two moments both processes
// accept from the same sockets: no connection is refused at any point.
// A new process that fails to start (an invalid configuration, a bind
// error) or is not ready within upgradeTimeout is killed and the old
// one serves on.
//
// The hand-off is github.com/cloudflare/tableflip (v1.2.3): the
// inherited descriptors, the readiness pipe, one upgrade at a time, a
// child that dies during start-up, the PID file for systemd. It is used
// here only; internal/deptest keeps it out of host and the library.
// The raw accept of the event loops (host/accept_linux.go) takes an
// inherited socket as it takes a bound one: net.FileListener returns a
// *net.TCPListener.
//
// What is not carried over: the in-memory state (the route rate limits,
// the shield's windows, the login throttle's memory store, the
// connection guards' counts) starts afresh in the new process, as after
// a restart; what lives in Redis or PostgreSQL (cluster profile) is
// shared by both. Runtime list entries are saved to the state directory
// and loaded by the new process at start (one added to the old process
// during the overlap is not).

// upgradeTimeout bounds the new process's start: not ready by then, it
// is killed and the old process serves on. A start runs the readiness
// checks (PostgreSQL, Redis), each bounded well below it.
const upgradeTimeout = 2 * time.Minute

// upgrader binds the listening sockets and hands them to a new process.
// Without upgrade support (Windows, or a second serve in one process:
// tests) it binds with net.Listen and Upgrade fails.
type upgrader struct {
	upg       *tableflip.Upgrader // nil: no upgrades
	why       string              // why upg is nil
	mu        sync.Mutex
	inherited []string       // names of the sockets taken over
	seen      map[string]int // keys asked for so far
}

// upgraderOnce: tableflip allows one Upgrader per process.
var upgraderOnce sync.Once

// newUpgrader returns the process's upgrader; pidFile, when set, is
// written with the process's PID once it is ready (ready).
func newUpgrader(pidFile string) *upgrader {
	u := &upgrader{why: "a second serve in this process"}
	upgraderOnce.Do(func() {
		upg, err := tableflip.New(tableflip.Options{PIDFile: pidFile, UpgradeTimeout: upgradeTimeout})
		if err != nil {
			u.why = err.Error()
			return
		}
		u.upg, u.why = upg, ""
	})
	return u
}

// listen is gateway.Deps.Listen: the socket called name at addr from
// the previous process, else a new one. The key is the name and the
// address as configured (and, for the same name and address asked for
// again, such as two listeners on port 0 in tests, the order it is
// asked for in), so a socket on port 0 is found again and a listener
// moved to another address is bound afresh (the old socket is closed
// once this process is ready).
func (u *upgrader) listen(name, network, addr string) (net.Listener, error) {
	if u.upg == nil {
		return net.Listen(network, addr)
	}
	key := name + "=" + addr
	u.mu.Lock()
	if u.seen == nil {
		u.seen = map[string]int{}
	}
	if n := u.seen[key]; n > 0 {
		key += "#" + strconv.Itoa(n)
	}
	u.seen[name+"="+addr]++
	u.mu.Unlock()
	ln, err := u.upg.Listener(network, key)
	if err != nil {
		return nil, fmt.Errorf("inherited socket %s: %w", name, err)
	}
	if ln != nil {
		u.mu.Lock()
		u.inherited = append(u.inherited, name)
		u.mu.Unlock()
		return ln, nil
	}
	ln, err = net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	tl, ok := ln.(tableflip.Listener)
	if !ok {
		_ = ln.Close()
		return nil, fmt.Errorf("listener %s cannot be handed over", name)
	}
	if err := u.upg.AddListener(network, key, tl); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("listener %s: %w", name, err)
	}
	return ln, nil
}

// ready tells the previous process (if any) that this one serves, closes
// the inherited sockets nobody took, and writes the PID file.
func (u *upgrader) ready(log *slog.Logger) error {
	if u.upg == nil {
		return nil
	}
	u.mu.Lock()
	names := u.inherited
	u.mu.Unlock()
	if u.upg.HasParent() {
		log.Info("upgrade: serving; the previous process hands over", "sockets_taken_over", names)
	}
	return u.upg.Ready()
}

// upgrade starts the new process and waits until it is ready (nil) or
// failed; the caller then hands over (nil) or serves on. A process
// started by an upgrade first waits for its predecessor to exit (it
// may still be draining), within upgradeTimeout or until ctx is done.
func (u *upgrader) upgrade(ctx context.Context) error {
	if u.upg == nil {
		return errors.New("upgrades are not supported here: " + u.why)
	}
	if u.upg.HasParent() {
		wctx, cancel := context.WithTimeout(ctx, upgradeTimeout)
		err := u.upg.WaitForParent(wctx) // (its exit status is not ours)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return errors.New("the previous process has not exited yet")
		}
	}
	for i := 0; ; i++ {
		err := u.upg.Upgrade()
		// tableflip notices the predecessor's exit on its own goroutine,
		// a moment after WaitForParent: ask again.
		if err == nil || err.Error() != "parent hasn't exited" || i == 100 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// stop ends the upgrader: a running upgrade is cancelled (its process
// killed). After a successful upgrade it changes nothing.
func (u *upgrader) stop() {
	if u.upg != nil {
		u.upg.Stop()
	}
}
