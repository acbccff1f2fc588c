// Package redisconn opens go-redis clients the way Bulwark's Redis
// adapters need them, from the URLs users already have, and routes
// go-redis's own logging through log/slog without addresses.
//
// One [Options] value describes a single server (redis://, or rediss://
// for TLS) or a Redis Cluster (Cluster set; the URL names one seed node,
// more through addr= query parameters, as redis.ParseClusterURL reads
// them). [Open] returns a redis.UniversalClient either way; package
// github.com/bulwarkhq/bulwark/global/redisglobal and
// github.com/bulwarkhq/bulwark/login/redisstore accept it.
//
// Clients are tuned to fail fast: bounded dial, read and write timeouts, no
// command retries (a retried script could count twice) and a single dial
// attempt per operation, so a Redis that is down or hanging degrades the
// caller at once instead of stalling it. No error of this package contains
// the URL, an address or a password.
//
// TLS: a rediss:// URL verifies the server's certificate against the
// system's roots, or against the CAs of Options.CAFile (a private CA, the
// usual case for Redis); Options.CertFile and KeyFile add a client
// certificate for servers that require one. [Check] pings a client's
// server(s) and names the problem without an address, telling an
// untrusted certificate ([ErrUntrusted]) apart.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/conf"
)

// Bounds and defaults of [Options].
const (
	DefaultDialTimeout  = time.Second
	DefaultReadTimeout  = 500 * time.Millisecond
	DefaultWriteTimeout = 500 * time.Millisecond
	MinTimeout          = time.Millisecond
	MaxTimeout          = 10 * time.Second
	MaxPoolSize         = 1000
	MaxURLLen           = 4096
	// MaxPEMFileSize bounds CAFile, CertFile and KeyFile.
	MaxPEMFileSize = 1 << 20
)

// ErrConfig is the kind of every error of [Options.Validate] and [Open].
var ErrConfig = errors.New("redisconn: invalid options")

// Options describe how to reach Redis. The yaml tags are the gateway's
// configuration keys (redis.<key>); URL (a secret, read from the
// environment there) and TLS are not keys.
type Options struct {
	// URL is redis://[user[:password]@]host[:port][/db][?option=value...]
	// or rediss:// for TLS (server name and certificate verified against
	// the host). With Cluster, the URL names one node and addr=host:port
	// parameters add more seed nodes; there is no db. Query options are
	// go-redis's (redis.ParseURL, redis.ParseClusterURL); the fields below
	// override them when set. Required by Open; at most MaxURLLen bytes.
	URL string `yaml:"-"`
	// Cluster (cluster) selects a Redis Cluster client (the URL names one
	// node; addr=host:port parameters add seeds).
	Cluster bool `yaml:"cluster"`
	// DialTimeout (dial_timeout, default 1 s), ReadTimeout (read_timeout)
	// and WriteTimeout (write_timeout, default 500 ms each) bound every
	// step, in [MinTimeout, MaxTimeout].
	DialTimeout  time.Duration `yaml:"dial_timeout"`
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// PoolSize (pool_size) is the number of connections per node, in
	// [0, MaxPoolSize]; 0 keeps the URL's pool_size or go-redis's default
	// (10 per CPU).
	PoolSize int `yaml:"pool_size"`
	// TLS, when non-nil, is the TLS configuration for rediss:// (e.g. a
	// private RootCAs or client certificates). Its ServerName defaults to
	// the URL's host. Setting it with a redis:// URL is an error.
	TLS *tls.Config `yaml:"-"`
	// CAFile (ca_file) names a PEM file of the CA certificates that sign
	// the server's certificate (a private CA, the usual case for Redis),
	// trusted instead of the system's roots (rediss:// only; not together
	// with TLS.RootCAs). At most MaxPEMFileSize bytes.
	CAFile string `yaml:"ca_file"`
	// CertFile (cert_file) and KeyFile (key_file), both or neither, name
	// a PEM client certificate and its private key, for servers that
	// require client certificates (tls-auth-clients yes); rediss:// only,
	// not together with TLS.Certificates.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// WithDefaults returns o with a zero DialTimeout, ReadTimeout or
// WriteTimeout replaced by its default. Negative values are kept so that
// Validate reports them.
func (o Options) WithDefaults() Options {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.DialTimeout, DefaultDialTimeout}, {&o.ReadTimeout, DefaultReadTimeout}, {&o.WriteTimeout, DefaultWriteTimeout}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return o
}

