package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// How the allow and deny lists are enforced
//
// Both lists match the socket peer of a connection; X-Forwarded-For and
// the trusted-proxy contract never count, so a forwarded header can
// neither unblock nor allow anyone.
//
//   - At accept: the client listener is wrapped (innermost, before TLS and
//     before any other wrapper such as connection guards). A connection
//     whose peer is denied and not allowed is closed at once with
//     SO_LINGER 0 (the client sees a reset) and Accept moves on to the next
//     one: no TLS handshake, no byte of HTTP is read. It is counted as
//     bulwark_rejections_total{layer="ipset",reason="deny"}; the address is
//     never logged.
//   - Per request: when either list is non-empty, the gateway's handler
//     looks the socket peer up again. This is how an allowed peer's
//     requests reach the pipeline variant without the shield and without
//     route rate limits (login throttles and quotas still apply), and how
//     a block added at runtime also cuts keep-alive connections that were
//     accepted before it: such a request is aborted without an answer and
//     its connection closed (reason "deny_request"). With both lists empty
//     the per-request cost is two atomic loads.
//
// Static entries come from the configuration (ipsets.allow, ipsets.deny)
// and runtime entries from the control API. The gateway remembers which
// prefixes the configuration installed, with their reasons; a reload
// removes the static prefixes the new configuration dropped (unless the
// API has since changed that entry: a TTL or another reason makes it a
// runtime entry) and (re)installs every static prefix of the new
// configuration, overwriting a runtime entry for the same prefix. Every
// other runtime entry survives a reload untouched.

// lists are the gateway's allow and deny sets plus what the
// configuration installed in them.
type lists struct {
	allow, deny *ipset.Set
	// allowN and denyN mirror the sets' sizes (maintained by their change
	// notifications), so the hot paths skip lookups on empty lists.
	allowN, denyN atomic.Int64
	// mirror, when set, receives every change too (the XDP manager's
	// kernel maps).
	mirror atomic.Pointer[func(ipset.Change)]
	clock  clock.Clock
	// static[0] is the allow list's configured prefixes, static[1] the
	// deny list's, each with its reason. Held under Gateway.mu.
	static [2]map[netip.Prefix]string
}

func newLists(cfg *Config, c clock.Clock) (*lists, error) {
	l := &lists{clock: clock.Or(c)}
	count := func(n *atomic.Int64) func(ipset.Change) {
		return func(ch ipset.Change) {
			switch ch.Op {
			case ipset.Added:
				n.Add(1)
			case ipset.Removed, ipset.Expired:
				n.Add(-1)
			}
			if m := l.mirror.Load(); m != nil {
				(*m)(ch)
			}
		}
	}
	var err error
	if l.allow, err = ipset.New(ipset.Config{Name: "allow", Capacity: cfg.IPSets.AllowCapacity, Clock: c, OnChange: count(&l.allowN)}); err != nil {
		return nil, fmt.Errorf("gateway: ipsets.allow_capacity: %w", err)
	}
	if l.deny, err = ipset.New(ipset.Config{Name: "deny", Capacity: cfg.IPSets.DenyCapacity, Clock: c, OnChange: count(&l.denyN)}); err != nil {
		return nil, fmt.Errorf("gateway: ipsets.deny_capacity: %w", err)
	}
	if _, ps := l.apply(cfg); len(ps) > 0 {
		return nil, &yamlconf.Error{Problems: ps}
	}
	return l, nil
}

// active reports whether either list has an entry.
func (l *lists) active() bool { return l.allowN.Load() > 0 || l.denyN.Load() > 0 }

// denied reports whether addr is on the deny list and not on the allow
// list. The accept path calls it for every connection.
func (l *lists) denied(addr netip.Addr) bool {
	if l.denyN.Load() == 0 || !l.deny.Contains(addr) {
		return false
	}
	return l.allowN.Load() == 0 || !l.allow.Contains(addr)
}

// verdict checks addr against both lists; allow wins.
func (l *lists) verdict(addr netip.Addr) ipset.Verdict {
	if l.allowN.Load() > 0 && l.allow.Contains(addr) {
		return ipset.Allowed
	}
	if l.denyN.Load() > 0 && l.deny.Contains(addr) {
		return ipset.Denied
	}
	return ipset.Neither
}

// remoteVerdict is verdict for an http.Request's RemoteAddr (the socket
// peer as net/http formats it). An unparsable address matches nothing.
func (l *lists) remoteVerdict(remote string) ipset.Verdict {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return ipset.Neither
	}
	return l.verdict(ap.Addr().Unmap())
}

