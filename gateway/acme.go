package gateway

// Automatic HTTPS (listen.tls.acme)
//
// With listen.tls.acme the gateway obtains and renews the certificates
// of its domains from an ACME CA itself, with
// github.com/caddyserver/certmagic. certmagic stays in this file and in
// acmestore.go (a deptest rule keeps it out of host and the library
// packages); the host only sees a tls.Config whose GetCertificate is
// the listener's certHolder (certs.go), which asks acmeSource.source
// before the certificate files.
//
// Challenges: TLS-ALPN-01 is answered on the TLS listener itself (the
// host keeps "acme-tls/1" among the ALPN protocols and closes such a
// connection after its handshake); HTTP-01 on every cleartext listener
// of the gateway (before a redirect_to_https redirects, and before the
// routes of a listener that proxies: acmeHTTP01), and on a small
// cleartext server the gateway runs on http_listen when it is set, which
// answers the challenge path and nothing else. All these sockets are
// bound by the gateway before any order, so certmagic never binds one of
// its own.
//
// Storage: certmagic.FileStorage under storage_dir in the standalone
// profile; in the cluster profile redisStorage (acmestore.go) on the
// cluster's Redis, with expiring locks, so that the replicas share one
// account, one certificate per domain and one order for it: the first
// replica to take a domain's lock orders, the others wait for the lock
// and then find the certificate in storage. Challenge tokens are shared
// through the same storage, so any replica can answer the CA.
//
// Certificates are requested in the background at Start (the gateway
// does not wait for the CA: until the first certificate is stored, a
// handshake for the domain fails) and renewed by certmagic's maintenance
// when a third of their lifetime remains (or when the CA's renewal
// information, ARI, says so). Failures are logged, counted in
// bulwark_acme_failures_total and retried by certmagic with backoff.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/bulwarkhq/bulwark/conf"
)

// ACME challenge types of listen.tls.acme.challenges.
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// DefaultACMECA is Let's Encrypt's production directory, the default of
// listen.tls.acme.ca.
const DefaultACMECA = "https://acme-v02.api.letsencrypt.org/directory"

// maxACMEDomains bounds listen.tls.acme.domains: each domain is one
// certificate, one order and one renewal job.
const maxACMEDomains = 100

// acmeTLS1 is the ALPN protocol of TLS-ALPN-01 (RFC 8737).
const acmeTLS1 = "acme-tls/1"

// ACME is listen.tls.acme: certificates obtained and renewed from an
// ACME CA (Let's Encrypt by default). Using it accepts the CA's terms of
// service.
type ACME struct {
	// Domains are the DNS names certificates are obtained for, one
	// certificate each (1 to 100 lower-case names, no wildcard: wildcards
	// need DNS-01, which the gateway does not solve). The first one is
	// served to clients that send no server name.
	Domains []string `yaml:"domains"`
	// Email is given to the CA for expiry notices; "" registers without.
	Email string `yaml:"email"`
	// CA is the ACME directory URL (https).
	CA string `yaml:"ca"`
	// CARoot is a PEM file of the certificates that sign the CA's own
	// HTTPS certificate, for a private CA or a test CA; "" trusts the
	// system's roots.
	CARoot string `yaml:"ca_root"`
	// StorageDir holds the account, certificates and keys in the
	// standalone profile (required there). In the cluster profile they
	// are in Redis and storage_dir must be empty.
	StorageDir string `yaml:"storage_dir"`
	// Challenges the gateway answers: tls-alpn-01 (on the TLS listener,
	// the default) and http-01 (on every cleartext listener of the
	// gateway, and on http_listen).
	Challenges []string `yaml:"challenges"`
	// HTTPListen is the host:port of a cleartext server of its own that
	// answers HTTP-01 (the CA connects to port 80), for a gateway that
	// has no cleartext listener on the TLS listener's host; only with
	// http-01. Its host must be listen.addr's.
	HTTPListen string `yaml:"http_listen"`
}

// DefaultACME is listen.tls.acme's defaults: Let's Encrypt, TLS-ALPN-01.
func DefaultACME() ACME {
	return ACME{CA: DefaultACMECA, Challenges: []string{ChallengeTLSALPN01}}
}

// has reports whether challenge c is enabled.
func (a *ACME) has(c string) bool { return slices.Contains(a.Challenges, c) }

