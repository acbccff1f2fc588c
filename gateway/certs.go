package gateway

// Certificates (listen.tls)
//
// A TLS listener's certificates are read from their PEM files by
// Provision (so `bulwark check` reads and checks them exactly as serve
// does) into the TLS section, and served by a certHolder: the listener's
// tls.Config has no Certificates, only GetCertificate, which reads the
// holder's current certSet (an atomic pointer) on every handshake. The
// host runs every handshake with that one tls.Config on every engine
// (host/tls.go), so a swapped set holds for the next handshake wherever
// it lands; connections already set up keep their certificate.
//
// Every listen.tls.watch_interval (1m by default) the gateway reads the
// files of the configuration in use again (checkCertificates) and, when
// a certificate changed, swaps the set by the same rules as a reload: a
// bad pair or a new expired certificate keeps the set in use, is logged
// and counted once (until the files change again), so that a renewal
// that sends no signal (a Kubernetes secret, a tool writing the files)
// is served within the interval, and one caught half-written is picked
// up at the next check.
//
// A reload (SIGHUP, POST /v1/reload: Gateway.ReloadFromSource) loads the
// configuration again, which reads the certificate files again whether
// or not the configuration file changed, and Gateway.Reload swaps the
// set in once everything else in the reload succeeded. A pair that cannot
// be read, does not parse or does not match fails that load (the problem
// names the key and both files): the reload is refused, the previous
// configuration and certificates keep serving, and the problem is the
// reload's answer and log line, and counts in
// bulwark_tls_certificate_reload_failures_total. A certificate not served
// yet that is expired, or not valid yet, by the gateway's clock is refused
// the same way; one already served is kept (refusing it would refuse every
// other change), and `bulwark check` and serve warn about it
// (Config.CertificateWarnings).
//
// Choosing a certificate for a handshake: the name the client asks for
// (SNI, lower-cased, without a trailing dot) is looked up among the
// certificates' DNS names (the subject CN of one that has none): an exact
// name first, then a wildcard one label deep ("*.example.com" answers
// "a.example.com", not "example.com" nor "a.b.example.com"), else the
// default, the first certificate listed (a client that sends no name, or
// an IP address, gets it too). Among several certificates for one name
// (an ECDSA and an RSA one) the first the client supports wins. A
// certSource set on the holder (ACME) is asked before any of that.

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
)

// CertFiles names a certificate and its private key, PEM files.
type CertFiles struct {
	// CertFile is the certificate chain, leaf first; relative to the
	// configuration file.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the leaf's private key; relative to the configuration
	// file.
	KeyFile string `yaml:"key_file"`
}

// maxCertificates bounds listen.tls.certificates.
const maxCertificates = 256

// maxSubjectBytes bounds a certificate's subject as a metric label and
// in logs (X.509 bounds a CN to 64 characters).
const maxSubjectBytes = 64

// listen.tls.watch_interval: its default and range (0 is off).
const (
	defaultWatchInterval = time.Minute
	minWatchInterval     = time.Second
	maxWatchInterval     = 24 * time.Hour
)

// certEntry is one loaded certificate.
type certEntry struct {
	cert *tls.Certificate // Leaf set
	// label is its key below the listener: "tls" (cert_file and
	// key_file) or "tls.certificates[i]"; the metrics' certificate label.
	label string
	// subject is the leaf's subject CN, else its first DNS name.
	subject string
	// names are the DNS names it answers, lower-case ("*.example.com"
	// for a wildcard): its DNS SANs, or its subject CN when it has none.
	names []string
	// sum identifies the leaf, to tell a changed certificate.
	sum [sha256.Size]byte
}

// newCertEntry describes the loaded pair c.
func newCertEntry(label string, c *tls.Certificate) (*certEntry, error) {
	if len(c.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	if c.Leaf == nil {
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return nil, err
		}
		c.Leaf = leaf
	}
	e := &certEntry{cert: c, label: label, sum: sha256.Sum256(c.Certificate[0])}
	for _, n := range c.Leaf.DNSNames {
		e.names = append(e.names, strings.ToLower(strings.TrimSuffix(n, ".")))
	}
	cn := c.Leaf.Subject.CommonName
	if len(e.names) == 0 && cn != "" && !strings.ContainsAny(cn, " /:") {
		e.names = append(e.names, strings.ToLower(strings.TrimSuffix(cn, ".")))
	}
	e.subject = cn
	if e.subject == "" && len(e.names) > 0 {
		e.subject = e.names[0]
	}
	if len(e.subject) > maxSubjectBytes { // (a label value)
		e.subject = strings.ToValidUTF8(e.subject[:maxSubjectBytes], "")
	}
	return e, nil
}

