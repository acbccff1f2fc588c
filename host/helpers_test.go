package host_test

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

	"go.uber.org/goleak"

	"github.com/bulwarkhq/bulwark/host"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mode is one transport the host is tested over.
type mode struct {
	name string
	tls  bool
	h2c  bool
	fast bool // HTTP/1.1 on the fast engine (handing over to net/http what it declines)
}

func (m mode) h2() bool { return m.tls || m.h2c }

var (
	modeH1   = mode{name: "h1"}
	modeH2   = mode{name: "h2", tls: true}
	modeH2C  = mode{name: "h2c", h2c: true}
	modeFast = mode{name: "fast", fast: true}
	modes    = []mode{modeH1, modeH2, modeH2C, modeFast}
)

// testCert is a self-signed certificate for 127.0.0.1, made once.
var testCert = sync.OnceValues(func() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bulwark-host-test"},
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

// env is a started host plus a client for one mode.
type env struct {
	t     *testing.T
	m     mode
	h     *host.Host
	base  string
	tr    *http.Transport
	c     *http.Client
	dials atomic.Int64
}

type option func(*host.Config)

// start creates and starts a host on a loopback port for mode m. The host is
// shut down at cleanup if the test did not do it.
func start(t *testing.T, m mode, lim host.Limits, opts ...option) *env {
	t.Helper()
	cfg := host.Config{Addr: "127.0.0.1:0", Limits: lim, H2C: m.h2c}
	if m.fast {
		cfg.Engine = host.EngineFast
	}
	if m.tls {
		cert, _ := testCert()
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
	e := &env{t: t, m: m, h: h}
	e.tr = newTransport(m, &e.dials)
	e.c = &http.Client{Transport: e.tr, Timeout: 30 * time.Second}
	scheme := "http"
	if m.tls {
		scheme = "https"
	}
	e.base = scheme + "://" + h.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.tr.CloseIdleConnections() // lets HTTP/2 connections close without the GOAWAY wait
		_ = h.Shutdown(ctx)
		e.tr.CloseIdleConnections()
	})
	return e
}

func newTransport(m mode, dials *atomic.Int64) *http.Transport {
	p := new(http.Protocols)
	switch {
	case m.tls:
		p.SetHTTP2(true)
	case m.h2c:
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
	if m.tls {
		_, pool := testCert()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr
}

// result is a response read in full.
type result struct {
	status int
	code   string // problem code, if any
	header http.Header
	body   string
	close  bool
	proto  int
}

func (e *env) do(method, path string, body io.Reader, hdr ...string) result {
	e.t.Helper()
	r, err := e.try(method, path, body, hdr...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *env) try(method, path string, body io.Reader, hdr ...string) (result, error) {
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		return result{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Content-Length" {
			req.ContentLength, err = strconv.ParseInt(hdr[i+1], 10, 64)
			if err != nil {
				return result{}, err
			}
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := e.c.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	return toResult(resp, b), nil
}

func toResult(resp *http.Response, b []byte) result {
	r := result{status: resp.StatusCode, header: resp.Header, body: string(b), close: resp.Close, proto: resp.ProtoMajor}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Code string }
		if json.Unmarshal(b, &p) == nil {
			r.code = p.Code
		}
	}
	return r
}

func (e *env) checkProto(r result) {
	e.t.Helper()
	want := 1
	if e.m.h2() {
		want = 2
	}
	if r.proto != want {
		e.t.Fatalf("response over HTTP/%d, want HTTP/%d", r.proto, want)
	}
}

// expect checks status and problem code.
func expect(t *testing.T, what string, r result, status int, code string) {
	t.Helper()
	if r.status != status || r.code != code {
		t.Fatalf("%s: got %d %q (%s), want %d %q", what, r.status, r.code, r.body, status, code)
	}
	if status >= 400 && code != "" && r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: content-type %q", what, r.header.Get("Content-Type"))
	}
}

// rawConn is a plain TCP connection to an HTTP/1.1 host.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, e *env) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", e.h.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A failure guard so a broken host fails the test instead of hanging
	// it; correctness never depends on it.
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *rawConn) read(method string) result {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatal(err)
	}
	return toResult(resp, b)
}

// expectEOF checks that the server closed the connection.
func (rc *rawConn) expectEOF() {
	rc.t.Helper()
	var buf [1]byte
	n, err := rc.br.Read(buf[:])
	if err != io.EOF {
		rc.t.Fatalf("next read: %d bytes, err %v; want EOF (connection closed)", n, err)
	}
}

// events records an order of events across goroutines.
type events struct {
	mu  sync.Mutex
	evs []string
}

func (ev *events) add(s string) {
	ev.mu.Lock()
	ev.evs = append(ev.evs, s)
	ev.mu.Unlock()
}

func (ev *events) get() []string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return append([]string(nil), ev.evs...)
}

// closeRecorder wraps a listener and records its (first) Close.
type closeRecorder struct {
	net.Listener
	once    sync.Once
	onClose func()
	accepts atomic.Int64
}

func (l *closeRecorder) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

func (l *closeRecorder) Close() error {
	l.once.Do(l.onClose)
	return l.Listener.Close()
}

func okHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}