// Validate checks the settings that need nothing beyond the section: the
// domains, the email, the CA URL and the challenges. The rules that
// involve the profile and listen.addr are in validateACME.
func (a ACME) Validate() error {
	var f conf.Check
	switch n := len(a.Domains); {
	case n == 0:
		f.Add("domains", "required: at least one domain")
	case n > maxACMEDomains:
		f.Add("domains", "%d domains: at most %d", n, maxACMEDomains)
	}
	seen := map[string]bool{}
	for i, d := range a.Domains {
		p := conf.Index("domains", i)
		if err := acmeDomainProblem(d); err != "" {
			f.Add(p, "%q: %s", truncate(d), err)
			continue
		}
		if seen[d] {
			f.Add(p, "%q listed twice", d)
		}
		seen[d] = true
	}
	if e := a.Email; e != "" {
		if len(e) > 254 || strings.Count(e, "@") != 1 || strings.HasPrefix(e, "@") || strings.HasSuffix(e, "@") || strings.ContainsAny(e, " \t\r\n<>") {
			f.Add("email", "%q is not an email address", truncate(e))
		}
	}
	if u, err := url.Parse(a.CA); err != nil || u.Scheme != "https" || u.Host == "" || len(a.CA) > 2048 {
		f.Add("ca", "%q: want the https:// URL of an ACME directory", truncate(conf.RedactURL(a.CA)))
	}
	if len(a.Challenges) == 0 {
		f.Add("challenges", "at least one of %s, %s", ChallengeTLSALPN01, ChallengeHTTP01)
	}
	for i, c := range a.Challenges {
		f.OneOf(conf.Index("challenges", i), c, ChallengeTLSALPN01, ChallengeHTTP01)
		if slices.Index(a.Challenges, c) < i {
			f.Add(conf.Index("challenges", i), "%q listed twice", c)
		}
	}
	// http-01 without http_listen needs a cleartext listener
	// (validateACME).
	switch {
	case !a.has(ChallengeHTTP01) && a.HTTPListen != "":
		f.Add("http_listen", "only with the http-01 challenge")
	case a.HTTPListen != "":
		if err := conf.HostPort(a.HTTPListen); err != nil {
			f.Add("http_listen", "%q: %v", a.HTTPListen, err)
		}
	}
	return f.Err()
}

// acmeDomainProblem says why d cannot be an ACME domain, or "".
func acmeDomainProblem(d string) string {
	switch {
	case strings.HasPrefix(d, "*."):
		return "wildcard names need the DNS-01 challenge, which the gateway does not solve"
	case !conf.Hostname(d) || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || strings.Contains(d, ".."):
		return "want a lower-case DNS name"
	}
	if net.ParseIP(d) != nil {
		return "an IP address, not a DNS name"
	}
	for _, l := range strings.Split(d, ".") {
		if len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return "want a lower-case DNS name (labels of 1 to 63 bytes, not starting or ending with -)"
		}
	}
	return ""
}

// acmeListener is the index of the listener with tls.acme, or -1.
func (c *Config) acmeListener() int {
	for i, l := range c.Listen {
		if l.TLS != nil && l.TLS.ACME != nil {
			return i
		}
	}
	return -1
}

// acmeSections are the listeners' tls.acme sections, by index (nil
// without): what a reload must leave unchanged.
func acmeSections(c *Config) []*ACME {
	out := make([]*ACME, len(c.Listen))
	for i, l := range c.Listen {
		if l.TLS != nil {
			out[i] = l.TLS.ACME
		}
	}
	return out
}

// acmeHTTPListener is the index of the cleartext listener on the host
// of the listener with tls.acme (the host of its addr, as written) whose
// port certmagic is told the HTTP-01 challenge is answered on when
// http_listen is empty, or -1. Every cleartext listener answers the
// challenge; this one is bound where certmagic would look, so it finds
// the port taken and binds nothing of its own.
func (c *Config) acmeHTTPListener() int {
	i := c.acmeListener()
	if i < 0 || conf.HostPort(c.Listen[i].Addr) != nil {
		return -1
	}
	h, _, _ := net.SplitHostPort(c.Listen[i].Addr)
	for j, l := range c.Listen {
		if l.TLS != nil || conf.HostPort(l.Addr) != nil {
			continue
		}
		if lh, _, _ := net.SplitHostPort(l.Addr); lh == h {
			return j
		}
	}
	return -1
}

