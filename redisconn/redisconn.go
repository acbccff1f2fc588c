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
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
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

// ErrConfig is wrapped by every error of [Options.Validate] and [Open].
var ErrConfig = errors.New("redisconn: invalid options")

// Options describe how to reach Redis.
type Options struct {
	// URL is redis://[user[:password]@]host[:port][/db][?option=value...]
	// or rediss:// for TLS (server name and certificate verified against
	// the host). With Cluster, the URL names one node and addr=host:port
	// parameters add more seed nodes; there is no db. Query options are
	// go-redis's (redis.ParseURL, redis.ParseClusterURL); the fields below
	// override them when set. Required; at most MaxURLLen bytes.
	URL string
	// Cluster selects a Redis Cluster client.
	Cluster bool
	// DialTimeout (default 1 s), ReadTimeout and WriteTimeout (default
	// 500 ms each) bound every step, in [MinTimeout, MaxTimeout].
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// PoolSize is the number of connections per node, in [1, MaxPoolSize];
	// 0 keeps the URL's pool_size or go-redis's default (10 per CPU).
	PoolSize int
	// TLS, when non-nil, is the TLS configuration for rediss:// (e.g. a
	// private RootCAs or client certificates). Its ServerName defaults to
	// the URL's host. Setting it with a redis:// URL is an error.
	TLS *tls.Config
	// CAFile names a PEM file of the CA certificates that sign the
	// server's certificate, trusted instead of the system's roots
	// (rediss:// only; not together with TLS.RootCAs). At most
	// MaxPEMFileSize bytes.
	CAFile string
	// CertFile and KeyFile, both or neither, name a PEM client
	// certificate and its private key, for servers that require client
	// certificates (tls-auth-clients yes); rediss:// only, not together
	// with TLS.Certificates.
	CertFile, KeyFile string
}

// Validate checks o without connecting; it reads CAFile, CertFile and
// KeyFile. Errors never contain the URL.
func (o Options) Validate() error {
	_, _, err := o.parse()
	return err
}

// Open returns a client for o. It connects lazily: no connection is made
// until the first command, so a Redis that is down at start does not fail
// Open (the caller's breaker or degraded mode takes over). The caller owns
// the client and closes it.
func Open(o Options) (redis.UniversalClient, error) {
	s, c, err := o.parse()
	if err != nil {
		return nil, err
	}
	if c != nil {
		return redis.NewClusterClient(c), nil
	}
	return redis.NewClient(s), nil
}

// parse validates o into go-redis options: one of single or cluster.
func (o Options) parse() (single *redis.Options, cluster *redis.ClusterOptions, err error) {
	if o.URL == "" {
		return nil, nil, fmt.Errorf("%w: URL is required", ErrConfig)
	}
	if len(o.URL) > MaxURLLen {
		return nil, nil, fmt.Errorf("%w: URL longer than %d bytes", ErrConfig, MaxURLLen)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DialTimeout", &o.DialTimeout, DefaultDialTimeout},
		{"ReadTimeout", &o.ReadTimeout, DefaultReadTimeout},
		{"WriteTimeout", &o.WriteTimeout, DefaultWriteTimeout},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < MinTimeout || *d.v > MaxTimeout {
			return nil, nil, fmt.Errorf("%w: %s %v out of range [%v, %v]", ErrConfig, d.name, *d.v, MinTimeout, MaxTimeout)
		}
	}
	if o.PoolSize < 0 || o.PoolSize > MaxPoolSize {
		return nil, nil, fmt.Errorf("%w: PoolSize %d out of range [1, %d]", ErrConfig, o.PoolSize, MaxPoolSize)
	}
	var tlsc **tls.Config
	var pool *int
	if o.Cluster {
		cluster, err = redis.ParseClusterURL(o.URL)
		if err != nil {
			// go-redis's message can echo the URL or its parts.
			return nil, nil, fmt.Errorf("%w: not a valid Redis Cluster URL (redis:// or rediss://, addr= for more nodes)", ErrConfig)
		}
		cluster.DialTimeout, cluster.ReadTimeout, cluster.WriteTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		// No command retries (a retried script could count twice) and
		// one dial attempt per operation (degrade at once, not after
		// back-off). MOVED/ASK redirects still follow the cluster.
		cluster.MaxRetries, cluster.DialerRetries = -1, 1
		tlsc, pool = &cluster.TLSConfig, &cluster.PoolSize
	} else {
		single, err = redis.ParseURL(o.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: not a valid Redis URL (redis:// or rediss://)", ErrConfig)
		}
		single.DialTimeout, single.ReadTimeout, single.WriteTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		single.MaxRetries, single.DialerRetries = -1, 1
		tlsc, pool = &single.TLSConfig, &single.PoolSize
	}
	if o.TLS != nil {
		if *tlsc == nil {
			return nil, nil, fmt.Errorf("%w: TLS is set but the URL is not rediss://", ErrConfig)
		}
		c := o.TLS.Clone()
		if c.ServerName == "" {
			c.ServerName = (*tlsc).ServerName
		}
		*tlsc = c
	}
	if err := o.loadFiles(tlsc); err != nil {
		return nil, nil, err
	}
	if *tlsc != nil && (*tlsc).MinVersion == 0 {
		(*tlsc).MinVersion = tls.VersionTLS12
	}
	if o.PoolSize != 0 {
		*pool = o.PoolSize
	}
	if *pool < 0 || *pool > MaxPoolSize {
		return nil, nil, fmt.Errorf("%w: pool_size out of range [1, %d]", ErrConfig, MaxPoolSize)
	}
	return single, cluster, nil
}

// loadFiles applies CAFile, CertFile and KeyFile to *tlsc (which is nil
// for a redis:// URL).
func (o Options) loadFiles(tlsc **tls.Config) error {
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return nil
	}
	if *tlsc == nil {
		return fmt.Errorf("%w: CAFile, CertFile and KeyFile need a rediss:// URL", ErrConfig)
	}
	c := (*tlsc).Clone()
	if o.CAFile != "" {
		if c.RootCAs != nil {
			return fmt.Errorf("%w: set either CAFile or TLS.RootCAs, not both", ErrConfig)
		}
		b, err := readPEM("CAFile", o.CAFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("%w: CAFile holds no PEM certificate", ErrConfig)
		}
		c.RootCAs = pool
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return fmt.Errorf("%w: CertFile and KeyFile go together", ErrConfig)
	}
	if o.CertFile != "" {
		if len(c.Certificates) > 0 {
			return fmt.Errorf("%w: set either CertFile and KeyFile or TLS.Certificates, not both", ErrConfig)
		}
		cert, err := readPEM("CertFile", o.CertFile)
		if err != nil {
			return err
		}
		key, err := readPEM("KeyFile", o.KeyFile)
		if err != nil {
			return err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// crypto/tls's message names neither file contents nor key.
			return fmt.Errorf("%w: CertFile and KeyFile: %v", ErrConfig, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	*tlsc = c
	return nil
}

// readPEM reads a file of at most MaxPEMFileSize bytes; errors name the
// option, not the path's contents.
func readPEM(field, name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: cannot open: %v", ErrConfig, field, pathErr(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxPEMFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: cannot read: %v", ErrConfig, field, pathErr(err))
	}
	if len(b) > MaxPEMFileSize {
		return nil, fmt.Errorf("%w: %s larger than %d bytes", ErrConfig, field, MaxPEMFileSize)
	}
	return b, nil
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
