package guard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/guard"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/wire"
)

// A plain net/http server behind the guard: the listener applies the
// accept caps and the slow-client deadlines, ConfigureServer tells the
// connections where requests begin and end and serves HTTP/2 through the
// frame guard, and Middleware counts requests for the overload manager.
func Example() {
	var refused atomic.Int64
	g, err := guard.New(guard.Config{
		Conns: guard.ConnConfig{MaxPerAddr: 2, MaxIncompletePerAddr: 2},
	}, guard.Options{Hooks: guard.Hooks{Refused: func(reason string) { refused.Add(1) }}})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	srv := &http.Server{
		Handler: g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "hello")
		})),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if err := g.ConfigureServer(srv); err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(g.Listener(ln, nil)) }()
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		panic(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(b))

	// Two more idle connections from the same address: the third one
	// (the client's keep-alive connection is the first) is refused.
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			idle = append(idle, c)
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, _ = c.Read(make([]byte, 1))
		}
	}
	for _, c := range idle {
		c.Close()
	}
	fmt.Println("refused:", refused.Load())
	// Output:
	// 200 hello
	// refused: 1
}

// How the gateway wires a Guard into package host: every hook, over TLS
// (use WrapListener with Listener(ln, nil) for cleartext).
func Example_host() {
	g, err := guard.New(guard.Config{}, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	h, err := host.New(host.Config{
		Addr:            "127.0.0.1:0",
		TLSConfig:       serverTLSConfig(),
		WrapTLSListener: g.Listener,    // accept caps, handshake limits, slow clients
		ConnContext:     g.ConnContext, // per-connection state for the request hooks
		ConnState:       g.ConnState,   // HTTP/1.1 heads, idle, hijack
		WrapH2Conn:      g.WrapH2,      // HTTP/2 frame guard (x/net's server)
		HTTP2:           g.HTTP2Config(),
		Requests:        g, // overload: in flight, keep-alive off, shedding
	})
	if err != nil {
		panic(err)
	}
	if err := h.Start(); err != nil {
		panic(err)
	}
	h.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "HTTP/%d", r.ProtoMajor)
	}))
	tr := &http.Transport{TLSClientConfig: clientTLSConfig(), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + h.Addr().String() + "/")
	if err != nil {
		panic(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(b), g.Stats().H2Conns)
	tr.CloseIdleConnections()
	_ = h.Shutdown(context.Background())
	// Output:
	// HTTP/2 1
}

// Validate names the offending key and its range.
func ExampleConfig_Validate() {
	cfg := guard.DefaultConfig()
	cfg.H2.MaxResetsPerSec = 0
	err := cfg.Validate()
	fmt.Println(errors.Is(err, guard.ErrInvalidConfig))
	fmt.Println(err)
	// Output:
	// true
	// guard: invalid config: h2.max_rst_per_sec: 0 out of range [1, 1000000]
}

// Shed requests answered the application's way: the hooks get the
// request; the guard has already set Retry-After and made the connection
// close.
func ExampleGuard_MiddlewareWith() {
	g, err := guard.New(guard.Config{Overload: guard.OverloadConfig{MaxInFlight: 1}}, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	var h http.Handler
	h = g.MiddlewareWith(guard.MiddlewareOptions{
		OnRejectRequest: func(r *http.Request, rej wire.Rejection) {
			fmt.Println("shed", r.URL.Path, "by", rej.Layer, "for", rej.Reason)
		},
		RejectHandler: func(w http.ResponseWriter, r *http.Request, rej wire.Rejection) {
			w.WriteHeader(rej.Problem.Status)
			fmt.Fprintln(w, "busy, retry in", w.Header().Get("Retry-After"), "s")
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/outer" {
			// A second request while this one is in flight: 1 of 1 in
			// flight, so the guard sheds it.
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/inner", nil))
			fmt.Printf("inner: %d %q %s", rec.Code, rec.Header().Get("Connection"), rec.Body)
		}
		fmt.Fprintln(w, "ok")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/outer", nil))
	fmt.Print("outer: ", rec.Code, " ", rec.Body)
	// Output:
	// shed /inner by guard for overloaded
	// inner: 503 "close" busy, retry in 1 s
	// outer: 200 ok
}
