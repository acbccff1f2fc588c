package shield

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// testServer is a real host on a loopback port with the shield installed
// as the activated handler in front of an app that reads the body.
type testServer struct {
	host     *host.Host
	addr     string
	shield   *Shield
	clk      *clock.Manual
	rec      *recorder
	handler  http.Handler
	appCalls atomic.Int64
}

func startServer(t *testing.T, cfg Config, res *peer.Resolver, activate bool) *testServer {
	t.Helper()
	ts := &testServer{clk: clock.NewManual(t0), rec: &recorder{}}
	cfg.Clock, cfg.Hook = ts.clk, ts.rec.hook
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.shield = s
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.appCalls.Add(1)
		// A real handler authenticates and reads the body; the shield
		// must have decided before any of this.
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Test-Authenticated") == "yes" {
			if a := FromContext(r.Context()); a == nil || !a.Refund() {
				http.Error(w, "refund failed", http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	})
	ts.handler = s.Middleware(res)(app)
	h, err := host.New(host.Config{Addr: "127.0.0.1:0", Limits: host.Limits{MaxRequestsPerConn: 2000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	ts.host, ts.addr = h, h.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("host shutdown: %v", err)
		}
		s.Close()
	})
	if activate {
		ts.activate(t)
	}
	return ts
}

func (ts *testServer) activate(t *testing.T) {
	t.Helper()
	if err := ts.host.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts.host.Activate(ts.handler)
}

type reply struct {
	status int
	header http.Header
	body   []byte
	close  bool // the response carried "Connection: close"
}

// conn is one client socket with its reader.
type conn struct {
	net.Conn
	br *bufio.Reader
}

