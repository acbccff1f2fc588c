package host

import (
	"errors"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
)

// Limits are the host's hard bounds. Every field has a production default
// (DefaultLimits) and an allowed range checked by Validate; a zero field
// means "use the default" once WithDefaults is applied, which New does.
// The yaml tags are the gateway's configuration keys (limits.<key>);
// MaxResponseBytes is not one.
type Limits struct {
	// MaxURLBytes (max_url_bytes) bounds the request target (path and
	// query, as sent). Longer → 414 url_too_long. Default 8 KiB, range
	// [256, 64 KiB].
	MaxURLBytes int `yaml:"max_url_bytes"`
	// MaxHeaderBytes (max_header_bytes) bounds the request line plus
	// header block; it is http.Server.MaxHeaderBytes (HTTP/2: the
	// advertised SETTINGS_MAX_HEADER_LIST_SIZE). Over it, net/http itself
	// answers 431 before the host runs. Default 64 KiB, range [4 KiB, 1 MiB].
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxHeaders (max_headers) bounds the number of header field lines
	// (repeated fields count once per line; Host is not counted). More →
	// 431 too_many_headers. Default 100, range [1, 1000].
	MaxHeaders int `yaml:"max_headers"`
	// MaxRequestsPerConn (max_requests_per_conn) bounds the requests served
	// on one connection. The last allowed response carries
	// "Connection: close" (HTTP/1.1: the socket is closed after it;
	// HTTP/2: Go's server sends GOAWAY and closes once idle, so streams the
	// client opened concurrently before seeing GOAWAY are still served:
	// at most MaxRequestsPerConn plus the concurrent-stream limit).
	// Probes count too. Default 1000, range [1, 1000000].
	MaxRequestsPerConn int `yaml:"max_requests_per_conn"`
	// MaxInFlight (max_in_flight) bounds admitted handlers running at once
	// (including work kept alive by Hold). Above it → 503 overloaded.
	// Default 1024, range [1, 100000].
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxBodyBytes (max_body_bytes) bounds the request body of every
	// admitted request. A larger Content-Length → 413 payload_too_large
	// before admission; a body that grows past it while streaming makes
	// the handler's Read fail with *http.MaxBytesError. Default 1 MiB,
	// range [1, 64 GiB]. (The gateway raises it for proxied uploads.)
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxResponseBytes (max_response_bytes) is validated (default 1 MiB,
	// range [1, 64 MiB]) but not enforced by the host, which streams
	// answers: a handler that buffers its answer bounds it itself (the
	// control API does).
	MaxResponseBytes int64 `yaml:"-"`
	// RequestTimeout (request_timeout) cancels an admitted handler's
	// context (cause ErrRequestTimeout). Also sets the server's read
	// timeout to ReadHeaderTimeout+RequestTimeout and its write timeout to
	// RequestTimeout+5s, so a slow client cannot hold a handler longer.
	// Default 30 s, range [1 ms, 1 h].
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// DrainTimeout (drain_timeout) bounds each of the two main shutdown
	// phases, waiting for handlers and running OnStop hooks; closing the
	// listener and connections then takes at most min(DrainTimeout, 2 s).
	// Default 25 s (fits Kubernetes' 30 s grace
	// period), range [1 ms, 10 m].
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ReadHeaderTimeout (read_header_timeout) is http.Server's
	// ReadHeaderTimeout. Default 10 s, range [1 ms, 5 m].
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout (idle_timeout) closes keep-alive connections idle this
	// long. Default 60 s, range [1 ms, 1 h].
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ShutdownDelay (shutdown_delay) is how long a graceful stop keeps
	// serving, out of rotation (Host.Retire), before it drains: a load
	// balancer (a Kubernetes Service) sees /readyz fail and stops sending
	// new connections while nothing is refused yet. The host only
	// validates it; its owner waits. Default 0 (drain at once), range
	// [0, 5 m].
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
}

// Defaults and hard ranges of Limits.
const (
	DefaultMaxURLBytes        = 8 << 10
	DefaultMaxHeaderBytes     = 64 << 10
	DefaultMaxHeaders         = 100
	DefaultMaxRequestsPerConn = 1000
	DefaultMaxInFlight        = 1024
	DefaultMaxBodyBytes       = 1 << 20
	DefaultMaxResponseBytes   = 1 << 20
	DefaultRequestTimeout     = 30 * time.Second
	DefaultDrainTimeout       = 25 * time.Second
	DefaultReadHeaderTimeout  = 10 * time.Second
	DefaultIdleTimeout        = 60 * time.Second

	MaxMaxURLBytes        = 64 << 10
	MaxMaxHeaderBytes     = 1 << 20
	MaxMaxHeaders         = 1000
	MaxMaxRequestsPerConn = 1_000_000
	MaxMaxInFlight        = 100_000
	MaxMaxBodyBytes       = 64 << 30
	MaxMaxResponseBytes   = 64 << 20
	MaxRequestTimeout     = time.Hour
	MaxDrainTimeout       = 10 * time.Minute
	MaxReadHeaderTimeout  = 5 * time.Minute
	MaxIdleTimeout        = time.Hour
	MaxShutdownDelay      = 5 * time.Minute
)

// writeGrace is added to RequestTimeout for the server's write timeout so a
// timeout answer (504) can still be written after the handler's context
// expired.
const writeGrace = 5 * time.Second

// DefaultLimits returns the production defaults documented on each field.
func DefaultLimits() Limits {
	return Limits{
		MaxURLBytes:        DefaultMaxURLBytes,
		MaxHeaderBytes:     DefaultMaxHeaderBytes,
		MaxHeaders:         DefaultMaxHeaders,
		MaxRequestsPerConn: DefaultMaxRequestsPerConn,
		MaxInFlight:        DefaultMaxInFlight,
		MaxBodyBytes:       DefaultMaxBodyBytes,
		MaxResponseBytes:   DefaultMaxResponseBytes,
		RequestTimeout:     DefaultRequestTimeout,
		DrainTimeout:       DefaultDrainTimeout,
		ReadHeaderTimeout:  DefaultReadHeaderTimeout,
		IdleTimeout:        DefaultIdleTimeout,
	}
}

// WithDefaults returns l with every zero field replaced by its default.
// Negative values are kept so that Validate reports them.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxURLBytes == 0 {
		l.MaxURLBytes = d.MaxURLBytes
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxHeaders == 0 {
		l.MaxHeaders = d.MaxHeaders
	}
	if l.MaxRequestsPerConn == 0 {
		l.MaxRequestsPerConn = d.MaxRequestsPerConn
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = d.MaxInFlight
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxResponseBytes == 0 {
		l.MaxResponseBytes = d.MaxResponseBytes
	}
	if l.RequestTimeout == 0 {
		l.RequestTimeout = d.RequestTimeout
	}
	if l.DrainTimeout == 0 {
		l.DrainTimeout = d.DrainTimeout
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return l
}

// ErrInvalidLimits is the kind of every error of Limits.Validate.
var ErrInvalidLimits = errors.New("host: invalid limits")

// Validate checks every field against its allowed range (zero is out of
// range: apply WithDefaults first). The error is a conf.Errors naming
// every field out of range by its key ("max_headers: 0 out of range [1,
// 1000]"), each of kind ErrInvalidLimits.
func (l Limits) Validate() error {
	f := conf.Check{Kind: ErrInvalidLimits}
	f.Int("max_url_bytes", int64(l.MaxURLBytes), 256, MaxMaxURLBytes)
	f.Int("max_header_bytes", int64(l.MaxHeaderBytes), 4<<10, MaxMaxHeaderBytes)
	f.Int("max_headers", int64(l.MaxHeaders), 1, MaxMaxHeaders)
	f.Int("max_requests_per_conn", int64(l.MaxRequestsPerConn), 1, MaxMaxRequestsPerConn)
	f.Int("max_in_flight", int64(l.MaxInFlight), 1, MaxMaxInFlight)
	f.Int("max_body_bytes", l.MaxBodyBytes, 1, MaxMaxBodyBytes)
	f.Int("max_response_bytes", l.MaxResponseBytes, 1, MaxMaxResponseBytes)
	f.Duration("request_timeout", l.RequestTimeout, time.Millisecond, MaxRequestTimeout)
	f.Duration("drain_timeout", l.DrainTimeout, time.Millisecond, MaxDrainTimeout)
	f.Duration("read_header_timeout", l.ReadHeaderTimeout, time.Millisecond, MaxReadHeaderTimeout)
	f.Duration("idle_timeout", l.IdleTimeout, time.Millisecond, MaxIdleTimeout)
	f.Duration("shutdown_delay", l.ShutdownDelay, 0, MaxShutdownDelay)
	return f.Err()
}
