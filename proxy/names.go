package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Names for the event loops
//
// A request on an event loop cannot wait for a resolver, so a target
// named by host name is resolved in the background for the loops: the
// first request to it after start (or after its address went stale) is
// forwarded off the loop, as before, while a lookup runs; later ones are
// dialed from the loop to the addresses found, in order. Addresses serve
// for nameTTL and are looked up again after half of it; a lookup that
// fails leaves them to go stale, and the target's requests then dial off
// the loop, where a failure is answered as always. The goroutine engine and
// net/http resolve at every dial, as they always do.

// nameTTL is how long a looked-up address serves the loops.
const nameTTL = 30 * time.Second

// nameLookupTimeout bounds one background lookup.
const nameLookupTimeout = 5 * time.Second

// nameCache is one target's host name resolved for the loops.
type nameCache struct {
	host string
	port uint16
	cur  atomic.Pointer[nameEntry]
	busy atomic.Bool // a lookup in flight
}

type nameEntry struct {
	aps []netip.AddrPort // in the resolver's order, at most maxNameAddrs
	at  time.Time
}

// maxNameAddrs bounds the addresses kept per name: a loop's dial tries
// them in order, as net.Dialer does.
const maxNameAddrs = 8

// lookupFunc resolves a host name (net.DefaultResolver.LookupNetIP).
type lookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// lookups runs the background lookups of a proxy; Close waits for them.
type lookups struct {
	lookup lookupFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// addrs returns the target's addresses for a loop at now, or false when
// there are none fresh; it starts a lookup when they are missing or half
// stale.
func (n *nameCache) addrs(now time.Time, ls *lookups) ([]netip.AddrPort, bool) {
	e := n.cur.Load()
	fresh := e != nil && now.Sub(e.at) < nameTTL
	if (e == nil || now.Sub(e.at) >= nameTTL/2) && n.busy.CompareAndSwap(false, true) {
		ls.start(n)
	}
	if !fresh {
		return nil, false
	}
	return e.aps, true
}

// start runs n's lookup on a goroutine, unless the proxy is closed.
func (ls *lookups) start(n *nameCache) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		n.busy.Store(false)
		return
	}
	ls.wg.Add(1)
	go n.refresh(ls)
}

// close stops new lookups and waits for those running (each at most
// nameLookupTimeout).
func (ls *lookups) close() {
	ls.mu.Lock()
	ls.closed = true
	ls.mu.Unlock()
	ls.wg.Wait()
}

// refresh looks the name up once.
func (n *nameCache) refresh(ls *lookups) {
	defer ls.wg.Done()
	defer n.busy.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), nameLookupTimeout)
	defer cancel()
	addrs, err := ls.lookup(ctx, "ip", n.host)
	if err != nil || len(addrs) == 0 {
		return // stale: the loops keep off the target
	}
	e := &nameEntry{at: time.Now()}
	for _, a := range addrs[:min(len(addrs), maxNameAddrs)] {
		e.aps = append(e.aps, netip.AddrPortFrom(a.Unmap(), n.port))
	}
	n.cur.Store(e)
}

// newNameCache returns the cache for a target at hostport, or nil when
// its host is an IP literal (or the port is not a number).
func newNameCache(hostport string) *nameCache {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	pn, err := net.LookupPort("tcp", port)
	if err != nil || pn <= 0 || pn > 65535 {
		return nil
	}
	return &nameCache{host: host, port: uint16(pn)}
}
