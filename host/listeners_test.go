package host_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/internal/hosttest"
)

// ownHandler is a listener's own handler (Listener.Handler) on both
// paths: net/http's and the fast engine's.
type ownHandler struct{}

func (ownHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Own", "nethttp")
	_, _ = io.WriteString(w, "own")
}

func (ownHandler) ServeHTTP1(x *h1.Exchange) host.Verdict {
	x.Header().Set("X-Own", "fast")
	_, _ = io.WriteString(x, "own")
	return host.Served
}

// TestListenersShareOneHost: a host with several listeners (cleartext on
// event loops, TLS on the fast engine, cleartext on net/http with its
// own handler) serves them all at once, each with its engine; they share
// one admission (a request held on one listener fills max_in_flight for
// the others) and one drain: Shutdown turns every listener's /readyz to
// 503, waits for the request held on one of them, and closes them all.
func TestListenersShareOneHost(t *testing.T) {
	cert, _ := testCert()
	h, err := host.New(host.Config{
		Limits: host.Limits{MaxInFlight: 1},
		Listeners: []host.Listener{
			{Name: "loop", Addr: "127.0.0.1:0", Engine: host.EngineLoop},
			{Name: "tls", Addr: "127.0.0.1:0", Engine: host.EngineFast, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}},
			{Name: "own", Addr: "127.0.0.1:0", Engine: host.EngineNetHTTP, Handler: ownHandler{}},
			{Name: "own-fast", Addr: "127.0.0.1:0", Engine: host.EngineFast, Handler: ownHandler{}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	addrs := h.Addrs()
	if len(addrs) != 4 || h.Addr().String() != addrs[0].String() {
		t.Fatalf("Addrs %v, Addr %v", addrs, h.Addr())
	}
	plain := &http.Client{Transport: hosttest.NewTransport(modeH1, nil), Timeout: 20 * time.Second}
	secure := &http.Client{Transport: hosttest.NewTransport(modeH1TLS, nil), Timeout: 20 * time.Second}
	defer plain.CloseIdleConnections()
	defer secure.CloseIdleConnections()
	get := func(c *http.Client, url string) (int, string, http.Header) {
		t.Helper()
		res, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header
	}
	urls := []string{"http://" + addrs[0].String(), "https://" + addrs[1].String(), "http://" + addrs[2].String(), "http://" + addrs[3].String()}
	clients := []*http.Client{plain, secure, plain, plain}

	release := make(chan struct{})
	held := make(chan struct{}, 1)
	h.Activate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "main")
	}))
	for i, u := range urls {
		code, body, hdr := get(clients[i], u+"/x")
		want := "main"
		if i >= 2 {
			want = "own"
		}
		if code != 200 || body != want {
			t.Fatalf("listener %d: %d %q, want 200 %q", i, code, body, want)
		}
		if i == 3 && hdr.Get("X-Own") != "fast" || i == 2 && hdr.Get("X-Own") != "nethttp" {
			t.Fatalf("listener %d: own handler served by %q", i, hdr.Get("X-Own"))
		}
	}

	// One admission: a request held on the TLS listener fills
	// max_in_flight 1 for every listener.
	done := make(chan int, 1)
	go func() {
		res, err := secure.Get(urls[1] + "/hold")
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		done <- res.StatusCode
	}()
	recv(t, held, "the held request")
	if code, body, _ := get(plain, urls[0]+"/x"); code != http.StatusServiceUnavailable || !strings.Contains(body, "overloaded") {
		t.Fatalf("another listener while one request is in flight: %d %s", code, body)
	}

	// One drain: every listener's readiness turns at once, the held
	// request finishes, then every listener closes.
	stopped := make(chan error, 1)
	go func() { stopped <- h.Shutdown(context.Background()) }()
	waitFor(t, "draining", func() bool { return !h.IsReady() })
	for i := range urls {
		if code, body, _ := get(clients[i], urls[i]+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
			t.Fatalf("listener %d /readyz while draining: %d %s", i, code, body)
		}
	}
	close(release)
	if code := recv(t, done, "the held request's answer"); code != 200 {
		t.Fatalf("held request: %d", code)
	}
	if err := recv(t, stopped, "Shutdown"); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if c, err := net.DialTimeout("tcp", a.String(), 5*time.Second); err == nil {
			c.Close()
			t.Errorf("listener %d still accepts after Shutdown", i)
		}
	}
}

// TestListenersBindFailure: when one listener cannot be bound, Start
// fails naming it and the listeners already bound are closed.
func TestListenersBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Listeners: []host.Listener{
		{Listener: first, Engine: host.EngineLoop},
		{Name: "second", Addr: busy.Addr().String()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start()
	if err == nil || !strings.Contains(err.Error(), "listener second") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start with a busy second address: %v", err)
	}
	if c, err := net.DialTimeout("tcp", first.Addr().String(), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("the first listener still accepts after the failed Start")
	}
	if err := h.Shutdown(context.Background()); err != nil && !errors.Is(err, host.ErrStopped) {
		t.Fatalf("Shutdown after a failed Start: %v", err)
	}
}

// TestListenersConfig: Listeners excludes the single-listener fields,
// and each listener is checked by its index.
func TestListenersConfig(t *testing.T) {
	cert, _ := testCert()
	for _, c := range []struct {
		cfg  host.Config
		want string
	}{
		{host.Config{Addr: "127.0.0.1:0", Listeners: []host.Listener{{Addr: "127.0.0.1:0"}}}, "single-listener fields"},
		{host.Config{Listeners: []host.Listener{{Addr: "127.0.0.1:0"}, {}}}, "config.listeners[1]: addr is required"},
		{host.Config{Listeners: []host.Listener{{Addr: "127.0.0.1:0"}, {Addr: "127.0.0.1:0", H2C: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}}}, "config.listeners[1]: h2c cannot be combined with tls"},
		{host.Config{Listeners: []host.Listener{{Addr: "127.0.0.1:0", Engine: "loops"}}}, `config.listeners[0]: engine "loops"`},
	} {
		if _, err := host.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
