package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/ratelimit"
)

// discardWriter is a minimal ResponseWriter for benchmarks.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkHandler measures the gateway's handler (shield, route match,
// rate limit, metrics, proxy to a loopback upstream) without the client
// side of HTTP, layers off and on. The difference is the layers' cost.
//
//	go test -run XXX -bench Handler -benchmem ./gateway
func BenchmarkHandler(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, mode := range []struct{ name, extra, route string }{
		{"layers=off", "", ""},
		{"layers=on", "shield: {enabled: true, per_peer: 1000000, global: 100000000}\n",
			"    rate_limit: {qps: 1000000, burst: 1000000}\n"},
		// The access log on every request (issue: at most 5 % of the
		// request path), written as JSON like a real deployment's.
		{"layers=on,access_log=all", "shield: {enabled: true, per_peer: 1000000, global: 100000000}\naccess_log: {mode: all, max_per_second: 1000000}\n",
			"    rate_limit: {qps: 1000000, burst: 1000000}\n"},
	} {
		b.Run(mode.name, func(b *testing.B) {
			y := mode.extra + strings.ReplaceAll(`
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: api
    match: {path: /api/}
    upstream: app
`, "{{APP}}", up.URL) + mode.route
			cfg, err := Parse("bench.yaml", []byte(y), nil)
			if err != nil {
				b.Fatal(err)
			}
			// A JSON log to nowhere: the lines are formatted as in a
			// deployment (slog's discard handler would skip that).
			log, _ := NewLogger(io.Discard, "json", "info")
			g, err := New(cfg, Deps{Logger: log})
			if err != nil {
				b.Fatal(err)
			}
			h := g.Handler()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					r := httptest.NewRequest("GET", "/api/items", nil)
					r.RemoteAddr = fmt.Sprintf("127.0.%d.%d:1234", i%200, i%250)
					w := &discardWriter{h: http.Header{}}
					h.ServeHTTP(w, r)
					if w.status != 0 && w.status != 200 {
						b.Fatalf("status %d", w.status)
					}
				}
			})
			g.cur.Load().reuse.close()
		})
	}
}

// BenchmarkAccessLogLine measures one access-log line alone (the
// fingerprint, the line, the write to io.Discard): with NewLogger's logger
// (the daemon's: the line formatted directly) and with any other slog
// logger (through slog's JSON handler).
func BenchmarkAccessLogLine(b *testing.B) {
	direct, _ := NewLogger(io.Discard, "json", "info")
	for _, c := range []struct {
		name string
		log  *slog.Logger
	}{{"direct", direct}, {"slog", slog.New(slog.NewJSONHandler(io.Discard, nil))}} {
		b.Run(c.name, func(b *testing.B) {
			g := &Gateway{log: c.log, clock: clock.Or(nil)}
			a := g.newAccessLog(AccessLog{Mode: "all", Sample: 1, MaxPerSecond: 1 << 40})
			rt := &route{name: "api", upstream: "app"}
			rs := &reqState{clientOK: true, group: netip.MustParseAddr("192.0.2.7"), route: rt, status: 200}
			b.ReportAllocs()
			for b.Loop() {
				a.log(rs, 1500*time.Microsecond)
			}
		})
	}
}

// BenchmarkRouteLimiter measures the rate-limit decision alone.
func BenchmarkRouteLimiter(b *testing.B) {
	for _, key := range []string{"client_ip", "route", "header:X-Api-Key"} {
		b.Run(key, func(b *testing.B) {
			rl := ratelimit.DefaultConfig()
			rl.QPS, rl.Burst, rl.Key, rl.MaxKeys = 1e6, 1e6, key, 1<<16
			res, _ := peer.New(peer.Config{})
			bld := &builder{resolver: res, next: newRegistry()}
			l, err := newRouteLimit(bld, "bench", rl)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = "192.0.2.7:4321"
				r.Header.Set("X-Api-Key", "k-123456")
				rs := &reqState{clientOK: true, group: netip.MustParseAddr("192.0.2.7")}
				w := &discardWriter{h: http.Header{}}
				for pb.Next() {
					if ok, reason := l.check(w, r, rs, false); !ok {
						b.Fatal(reason)
					}
				}
			})
		})
	}
}