// validity says why e cannot serve at now, or "".
func (e *certEntry) validity(now time.Time) string {
	switch l := e.cert.Leaf; {
	case now.After(l.NotAfter):
		return "expired at " + l.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(l.NotBefore):
		return "not valid before " + l.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}

// loadCertificates reads the certificates the TLS section t of the
// listener at key ("listen"; t is at key.tls) names, in order: cert_file
// and key_file first, then each of certificates. It resolves the file
// names against dir and reports every problem through at, naming the key
// and the files; it returns nil after a problem.
func (t *TLS) loadCertificates(dir, key string, at func(path, format string, args ...any)) []*certEntry {
	var list []*certEntry
	ok := true
	add := func(label string, certFile, keyFile *string) {
		path := key + "." + label
		c := loadKeyPair(dir, path, certFile, keyFile, at)
		if c == nil {
			ok = false
			return
		}
		e, err := newCertEntry(label, c)
		if err != nil {
			at(path, "bad certificate: %v", err)
			ok = false
			return
		}
		list = append(list, e)
	}
	if t.CertFile != "" || t.KeyFile != "" {
		add("tls", &t.CertFile, &t.KeyFile)
	}
	for i := range t.Certificates {
		c := &t.Certificates[i]
		add(fmt.Sprintf("tls.certificates[%d]", i), &c.CertFile, &c.KeyFile)
	}
	if !ok {
		return nil
	}
	return list
}

// certSet is the certificates one listener serves at a time, indexed by
// name.
type certSet struct {
	list  []*certEntry            // in configuration order; list[0] is the default
	exact map[string][]*certEntry // by DNS name
	wild  map[string][]*certEntry // "*.example.com" under "example.com"
}

func newCertSet(list []*certEntry) *certSet {
	s := &certSet{list: list, exact: map[string][]*certEntry{}, wild: map[string][]*certEntry{}}
	for _, e := range list {
		for _, n := range e.names {
			if parent, ok := strings.CutPrefix(n, "*."); ok {
				s.wild[parent] = append(s.wild[parent], e)
			} else {
				s.exact[n] = append(s.exact[n], e)
			}
		}
	}
	return s
}

// choose returns the certificate for hello: by exact name, by wildcard,
// else the default.
func (s *certSet) choose(hello *tls.ClientHelloInfo) *tls.Certificate {
	if name := strings.ToLower(strings.TrimSuffix(hello.ServerName, ".")); name != "" {
		if es := s.exact[name]; len(es) > 0 {
			return pick(es, hello)
		}
		if _, parent, ok := strings.Cut(name, "."); ok {
			if es := s.wild[parent]; len(es) > 0 {
				return pick(es, hello)
			}
		}
	}
	return s.list[0].cert
}

// pick returns the first of es the client supports (its key type,
// signature schemes and versions), else the first.
func pick(es []*certEntry, hello *tls.ClientHelloInfo) *tls.Certificate {
	if len(es) > 1 {
		for _, e := range es {
			if hello.SupportsCertificate(e.cert) == nil {
				return e.cert
			}
		}
	}
	return es[0].cert
}

// served reports whether s serves the certificate e (the same leaf).
func (s *certSet) served(e *certEntry) bool {
	for _, o := range s.list {
		if o.sum == e.sum {
			return true
		}
	}
	return false
}

// certSource is a source of certificates beside the files (ACME): asked
// first on every handshake, it returns nil, nil when it has none for
// hello, and the files answer.
type certSource func(hello *tls.ClientHelloInfo) (*tls.Certificate, error)

// errNoCertificate answers a handshake when a listener has no
// certificate for it (no file and the source had none).
var errNoCertificate = errors.New("gateway: no certificate for this listener")

// certHolder serves one TLS listener's certificates: its tls.Config's
// GetCertificate reads the current set on every handshake, and a reload
// swaps the set.
type certHolder struct {
	// listener names the listener in metrics and logs (Listen.Label).
	listener string
	set      atomic.Pointer[certSet]
	source   atomic.Pointer[certSource]
	// acme is the listener's ACME source (acme.go), whose certificates
	// the expiry gauge shows too; nil without listen.tls.acme. Set
	// before Start.
	acme *acmeSource
	// failures counts the reloads refused because of a certificate.
	failures atomic.Uint64
	// refusedFiles is what the last check of the files refused ("":
	// nothing), so that a bad pair left in place is logged and counted
	// once. Guarded by Gateway.mu.
	refusedFiles string
}

func newCertHolder(listener string, list []*certEntry) *certHolder {
	h := &certHolder{listener: listener}
	h.set.Store(newCertSet(list))
	return h
}

// tlsConfig is the listener's TLS configuration: each handshake's
// certificate is chosen by h.
func (h *certHolder) tlsConfig() *tls.Config {
	return &tls.Config{GetCertificate: h.getCertificate, MinVersion: tls.VersionTLS12}
}

// getCertificate is the listener's tls.Config.GetCertificate.
func (h *certHolder) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if src := h.source.Load(); src != nil {
		if c, err := (*src)(hello); c != nil || err != nil {
			return c, err
		}
	}
	s := h.set.Load()
	if len(s.list) == 0 {
		return nil, errNoCertificate
	}
	return s.choose(hello), nil
}