// staticOf returns the prefixes and reasons a configuration lists.
func staticOf(entries []ipset.StaticEntry) map[netip.Prefix]string {
	m := make(map[netip.Prefix]string, len(entries))
	for _, e := range entries {
		if p := e.Prefix(); p.IsValid() {
			m[p] = e.Reason
		}
	}
	return m
}

// listChange is one applied change, kept to undo it.
type listChange struct {
	set    *ipset.Set
	prefix netip.Prefix
	had    bool        // the prefix was present before
	prev   ipset.Entry // and this was its entry
}

// apply installs cfg's static entries (see the comment at the top of the
// file). It is all or nothing: when an entry does not fit, every change
// is undone and the problems are returned. On success it returns a
// function that undoes the changes (for a reload that fails afterwards)
// and records cfg's entries as the static ones.
func (l *lists) apply(cfg *Config) (undo func(), problems []yamlconf.Problem) {
	var done []listChange
	rollback := func() {
		for i := len(done) - 1; i >= 0; i-- {
			l.restore(done[i])
		}
	}
	var next [2]map[netip.Prefix]string
	for i, x := range []struct {
		name    string
		set     *ipset.Set
		entries []ipset.StaticEntry
	}{{"allow", l.allow, cfg.IPSets.Allow}, {"deny", l.deny, cfg.IPSets.Deny}} {
		want := staticOf(x.entries)
		next[i] = want
		var remove []netip.Prefix
		for p, reason := range l.static[i] {
			if _, keep := want[p]; keep {
				continue
			}
			// Only an entry still as the configuration left it is
			// removed; one the API changed is the operator's now.
			if e, ok := x.set.Get(p); ok && e.Expires.IsZero() && e.Reason == reason {
				remove = append(remove, p)
			}
		}
		type add struct {
			p      netip.Prefix
			reason string
			had    bool
			prev   ipset.Entry
		}
		var adds []add
		grow := -len(remove)
		for p, reason := range want {
			e, had := x.set.Get(p)
			if had && e.Expires.IsZero() && e.Reason == reason {
				continue // already installed as configured
			}
			if !had {
				grow++
			}
			adds = append(adds, add{p, reason, had, e})
		}
		if grow > 0 {
			x.set.Sweep(ipset.FullScanLimit)
			if n := x.set.Len(); n+grow > x.set.Capacity() {
				rollback()
				return nil, []yamlconf.Problem{{File: cfg.File, Line: cfg.Line("ipsets." + x.name), Path: "ipsets." + x.name,
					Msg: fmt.Sprintf("the static entries do not fit: they need %d more slots, the list holds %d entries (capacity %d); remove runtime entries first", grow, n, x.set.Capacity())}}
			}
		}
		for _, p := range remove {
			e, _ := x.set.Get(p)
			if x.set.Remove(p) {
				done = append(done, listChange{set: x.set, prefix: p, had: true, prev: e})
			}
		}
		for _, a := range adds {
			if err := x.set.Add(a.p, 0, a.reason); err != nil {
				// Only a concurrent API addition can fill the list
				// between the check above and here.
				rollback()
				msg := "does not fit"
				if !errors.Is(err, ipset.ErrFull) {
					msg = "rejected"
				}
				return nil, []yamlconf.Problem{{File: cfg.File, Line: cfg.Line("ipsets." + x.name), Path: "ipsets." + x.name,
					Msg: fmt.Sprintf("static entry %s %s: the list holds %d entries (capacity %d)", a.p, msg, x.set.Len(), x.set.Capacity())}}
			}
			done = append(done, listChange{set: x.set, prefix: a.p, had: a.had, prev: a.prev})
		}
	}
	prev := l.static
	l.static = next
	return func() {
		rollback()
		l.static = prev
	}, nil
}

// restore puts c.prefix back as it was before c.
func (l *lists) restore(c listChange) {
	if !c.had {
		c.set.Remove(c.prefix)
		return
	}
	var ttl time.Duration
	if !c.prev.Expires.IsZero() {
		ttl = c.prev.Expires.Sub(l.clock.Now())
		if ttl < time.Millisecond {
			c.set.Remove(c.prefix) // it has expired meanwhile
			return
		}
	}
	_ = c.set.Add(c.prefix, ttl, c.prev.Reason)
}

