// Package hosttest is the test harness shared by the suites that run a
// host.Host over every transport (HTTP/1.1 on net/http and on the fast
// engine, HTTP/2 over TLS, h2c): a started host with a matching client,
// response helpers, raw HTTP/1.1 connections and a self-signed
// certificate. It is imported by tests only.
package hosttest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/host"
)

// Mode is one transport a host is tested over.
type Mode struct {
	Name string
	TLS  bool // HTTP/2 over TLS
	TLS1 bool // HTTP/1.1 over TLS (the client offers http/1.1 only)
	H2C  bool // HTTP/2 with prior knowledge
	Fast bool // HTTP/1.1 on the fast engine (handing over to net/http what it declines)
	Loop bool // the fast engine on event loops (host.EngineLoop)
	// Native serves HTTP/2 with the native engine (host.H2Native).
	Native bool
}

// H2 reports whether the mode speaks HTTP/2.
func (m Mode) H2() bool { return m.TLS || m.H2C }

// The modes.
var (
	ModeH1   = Mode{Name: "h1"}
	ModeH2   = Mode{Name: "h2", TLS: true}
	ModeH2C  = Mode{Name: "h2c", H2C: true}
	ModeFast = Mode{Name: "fast", Fast: true}
	ModeLoop = Mode{Name: "loop", Fast: true, Loop: true}
	// HTTP/1.1 over TLS: on net/http, on the fast engine, and asking
	// for the loops (TLS connections are served by goroutines).
	ModeH1TLS   = Mode{Name: "h1-tls", TLS1: true}
	ModeFastTLS = Mode{Name: "fast-tls", Fast: true, TLS1: true}
	ModeLoopTLS = Mode{Name: "loop-tls", Fast: true, Loop: true, TLS1: true}
	// HTTP/2 on the native engine (host.H2Native): over TLS, and h2c
	// on the fast engine.
	ModeH2Native  = Mode{Name: "h2-native", TLS: true, Native: true}
	ModeH2CNative = Mode{Name: "h2c-native", H2C: true, Fast: true, Native: true}
)

// Cert returns a self-signed certificate for 127.0.0.1 and a pool that
// trusts it, made once per process.
var Cert = sync.OnceValues(func() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bulwark-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
})

// Env is a started host plus a client for one mode.
type Env struct {
	T     *testing.T
	M     Mode
	H     *host.Host
	Base  string // scheme://addr
	Tr    *http.Transport
	C     *http.Client
	Dials atomic.Int64 // connections the client dialed
}

// Option adjusts the host config before New.
type Option func(*host.Config)

// Start creates and starts a host on a loopback port for mode m. The host is
// shut down at cleanup if the test did not do it.
func Start(t *testing.T, m Mode, lim host.Limits, opts ...Option) *Env {
	t.Helper()
	cfg := host.Config{Addr: "127.0.0.1:0", Limits: lim, H2C: m.H2C}
	if m.Fast {
		cfg.Engine = host.EngineFast
	}
	if m.Loop {
		cfg.Engine = host.EngineLoop
	}
	if m.Native {
		cfg.H2Engine = host.H2Native
	}
	if m.TLS || m.TLS1 {
		cert, _ := Cert()
		cfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	for _, o := range opts {
		o(&cfg)
	}
	h, err := host.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := h.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	e := &Env{T: t, M: m, H: h}
	e.Tr = NewTransport(m, &e.Dials)
	e.C = &http.Client{Transport: e.Tr, Timeout: 30 * time.Second}
	scheme := "http"
	if m.TLS || m.TLS1 {
		scheme = "https"
	}
	e.Base = scheme + "://" + h.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.Tr.CloseIdleConnections() // lets HTTP/2 connections close without the GOAWAY wait
		_ = h.Shutdown(ctx)
		e.Tr.CloseIdleConnections()
	})
	return e
}

// NewTransport returns a client transport for mode m; dials, if not nil,
// counts its connections.
func NewTransport(m Mode, dials *atomic.Int64) *http.Transport {
	p := new(http.Protocols)
	switch {
	case m.TLS:
		p.SetHTTP2(true)
	case m.H2C:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Protocols:           p,
		MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	if m.TLS || m.TLS1 {
		tr.TLSClientConfig = ClientTLS()
	}
	return tr
}

// ClientTLS returns a client configuration trusting Cert, offering
// protos over ALPN.
func ClientTLS(protos ...string) *tls.Config {
	_, pool := Cert()
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: protos}
}

// Result is a response read in full.
type Result struct {
	Status int
	Code   string // problem code, if any
	Header http.Header
	Body   string
	Close  bool
	Proto  int // major version
}