// dial opens a socket to addr from local (any loopback source when local
// is the zero Addr).
func dial(t testing.TB, local netip.Addr, addr string) *conn {
	t.Helper()
	c, err := tryDial(local, addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tryDial(local netip.Addr, addr string) (*conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if local.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial from %v: %w", local, err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &conn{Conn: c, br: bufio.NewReader(c)}, nil
}

// roundTrip writes a raw request and reads one response.
func (c *conn) roundTrip(t testing.TB, req string) reply {
	t.Helper()
	r, err := c.tryRoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (c *conn) tryRoundTrip(req string) (reply, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return reply{}, fmt.Errorf("write: %w", err)
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		return reply{}, fmt.Errorf("read response: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return reply{}, fmt.Errorf("read body: %w", err)
	}
	// net/http moves "Connection: close" from the header into Close.
	return reply{status: resp.StatusCode, header: resp.Header, body: body, close: resp.Close}, nil
}

// expectEOF asserts that the server closed the connection.
func (c *conn) expectEOF(t testing.TB) {
	t.Helper()
	// Generous (a loaded machine), and well under the server's request
	// and idle timeouts (30 s, 60 s): an EOF within it is the server's
	// decision, not a timeout.
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := c.br.ReadByte()
	if err == nil {
		t.Fatalf("connection still open: read %q", b)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("want EOF after the rejection, got %v", err)
	}
}

// get sends one request on a fresh socket from local and closes it.
func get(t testing.TB, local netip.Addr, addr, path string, headers ...string) reply {
	t.Helper()
	r, err := fetch(local, addr, path, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fetch is get for goroutines other than the test's own.
func fetch(local netip.Addr, addr, path string, headers ...string) (reply, error) {
	c, err := tryDial(local, addr)
	if err != nil {
		return reply{}, err
	}
	defer c.Close()
	return c.tryRoundTrip(request("GET", path, true, headers...))
}

func request(method, path string, closeConn bool, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: shield.test\r\n", method, path)
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	if closeConn {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// checkRejection verifies a shield answer: status, code, Connection:
// close, an integer Retry-After >= 1 on 429, and nothing but fixed
// members in the body.
func checkRejection(t testing.TB, r reply, status int, code string, leaks ...string) {
	t.Helper()
	if err := rejectionError(r, status, code, leaks...); err != nil {
		t.Fatal(err)
	}
}

func rejectionError(r reply, status int, code string, leaks ...string) error {
	if r.status != status {
		return fmt.Errorf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != wire.ContentType {
		return fmt.Errorf("content type %q", ct)
	}
	if !r.close {
		return fmt.Errorf("no Connection: close on a pre-body rejection: %v", r.header)
	}
	var doc map[string]any
	if err := json.Unmarshal(r.body, &doc); err != nil {
		return fmt.Errorf("body is not JSON: %v", err)
	}
	if doc["code"] != code || doc["status"] != float64(status) {
		return fmt.Errorf("problem %v, want code %s", doc, code)
	}
	for k := range doc {
		switch k {
		case "type", "status", "code", "title", "retryAfter":
		case "detail":
			// Only the code's fixed sentence: nothing about the request.
			if _, want, _ := wire.Lookup(code); doc[k] != want {
				return fmt.Errorf("detail %q is not the fixed sentence of %s", doc[k], code)
			}
		default:
			return fmt.Errorf("problem carries member %q: %s", k, r.body)
		}
	}
	ra := r.header.Get("Retry-After")
	if status == http.StatusTooManyRequests {
		n, err := strconv.Atoi(ra)
		if err != nil || n < 1 || doc["retryAfter"] != float64(n) {
			return fmt.Errorf("retry-after %q / retryAfter %v", ra, doc["retryAfter"])
		}
	} else if ra != "" {
		return fmt.Errorf("retry-after %q on %d", ra, status)
	}
	// The IETF RateLimit field says only what Retry-After says (nothing
	// left, back in N seconds); the policy (the deployment's capacity
	// and window) is never sent.
	if status == http.StatusTooManyRequests {
		if got, want := r.header.Get("RateLimit"), `"shield";r=0;t=`+ra; got != want {
			return fmt.Errorf("RateLimit %q, want %q", got, want)
		}
	} else if rl := r.header.Get("RateLimit"); rl != "" {
		return fmt.Errorf("RateLimit %q on %d", rl, status)
	}
	for _, h := range []string{"RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining"} {
		if r.header.Get(h) != "" {
			return fmt.Errorf("rejection reveals %s", h)
		}
	}
	all := string(r.body) + fmt.Sprint(r.header)
	for _, l := range append(leaks, "127.", "capacity", "global", "peer", "window") {
		if strings.Contains(all, l) {
			return fmt.Errorf("rejection reveals %q: %s", l, all)
		}
	}
	return nil
}

func TestHTTPProbesAndNotReadyConsumeNoBudget(t *testing.T) {
	ts := startServer(t, Config{PerPeer: 3, Global: 100}, nil, false)
	// Not ready: the host answers, the shield never runs.
	for range 30 {
		if r := get(t, netip.Addr{}, ts.addr, "/api/login"); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), wire.CodeNotReady) {
			t.Fatalf("before ready: %d %s", r.status, r.body)
		}
		if r := get(t, netip.Addr{}, ts.addr, "/livez"); r.status != http.StatusOK {
			t.Fatalf("/livez: %d", r.status)
		}
		if r := get(t, netip.Addr{}, ts.addr, "/readyz"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("/readyz before ready: %d", r.status)
		}
	}
	if ts.shield.Len() != 0 || len(ts.rec.all()) != 0 || ts.appCalls.Load() != 0 {
		t.Fatalf("not-ready traffic reached the shield: len %d events %v", ts.shield.Len(), ts.rec.all())
	}
	ts.activate(t)
	// Probes after activation never consume budget either; the budget of
	// exactly 3 is intact.
	c := dial(t, netip.Addr{}, ts.addr)
	defer c.Close()
	for i := range 3 {
		for range 10 {
			if r := c.roundTrip(t, request("GET", "/livez", false)); r.status != http.StatusOK {
				t.Fatalf("/livez: %d", r.status)
			}
			if r := c.roundTrip(t, request("HEAD", "/readyz", false)); r.status != http.StatusOK {
				t.Fatalf("/readyz: %d", r.status)
			}
		}
		if r := c.roundTrip(t, request("GET", "/api/login", false)); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, r.status, r.body)
		}
	}
	checkRejection(t, c.roundTrip(t, request("GET", "/api/login", false)), http.StatusTooManyRequests, wire.CodeAuthenticationRateLimited)
	c.expectEOF(t)
	if ev := ts.rec.all(); len(ev) != 1 || ev[0] != (Event{OutcomeRateLimited, ReasonPeer}) {
		t.Fatalf("events %v", ev)
	}
	if ts.appCalls.Load() != 3 {
		t.Fatalf("app called %d times", ts.appCalls.Load())
	}
}

func TestHTTPRejectsBeforeBody(t *testing.T) {
	ts := startServer(t, Config{PerPeer: 1, Global: 100}, nil, true)
	if r := get(t, netip.Addr{}, ts.addr, "/api/login"); r.status != http.StatusOK {
		t.Fatalf("first request: %d", r.status)
	}
	for _, framing := range []string{"Content-Length: 1000000", "Content-Length: 10", "Transfer-Encoding: chunked"} {
		t.Run(framing, func(t *testing.T) {
			c := dial(t, netip.Addr{}, ts.addr)
			defer c.Close()
			// Headers only: the announced body is never sent.
			k, v, _ := strings.Cut(framing, ": ")
			start := time.Now()
			r := c.roundTrip(t, request("POST", "/api/login", false, k, v, "Content-Type", "application/json"))
			checkRejection(t, r, http.StatusTooManyRequests, wire.CodeAuthenticationRateLimited)
			if r.header.Get("Retry-After") != "60" {
				t.Fatalf("Retry-After %q, want 60", r.header.Get("Retry-After"))
			}
			// The server closes at once instead of waiting for the body:
			// expectEOF's deadline is well under the server's request
			// timeout (host.DefaultRequestTimeout, 30 s), the only other
			// way this connection could end.
			c.expectEOF(t)
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		})
	}
	if ts.appCalls.Load() != 1 {
		t.Fatalf("app (and its body read) ran %d times", ts.appCalls.Load())
	}
}

func TestHTTPUnavailable(t *testing.T) {
	ts := startServer(t, Config{PerPeer: 10, Global: 100}, nil, true)
	if r := get(t, netip.Addr{}, ts.addr, "/api"); r.status != http.StatusOK {
		t.Fatalf("first: %d", r.status)
	}
	ts.clk.Advance(-time.Second)
	c := dial(t, netip.Addr{}, ts.addr)
	checkRejection(t, c.roundTrip(t, request("POST", "/api", false, "Content-Length", "100")), http.StatusServiceUnavailable, wire.CodeAuthenticationShieldUnavailable)
	c.expectEOF(t)
	c.Close()
	if ev := ts.rec.all(); len(ev) != 1 || ev[0] != (Event{OutcomeUnavailable, ReasonClock}) {
		t.Fatalf("events %v", ev)
	}
	ts.clk.Advance(time.Second)
	if r := get(t, netip.Addr{}, ts.addr, "/api"); r.status != http.StatusOK {
		t.Fatalf("after the clock caught up: %d", r.status)
	}
	ts.shield.Close()
	checkRejection(t, get(t, netip.Addr{}, ts.addr, "/api"), http.StatusServiceUnavailable, wire.CodeAuthenticationShieldUnavailable)
	if ts.appCalls.Load() != 2 {
		t.Fatalf("app called %d times", ts.appCalls.Load())
	}
}

func TestHTTPNilShieldFailsClosed(t *testing.T) {
	h := (*Shield)(nil).Middleware(nil)(http.NotFoundHandler())
	rec := &responseRecorder{header: http.Header{}}
	h.ServeHTTP(rec, &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, ProtoMajor: 1, RemoteAddr: "192.0.2.1:1", Header: http.Header{}})
	checkRejection(t, reply{status: rec.status, header: rec.header, body: rec.body, close: rec.header.Get("Connection") == "close"}, http.StatusServiceUnavailable, wire.CodeAuthenticationShieldUnavailable)
}

type responseRecorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) WriteHeader(s int)   { r.status = s }
func (r *responseRecorder) Write(b []byte) (int, error) {
	r.body = append(r.body, b...)
	return len(b), nil
}

func TestHTTPRefundAfterAuthentication(t *testing.T) {
	ts := startServer(t, Config{PerPeer: 2, Global: 100}, nil, true)
	c := dial(t, netip.Addr{}, ts.addr)
	defer c.Close()
	for i := range 20 {
		if r := c.roundTrip(t, request("GET", "/api", false, "X-Test-Authenticated", "yes")); r.status != http.StatusOK {
			t.Fatalf("authenticated request %d: %d %s", i, r.status, r.body)
		}
	}
	for range 2 {
		if r := c.roundTrip(t, request("GET", "/api", false)); r.status != http.StatusOK {
			t.Fatalf("anonymous: %d", r.status)
		}
	}
	checkRejection(t, c.roundTrip(t, request("GET", "/api", false)), http.StatusTooManyRequests, wire.CodeAuthenticationRateLimited)
}

func TestHTTPForwardedHeadersShareOneBudget(t *testing.T) {
	const budget = 1000
	ts := startServer(t, Config{PerPeer: budget, Global: 1_000_000}, nil, true)
	c := dial(t, netip.Addr{}, ts.addr)
	defer c.Close()
	for i := range budget {
		spoof := fmt.Sprintf("198.51.%d.%d", i/256, i%256)
		r := c.roundTrip(t, request("GET", "/api/login", false,
			"X-Forwarded-For", spoof,
			"X-Real-IP", spoof,
			"Forwarded", "for="+spoof,
			"True-Client-IP", spoof))
		if r.status != http.StatusOK {
			t.Fatalf("request %d: %d", i+1, r.status)
		}
	}
	r := c.roundTrip(t, request("GET", "/api/login", false, "X-Forwarded-For", "203.0.113.250", "X-Real-IP", "203.0.113.250"))
	checkRejection(t, r, http.StatusTooManyRequests, wire.CodeAuthenticationRateLimited, "203.0.113.250")
	c.expectEOF(t)
	if n := ts.shield.Len(); n != 1 {
		t.Fatalf("peer table holds %d entries, want 1: headers created peers", n)
	}
}

// loopbackPeer returns the i-th distinct client address in 127.0.0.0/8.
func loopbackPeer(i int) netip.Addr {
	// 127.20.0.1 upwards, skipping .0 and .255 in the last octet.
	return netip.AddrFrom4([4]byte{127, 20 + byte(i/(254*254)), byte(i / 254 % 254), byte(1 + i%254)})
}

func TestHTTPManyRealPeers(t *testing.T) {
	const (
		maxPeers = DefaultMaxPeers
		peers    = 5000
		workers  = 32
	)
	if testing.Short() {
		t.Skip("opens about 6,000 sockets")
	}
	ts := startServer(t, Config{MaxPeers: maxPeers, Global: 1_000_000}, nil, true)

	// Watch the table size while the flood runs.
	var maxLen atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n := int64(ts.shield.Len()); n > maxLen.Load() {
				maxLen.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	// flood sends one request from each peer in ids, from that peer's own
	// address, and returns which were admitted.
	flood := func(ids []int) (admitted, limited []int) {
		var mu sync.Mutex
		next := atomic.Int64{}
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1)) - 1
					if k >= len(ids) || t.Failed() {
						return
					}
					id := ids[k]
					r, err := fetch(loopbackPeer(id), ts.addr, "/api/login")
					if err != nil {
						t.Errorf("peer %d: %v", id, err)
						return
					}
					if l := ts.shield.Len(); l > maxPeers {
						t.Errorf("table holds %d > %d", l, maxPeers)
					}
					switch r.status {
					case http.StatusOK:
						mu.Lock()
						admitted = append(admitted, id)
						mu.Unlock()
					case http.StatusTooManyRequests:
						if err := rejectionError(r, r.status, wire.CodeAuthenticationRateLimited, loopbackPeer(id).String()); err != nil {
							t.Errorf("peer %d: %v", id, err)
						}
						if r.header.Get("Retry-After") != "60" {
							t.Errorf("capacity Retry-After %q", r.header.Get("Retry-After"))
						}
						mu.Lock()
						limited = append(limited, id)
						mu.Unlock()
					default:
						t.Errorf("peer %d: status %d", id, r.status)
					}
				}
			}()
		}
		wg.Wait()
		return admitted, limited
	}

	all := make([]int, peers)
	for i := range all {
		all[i] = i
	}
	admitted, limited := flood(all)
	if t.Failed() {
		t.FailNow()
	}
	if len(admitted) != maxPeers || len(limited) != peers-maxPeers {
		t.Fatalf("admitted %d, limited %d; want %d and %d", len(admitted), len(limited), maxPeers, peers-maxPeers)
	}
	if got := ts.rec.count(ReasonCapacity); got != len(limited) || len(ts.rec.all()) != got {
		t.Fatalf("capacity events %d of %d, want %d", got, len(ts.rec.all()), len(limited))
	}

	// Still within the window: the table stays full, the newcomers stay
	// out, the admitted peers keep being served.
	a2, l2 := flood(limited[:200])
	if len(a2) != 0 || len(l2) != 200 {
		t.Fatalf("within the window: admitted %d newcomers", len(a2))
	}
	if a3, _ := flood(admitted[:200]); len(a3) != 200 {
		t.Fatalf("known peers: %d of 200 admitted", len(a3))
	}

	// Every window expires: the newcomers are admitted, each reclaiming an
	// expired entry within the scan bound.
	ts.clk.Advance(DefaultWindow)
	a4, l4 := flood(limited)
	if len(a4) != len(limited) || len(l4) != 0 {
		t.Fatalf("after expiry: admitted %d, limited %d, want %d and 0", len(a4), len(l4), len(limited))
	}
	close(stop)
	<-watched
	st := ts.shield.table.Stats()
	if maxLen.Load() > maxPeers || st.Len > maxPeers {
		t.Fatalf("table held up to %d entries (now %d), capacity %d", maxLen.Load(), st.Len, maxPeers)
	}
	if st.MaxInspected > DefaultScanLimit {
		t.Fatalf("an insert inspected %d entries", st.MaxInspected)
	}
	if st.Reclaimed < uint64(len(limited)) {
		t.Fatalf("reclaimed %d, want at least %d", st.Reclaimed, len(limited))
	}
	t.Logf("peers %d, capacity %d: admitted %d then %d after expiry; max table %d; inspected max %d per insert, %d total",
		peers, maxPeers, len(admitted), len(a4), maxLen.Load(), st.MaxInspected, st.Inspected)
}