// setSource makes src answer every handshake before the files (nil: the
// files alone).
func (h *certHolder) setSource(src certSource) {
	if src == nil {
		h.source.Store(nil)
		return
	}
	h.source.Store(&src)
}

// refused returns the problems that keep list, the certificates of the
// listener at key in cfg, from replacing the served set: a certificate
// not served yet that is expired or not valid yet at now.
func (h *certHolder) refused(cfg *Config, key string, list []*certEntry, now time.Time) []yamlconf.Problem {
	var ps []yamlconf.Problem
	cur := h.set.Load()
	for _, e := range list {
		if cur.served(e) {
			continue
		}
		if why := e.validity(now); why != "" {
			path := key + "." + e.label
			ps = append(ps, yamlconf.Problem{File: cfg.File, Line: cfg.Line(path), Path: path,
				Msg: fmt.Sprintf("certificate %q %s; the certificates in use keep serving", e.subject, why)})
		}
	}
	return ps
}

// changed reports whether list differs from the set in use.
func (h *certHolder) changed(list []*certEntry) bool {
	cur := h.set.Load().list
	if len(cur) != len(list) {
		return true
	}
	for i, e := range list {
		if cur[i].sum != e.sum || cur[i].label != e.label {
			return true
		}
	}
	return false
}

// swap serves list from the next handshake on and returns the entries
// that were not served before.
func (h *certHolder) swap(list []*certEntry) []*certEntry {
	old := h.set.Swap(newCertSet(list))
	var fresh []*certEntry
	for _, e := range list {
		if !old.served(e) {
			fresh = append(fresh, e)
		}
	}
	return fresh
}

// startCertWatch starts reading each TLS listener's certificate files
// again every tls.watch_interval (none with 0).
func (g *Gateway) startCertWatch() {
	g.mu.Lock()
	cfg := g.cfg // (watch_interval never changes on reload)
	g.mu.Unlock()
	for i, h := range g.certs {
		if h == nil || cfg.Listen[i].TLS.WatchInterval <= 0 {
			continue
		}
		if g.certStop == nil {
			g.certStop = make(chan struct{})
		}
		go g.watchCertificates(i, cfg.Listen[i].TLS.WatchInterval, g.certStop)
	}
}

func (g *Gateway) stopCertWatch() {
	if g.certStop != nil {
		close(g.certStop)
		g.certStop = nil
	}
}

// watchCertificates checks listener i's certificate files every
// interval until stop is closed.
func (g *Gateway) watchCertificates(i int, interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			g.checkCertificates(i)
		}
	}
}

// checkCertificates reads the certificate files of the TLS listeners at
// the given indexes of listen (every one when none is given) in the
// configuration in use again, and serves a listener's if a certificate
// changed and they pass a reload's checks; otherwise the set in use
// keeps serving, and a problem is logged and counted once until the
// files change again. It reports whether it swapped a set.
func (g *Gateway) checkCertificates(listeners ...int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(listeners) == 0 {
		for i := range g.certs {
			listeners = append(listeners, i)
		}
	}
	swapped := false
	for _, i := range listeners {
		if !g.closed && i < len(g.certs) && g.certs[i] != nil && g.checkCertificatesLocked(i) {
			swapped = true
		}
	}
	return swapped
}

