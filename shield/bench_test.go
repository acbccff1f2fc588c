package shield

import (
	"context"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// benchShield has budgets no benchmark run can exhaust, so every decision
// is a full admission (both windows consumed).
func benchShield(b *testing.B) *Shield {
	s, err := New(Config{Window: time.Hour, PerPeer: HardMaxPerPeer, Global: HardMaxGlobal})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

// BenchmarkAdmit measures one decision for an existing peer, including
// the HMAC-SHA-256 fingerprint and two real clock readings.
func BenchmarkAdmit(b *testing.B) {
	const peers = 1024
	addrs := make([]netip.Addr, peers)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	b.Run("serial", func(b *testing.B) {
		s := benchShield(b)
		for _, a := range addrs {
			s.Admit(a, true)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if !s.Admit(addrs[i%peers], true).Allowed {
				b.Fatal("rejected")
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s := benchShield(b)
		for _, a := range addrs {
			s.Admit(a, true)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if !s.Admit(addrs[i%peers], true).Allowed {
					b.Error("rejected")
					return
				}
				i += 7
			}
		})
	})
	b.Run("one-peer-parallel", func(b *testing.B) {
		s := benchShield(b)
		a := addrs[0]
		s.Admit(a, true)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Admit(a, true)
			}
		})
	})
}

// BenchmarkAdmitConn measures one decision for a request on a known
// connection (its peer's fingerprint computed at accept): the per-request
// cost with keep-alive. real-clock reads the monotonic clock per decision;
// coarse-clock uses a started clock.Coarse (1 ms), as a gateway would.
func BenchmarkAdmitConn(b *testing.B) {
	const peers = 1024
	for _, coarse := range []bool{false, true} {
		name := "real-clock"
		var clk clock.Clock
		if coarse {
			name = "coarse-clock"
			c, err := clock.NewCoarse(time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			c.Start()
			defer c.Stop()
			clk = c
		}
		newShield := func(b *testing.B) (*Shield, []*Conn, []*http.Request) {
			s, err := New(Config{Window: time.Hour, PerPeer: HardMaxPerPeer, Global: HardMaxGlobal, Clock: clk})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Close)
			conns := make([]*Conn, peers)
			reqs := make([]*http.Request, peers)
			for i := range conns {
				remote := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 40000).String()
				conns[i] = s.NewConn(remote, nil)
				reqs[i] = &http.Request{RemoteAddr: remote}
				s.AdmitConn(conns[i], reqs[i])
			}
			return s, conns, reqs
		}
		b.Run(name+"/serial", func(b *testing.B) {
			s, conns, reqs := newShield(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !s.AdmitConn(conns[i%peers], reqs[i%peers]).Allowed {
					b.Fatal("rejected")
				}
				i++
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			s, conns, reqs := newShield(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if !s.AdmitConn(conns[i%peers], reqs[i%peers]).Allowed {
						b.Error("rejected")
						return
					}
					i += 7
				}
			})
		})
	}
}

// BenchmarkMiddleware compares a loopback HTTP/1.1 keep-alive request to
// the same server with and without the shield in front of the handler
// (with-shield-conn: with the ConnContext hook, fingerprint per
// connection).
func BenchmarkMiddleware(b *testing.B) {
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	run := func(b *testing.B, h http.Handler, hook func(context.Context, net.Conn) context.Context) {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ConnContext = hook
		srv.Start()
		defer srv.Close()
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		do := func() {
			resp, err := client.Get(srv.URL + "/api/login")
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		do()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			do()
		}
	}
	b.Run("without", func(b *testing.B) { run(b, app, nil) })
	b.Run("with-shield", func(b *testing.B) { run(b, benchShield(b).Middleware(nil)(app), nil) })
	b.Run("with-shield-conn", func(b *testing.B) {
		s := benchShield(b)
		run(b, s.Middleware(nil)(app), s.ConnContext(nil))
	})
	// interleaved alternates one request to each server per iteration and
	// times them separately, so load from other processes hits both
	// sides alike; overhead-ns/op is the difference.
	b.Run("interleaved", func(b *testing.B) {
		var clients [2]*http.Client
		var urls [2]string
		for i, h := range []http.Handler{app, benchShield(b).Middleware(nil)(app)} {
			srv := httptest.NewServer(h)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			clients[i], urls[i] = &http.Client{Transport: tr}, srv.URL+"/api/login"
		}
		do := func(i int) time.Duration {
			start := time.Now()
			resp, err := clients[i].Get(urls[i])
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
			return time.Since(start)
		}
		do(0)
		do(1)
		var spent [2]time.Duration
		n := 0
		for b.Loop() {
			first := n & 1 // alternate which side goes first
			spent[first] += do(first)
			spent[1-first] += do(1 - first)
			n++
		}
		without := float64(spent[0]) / float64(n)
		with := float64(spent[1]) / float64(n)
		b.ReportMetric(without, "without-ns/op")
		b.ReportMetric(with, "with-ns/op")
		b.ReportMetric(with-without, "overhead-ns/op")
	})
}

// BenchmarkCalibration measures the two primitives a decision is built
// on, so that Admit's numbers can be read against the machine: one
// SHA-256 block (an HMAC-SHA-256 of a peer costs two) and one reading of
// the real clock.
func BenchmarkCalibration(b *testing.B) {
	b.Run("sha256-one-block", func(b *testing.B) {
		var msg [40]byte
		for b.Loop() {
			sinkSum = sha256.Sum256(msg[:])
		}
	})
	b.Run("time-now", func(b *testing.B) {
		for b.Loop() {
			sinkTime = time.Now()
		}
	})
}

var (
	sinkSum  [32]byte
	sinkTime time.Time
)