// Do sends a request (hdr: name, value pairs; "Content-Length" sets the
// length) and reads the whole response, failing the test on error.
func (e *Env) Do(method, path string, body io.Reader, hdr ...string) Result {
	e.T.Helper()
	r, err := e.Try(method, path, body, hdr...)
	if err != nil {
		e.T.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Try is Do returning the error.
func (e *Env) Try(method, path string, body io.Reader, hdr ...string) (Result, error) {
	req, err := http.NewRequest(method, e.Base+path, body)
	if err != nil {
		return Result{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Content-Length" {
			req.ContentLength, err = strconv.ParseInt(hdr[i+1], 10, 64)
			if err != nil {
				return Result{}, err
			}
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := e.C.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Result{}, err
	}
	return ToResult(resp, b), nil
}

// ToResult reads resp's problem code, if any, into a Result with body b.
func ToResult(resp *http.Response, b []byte) Result {
	r := Result{Status: resp.StatusCode, Header: resp.Header, Body: string(b), Close: resp.Close, Proto: resp.ProtoMajor}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Code string }
		if json.Unmarshal(b, &p) == nil {
			r.Code = p.Code
		}
	}
	return r
}

// CheckProto fails the test unless r came over the mode's HTTP version.
func (e *Env) CheckProto(r Result) {
	e.T.Helper()
	want := 1
	if e.M.H2() {
		want = 2
	}
	if r.Proto != want {
		e.T.Fatalf("response over HTTP/%d, want HTTP/%d", r.Proto, want)
	}
}

// Expect checks status and problem code (and the problem content type).
func Expect(t *testing.T, what string, r Result, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code != code {
		t.Fatalf("%s: got %d %q (%s), want %d %q", what, r.Status, r.Code, r.Body, status, code)
	}
	if status >= 400 && code != "" && r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: content-type %q", what, r.Header.Get("Content-Type"))
	}
}

// RawConn is a raw connection to an HTTP/1.1 host (TCP, or TLS in a
// TLS1 mode).
type RawConn struct {
	T  *testing.T
	C  net.Conn
	Br *bufio.Reader
}

// DialRaw connects to e's host with a 20 s deadline (a safety net against a
// hung test) and closes the connection at cleanup. In a TLS1 mode the
// connection is TLS, offering http/1.1.
func DialRaw(t *testing.T, e *Env) *RawConn {
	t.Helper()
	var c net.Conn
	var err error
	if e.M.TLS1 {
		c, err = tls.Dial("tcp", e.H.Addr().String(), ClientTLS("http/1.1"))
	} else {
		c, err = net.Dial("tcp", e.H.Addr().String())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A safety deadline so a broken host fails the test instead of hanging
	// it; correctness never depends on it.
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &RawConn{T: t, C: c, Br: bufio.NewReader(c)}
}

// Send writes s.
func (rc *RawConn) Send(s string) {
	rc.T.Helper()
	if _, err := io.WriteString(rc.C, s); err != nil {
		rc.T.Fatal(err)
	}
}

// Read reads one response to a request of method.
func (rc *RawConn) Read(method string) Result {
	rc.T.Helper()
	resp, err := http.ReadResponse(rc.Br, &http.Request{Method: method})
	if err != nil {
		rc.T.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.T.Fatal(err)
	}
	return ToResult(resp, b)
}

// ExpectEOF checks that the server closed the connection.
func (rc *RawConn) ExpectEOF() {
	rc.T.Helper()
	var buf [1]byte
	n, err := rc.Br.Read(buf[:])
	if err != io.EOF {
		rc.T.Fatalf("next read: %d bytes, err %v; want EOF (connection closed)", n, err)
	}
}

// Events records an order of events across goroutines.
type Events struct {
	mu  sync.Mutex
	evs []string
}

// Add records s.
func (ev *Events) Add(s string) {
	ev.mu.Lock()
	ev.evs = append(ev.evs, s)
	ev.mu.Unlock()
}

// Get returns the events so far.
func (ev *Events) Get() []string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return append([]string(nil), ev.evs...)
}

// CloseRecorder wraps a listener, counts its accepts and calls OnClose
// on its first Close.
type CloseRecorder struct {
	net.Listener
	once    sync.Once
	OnClose func()
	Accepts atomic.Int64
}

// Accept accepts from the wrapped listener and counts it.
func (l *CloseRecorder) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.Accepts.Add(1)
	}
	return c, err
}

// Close calls OnClose (the first time) and closes the wrapped listener.
func (l *CloseRecorder) Close() error {
	l.once.Do(l.OnClose)
	return l.Listener.Close()
}

// OKHandler answers 200 "ok" as text/plain.
func OKHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}