// Validate checks every option as it is, without connecting (a zero
// timeout is out of range: apply WithDefaults first), and reads CAFile,
// CertFile and KeyFile. The URL is checked when set (Open requires it):
// its syntax, its query options and that it is rediss:// when TLS or a
// file is set. The error is a conf.Errors naming each problem by its key
// ("dial_timeout: 0s out of range [1ms, 10s]", "url: not a valid Redis
// URL ..."), each of kind ErrConfig. No error contains the URL.
func (o Options) Validate() error {
	f := conf.Check{Kind: ErrConfig}
	o.build(&f)
	return f.Err()
}

// Open returns a client for o (with its defaults). It connects lazily: no
// connection is made until the first command, so a Redis that is down at
// start does not fail Open (the caller's breaker or degraded mode takes
// over). The caller owns the client and closes it.
func Open(o Options) (redis.UniversalClient, error) {
	o = o.WithDefaults()
	f := conf.Check{Kind: ErrConfig}
	if o.URL == "" {
		f.Add("url", "required")
		return nil, f.Err()
	}
	s, c := o.build(&f)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if c != nil {
		return redis.NewClusterClient(c), nil
	}
	return redis.NewClient(s), nil
}

// build checks o into f and, when o has a URL and f nothing, returns its
// go-redis options: one of single or cluster.
func (o Options) build(f *conf.Check) (single *redis.Options, cluster *redis.ClusterOptions) {
	f.Duration("dial_timeout", o.DialTimeout, MinTimeout, MaxTimeout)
	f.Duration("read_timeout", o.ReadTimeout, MinTimeout, MaxTimeout)
	f.Duration("write_timeout", o.WriteTimeout, MinTimeout, MaxTimeout)
	f.Int("pool_size", int64(o.PoolSize), 0, MaxPoolSize)
	roots, certs := o.readFiles(f)
	if o.URL == "" {
		return nil, nil
	}
	tlsc, pool := o.parseURL(f, &single, &cluster)
	if tlsc == nil {
		return nil, nil
	}
	if *tlsc == nil && (o.TLS != nil || o.CAFile != "" || o.CertFile != "" || o.KeyFile != "") {
		if o.TLS != nil {
			f.Add("url", "TLS is set but the URL is not rediss://")
		} else {
			f.Add("url", "ca_file, cert_file and key_file need a rediss:// URL")
		}
		return nil, nil
	}
	if *tlsc != nil {
		c := (*tlsc).Clone()
		if o.TLS != nil {
			c = o.TLS.Clone()
			if c.ServerName == "" {
				c.ServerName = (*tlsc).ServerName
			}
		}
		if roots != nil {
			if c.RootCAs != nil {
				f.Add("ca_file", "set either ca_file or TLS.RootCAs, not both")
			}
			c.RootCAs = roots
		}
		if certs != nil {
			if len(c.Certificates) > 0 {
				f.Add("cert_file", "set either cert_file and key_file or TLS.Certificates, not both")
			}
			c.Certificates = certs
		}
		if c.MinVersion == 0 {
			c.MinVersion = tls.VersionTLS12
		}
		*tlsc = c
	}
	if o.PoolSize != 0 {
		*pool = o.PoolSize
	}
	if *pool < 0 || *pool > MaxPoolSize {
		f.Add("url", "pool_size out of range [1, %d]", MaxPoolSize)
	}
	if !f.OK() {
		return nil, nil
	}
	return single, cluster
}

// parseURL parses o.URL into *single or *cluster with o's timeouts and
// no retries, returning where its TLS configuration and pool size are,
// or nil after recording why it does not parse.
func (o Options) parseURL(f *conf.Check, single **redis.Options, cluster **redis.ClusterOptions) (tlsc **tls.Config, pool *int) {
	if len(o.URL) > MaxURLLen {
		f.Add("url", "longer than %d bytes", MaxURLLen)
		return nil, nil
	}
	if o.Cluster {
		c, err := redis.ParseClusterURL(o.URL)
		if err != nil {
			// go-redis's message can echo the URL or its parts.
			f.Add("url", "not a valid Redis Cluster URL (redis:// or rediss://, addr= for more nodes)")
			return nil, nil
		}
		c.DialTimeout, c.ReadTimeout, c.WriteTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		// No command retries (a retried script could count twice) and
		// one dial attempt per operation (degrade at once, not after
		// back-off). MOVED/ASK redirects still follow the cluster.
		c.MaxRetries, c.DialerRetries = -1, 1
		*cluster = c
		return &c.TLSConfig, &c.PoolSize
	}
	s, err := redis.ParseURL(o.URL)
	if err != nil {
		f.Add("url", "not a valid Redis URL (redis:// or rediss://)")
		return nil, nil
	}
	s.DialTimeout, s.ReadTimeout, s.WriteTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
	s.MaxRetries, s.DialerRetries = -1, 1
	*single = s
	return &s.TLSConfig, &s.PoolSize
}