// checkCertificatesLocked is checkCertificates for listener i, with g.mu
// held.
func (g *Gateway) checkCertificatesLocked(i int) bool {
	cfg, h := g.cfg, g.certs[i]
	key := cfg.listenPath(i)
	var ps []yamlconf.Problem
	at := func(path, format string, args ...any) {
		ps = append(ps, yamlconf.Problem{File: cfg.File, Line: cfg.Line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	t := *cfg.Listen[i].TLS // a copy: loading resolves the (already absolute) names in place
	t.Certificates = slices.Clone(t.Certificates)
	list := t.loadCertificates("", key, at)
	if list != nil && !h.changed(list) {
		h.refusedFiles = ""
		return false
	}
	if list != nil {
		ps = append(ps, h.refused(cfg, key, list, g.clock.Now())...)
	}
	if len(ps) > 0 {
		var b strings.Builder
		for _, p := range ps {
			b.WriteString(p.String() + "\n")
		}
		if b.String() != h.refusedFiles {
			h.refusedFiles = b.String()
			h.failures.Add(1)
			for _, p := range ps {
				g.log.Warn("tls certificate files not loaded; the certificates in use keep serving", "listener", h.listener, "problem", p.String())
			}
		}
		return false
	}
	h.refusedFiles = ""
	g.logCertificates("tls certificate loaded", h.listener, h.swap(list))
	return true
}

// certListener returns the index of the listener whose certificates a
// configuration problem is about (a key at or under listen.tls or
// listen[i].tls).
func certListener(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "listen")
	if !ok {
		return 0, false
	}
	i := 0
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return 0, false
		}
		n, err := strconv.Atoi(rest[1:end])
		if err != nil || n < 0 {
			return 0, false
		}
		i, rest = n, rest[end+1:]
	}
	return i, rest == ".tls" || strings.HasPrefix(rest, ".tls.")
}

// countCertFailure counts a reload refused because of a certificate:
// err names one, for each listener it names.
func (g *Gateway) countCertFailure(err error) {
	var ce *yamlconf.Error
	if !errors.As(err, &ce) {
		return
	}
	counted := map[int]bool{}
	for _, p := range ce.Problems {
		if i, ok := certListener(p.Path); ok && i < len(g.certs) && g.certs[i] != nil && !counted[i] {
			counted[i] = true
			g.certs[i].failures.Add(1)
		}
	}
}

// logCertificates logs the certificates of list, naming each by its key
// and subject, with its expiry.
func (g *Gateway) logCertificates(msg string, listener string, list []*certEntry) {
	for _, e := range list {
		g.log.Info(msg, "listener", listener, "certificate", e.label, "subject", e.subject,
			"not_after", e.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// CertificateWarnings returns a warning for each certificate of the
// listeners that is expired, or not valid yet, at now: `bulwark check`
// prints them and serve logs them at start and on reload, which serve
// such a certificate anyway (only a reload that would bring in a new one
// refuses it). Only a provisioned configuration has certificates to
// check.
func (c *Config) CertificateWarnings(now time.Time) []yamlconf.Problem {
	var ws []yamlconf.Problem
	for i, l := range c.Listen {
		if l.TLS == nil {
			continue
		}
		for _, e := range l.TLS.loaded {
			if why := e.validity(now); why != "" {
				path := c.listenPath(i) + "." + e.label
				ws = append(ws, yamlconf.Problem{File: c.File, Line: c.Line(path), Path: path,
					Msg: fmt.Sprintf("certificate %q %s: clients will refuse it", e.subject, why)})
			}
		}
	}
	return ws
}

// certCollector exports the listeners' certificates at scrape time.
type certCollector struct {
	holders  []*certHolder
	expiry   *prometheus.Desc
	failures *prometheus.Desc
}

func newCertCollector(hs ...*certHolder) *certCollector {
	return &certCollector{
		holders: hs,
		expiry: prometheus.NewDesc("bulwark_tls_certificate_expiry_timestamp_seconds",
			"When each certificate a TLS listener serves expires (its notAfter), as a Unix timestamp; certificate is its configuration key, subject its CN.",
			[]string{"listener", "certificate", "subject"}, nil),
		failures: prometheus.NewDesc("bulwark_tls_certificate_reload_failures_total",
			"Reloads refused because of a TLS listener's certificate (unreadable, not matching its key, expired); the previous certificates kept serving.",
			[]string{"listener"}, nil),
	}
}

func (c *certCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.expiry
	ch <- c.failures
}

func (c *certCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.holders {
		if h == nil {
			continue
		}
		for _, e := range h.set.Load().list {
			ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(e.cert.Leaf.NotAfter.Unix()), h.listener, e.label, e.subject)
		}
		if h.acme != nil {
			h.acme.expiries(func(domain string, notAfter time.Time) {
				ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(notAfter.Unix()), h.listener, "tls.acme", domain)
			})
		}
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(h.failures.Load()), h.listener)
	}
}
