package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/miekg/dns"
	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// The ACME tests run Let's Encrypt's pebble (the version go.mod pins as
// a tool), built from the module cache and started on loopback with a
// configuration whose validation ports are the gateway's, and a DNS
// server of the test's that answers 127.0.0.1 for every name.

// pebble is a running pebble ACME server.
type pebble struct {
	dir   string         // the ACME directory URL
	root  string         // PEM file trusting pebble's own HTTPS certificate
	mgmt  string         // the management interface's base URL
	log   *syncBuffer    // pebble's output
	cas   *x509.CertPool // trusts pebble's HTTPS (the minica root)
	chain *x509.CertPool // pebble's issuing root, fetched on demand
}

// startPebble builds and starts pebble validating HTTP-01 at httpPort and
// TLS-ALPN-01 at tlsPort of 127.0.0.1, issuing certificates valid for
// validity.
func startPebble(t *testing.T, httpPort, tlsPort int, validity time.Duration) *pebble {
	t.Helper()
	bin := buildPebble(t)
	src := pebbleSource(t)
	dnsAddr := startLoopbackDNS(t)
	dir := t.TempDir()
	listen, mgmt := freeAddr(t), freeAddr(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           listen,
		"managementListenAddress": mgmt,
		"certificate":             filepath.Join(src, "test/certs/localhost/cert.pem"),
		"privateKey":              filepath.Join(src, "test/certs/localhost/key.pem"),
		"httpPort":                httpPort,
		"tlsPort":                 tlsPort,
		"ocspResponderURL":        "",
		"keyAlgorithm":            "ecdsa",
		"retryAfter":              map[string]int{"authz": 1, "order": 1},
		"profiles": map[string]any{"default": map[string]any{
			"description": "test", "validityPeriod": int(validity / time.Second)}},
	}}
	data, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", dnsAddr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pebble:\n%s", log.String())
		}
	})
	rootPEM, err := os.ReadFile(filepath.Join(src, "test/certs/pebble.minica.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cas := x509.NewCertPool()
	cas.AppendCertsFromPEM(rootPEM)
	p := &pebble{dir: "https://" + listen + "/dir", root: filepath.Join(src, "test/certs/pebble.minica.pem"), mgmt: "https://" + mgmt, log: log, cas: cas}
	c := p.client()
	waitUntil(t, 30*time.Second, "pebble's directory", func() bool {
		resp, err := c.Get(p.dir)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

func (p *pebble) client() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.cas}}}
}

// orders counts the orders pebble created.
func (p *pebble) orders() int { return strings.Count(p.log.String(), "Added order") }

// issuingRoots returns the root that signs pebble's certificates.
func (p *pebble) issuingRoots(t *testing.T) *x509.CertPool {
	t.Helper()
	if p.chain != nil {
		return p.chain
	}
	resp, err := p.client().Get(p.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	p.chain = x509.NewCertPool()
	if !p.chain.AppendCertsFromPEM(data) {
		t.Fatalf("pebble root: %q", data)
	}
	return p.chain
}

var pebbleBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// buildPebble builds the pinned pebble once per test binary.
func buildPebble(t *testing.T) string {
	t.Helper()
	b := &pebbleBuild
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "bulwark-pebble-")
		if b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "pebble")
		cmd := exec.Command("go", "build", "-o", b.bin, "github.com/letsencrypt/pebble/v2/cmd/pebble")
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building pebble (go.mod pins it as a tool; go mod download fetches it): %v\n%s", b.err, b.out)
	}
	return b.bin
}