// validateACME checks the rules of listen[].tls.acme that span
// sections: one listener at most, storage by profile, a cleartext
// listener on the listener's host or http_listen for http-01, and
// http_listen on the listener's host and apart from every listener.
func (c *Config) validateACME(f *conf.Check) {
	first := -1
	for i, l := range c.Listen {
		if l.TLS == nil || l.TLS.ACME == nil {
			continue
		}
		key := c.listenPath(i) + ".tls.acme"
		if first >= 0 {
			f.Add(key, "only one listener may have acme (%s.tls.acme has): one set of domains, one storage", c.listenPath(first))
			continue
		}
		first = i
		a := l.TLS.ACME
		switch {
		case c.Profile == Cluster && a.StorageDir != "":
			f.Add(key+".storage_dir", "not used in the cluster profile (the replicas share the certificates in Redis): remove it")
		case c.Profile != Cluster && a.StorageDir == "":
			f.Add(key+".storage_dir", "required in the standalone profile: a directory the gateway may write (the ACME account, certificates and keys)")
		}
		if a.has(ChallengeHTTP01) && a.HTTPListen == "" && conf.HostPort(l.Addr) == nil && c.acmeHTTPListener() < 0 {
			h, _, _ := net.SplitHostPort(l.Addr)
			f.Add(key+".http_listen", "required with the http-01 challenge when no cleartext listener (without tls) has %s.addr's host %q: add one on port 80 (with redirect_to_https, say), or set http_listen (typically \":80\")", c.listenPath(i), h)
		}
		if a.HTTPListen == "" || conf.HostPort(a.HTTPListen) != nil || conf.HostPort(l.Addr) != nil {
			continue
		}
		h1, _, _ := net.SplitHostPort(a.HTTPListen)
		h2, _, _ := net.SplitHostPort(l.Addr)
		switch other := c.listenerAt(a.HTTPListen); {
		case h1 != h2:
			f.Add(key+".http_listen", "host %q differs from %s.addr's %q: both challenges are answered on one host", h1, c.listenPath(i), h2)
		case other != "":
			f.Add(key+".http_listen", "same address as %s", other)
		}
	}
}

// provisionACME reads listen[].tls.acme.ca_root and resolves
// storage_dir against dir.
func (c *Config) provisionACME(dir string, at func(path, format string, args ...any)) {
	c.acmeRoots = nil
	i := c.acmeListener()
	if i < 0 {
		return
	}
	a := c.Listen[i].TLS.ACME
	key := c.listenPath(i) + ".tls.acme.ca_root"
	if a.StorageDir != "" {
		a.StorageDir = resolve(dir, a.StorageDir)
	}
	if a.CARoot == "" {
		return
	}
	data, ok := readNamed(dir, key, &a.CARoot, at)
	if !ok {
		return
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		at(key, "%q holds no PEM certificate", a.CARoot)
		return
	}
	c.acmeRoots = pool
}