// millionDenyLists returns lists with 1,000,000 deny entries of mixed
// prefix lengths (IPv4 /16 to /32 outside 127/8, IPv6 /48 to /128) and
// probe addresses (about a quarter IPv6), built once.
var millionDenyLists = sync.OnceValues(func() (*lists, []netip.Addr) {
	cfg, err := Parse("bench.yaml", []byte(minimal), nil)
	if err != nil {
		panic(err)
	}
	l, err := newLists(cfg, nil)
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	v4 := func() [4]byte {
		for {
			b := [4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}
			if b[0] != 127 {
				return b
			}
		}
	}
	v6 := func() [16]byte {
		var x [16]byte
		for i := range x {
			x[i] = byte(rng.IntN(256))
		}
		x[0], x[1] = 0x20, 0x01
		return x
	}
	for l.deny.Len() < ipset.DefaultDenyCapacity {
		var p netip.Prefix
		if rng.IntN(4) != 0 {
			p = netip.PrefixFrom(netip.AddrFrom4(v4()), 16+rng.IntN(17)).Masked()
		} else {
			p = netip.PrefixFrom(netip.AddrFrom16(v6()), 48+rng.IntN(81)).Masked()
		}
		if err := l.deny.Add(p, 0, "bench"); err != nil {
			panic(err)
		}
	}
	probes := make([]netip.Addr, 4096)
	for i := range probes {
		if i%4 == 0 {
			probes[i] = netip.AddrFrom16(v6())
		} else {
			probes[i] = netip.AddrFrom4(v4())
		}
	}
	return l, probes
})

// repeatListener hands out the same (real, loopback) connection forever,
// so the benchmark measures the deny check and not the accept syscall.
type repeatListener struct {
	net.Listener
	c net.Conn
}

func (l *repeatListener) Accept() (net.Conn, error) { return l.c, nil }

func loopbackConn(b *testing.B) net.Conn {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	sc, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sc.Close() })
	return sc
}

// BenchmarkAcceptDenyCheck measures what the deny-list listener adds to
// each accepted connection: reading the peer address from the real
// *net.TCPConn and the list lookup, with an empty deny list and with
// 1,000,000 entries (the peer, 127.0.0.1, is not covered: the cost every
// served connection pays). random-probes looks up varied addresses
// (hits and misses, a cold trie path) without a connection.
//
//	go test -run XXX -bench AcceptDenyCheck -benchmem ./gateway
func BenchmarkAcceptDenyCheck(b *testing.B) {
	conn := loopbackConn(b)
	empty, err := newLists(mustParse(b, minimal), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		lists func() *lists
	}{
		{"deny=empty", func() *lists { return empty }},
		{"deny=1M", func() *lists { l, _ := millionDenyLists(); return l }},
	} {
		b.Run(c.name, func(b *testing.B) {
			ln := &denyListener{Listener: &repeatListener{c: conn}, lists: c.lists(), denied: func() { b.Fatal("denied") }}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ln.Accept(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("deny=1M/random-probes", func(b *testing.B) {
		l, probes := millionDenyLists()
		b.ReportAllocs()
		hits := 0
		for i := 0; b.Loop(); i++ {
			if l.denied(probes[i&4095]) {
				hits++
			}
		}
		b.ReportMetric(float64(hits)/float64(b.N), "hit-ratio")
	})
}

// BenchmarkAcceptLoopback is the whole accept path over real loopback
// sockets (dial, accept, close on both ends) without and with the deny
// listener: the check is noise next to the syscalls.
func BenchmarkAcceptLoopback(b *testing.B) {
	for _, c := range []struct {
		name string
		wrap func(net.Listener) net.Listener
	}{
		{"plain", func(ln net.Listener) net.Listener { return ln }},
		{"deny=1M", func(ln net.Listener) net.Listener {
			l, _ := millionDenyLists()
			return &denyListener{Listener: ln, lists: l, denied: func() {}}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ln := c.wrap(raw)
			defer ln.Close()
			addr := raw.Addr().String()
			b.ReportAllocs()
			for b.Loop() {
				cc, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				sc, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				sc.Close()
				cc.Close()
			}
		})
	}
}

func mustParse(b *testing.B, y string) *Config {
	cfg, err := Parse("bench.yaml", []byte(y), nil)
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkRequestVerdict is the per-request list check the handler does
// when a list is non-empty: parse RemoteAddr, look it up in both lists.
func BenchmarkRequestVerdict(b *testing.B) {
	small, err := newLists(mustParse(b, minimal+"ipsets: {allow: [192.0.2.0/24], deny: [10.0.0.0/8, 198.51.100.7]}\n"), nil)
	if err != nil {
		b.Fatal(err)
	}
	big, _ := millionDenyLists()
	for _, c := range []struct {
		name string
		l    *lists
	}{{"lists=small", small}, {"deny=1M", big}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.l.remoteVerdict("127.0.0.1:54321") != ipset.Neither {
					b.Fatal("verdict")
				}
			}
		})
	}
}
