package guard_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/guard"
)

// gatedHandler blocks /block requests until their gate is released;
// other paths answer at once.
type gatedHandler struct {
	gates chan chan struct{}
}

func (h *gatedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/block" {
		g := make(chan struct{})
		h.gates <- g
		<-g
	}
	_, _ = io.WriteString(w, "ok")
}

// rawGet sends GET path on c and reads the answer.
func rawGet(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// In-flight requests forced against a low limit walk the overload states
// in order (stop accepting, then keep-alive off, then shedding with 503
// overloaded) and back down with hysteresis; each state has its effect on
// real connections, and every transition reaches the hook in order.
func TestOverloadWalksStatesByInFlight(t *testing.T) {
	cfg := guard.Config{Overload: guard.OverloadConfig{
		MaxConns: 1000, MaxInFlight: 10,
		StopAcceptAt: 0.3, DisableKeepAliveAt: 0.6, ShedAt: 0.9, Hysteresis: 0.1,
	}}
	h := &gatedHandler{gates: make(chan chan struct{}, 16)}
	s := startServer(t, modeH1, cfg, h)

	// Two keep-alive connections opened while everything is normal.
	probe, err := dialFrom("127.0.0.9", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	pbr := bufio.NewReader(probe)
	if resp := rawGet(t, probe, pbr, "/fast"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("normal: %d close=%v", resp.StatusCode, resp.Close)
	}
	probe2, err := dialFrom("127.0.0.9", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer probe2.Close()
	pbr2 := bufio.NewReader(probe2)
	if resp := rawGet(t, probe2, pbr2, "/fast"); resp.StatusCode != 200 {
		t.Fatalf("normal: %d", resp.StatusCode)
	}

	// Connections for the blocked requests, opened while accepting.
	var idle []net.Conn
	for range 10 {
		c, err := dialFrom("127.0.0.8", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	waitFor(t, "12 connections", func() bool { return s.g.Stats().Conns == 12 })

	var gates []chan struct{}
	var wg sync.WaitGroup
	block := func() {
		c := idle[0]
		idle = idle[1:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_, _ = io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = http.ReadResponse(bufio.NewReader(c), nil)
		}()
		gates = append(gates, <-h.gates)
	}
	state := func(want guard.OverloadState) {
		t.Helper()
		waitFor(t, "state "+want.String(), func() bool { return s.g.OverloadState() == want })
	}

	// Up: 3 in flight (0.3) stops accepting.
	for range 3 {
		block()
	}
	state(guard.StopAccepting)
	late, err := dialFrom("127.0.0.10", s.addr) // completes in the kernel's backlog only
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	lateResp := make(chan *http.Response, 1)
	go func() {
		_, _ = io.WriteString(late, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = late.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(late), nil)
		if err == nil {
			resp.Body.Close()
		}
		lateResp <- resp
	}()
	select {
	case <-lateResp:
		t.Fatal("a connection was accepted and served while not accepting")
	case <-time.After(200 * time.Millisecond):
	}
	if resp := rawGet(t, probe, pbr, "/fast"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("stop_accepting: existing keep-alive connection got %d close=%v", resp.StatusCode, resp.Close)
	}

	// 6 in flight (0.6): keep-alive off.
	for range 3 {
		block()
	}
	state(guard.NoKeepAlive)
	if resp := rawGet(t, probe, pbr, "/fast"); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("disable_keepalive: got %d close=%v, want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	probe.Close()

	// 9 in flight (0.9): shedding.
	for range 3 {
		block()
	}
	state(guard.Shedding)
	resp := rawGet(t, probe2, pbr2, "/fast")
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != 503 || problemCode(t, string(body)) != "overloaded" {
		t.Fatalf("shedding: got %d %q, want 503 overloaded", resp.StatusCode, body)
	}
	if st := s.g.Stats(); st.InFlight != 9 {
		t.Fatalf("in flight %d, want 9", st.InFlight)
	}

	// Down, with hysteresis: shedding ends below 0.8, keep-alive comes
	// back below 0.5, accepting below 0.2.
	release := func(n int) {
		for range n {
			close(gates[0])
			gates = gates[1:]
		}
	}
	release(1) // 8: still shedding (0.8 is not below 0.8)
	waitFor(t, "8 in flight", func() bool { return s.g.Stats().InFlight == 8 })
	if got := s.g.OverloadState(); got != guard.Shedding {
		t.Fatalf("at 0.8 state %v, want shedding (hysteresis)", got)
	}
	release(1) // 7
	state(guard.NoKeepAlive)
	release(3) // 4
	state(guard.StopAccepting)
	release(3) // 1
	state(guard.Normal)
	select {
	case resp := <-lateResp:
		if resp == nil || resp.StatusCode != 200 {
			t.Fatalf("the connection that waited in the backlog got %v", resp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection that waited in the backlog was not served after recovery")
	}
	release(1)
	wg.Wait()
	for _, c := range idle {
		c.Close()
	}

	want := []string{
		"normal->stop_accepting", "stop_accepting->disable_keepalive", "disable_keepalive->shedding",
		"shedding->disable_keepalive", "disable_keepalive->stop_accepting", "stop_accepting->normal",
	}
	if got := s.c.transitions(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// While shedding, requests on open connections get 503 overloaded
// (problem+json, Retry-After, connection closed) and never reach the
// handler; probes still answer. The request that raises the pressure is
// served: a state applies to the requests that arrive in it.
func TestOverloadSheds503(t *testing.T) {
	cfg := guard.Config{Overload: guard.OverloadConfig{
		MaxConns: 1000, MaxInFlight: 2,
		StopAcceptAt: 0.5, DisableKeepAliveAt: 0.5, ShedAt: 0.5, Hysteresis: 0.1,
	}}
	h := &gatedHandler{gates: make(chan chan struct{}, 4)}
	s := startServer(t, modeH1, cfg, h)
	c, err := dialFrom("127.0.0.11", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	bc, err := dialFrom("127.0.0.12", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	// Both connections are accepted before the overload begins.
	waitFor(t, "two connections", func() bool { return s.g.Stats().Conns == 2 })
	// One blocked request: 1/2 = 0.5 sheds the next ones.
	_, _ = io.WriteString(bc, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	g := <-h.gates
	defer close(g)
	waitFor(t, "shedding", func() bool { return s.g.OverloadState() == guard.Shedding })
	resp := rawGet(t, c, br, "/fast")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/problem+json" ||
		problemCode(t, string(body)) != "overloaded" || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("shed answer %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if n := s.c.get("shed:"); n != 1 {
		t.Fatalf("shed hook called %d times", n)
	}
}

// heapObjects reads the metric the overload manager uses by default.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The real heap (runtime/metrics, no injected reading) drives the states
// too: allocating towards the heap limit walks them up in order, freeing
// walks them back down.
func TestOverloadWalksStatesByHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MiB")
	}
	runtime.GC()
	const limit = 512 << 20
	base := heapObjects()
	if base > limit/10 {
		t.Skipf("heap already %d MiB", base>>20)
	}
	cfg := guard.Config{Overload: guard.OverloadConfig{
		HeapBytes: limit, MaxConns: 1000, MaxInFlight: 1000,
		StopAcceptAt: 0.5, DisableKeepAliveAt: 0.7, ShedAt: 0.9, Hysteresis: 0.15,
		SampleInterval: 10 * time.Millisecond,
	}}
	s := startServer(t, modeH1, cfg, http.HandlerFunc(okHandler))
	c, tr := s.client("127.0.0.13")
	c.Timeout = 200 * time.Millisecond
	defer tr.CloseIdleConnections()
	var hold [][]byte
	// nudge gives the Guard a chance to look at the heap: a request
	// samples it when the last reading is older than the interval (while
	// not accepting, the paused listener samples it on its own and the
	// request may time out in the backlog).
	nudge := func() {
		time.Sleep(15 * time.Millisecond)
		code, err := get(c, s.url("/"))
		if testing.Verbose() {
			t.Logf("nudge: %d %v %+v heapNow=%dMiB", code, err, s.g.Stats(), heapObjects()>>20)
		}
	}
	reach := func(p float64, want guard.OverloadState) {
		t.Helper()
		for heapObjects() < uint64(p*limit) {
			b := make([]byte, 16<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			hold = append(hold, b)
		}
		waitFor(t, "state "+want.String(), func() bool { nudge(); return s.g.OverloadState() == want })
	}
	drop := func(p float64, want guard.OverloadState) {
		t.Helper()
		for len(hold) > 0 && heapObjects() > uint64(p*limit) {
			hold[len(hold)-1] = nil
			hold = hold[:len(hold)-1]
			runtime.GC()
		}
		waitFor(t, "state "+want.String(), func() bool { nudge(); return s.g.OverloadState() == want })
	}
	reach(0.6, guard.StopAccepting)
	reach(0.8, guard.NoKeepAlive)
	reach(0.95, guard.Shedding)
	drop(0.6, guard.NoKeepAlive)
	drop(0.4, guard.StopAccepting)
	drop(0.2, guard.Normal)
	hold = nil
	runtime.GC()
	want := []string{
		"normal->stop_accepting", "stop_accepting->disable_keepalive", "disable_keepalive->shedding",
		"shedding->disable_keepalive", "disable_keepalive->stop_accepting", "stop_accepting->normal",
	}
	if got := s.c.transitions(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}
