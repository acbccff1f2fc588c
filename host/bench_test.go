package host_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/host"
)

// benchHandler is the same trivial handler behind both servers.
func benchHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

// BenchmarkLoopback compares an admitted request through the host with the
// same handler on a bare http.Server (header and idle timeouts only), over
// a loopback keep-alive HTTP/1.1 connection, one request at a time. The
// host runs with DefaultLimits, so its client reconnects every 1000
// requests (max_requests_per_conn).
func BenchmarkLoopback(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(benchHandler), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		runLoopback(b, "http://"+ln.Addr().String()+"/api/x")
		_ = srv.Close()
		<-done
	})
	b.Run("host", func(b *testing.B) {
		h, err := host.New(host.Config{Addr: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Start(); err != nil {
			b.Fatal(err)
		}
		h.Activate(http.HandlerFunc(benchHandler))
		runLoopback(b, "http://"+h.Addr().String()+"/api/x")
		if err := h.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkLoopbackInterleaved runs a bare http.Server and the host at
// once and alternates their requests within each iteration, so that load
// drift on a shared machine affects both equally. It reports each side's
// median time per request and the host's overhead in percent. Baselines:
// "bare" has only header and idle timeouts; "bare-timeouts" also has the
// read and write timeouts the host configures (what a production
// http.Server should set anyway), isolating the host's own work.
func BenchmarkLoopbackInterleaved(b *testing.B) {
	for _, withTimeouts := range []bool{false, true} {
		name := "bare"
		if withTimeouts {
			name = "bare-timeouts"
		}
		b.Run("vs-"+name, func(b *testing.B) { interleaved(b, withTimeouts) })
	}
}

func interleaved(b *testing.B, withTimeouts bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	d := host.DefaultLimits()
	srv := &http.Server{Handler: http.HandlerFunc(benchHandler), ReadHeaderTimeout: d.ReadHeaderTimeout, IdleTimeout: d.IdleTimeout}
	if withTimeouts {
		srv.ReadTimeout = d.ReadHeaderTimeout + d.RequestTimeout
		srv.WriteTimeout = d.RequestTimeout + 5*time.Second
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	h, err := host.New(host.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Start(); err != nil {
		b.Fatal(err)
	}
	h.Activate(http.HandlerFunc(benchHandler))

	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	c := &http.Client{Transport: tr}
	bareReq, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/api/x", nil)
	hostReq, _ := http.NewRequest("GET", "http://"+h.Addr().String()+"/api/x", nil)
	one := func(req *http.Request) time.Duration {
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	one(bareReq)
	one(hostReq)
	var bare, hosted []time.Duration
	i := 0
	b.ResetTimer()
	for b.Loop() {
		if i%2 == 0 {
			bare = append(bare, one(bareReq))
			hosted = append(hosted, one(hostReq))
		} else {
			hosted = append(hosted, one(hostReq))
			bare = append(bare, one(bareReq))
		}
		i++
	}
	b.StopTimer()
	// Medians resist the load spikes of a shared machine better than means.
	mb, mh := median(bare), median(hosted)
	b.ReportMetric(float64(mb.Nanoseconds()), "bare-ns/req")
	b.ReportMetric(float64(mh.Nanoseconds()), "host-ns/req")
	b.ReportMetric(100*(float64(mh)-float64(mb))/float64(mb), "overhead-%")
	tr.CloseIdleConnections()
	_ = srv.Close()
	<-done
	if err := h.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func runLoopback(b *testing.B, url string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	tr.CloseIdleConnections()
}