// readFiles reads CAFile, CertFile and KeyFile into a root pool and a
// client certificate (nil when not set), recording their problems in f.
func (o Options) readFiles(f *conf.Check) (roots *x509.CertPool, certs []tls.Certificate) {
	if o.CAFile != "" {
		if b, ok := readPEM(f, "ca_file", o.CAFile); ok {
			roots = x509.NewCertPool()
			if !roots.AppendCertsFromPEM(b) {
				f.Add("ca_file", "holds no PEM certificate")
				roots = nil
			}
		}
	}
	switch {
	case o.CertFile != "" && o.KeyFile == "":
		f.Add("cert_file", "needs key_file")
	case o.CertFile == "" && o.KeyFile != "":
		f.Add("key_file", "needs cert_file")
	case o.CertFile != "":
		cert, ok1 := readPEM(f, "cert_file", o.CertFile)
		key, ok2 := readPEM(f, "key_file", o.KeyFile)
		if !ok1 || !ok2 {
			break
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// crypto/tls's message names neither file contents nor key.
			f.Add("cert_file", "with key_file: %v", err)
			break
		}
		certs = []tls.Certificate{pair}
	}
	return roots, certs
}

// readPEM reads a file of at most MaxPEMFileSize bytes; errors name the
// key, not the path or the contents.
func readPEM(f *conf.Check, key, name string) ([]byte, bool) {
	file, err := os.Open(name)
	if err != nil {
		f.Add(key, "cannot open: %v", pathErr(err))
		return nil, false
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, MaxPEMFileSize+1))
	if err != nil {
		f.Add(key, "cannot read: %v", pathErr(err))
		return nil, false
	}
	if len(b) > MaxPEMFileSize {
		f.Add(key, "larger than %d bytes", MaxPEMFileSize)
		return nil, false
	}
	return b, true
}

// pathErr strips the path from a file error.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ErrUntrusted is wrapped by [Check]'s error when the server presented a
// TLS certificate the client does not trust (unknown authority, wrong
// host name, expired): configure CAFile (or TLS.RootCAs) with the CA that
// signed it.
var ErrUntrusted = errors.New("redisconn: the server's TLS certificate is not trusted")

// CheckError is a failed [Check]: its text is redacted (no address, host
// name or URL, see [Redact]); Unwrap returns the original error.
type CheckError struct {
	msg string
	err error
}

func (e *CheckError) Error() string { return e.msg }

// Unwrap returns the underlying errors: the client's, and ErrUntrusted
// when the certificate was not trusted.
func (e *CheckError) Unwrap() []error {
	if untrusted(e.err) != "" {
		return []error{ErrUntrusted, e.err}
	}
	return []error{e.err}
}

// Check pings the server, or every master of a Redis Cluster, and returns
// nil or a [*CheckError] whose text names the problem without an address,
// a host name or the URL (so it is fit for logs and readiness details);
// errors.Is(err, ErrUntrusted) reports a server certificate the client
// does not trust. Use it for start-up and readiness checks.
func Check(ctx context.Context, c redis.UniversalClient) error {
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
	} else {
		err = c.Ping(ctx).Err()
	}
	if err == nil {
		return nil
	}
	if why := untrusted(err); why != "" {
		return &CheckError{msg: ErrUntrusted.Error() + ": " + why, err: err}
	}
	return &CheckError{msg: "redisconn: check failed: " + Redact(err.Error()), err: err}
}

// untrusted explains a certificate verification failure in fixed words
// (crypto/x509's own messages name host names), or returns "".
func untrusted(err error) string {
	var (
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
		ve *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &ua):
		return "signed by an unknown authority (configure CAFile with the CA that signed it)"
	case errors.As(err, &hn):
		return "not valid for the server's name (the URL's host, or TLS.ServerName)"
	case errors.As(err, &ci):
		if ci.Reason == x509.Expired {
			return "expired or not yet valid"
		}
		return "not valid for this use (" + Redact(ci.Error()) + ")"
	case errors.As(err, &ve):
		return "verification failed"
	}
	return ""
}