// newACME creates the listen.tls.acme source, on the cluster's Redis in
// the cluster profile, and registers its metrics.
func (g *Gateway) newACME(cfg *Config) error {
	var store certmagic.Storage
	if g.opsRedis != nil {
		store = newRedisStorage(g.opsRedis, g.log)
	}
	g.acmeAt = cfg.acmeListener()
	g.acmeHTTPAt = cfg.acmeHTTPListener()
	h := g.certs[g.acmeAt]
	g.acme = newACMESource(cfg.Listen[g.acmeAt].TLS.ACME, cfg.acmeRoots, store, func() bool { return len(h.set.Load().list) > 0 }, g.log, g.deps.acme)
	h.acme = g.acme
	for _, c := range g.acme.collectors() {
		if err := g.metrics.register(c); err != nil {
			return fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	return nil
}

// startACME starts the source on the bound TLS listener (and, for
// HTTP-01 without http_listen, the bound cleartext listener on its
// host).
func (g *Gateway) startACME() error {
	if g.acme == nil {
		return nil
	}
	addrs := g.host.Addrs()
	var httpAddr net.Addr
	if j := g.acmeHTTPAt; j >= 0 && j < len(addrs) {
		httpAddr = addrs[j]
	}
	return g.acme.start(addrs[g.acmeAt], httpAddr, func(ln net.Listener) net.Listener {
		return &denyListener{Listener: ln, lists: g.lists, denied: g.metrics.connDenied}
	})
}

// stopACME stops the source's background work.
func (g *Gateway) stopACME(context.Context) error {
	if g.acme != nil {
		g.acme.stop()
	}
	return nil
}

// acmeKnobs are test settings of the ACME source (zero: certmagic's
// defaults).
type acmeKnobs struct {
	renewCheck time.Duration // how often certificates are checked for renewal
	renewRatio float64       // renew when this share of the lifetime remains
	// storage, when set, wraps the source's storage (tests count what
	// reaches it).
	storage func(certmagic.Storage) certmagic.Storage
}

// acmeSource is the certificate source of listen.tls.acme: a
// GetCertificate for the TLS listener backed by certmagic.
type acmeSource struct {
	cfg   ACME
	roots *x509.CertPool
	// files reports whether the listener has certificate files, which
	// then answer the names ACME does not manage.
	files func() bool
	log   *slog.Logger
	knobs acmeKnobs
	store certmagic.Storage

	managed map[string]bool
	magic   atomic.Pointer[certmagic.Config]

	failures *prometheus.CounterVec // by kind: obtain, renew
	obtained *prometheus.CounterVec

	// issuer answers the HTTP-01 challenges it (or, through the
	// storage, another replica) has pending; nil before start.
	issuer atomic.Pointer[certmagic.ACMEIssuer]

	mu       sync.Mutex // guards what Start and stop set
	cache    *certmagic.Cache
	cancel   context.CancelFunc
	httpSrv  *http.Server
	httpLn   net.Listener
	httpDone chan struct{}
}

// newACMESource prepares the source; start obtains the certificates.
// store is the cluster profile's shared storage, or nil for storage_dir.
func newACMESource(section *ACME, roots *x509.CertPool, store certmagic.Storage, files func() bool, log *slog.Logger, knobs acmeKnobs) *acmeSource {
	a := *section
	s := &acmeSource{
		cfg: a, roots: roots, files: files, log: log, knobs: knobs,
		managed: map[string]bool{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_acme_failures_total",
			Help: "Certificates the gateway failed to obtain (kind obtain) or renew (kind renew) from the ACME CA; certmagic retries with backoff.",
		}, []string{"kind"}),
		obtained: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_acme_certificates_obtained_total",
			Help: "Certificates obtained (kind obtain) or renewed (kind renew) from the ACME CA by this replica.",
		}, []string{"kind"}),
	}
	for _, k := range []string{"obtain", "renew"} {
		s.failures.WithLabelValues(k)
		s.obtained.WithLabelValues(k)
	}
	for _, d := range a.Domains {
		s.managed[d] = true
	}
	if store == nil {
		store = &certmagic.FileStorage{Path: a.StorageDir}
	}
	if knobs.storage != nil {
		store = knobs.storage(store)
	}
	s.store = store
	return s
}

// collectors are the source's metrics (the expiry of its certificates
// is certHolder's gauge: certs.go).
func (s *acmeSource) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.failures, s.obtained}
}

// source is the listener's certSource (certs.go), asked before the
// certificate files on every handshake: the TLS-ALPN-01 challenge and
// the managed domains are answered by certmagic; any other name, and a
// managed one before its first certificate, is left to the files (nil,
// nil) when the listener has some; without files certmagic answers
// everything (a client without SNI gets the first domain's).
func (s *acmeSource) source(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	m := s.magic.Load()
	if m == nil {
		return nil, nil
	}
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	challenge := len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmeTLS1
	switch {
	case challenge:
		return m.GetCertificate(hello)
	case !s.files():
		c, err := m.GetCertificate(hello)
		if err != nil {
			return nil, fmt.Errorf("acme: no certificate (yet) for the name asked: %w", errNoCertificate)
		}
		return c, nil
	case s.managed[name]:
		if c, err := m.GetCertificate(hello); err == nil {
			return c, nil
		}
	}
	return nil, nil
}

// expiries calls f with each managed domain and when its served
// certificate expires, for the domains that have one.
func (s *acmeSource) expiries(f func(domain string, notAfter time.Time)) {
	s.mu.Lock()
	cache := s.cache
	s.mu.Unlock()
	if cache == nil {
		return
	}
	for _, d := range s.cfg.Domains {
		var latest time.Time
		for _, c := range cache.AllMatchingCertificates(d) {
			if c.Leaf != nil && c.Leaf.NotAfter.After(latest) {
				latest = c.Leaf.NotAfter
			}
		}
		if !latest.IsZero() {
			f(d, latest)
		}
	}
}

