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
package redisconn

import (
	"crypto/tls"
	"errors"
	"fmt"
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
}

// Validate checks o without connecting. Errors never contain the URL.
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