func TestHTTPTrustedProxy(t *testing.T) {
	proxyAddr := netip.MustParseAddr("127.30.0.1")
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.PrefixFrom(proxyAddr, 32)}, Hops: 1})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{PerPeer: 2, Global: 1000}, res, true)

	// A real reverse proxy that appends the client's socket address to
	// X-Forwarded-For and connects to the service from proxyAddr.
	target, _ := url.Parse("http://" + ts.addr)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: proxyAddr.AsSlice()}}).DialContext,
			DisableKeepAlives: true,
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	psrv := &http.Server{Handler: rp, ReadHeaderTimeout: 5 * time.Second}
	go psrv.Serve(ln)
	t.Cleanup(func() { psrv.Close() })
	via := ln.Addr().String()

	status := func(local netip.Addr, addr string, headers ...string) int {
		return get(t, local, addr, "/api/login", headers...).status
	}
	// Clients behind the trusted proxy get separate budgets.
	for i := range 5 {
		client := netip.AddrFrom4([4]byte{127, 31, 0, byte(1 + i)})
		for j := range 2 {
			if s := status(client, via); s != http.StatusOK {
				t.Fatalf("client %v request %d via proxy: %d", client, j+1, s)
			}
		}
		if s := status(client, via); s != http.StatusTooManyRequests {
			t.Fatalf("client %v third request: %d", client, s)
		}
	}
	// A client behind the proxy cannot escape its budget by writing its
	// own X-Forwarded-For: the proxy appends the real address on the right.
	spoofer := netip.MustParseAddr("127.31.0.99")
	for i := range 6 {
		s := status(spoofer, via, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
		if want := http.StatusOK; i >= 2 {
			want = http.StatusTooManyRequests
			if s != want {
				t.Fatalf("spoofing client request %d: %d, want %d", i+1, s, want)
			}
		} else if s != want {
			t.Fatalf("spoofing client request %d: %d", i+1, s)
		}
	}
	// A spoofed chain straight from an untrusted peer is ignored: one
	// budget for the socket.
	direct := netip.MustParseAddr("127.32.0.1")
	for i := range 6 {
		s := status(direct, ts.addr, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d, 127.31.0.%d", i, 50+i))
		if (i < 2) != (s == http.StatusOK) || (i >= 2 && s != http.StatusTooManyRequests) {
			t.Fatalf("untrusted spoofed request %d: %d", i+1, s)
		}
	}
	// The proxy's own address without a chain is the unknown peer.
	for i := range 3 {
		s := status(proxyAddr, ts.addr)
		if (i < 2) != (s == http.StatusOK) {
			t.Fatalf("proxy without header, request %d: %d", i+1, s)
		}
	}
	if n := ts.shield.Len(); n != 5+1+1+1 {
		t.Fatalf("peer table holds %d entries, want 8", n)
	}
}

func TestHTTPTrustedProxyForwarded(t *testing.T) {
	proxyAddr := netip.MustParseAddr("127.30.0.2")
	res, err := peer.NewResolver(&peer.TrustedProxies{CIDRs: []netip.Prefix{netip.MustParsePrefix("127.30.0.0/24")}, Hops: 1, Header: peer.Forwarded})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{PerPeer: 1, Global: 1000}, res, true)
	for _, client := range []string{`for=203.0.113.1`, `for="[2001:db8::1]:4711"`, `for=203.0.113.2;proto=https`} {
		if r := get(t, proxyAddr, ts.addr, "/api", "Forwarded", "for=6.6.6.6, "+client); r.status != http.StatusOK {
			t.Fatalf("%s: %d", client, r.status)
		}
		checkRejection(t, get(t, proxyAddr, ts.addr, "/api", "Forwarded", client), http.StatusTooManyRequests, wire.CodeAuthenticationRateLimited, "203.0.113", "2001:db8")
	}
	// Untrusted: the header is ignored.
	untrusted := netip.MustParseAddr("127.32.0.2")
	if r := get(t, untrusted, ts.addr, "/api", "Forwarded", "for=203.0.113.9"); r.status != http.StatusOK {
		t.Fatalf("untrusted first: %d", r.status)
	}
	if r := get(t, untrusted, ts.addr, "/api", "Forwarded", "for=203.0.113.10"); r.status != http.StatusTooManyRequests {
		t.Fatalf("untrusted second: %d", r.status)
	}
}