// start binds the HTTP-01 server (with http-01 and http_listen), then
// starts certmagic and asks for the certificates in the background.
// tlsAddr is the bound TLS listener; httpAddr, when not nil, the bound
// cleartext listener whose port certmagic is given for HTTP-01 without
// http_listen (every cleartext listener answers it: acmeHTTP01). A
// failure here (the HTTP-01 address taken) stops the gateway's start.
func (s *acmeSource) start(tlsAddr, httpAddr net.Addr, wrap func(net.Listener) net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	listenHost := ""
	tlsPort := 443
	if ta, ok := tlsAddr.(*net.TCPAddr); ok {
		tlsPort = ta.Port
		if !ta.IP.IsUnspecified() {
			listenHost = ta.IP.String()
		}
	}
	httpPort := 80
	if ta, ok := httpAddr.(*net.TCPAddr); ok {
		httpPort = ta.Port
	}
	if s.cfg.has(ChallengeHTTP01) && s.cfg.HTTPListen != "" {
		ln, err := net.Listen("tcp", s.cfg.HTTPListen)
		if err != nil {
			return fmt.Errorf("gateway: listen.tls.acme.http_listen: %w", err)
		}
		if ta, ok := ln.Addr().(*net.TCPAddr); ok {
			httpPort = ta.Port
		}
		s.httpLn = ln
	}

	zl := zap.New(&slogCore{log: s.log})
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return s.magic.Load(), nil },
		RenewCheckInterval: s.knobs.renewCheck,
		Logger:             zl,
	})
	magic := certmagic.New(s.cache, certmagic.Config{
		Storage:            s.store,
		Logger:             zl,
		OnEvent:            s.onEvent,
		DefaultServerName:  s.cfg.Domains[0],
		RenewalWindowRatio: s.knobs.renewRatio,
	})
	issuer := certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                      s.cfg.CA,
		Email:                   s.cfg.Email,
		Agreed:                  true,
		TrustedRoots:            s.roots,
		DisableHTTPChallenge:    !s.cfg.has(ChallengeHTTP01),
		DisableTLSALPNChallenge: !s.cfg.has(ChallengeTLSALPN01),
		// Both addresses are bound by the gateway: certmagic finds them
		// taken and binds nothing of its own.
		ListenHost:     listenHost,
		AltHTTPPort:    httpPort,
		AltTLSALPNPort: tlsPort,
		Logger:         zl,
	})
	magic.Issuers = []certmagic.Issuer{issuer}
	s.magic.Store(magic)
	if s.cfg.has(ChallengeHTTP01) {
		s.issuer.Store(issuer)
	}

	if s.httpLn != nil {
		s.httpSrv = &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if s.wantsHTTP01(r.Method, r.RequestURI, r.Host) && s.answerHTTP01(w, r, time.Time{}) {
					return
				}
				http.NotFound(w, r)
			}),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       30 * time.Second,
			MaxHeaderBytes:    8 << 10,
			ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
		}
		s.httpDone = make(chan struct{})
		srv, ln, done := s.httpSrv, s.httpLn, s.httpDone
		if wrap != nil {
			ln = wrap(ln)
		}
		go func() {
			defer close(done)
			_ = srv.Serve(ln)
		}()
	}
	if err := magic.ManageAsync(ctx, s.cfg.Domains); err != nil {
		return fmt.Errorf("gateway: listen.tls.acme: %w", err)
	}
	s.log.Info("acme: managing certificates", "domains", len(s.cfg.Domains), "challenges", strings.Join(s.cfg.Challenges, ","))
	return nil
}

// stop ends the background work: pending orders are cancelled, the
// maintenance stops, the HTTP-01 server closes.
func (s *acmeSource) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
	if s.cache != nil {
		s.cache.Stop()
	}
	if s.httpSrv != nil {
		_ = s.httpSrv.Close()
		<-s.httpDone
		s.httpSrv = nil
	} else if s.httpLn != nil {
		_ = s.httpLn.Close()
	}
}

// onEvent logs and counts certmagic's outcomes. Only the identifier (a
// configured domain) and the error are logged.
func (s *acmeSource) onEvent(_ context.Context, event string, data map[string]any) error {
	kind := "obtain"
	if r, _ := data["renewal"].(bool); r {
		kind = "renew"
	}
	id, _ := data["identifier"].(string)
	switch event {
	case "cert_obtained":
		s.obtained.WithLabelValues(kind).Inc()
		s.log.Info("acme: certificate stored", "domain", id, "kind", kind)
	case "cert_failed":
		s.failures.WithLabelValues(kind).Inc()
		msg := ""
		if err, ok := data["error"].(error); ok {
			msg = err.Error()
		}
		s.log.Warn("acme: certificate not obtained; retrying with backoff", "domain", id, "kind", kind, "error", msg)
	}
	return nil
}

// slogCore hands certmagic's zap log entries (Info and above) to the
// gateway's logger, without the fields that name a client (certmagic
// logs the remote address of handshakes).
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(slices.Clip(c.fields), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		if !strings.Contains(k, "remote") && k != "client_hello" && k != "client_ip" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		attrs = append(attrs, k, enc.Fields[k])
	}
	level := slog.LevelInfo
	switch {
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case e.Level == zapcore.WarnLevel:
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, "acme: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