// pebbleSource is pebble's module directory (its test certificates).
func pebbleSource(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/letsencrypt/pebble/v2").Output()
	if err != nil {
		t.Fatalf("go list pebble: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startLoopbackDNS serves 127.0.0.1 for every A query (nothing else)
// over UDP and TCP on one port of 127.0.0.1 and returns its address.
func startLoopbackDNS(t *testing.T) string {
	t.Helper()
	var (
		ln  net.Listener
		pc  net.PacketConn
		err error
	)
	for range 20 { // a TCP port whose UDP twin is free
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if pc, err = net.ListenPacket("udp", ln.Addr().String()); err == nil {
			break
		}
		ln.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		for _, q := range r.Question {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(127, 0, 0, 1)})
			}
		}
		_ = w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return ln.Addr().String()
}

// freeAddr returns a 127.0.0.1 address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitUntil polls cond until it holds, failing the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// servedCert returns the leaf certificate the gateway at addr serves for
// name, verified against roots, or nil while it serves none.
func servedCert(addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// waitCert waits until the gateway serves a certificate for name that
// roots verify and that differs from not (by serial), and returns it.
func waitCert(t *testing.T, addr, name string, roots *x509.CertPool, not *x509.Certificate) *x509.Certificate {
	t.Helper()
	var got *x509.Certificate
	waitUntil(t, 90*time.Second, "a certificate for "+name, func() bool {
		c, err := servedCert(addr, name, roots)
		if err != nil || (not != nil && c.SerialNumber.Cmp(not.SerialNumber) == 0) {
			return false
		}
		got = c
		return true
	})
	return got
}

const acmeYAML = `
listen:
  addr: 127.0.0.1:0
  tls:
{{FILES}}    acme:
      domains: [{{DOMAINS}}]
      email: ops@bulwark.test
      ca: {{CA}}
      ca_root: {{ROOT}}
{{STORAGE}}      challenges: [{{CHALLENGES}}]
{{HTTP}}upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - {name: root, upstream: app, match: {path: /}}
`

type acmeCase struct {
	domains    string
	challenges string
	httpListen string // with http-01
	storageDir string // "" in the cluster profile
	files      string // listen.tls.cert_file and key_file lines, or ""
	getenv     func(string) string
}

func (c acmeCase) parse(t *testing.T, p *pebble, app string) *Config {
	t.Helper()
	y := acmeYAML
	storage, httpKey := "", ""
	if c.storageDir != "" {
		storage = "      storage_dir: " + c.storageDir + "\n"
	}
	if c.httpListen != "" {
		httpKey = "      http_listen: " + c.httpListen + "\n"
	}
	for k, v := range map[string]string{"DOMAINS": c.domains, "CA": p.dir, "ROOT": p.root, "STORAGE": storage,
		"CHALLENGES": c.challenges, "HTTP": httpKey, "APP": app, "FILES": c.files} {
		y = strings.ReplaceAll(y, "{{"+k+"}}", v)
	}
	cfg, err := Parse("acme.yaml", []byte(y), c.getenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if e := engineOf(t); e != "" {
		for i := range cfg.Listen { // as startConfig sets it: a reload compares
			cfg.Listen[i].Engine = e
		}
	}
	return cfg
}

func acmeUpstream(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello over acme") }))
	t.Cleanup(up.Close)
	return up.URL
}

// TestACMEIssuance obtains a certificate from pebble with TLS-ALPN-01 on
// every engine (the challenge is answered on the gateway's TLS listener)
// and with HTTP-01 (on http_listen), serves HTTPS with it, keeps it
// through a reload, and a restart on the same storage_dir serves it
// again without a new order.
func TestACMEIssuance(t *testing.T) {
	t.Run("tls-alpn-01", func(t *testing.T) {
		engines(t, func(t *testing.T) { testACMEIssuance(t, ChallengeTLSALPN01) })
	})
	t.Run("http-01", func(t *testing.T) { testACMEIssuance(t, ChallengeHTTP01) })
}

func testACMEIssuance(t *testing.T, challenge string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Names of their own per subtest: certmagic keeps the challenges it
	// presents in a process-wide table, and the subtests run in parallel.
	sub := engineOf(t)
	if sub == "" {
		sub = strings.ReplaceAll(challenge, "-", "")
	}
	wwwName, apiName := "www."+sub+".bulwark.test", "api."+sub+".bulwark.test"
	c := acmeCase{domains: wwwName + ", " + apiName, challenges: challenge, storageDir: t.TempDir()}
	httpPort := 1 // pebble's unused port for the other challenge
	tlsPort := ln.Addr().(*net.TCPAddr).Port
	var files *testsvc.CA
	if challenge == ChallengeHTTP01 {
		c.httpListen = freeAddr(t)
		httpPort = acmeTestPort(t, c.httpListen)
		tlsPort = 1
		// With a certificate file as well: it answers the other names.
		files = testsvc.NewCA(t, "files")
		is, err := files.Issue(t.TempDir(), "localhost", true)
		if err != nil {
			t.Fatal(err)
		}
		c.files = fmt.Sprintf("    cert_file: %s\n    key_file: %s\n", is.CertFile, is.KeyFile)
	}
	p := startPebble(t, httpPort, tlsPort, 24*time.Hour)
	app := acmeUpstream(t)
	cfg := c.parse(t, p, app)
	tg := startConfig(t, cfg, gwOpts{listener: ln, source: func() (*Config, error) { return c.parse(t, p, app), nil }})
	addr := tg.g.Addr().String()
	roots := p.issuingRoots(t)

	www := waitCert(t, addr, wwwName, roots, nil)
	api := waitCert(t, addr, apiName, roots, nil)
	if www.DNSNames[0] != wwwName || api.DNSNames[0] != apiName {
		t.Fatalf("names: %v %v", www.DNSNames, api.DNSNames)
	}
	if n := p.orders(); n != 2 {
		t.Errorf("pebble orders = %d, want 2 (one per domain)", n)
	}
	if files != nil {
		if c, err := servedCert(addr, "localhost", files.Pool()); err != nil || c.DNSNames[0] != "localhost" {
			t.Errorf("the file's certificate for another name: %v", err)
		}
	}
	if v := tg.counter(t, "bulwark_acme_certificates_obtained_total", "kind", "obtain"); v != 2 {
		t.Errorf("obtained = %v, want 2", v)
	}
	if v := tg.counter(t, "bulwark_tls_certificate_expiry_timestamp_seconds", "certificate", "tls.acme", "subject", wwwName); v != float64(www.NotAfter.Unix()) {
		t.Errorf("expiry gauge = %v, want %d", v, www.NotAfter.Unix())
	}
	if v := tg.counter(t, "bulwark_acme_failures_total"); v != 0 {
		t.Errorf("failures = %v", v)
	}

	// HTTPS through the gateway to the upstream.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: wwwName}}}
	resp, err := hc.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello over acme" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}

	// A reload keeps the source and its certificates; changing the ACME
	// settings needs a restart.
	if err := tg.g.Reload(c.parse(t, p, app)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got, err := servedCert(addr, wwwName, roots); err != nil || got.SerialNumber.Cmp(www.SerialNumber) != 0 {
		t.Errorf("after reload: %v, serial changed: %v", err, got != nil && got.SerialNumber.Cmp(www.SerialNumber) != 0)
	}
	changed := c
	changed.domains = wwwName
	if err := tg.g.Reload(changed.parse(t, p, app)); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("reload with other domains: %v, want listen needs a restart", err)
	}

	// A second gateway on the same storage_dir serves the stored
	// certificates without ordering.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg2 := c
	if c.httpListen != "" {
		cfg2.httpListen = "127.0.0.1:0"
	}
	tg2 := startConfig(t, cfg2.parse(t, p, app), gwOpts{listener: ln2})
	if got := waitCert(t, tg2.g.Addr().String(), wwwName, roots, nil); got.SerialNumber.Cmp(www.SerialNumber) != 0 {
		t.Errorf("restart on the same storage served serial %s, want the stored %s", got.SerialNumber, www.SerialNumber)
	}
	if n := p.orders(); n != 2 {
		t.Errorf("pebble orders after a restart = %d, want still 2", n)
	}
}

func acmeTestPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(p, &n)
	return n
}

// TestACMERenewal lets certmagic's own maintenance renew the certificate
// (the test's renewal window covers the whole lifetime, checked every
// 200ms): the gateway serves the renewed certificate without a restart.
func TestACMERenewal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := startPebble(t, 1, ln.Addr().(*net.TCPAddr).Port, time.Hour)
	c := acmeCase{domains: "renew.bulwark.test", challenges: ChallengeTLSALPN01, storageDir: t.TempDir()}
	app := acmeUpstream(t)
	renewNow := acmeKnobs{renewCheck: 200 * time.Millisecond, renewRatio: 0.9999}
	tg := startConfig(t, c.parse(t, p, app), gwOpts{listener: ln, acme: renewNow})
	addr := tg.g.Addr().String()
	roots := p.issuingRoots(t)
	first := waitCert(t, addr, "renew.bulwark.test", roots, nil)
	second := waitCert(t, addr, "renew.bulwark.test", roots, first) // another serial
	if second.DNSNames[0] != "renew.bulwark.test" {
		t.Fatalf("renewed certificate for %v", second.DNSNames)
	}
	waitUntil(t, 30*time.Second, "a renewal counted", func() bool {
		return tg.counter(t, "bulwark_acme_certificates_obtained_total", "kind", "renew") >= 1
	})
	if n := p.orders(); n < 2 {
		t.Errorf("pebble orders = %d, want the first and a renewal", n)
	}
}

// TestACMEClusterOneOrder runs two replicas in the cluster profile on one
// Redis: while the test holds the domain's issuance lock both replicas
// start and wait for it; once it is released, one of them orders and the
// other finds the certificate in the shared storage. Pebble sees exactly
// one order and both replicas serve the same certificate.
func TestACMEClusterOneOrder(t *testing.T) {
	rd := testsvc.StartRedis(t)
	getenv := env(EnvProfile, "cluster", EnvRedisURL, "redis://"+rd.Addr()+"/0").get
	lnA, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lnB, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// pebble validates TLS-ALPN-01 at replica A's port, whichever replica
	// orders: the challenge is in the shared storage.
	p := startPebble(t, 1, lnA.Addr().(*net.TCPAddr).Port, 24*time.Hour)
	app := acmeUpstream(t)
	c := acmeCase{domains: "shared.bulwark.test", challenges: ChallengeTLSALPN01, getenv: getenv}

	// The test takes the lock certmagic takes before ordering.
	cfgA := c.parse(t, p, app)
	rc, err := redisconnOpen(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	holder := newRedisStorage(rc, nil)
	ctx := context.Background()
	if err := holder.Lock(ctx, "issue_cert_shared.bulwark.test"); err != nil {
		t.Fatal(err)
	}
	var locksA, locksB lockCounter
	a := startConfig(t, cfgA, gwOpts{listener: lnA, acme: acmeKnobs{storage: locksA.wrap}})
	b := startConfig(t, c.parse(t, p, app), gwOpts{listener: lnB, acme: acmeKnobs{storage: locksB.wrap}})
	waitUntil(t, 30*time.Second, "both replicas waiting for the issuance lock", func() bool {
		return locksA.waiting("issue_cert_shared.bulwark.test") && locksB.waiting("issue_cert_shared.bulwark.test")
	})
	if n := p.orders(); n != 0 {
		t.Fatalf("orders while the lock is held: %d", n)
	}
	if err := holder.Unlock(ctx, "issue_cert_shared.bulwark.test"); err != nil {
		t.Fatal(err)
	}
	roots := p.issuingRoots(t)
	ca := waitCert(t, a.g.Addr().String(), "shared.bulwark.test", roots, nil)
	cb := waitCert(t, b.g.Addr().String(), "shared.bulwark.test", roots, nil)
	if ca.SerialNumber.Cmp(cb.SerialNumber) != 0 {
		t.Errorf("replicas serve different certificates: %s and %s", ca.SerialNumber, cb.SerialNumber)
	}
	if n := p.orders(); n != 1 {
		t.Errorf("pebble orders = %d, want exactly 1 for two replicas", n)
	}
	obtained := a.counter(t, "bulwark_acme_certificates_obtained_total", "kind", "obtain") + b.counter(t, "bulwark_acme_certificates_obtained_total", "kind", "obtain")
	if obtained != 1 {
		t.Errorf("replicas obtained %v certificates, want 1", obtained)
	}
}

// lockCounter wraps a replica's storage to see which locks it waits for.
type lockCounter struct {
	mu      sync.Mutex
	pending map[string]int
}

func (l *lockCounter) wrap(s certmagic.Storage) certmagic.Storage {
	return &countingStorage{Storage: s, l: l}
}

func (l *lockCounter) waiting(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending[name] > 0
}

type countingStorage struct {
	certmagic.Storage
	l *lockCounter
}

func (s *countingStorage) Lock(ctx context.Context, name string) error {
	s.l.mu.Lock()
	if s.l.pending == nil {
		s.l.pending = map[string]int{}
	}
	s.l.pending[name]++
	s.l.mu.Unlock()
	err := s.Storage.Lock(ctx, name)
	s.l.mu.Lock()
	s.l.pending[name]--
	s.l.mu.Unlock()
	return err
}

// TestACMERedisStorage checks the cluster storage on a real Redis:
// certmagic's Storage contract (files, directories, not-exist errors)
// and its locks (exclusive across instances, kept alive while held,
// expiring when the holder is gone).
func TestACMERedisStorage(t *testing.T) {
	rd := testsvc.StartRedis(t)
	getenv := env(EnvProfile, "cluster", EnvRedisURL, "redis://"+rd.Addr()+"/0").get
	cfg, err := Parse("s.yaml", []byte("upstreams: [{name: app, targets: [\"http://127.0.0.1:1\"]}]\nroutes: [{name: r, upstream: app, match: {path: /}}]\n"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := redisconnOpen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx := context.Background()
	s := newRedisStorage(rc, nil)

	if _, err := s.Load(ctx, "certificates/ca/x.crt"); !isNotExist(err) {
		t.Fatalf("load of a missing key: %v", err)
	}
	for _, k := range []string{"certificates/ca/x/x.crt", "certificates/ca/x/x.key", "certificates/ca/y/y.crt", "acme/ca/users/a.json"} {
		if err := s.Store(ctx, k, []byte("v:"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := s.Load(ctx, "certificates/ca/x/x.key"); err != nil || string(v) != "v:certificates/ca/x/x.key" {
		t.Fatalf("load: %q %v", v, err)
	}
	if ki, err := s.Stat(ctx, "certificates/ca/x/x.crt"); err != nil || !ki.IsTerminal || ki.Size != int64(len("v:certificates/ca/x/x.crt")) || ki.Modified.IsZero() {
		t.Errorf("stat file: %+v %v", ki, err)
	}
	if ki, err := s.Stat(ctx, "certificates/ca"); err != nil || ki.IsTerminal {
		t.Errorf("stat dir: %+v %v", ki, err)
	}
	if !s.Exists(ctx, "certificates/ca/x") || !s.Exists(ctx, "acme/ca/users/a.json") || s.Exists(ctx, "certificates/c") {
		t.Error("exists")
	}
	if got, err := s.List(ctx, "certificates/ca", false); err != nil || strings.Join(got, ",") != "certificates/ca/x,certificates/ca/y" {
		t.Errorf("list: %v %v", got, err)
	}
	if got, err := s.List(ctx, "certificates", true); err != nil || len(got) != 3 {
		t.Errorf("list recursive: %v %v", got, err)
	}
	if err := s.Delete(ctx, "certificates/ca/x"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/x/x.crt") || !s.Exists(ctx, "certificates/ca/y/y.crt") {
		t.Error("delete of a directory")
	}
	if err := s.Delete(ctx, "no/such/key"); err != nil {
		t.Errorf("delete of a missing key: %v", err)
	}

	// Locks are exclusive across instances.
	other := newRedisStorage(rc, nil)
	if ok, err := s.TryLock(ctx, "issue_cert_x"); !ok || err != nil {
		t.Fatalf("trylock: %v %v", ok, err)
	}
	if ok, _ := other.TryLock(ctx, "issue_cert_x"); ok {
		t.Fatal("a second instance took a held lock")
	}
	got := make(chan error, 1)
	go func() { got <- other.Lock(ctx, "issue_cert_x") }()
	if err := s.Unlock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	if err := other.Unlock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}

	// A held lock outlives its TTL (kept alive) ...
	short := newRedisStorage(rc, nil)
	short.lockTTL = time.Second
	if err := short.Lock(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the TTL: only the keep-alive holds it
	if ok, _ := other.TryLock(ctx, "held"); ok {
		t.Fatal("a held lock expired")
	}
	// ... and expires when its holder is gone (no keep-alive, no unlock).
	short.mu.Lock()
	h := short.held["held"]
	short.mu.Unlock()
	close(h.stop)
	<-h.done
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := other.Lock(wctx, "held"); err != nil {
		t.Fatalf("a dead holder's lock did not expire: %v", err)
	}
	// Lock honours its context.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := short.Lock(cctx, "held"); err == nil {
		t.Fatal("lock with a cancelled context succeeded")
	}
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// redisconnOpen opens a client on cfg's Redis, as the gateway does.
func redisconnOpen(cfg *Config) (redis.UniversalClient, error) {
	return redisconn.Open(cfg.redisConn())
}

// TestACMEFailureCounted: a CA that cannot validate the challenge (pebble
// checks TLS-ALPN-01 on a port where nothing listens) leaves the domain
// without a certificate, counts bulwark_acme_failures_total{kind=obtain}
// and logs the domain with the CA's error.
func TestACMEFailureCounted(t *testing.T) {
	p := startPebble(t, 1, 1, time.Hour)
	c := acmeCase{domains: "fail.bulwark.test", challenges: ChallengeTLSALPN01, storageDir: t.TempDir()}
	tg := startConfig(t, c.parse(t, p, acmeUpstream(t)), gwOpts{})
	waitUntil(t, 60*time.Second, "a failure counted", func() bool {
		return tg.counter(t, "bulwark_acme_failures_total", "kind", "obtain") >= 1
	})
	if _, err := servedCert(tg.g.Addr().String(), "fail.bulwark.test", p.issuingRoots(t)); err == nil {
		t.Error("a certificate is served although none was obtained")
	}
	if logs := tg.logs.String(); !strings.Contains(logs, `"msg":"acme: certificate not obtained; retrying with backoff","domain":"fail.bulwark.test"`) {
		t.Errorf("no failure logged:\n%s", logs)
	}
	if v := tg.counter(t, "bulwark_acme_certificates_obtained_total"); v != 0 {
		t.Errorf("obtained = %v", v)
	}
}