// denyListener refuses denied peers at accept. Accept loops over them
// internally: it never returns an error for a denied connection, so the
// server's accept loop neither logs nor backs off because of them.
type denyListener struct {
	net.Listener
	lists  *lists
	denied func() // counts one refused connection
}

// Accept returns the next connection whose peer is not denied.
func (l *denyListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.lists.denyN.Load() == 0 {
			return c, nil
		}
		if a, ok := peerAddr(c); !ok || !l.lists.denied(a) {
			return c, nil
		}
		l.denied() // before the close, so the count is visible when the peer sees it
		if tc, ok := c.(interface{ SetLinger(int) error }); ok {
			_ = tc.SetLinger(0) // close with RST: no FIN handshake, no TIME_WAIT
		}
		_ = c.Close()
	}
}

// peerAddr returns the remote IP of a TCP connection without allocating.
func peerAddr(c net.Conn) (netip.Addr, bool) {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		return ap.Addr().Unmap(), ap.Addr().IsValid()
	}
	return netip.Addr{}, false
}

// screen runs the allow and deny lists for the request (step 3), when
// either has entries. It reports false when the request was answered
// (403 blocked); a peer denied since its connection was accepted makes it
// panic with http.ErrAbortHandler. An allowed client is marked free.
func (g *Gateway) screen(w http.ResponseWriter, r *http.Request, rs *reqState, lbClient bool) bool {
	switch g.lists.remoteVerdict(r.RemoteAddr) {
	case ipset.Allowed:
		rs.free = true
	case ipset.Denied:
		// A connection accepted before its peer was blocked.
		rs.refuse(g.metrics, layerIPSet, "deny_request", 0)
		panic(http.ErrAbortHandler)
	}
	if !lbClient {
		return true
	}
	// Behind a load balancer the socket peer is the balancer: the client
	// it names is what the lists are about.
	rs.free = false
	v := ipset.Denied // the unknown client fails closed when the lists are in use
	if rs.clientOK {
		v = g.lists.verdict(rs.client)
	}
	switch v {
	case ipset.Allowed:
		rs.free = true
	case ipset.Denied:
		reason := "deny_client"
		if !rs.clientOK {
			// The balancer named no client (no forwarding header, or
			// one that does not parse): refused the same way, counted
			// apart from a real block.
			reason = "unresolved_client"
		}
		rs.refuse(g.metrics, layerIPSet, reason, http.StatusForbidden)
		wire.Reject(w, r, wire.New(wire.CodeBlocked))
		return false
	}
	return true
}

// collectors are the lists' gauges, read at scrape time.
func (ls *lists) collectors() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, l := range []struct {
		name string
		set  interface {
			Len() int
			Capacity() int
		}
	}{{"allow", ls.allow}, {"deny", ls.deny}} {
		set := l.set
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "bulwark_ipset_entries",
				Help:        "Entries in the allow or deny list (static and runtime; expired entries until reclaimed).",
				ConstLabels: prometheus.Labels{"list": l.name},
			}, func() float64 { return float64(set.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "bulwark_ipset_capacity",
				Help:        "Hard capacity of the allow or deny list.",
				ConstLabels: prometheus.Labels{"list": l.name},
			}, func() float64 { return float64(set.Capacity()) }))
	}
	return cs
}

// connDenied counts one connection refused at accept by the deny list.
func (m *metrics) connDenied() {
	m.tally.denied.Add(1)
	if m.on() {
		m.ipsetDeny.Inc()
	}
}

// sweepInterval is how often the sweeper reclaims expired list entries.
const sweepInterval = time.Second

// startSweeper starts the lists' sweeper (with the control API: it
// stops last).
func (g *Gateway) startSweeper() {
	g.sweeper = make(chan struct{})
	go g.sweep(g.sweeper)
}

func (g *Gateway) stopSweeper() {
	if g.sweeper != nil {
		close(g.sweeper)
		g.sweeper = nil
	}
}

// sweep reclaims expired list entries in the background, a bounded number
// per second (lookups already ignore them; this frees their room), and in
// the cluster profile brings the runtime entries in line with Redis.
func (g *Gateway) sweep(stop <-chan struct{}) {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			g.lists.allow.Sweep(ipset.FullScanLimit)
			g.lists.deny.Sweep(ipset.FullScanLimit)
			g.syncLists(false)
		}
	}
}

// Lists returns the gateway's allow and deny lists (for embedding; the
// control API changes the same sets).
func (g *Gateway) Lists() *ipset.Lists { return &ipset.Lists{Allow: g.lists.allow, Deny: g.lists.deny} }
