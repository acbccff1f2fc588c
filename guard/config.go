package guard

import (
	"errors"
	"math/bits"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/keyed"
)

// ErrInvalidConfig is the kind of every error [Config.Validate], [New]
// and [Guard.Reload] return for a bad setting: a conf.Errors (or one
// *conf.FieldError) whose paths are the settings' configuration keys under
// "guards:" (for example "h2.max_rst_per_sec") and whose messages give the
// allowed range.
var ErrInvalidConfig = errors.New("guard: invalid config")

// Config holds every limit of a [Guard]. A zero field takes its default
// (see [DefaultConfig] and the constants below) once WithDefaults is
// applied, which New and Reload do; [Config.Validate] checks the ranges.
// The yaml tags are the configuration keys under "guards:" (the
// snake_case name in each field comment is its full key, the path in
// error messages); Conns.Networks is not a key.
//
// All fields can be changed by [Guard.Reload] except the three sizes that
// fix memory at [New]: conns.addr_table_capacity, conns.ipv6_prefix and
// tls.rate_slots.
type Config struct {
	Conns    ConnConfig     `yaml:"conns"`
	Slow     SlowConfig     `yaml:"slowloris"`
	TLS      TLSConfig      `yaml:"tls"`
	H2       H2Config       `yaml:"h2"`
	Overload OverloadConfig `yaml:"overload"`
}

// ConnConfig bounds connections at accept time. Refusals close the socket
// at once (with a reset) and are reported to [Hooks.Refused].
type ConnConfig struct {
	// MaxConns (conns.max_conns) bounds the open connections of the whole
	// Guard. Default: from RLIMIT_NOFILE, see [DefaultMaxConns]. Range
	// [1, MaxMaxConns].
	MaxConns int `yaml:"max_conns"`
	// MaxPerAddr (conns.max_per_addr) bounds the open connections of one
	// client address (IPv4 /32, IPv6 /IPv6Prefix). Default 256 (a NAT
	// gateway in front of many browsers opening 6 connections each),
	// range [1, 1048576].
	MaxPerAddr int `yaml:"max_per_addr"`
	// MaxIncompletePerAddr (conns.max_incomplete_per_addr) bounds the
	// connections of one address that were accepted but have not yet
	// delivered a complete request head (TLS handshake included): the
	// Slowloris resource. Default 128 (a client opening many connections
	// at once: load tools, HTTP/2 clients dialing in parallel), range
	// [1, 1048576] and at most max_per_addr.
	MaxIncompletePerAddr int `yaml:"max_incomplete_per_addr"`
	// AcceptRatePerAddr (conns.accept_rate_per_addr) is the sustained rate
	// of new connections one address may open, per second (a GCRA with
	// AcceptBurstPerAddr). Default 300: what one carrier-grade NAT
	// address can open to one server port, 64,512 ports reused no
	// sooner than RFC 5382's 4-minute transitory timeout (about 269 per
	// second; docs/layers/guard.md), range [0.1, 1e6].
	AcceptRatePerAddr float64 `yaml:"accept_rate_per_addr"`
	// AcceptBurstPerAddr (conns.accept_burst_per_addr) is the burst of new
	// connections one address may open at once. Default 600 (two
	// seconds of the default rate), range [1, 1e6].
	AcceptBurstPerAddr int `yaml:"accept_burst_per_addr"`
	// AddrTableCapacity (conns.addr_table_capacity) is the number of
	// client addresses tracked at once. When it is full of live entries a
	// new address is refused ("table_full"): the table fails closed.
	// Default 65536, range [16, 16777216]. Not reloadable.
	AddrTableCapacity int `yaml:"addr_table_capacity"`
	// IPv6Prefix (conns.ipv6_prefix) is the prefix length that groups IPv6
	// clients into one address. Default 64 (one subscriber), range
	// [16, 128]. Not reloadable.
	IPv6Prefix int `yaml:"ipv6_prefix"`
	// Networks (client_ip.networks in the gateway), when its Share is
	// set, bounds the live entries of the address table one network of
	// peers (an IPv4 /24, an IPv6 /48 by default) may hold: at most
	// Share × AddrTableCapacity. A new address of a network at its share
	// is refused like a full table ("table_full") while other networks'
	// still get in; an entry counts until the table reclaims it. Loopback
	// peers are not counted. The zero value is off. Not reloadable.
	Networks keyed.NetworkBudget `yaml:"-"`
}

// SlowConfig bounds slow clients (Slowloris). Receive time is banked as a
// credit: a phase (the TLS handshake and first request head, a later
// request head, an HTTP/1.1 request body) starts with RecvGrace of credit;
// time spent waiting for the client's bytes is charged against it, every
// byte received earns 1/MinRecvRate seconds back, and the credit never
// exceeds RecvWindow. When the credit runs out the connection is too slow.
// Equivalently: after the grace period, over any span of T seconds of
// waiting the client must deliver at least MinRecvRate×(T−RecvWindow)
// bytes. Only time spent waiting in a read counts, so a handler that reads
// its body late is never charged for its own delay.
type SlowConfig struct {
	// HeaderTimeout (slowloris.header_timeout; the seed's
	// headers_timeout_ns) is the hard deadline for a complete request head,
	// from accept for the first one (TLS handshake included) and from its
	// first byte for later ones. Default 10 s, range [100 ms, 5 m].
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// MinRecvRate (slowloris.min_recv_rate; the seed's min_recv_rate_bps),
	// in bytes per second. Default 256, range [1, 1 GiB].
	MinRecvRate int `yaml:"min_recv_rate"`
	// RecvGrace (slowloris.recv_grace) is the credit a phase starts with.
	// Default 5 s, range [10 ms, 5 m], at most recv_window.
	RecvGrace time.Duration `yaml:"recv_grace"`
	// RecvWindow (slowloris.recv_window) caps the credit. Default 10 s,
	// range [10 ms, 10 m].
	RecvWindow time.Duration `yaml:"recv_window"`
}

// TLSConfig bounds TLS handshakes. Its limits apply to listeners created
// with a *tls.Config (see [Guard.Listener]).
type TLSConfig struct {
	// MaxHandshakesPerAddr (tls.max_handshakes_per_addr_per_sec; the
	// seed's max_handshakes_per_ip_per_sec) bounds the TLS connections one
	// address may start per second, checked at accept, before any
	// handshake work. Default 128, range [1, 1e6].
	MaxHandshakesPerAddr int `yaml:"max_handshakes_per_addr_per_sec"`
	// MaxConcurrent (tls.max_concurrent_handshakes) bounds the handshakes
	// in progress in the whole Guard; a connection that would exceed it is
	// refused at accept. Default 1024, range [1, 1048576].
	MaxConcurrent int `yaml:"max_concurrent_handshakes"`
	// Timeout (tls.handshake_timeout) bounds one handshake. Default 5 s,
	// range [100 ms, 1 m].
	Timeout time.Duration `yaml:"handshake_timeout"`
	// RateSlots (tls.rate_slots) is the size of the per-address handshake
	// counter array, a power of two. Addresses whose keyed hashes share a
	// slot share a budget. Default 65536 (512 KiB), range [64, 16777216].
	// Not reloadable.
	RateSlots int `yaml:"rate_slots"`
}

// H2Config bounds what one HTTP/2 connection may do. Rates are counted in
// fixed one-second windows. Exceeding any limit sends GOAWAY
// (ENHANCE_YOUR_CALM) and closes the connection; [Hooks.H2Abuse] gets the
// reason.
type H2Config struct {
	// MaxConcurrentStreams (h2.max_concurrent_streams) is the stream limit
	// advertised to clients (see [Guard.HTTP2Config]) and enforced: a
	// client that opens more is abusive. Default 100, range [1, 10000].
	// A reload applies to connections opened afterwards.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// MaxStreamsPerSec (h2.max_streams_per_sec): new streams per second.
	// Default 5000, range [1, 1e6].
	MaxStreamsPerSec int `yaml:"max_streams_per_sec"`
	// MaxResetsPerSec (h2.max_rst_per_sec): stream resets per second that
	// cost the server work: the client's RST_STREAM frames that cancel a
	// stream before its response headers were sent, and the RST_STREAM
	// frames the server sends because the client broke the protocol. A
	// client closing a response body it no longer wants resets a stream
	// that already has its answer and is not counted. Default 100, range
	// [1, 1e6].
	MaxResetsPerSec int `yaml:"max_rst_per_sec"`
	// PrematureResetStreams (h2.premature_reset_streams) is Envoy's
	// premature_reset_total_stream_count: once half of this many streams
	// (or, after this many streams closed, half of all closed streams)
	// were reset before their response completed, the connection is
	// abusive. Default 500, range [2, 1e6].
	PrematureResetStreams int `yaml:"premature_reset_streams"`
	// MaxContinuationFrames (h2.max_continuation_frames) bounds the
	// CONTINUATION frames of one header block. Default 32, range
	// [1, 100000].
	MaxContinuationFrames int `yaml:"max_continuation_frames"`
	// MaxHeaderBlockBytes (h2.max_header_block_bytes) bounds the encoded
	// size of one header block (HEADERS plus CONTINUATION payloads). Keep
	// it above the server's header-list limit so that oversized headers
	// get 431 rather than GOAWAY. Default 128 KiB, range [1 KiB, 16 MiB].
	MaxHeaderBlockBytes int `yaml:"max_header_block_bytes"`
	// MaxPingsPerSec (h2.max_pings_per_sec): PING frames per second.
	// Default 100, range [1, 1e6].
	MaxPingsPerSec int `yaml:"max_pings_per_sec"`
	// MaxSettingsPerSec (h2.max_settings_per_sec): SETTINGS frames (not
	// acknowledgements) per second. Default 20, range [1, 1e6].
	MaxSettingsPerSec int `yaml:"max_settings_per_sec"`
	// MaxWindowUpdatesPerSec (h2.max_window_updates_per_sec):
	// WINDOW_UPDATE frames per second beyond which a connection is
	// abusive, unless over its lifetime it received at most this many
	// plus 10 for every DATA frame the server sent (Envoy's ratio): a
	// client acknowledging a download is never cut. Default 100, range
	// [1, 1e6].
	MaxWindowUpdatesPerSec int `yaml:"max_window_updates_per_sec"`
	// MaxEmptyDataPerSec (h2.max_empty_data_per_sec): DATA frames with no
	// data and no END_STREAM, per second. Default 100, range [1, 1e6].
	MaxEmptyDataPerSec int `yaml:"max_empty_data_per_sec"`
	// MaxPriorityPerSec (h2.max_priority_per_sec): PRIORITY,
	// PRIORITY_UPDATE and unknown-type frames per second. Default 1000,
	// range [1, 1e6].
	MaxPriorityPerSec int `yaml:"max_priority_per_sec"`
}

// OverloadConfig sets the overload manager's thresholds. Each monitored
// resource has a limit; its pressure is value/limit, and the Guard's
// pressure is the highest of them. Pressure at or above StopAcceptAt
// pauses accepting, at or above DisableKeepAliveAt also ends keep-alive,
// at or above ShedAt also answers new requests 503 overloaded. A state is
// left only when the pressure falls Hysteresis below its threshold.
type OverloadConfig struct {
	// HeapBytes (overload.heap_bytes) is the heap limit (bytes in live
	// and not yet swept heap objects). 0 disables the heap monitor.
	// Range 0 or [1 MiB, 1 PiB].
	HeapBytes int64 `yaml:"heap_bytes"`
	// MaxConns (overload.max_conns) is the connection limit the pressure
	// is computed against. Default conns.max_conns, range [1, MaxMaxConns].
	MaxConns int `yaml:"max_conns"`
	// MaxInFlight (overload.max_in_flight) is the in-flight request
	// limit. Default 1024 (the host's max_in_flight), range [1, 1e6].
	MaxInFlight int `yaml:"max_in_flight"`
	// StopAcceptAt (overload.stop_accept_at), DisableKeepAliveAt
	// (overload.disable_keepalive_at) and ShedAt (overload.shed_at) are
	// pressures in [0.01, 1], in that order (non-decreasing). Defaults
	// 0.90, 0.95 and 0.98.
	StopAcceptAt       float64 `yaml:"stop_accept_at"`
	DisableKeepAliveAt float64 `yaml:"disable_keepalive_at"`
	ShedAt             float64 `yaml:"shed_at"`
	// Hysteresis (overload.hysteresis) is how far below a threshold the
	// pressure must fall to leave its state. Default 0.05, range [0, 0.5],
	// below stop_accept_at.
	Hysteresis float64 `yaml:"hysteresis"`
	// SampleInterval (overload.sample_interval) is the longest a heap
	// reading is reused, and how often a paused listener re-checks.
	// Default 100 ms, range [10 ms, 10 s].
	SampleInterval time.Duration `yaml:"sample_interval"`
}

// Defaults.
const (
	DefaultMaxPerAddr           = 256
	DefaultMaxIncompletePerAddr = 128
	DefaultAcceptRatePerAddr    = 300 // see ConnConfig.AcceptRatePerAddr
	DefaultAcceptBurstPerAddr   = 600
	DefaultAddrTableCapacity    = 65536
	DefaultIPv6Prefix           = 64

	DefaultHeaderTimeout = 10 * time.Second
	DefaultMinRecvRate   = 256
	DefaultRecvGrace     = 5 * time.Second
	DefaultRecvWindow    = 10 * time.Second

	DefaultMaxHandshakesPerAddr = 128
	DefaultMaxConcurrentHS      = 1024
	DefaultHandshakeTimeout     = 5 * time.Second
	DefaultRateSlots            = 65536

	DefaultMaxConcurrentStreams   = 100
	DefaultMaxStreamsPerSec       = 5000
	DefaultMaxResetsPerSec        = 100
	DefaultPrematureResetStreams  = 500
	DefaultMaxContinuationFrames  = 32
	DefaultMaxHeaderBlockBytes    = 128 << 10
	DefaultMaxPingsPerSec         = 100
	DefaultMaxSettingsPerSec      = 20
	DefaultMaxWindowUpdatesPerSec = 100
	DefaultMaxEmptyDataPerSec     = 100
	DefaultMaxPriorityPerSec      = 1000

	DefaultOverloadInFlight   = 1024
	DefaultStopAcceptAt       = 0.90
	DefaultDisableKeepAliveAt = 0.95
	DefaultShedAt             = 0.98
	DefaultHysteresis         = 0.05
	DefaultSampleInterval     = 100 * time.Millisecond
)

// Hard upper bounds.
const (
	// MaxMaxConns bounds conns.max_conns and overload.max_conns.
	MaxMaxConns = 1 << 22
	// windowUpdatesPerData is Envoy's allowance of WINDOW_UPDATE frames per
	// DATA frame sent.
	windowUpdatesPerData = 10
)

// DefaultConfig returns the defaults documented on each field, with
// conns.max_conns and overload.max_conns derived from RLIMIT_NOFILE.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field replaced by its default.
// Negative values are kept so that Validate reports them.
func (c Config) WithDefaults() Config {
	n := &c.Conns
	if n.MaxConns == 0 {
		n.MaxConns = DefaultMaxConns()
	}
	setInt(&n.MaxPerAddr, DefaultMaxPerAddr)
	setInt(&n.MaxIncompletePerAddr, DefaultMaxIncompletePerAddr)
	if n.AcceptRatePerAddr == 0 {
		n.AcceptRatePerAddr = DefaultAcceptRatePerAddr
	}
	setInt(&n.AcceptBurstPerAddr, DefaultAcceptBurstPerAddr)
	setInt(&n.AddrTableCapacity, DefaultAddrTableCapacity)
	setInt(&n.IPv6Prefix, DefaultIPv6Prefix)

	s := &c.Slow
	setDur(&s.HeaderTimeout, DefaultHeaderTimeout)
	setInt(&s.MinRecvRate, DefaultMinRecvRate)
	setDur(&s.RecvGrace, DefaultRecvGrace)
	setDur(&s.RecvWindow, DefaultRecvWindow)

	t := &c.TLS
	setInt(&t.MaxHandshakesPerAddr, DefaultMaxHandshakesPerAddr)
	setInt(&t.MaxConcurrent, DefaultMaxConcurrentHS)
	setDur(&t.Timeout, DefaultHandshakeTimeout)
	setInt(&t.RateSlots, DefaultRateSlots)

	h := &c.H2
	setInt(&h.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	setInt(&h.MaxStreamsPerSec, DefaultMaxStreamsPerSec)
	setInt(&h.MaxResetsPerSec, DefaultMaxResetsPerSec)
	setInt(&h.PrematureResetStreams, DefaultPrematureResetStreams)
	setInt(&h.MaxContinuationFrames, DefaultMaxContinuationFrames)
	setInt(&h.MaxHeaderBlockBytes, DefaultMaxHeaderBlockBytes)
	setInt(&h.MaxPingsPerSec, DefaultMaxPingsPerSec)
	setInt(&h.MaxSettingsPerSec, DefaultMaxSettingsPerSec)
	setInt(&h.MaxWindowUpdatesPerSec, DefaultMaxWindowUpdatesPerSec)
	setInt(&h.MaxEmptyDataPerSec, DefaultMaxEmptyDataPerSec)
	setInt(&h.MaxPriorityPerSec, DefaultMaxPriorityPerSec)

	o := &c.Overload
	if o.MaxConns == 0 {
		o.MaxConns = n.MaxConns
	}
	setInt(&o.MaxInFlight, DefaultOverloadInFlight)
	setFloat(&o.StopAcceptAt, DefaultStopAcceptAt)
	setFloat(&o.DisableKeepAliveAt, DefaultDisableKeepAliveAt)
	setFloat(&o.ShedAt, DefaultShedAt)
	setFloat(&o.Hysteresis, DefaultHysteresis)
	setDur(&o.SampleInterval, DefaultSampleInterval)
	return c
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setDur(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}

func setFloat(p *float64, d float64) {
	if *p == 0 {
		*p = d
	}
}

// Validate checks every field against its range as it is; apply
// WithDefaults first (zero is out of range for most fields). Every
// violation is reported, as a conf.Errors of kind ErrInvalidConfig naming
// the key: "guard: invalid config: <key>: <value> out of range [<min>,
// <max>]".
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrInvalidConfig}
	n := c.Conns
	f.Int("conns.max_conns", int64(n.MaxConns), 1, MaxMaxConns)
	f.Int("conns.max_per_addr", int64(n.MaxPerAddr), 1, 1<<20)
	f.Int("conns.max_incomplete_per_addr", int64(n.MaxIncompletePerAddr), 1, 1<<20)
	f.Float("conns.accept_rate_per_addr", n.AcceptRatePerAddr, 0.1, 1e6)
	f.Int("conns.accept_burst_per_addr", int64(n.AcceptBurstPerAddr), 1, 1e6)
	f.Int("conns.addr_table_capacity", int64(n.AddrTableCapacity), 16, keyed.MaxCapacity)
	f.Int("conns.ipv6_prefix", int64(n.IPv6Prefix), 16, 128)
	f.Sub("conns.networks", n.Networks.WithDefaults().Validate())
	if n.MaxIncompletePerAddr > n.MaxPerAddr && n.MaxPerAddr >= 1 {
		f.Add("conns.max_incomplete_per_addr", "%d must not exceed conns.max_per_addr %d", n.MaxIncompletePerAddr, n.MaxPerAddr)
	}
	s := c.Slow
	f.Duration("slowloris.header_timeout", s.HeaderTimeout, 100*time.Millisecond, 5*time.Minute)
	f.Int("slowloris.min_recv_rate", int64(s.MinRecvRate), 1, 1<<30)
	f.Duration("slowloris.recv_grace", s.RecvGrace, 10*time.Millisecond, 5*time.Minute)
	f.Duration("slowloris.recv_window", s.RecvWindow, 10*time.Millisecond, 10*time.Minute)
	if s.RecvGrace > s.RecvWindow && s.RecvWindow > 0 {
		f.Add("slowloris.recv_grace", "%s must not exceed slowloris.recv_window %s", conf.FormatDuration(s.RecvGrace), conf.FormatDuration(s.RecvWindow))
	}
	t := c.TLS
	f.Int("tls.max_handshakes_per_addr_per_sec", int64(t.MaxHandshakesPerAddr), 1, 1e6)
	f.Int("tls.max_concurrent_handshakes", int64(t.MaxConcurrent), 1, 1<<20)
	f.Duration("tls.handshake_timeout", t.Timeout, 100*time.Millisecond, time.Minute)
	f.Int("tls.rate_slots", int64(t.RateSlots), 64, 1<<24)
	if t.RateSlots > 0 && bits.OnesCount(uint(t.RateSlots)) != 1 {
		f.Add("tls.rate_slots", "%d must be a power of two", t.RateSlots)
	}
	h := c.H2
	f.Int("h2.max_concurrent_streams", int64(h.MaxConcurrentStreams), 1, 10000)
	f.Int("h2.max_streams_per_sec", int64(h.MaxStreamsPerSec), 1, 1e6)
	f.Int("h2.max_rst_per_sec", int64(h.MaxResetsPerSec), 1, 1e6)
	f.Int("h2.premature_reset_streams", int64(h.PrematureResetStreams), 2, 1e6)
	f.Int("h2.max_continuation_frames", int64(h.MaxContinuationFrames), 1, 100000)
	f.Int("h2.max_header_block_bytes", int64(h.MaxHeaderBlockBytes), 1<<10, 16<<20)
	f.Int("h2.max_pings_per_sec", int64(h.MaxPingsPerSec), 1, 1e6)
	f.Int("h2.max_settings_per_sec", int64(h.MaxSettingsPerSec), 1, 1e6)
	f.Int("h2.max_window_updates_per_sec", int64(h.MaxWindowUpdatesPerSec), 1, 1e6)
	f.Int("h2.max_empty_data_per_sec", int64(h.MaxEmptyDataPerSec), 1, 1e6)
	f.Int("h2.max_priority_per_sec", int64(h.MaxPriorityPerSec), 1, 1e6)
	o := c.Overload
	if o.HeapBytes != 0 {
		f.Int("overload.heap_bytes", o.HeapBytes, 1<<20, 1<<50)
	}
	f.Int("overload.max_conns", int64(o.MaxConns), 1, MaxMaxConns)
	f.Int("overload.max_in_flight", int64(o.MaxInFlight), 1, 1e6)
	f.Float("overload.stop_accept_at", o.StopAcceptAt, 0.01, 1)
	f.Float("overload.disable_keepalive_at", o.DisableKeepAliveAt, 0.01, 1)
	f.Float("overload.shed_at", o.ShedAt, 0.01, 1)
	f.Float("overload.hysteresis", o.Hysteresis, 0, 0.5)
	f.Duration("overload.sample_interval", o.SampleInterval, 10*time.Millisecond, 10*time.Second)
	if o.DisableKeepAliveAt < o.StopAcceptAt || o.ShedAt < o.DisableKeepAliveAt {
		f.Add("overload.disable_keepalive_at", "thresholds must satisfy stop_accept_at (%s) <= disable_keepalive_at (%s) <= shed_at (%s)",
			conf.FormatFloat(o.StopAcceptAt), conf.FormatFloat(o.DisableKeepAliveAt), conf.FormatFloat(o.ShedAt))
	}
	if o.Hysteresis >= o.StopAcceptAt {
		f.Add("overload.hysteresis", "%s must be below overload.stop_accept_at %s", conf.FormatFloat(o.Hysteresis), conf.FormatFloat(o.StopAcceptAt))
	}
	// Every problem at once: an operator fixes a file in one pass, not
	// one setting per start.
	return f.Err()
}

// checkReload reports the first setting that differs between old and new
// but cannot change after New.
func checkReload(old, c Config) error {
	f := conf.Check{Kind: ErrInvalidConfig}
	switch {
	case old.Conns.AddrTableCapacity != c.Conns.AddrTableCapacity:
		f.Add("conns.addr_table_capacity", "cannot change on reload (%d -> %d)", old.Conns.AddrTableCapacity, c.Conns.AddrTableCapacity)
	case old.Conns.IPv6Prefix != c.Conns.IPv6Prefix:
		f.Add("conns.ipv6_prefix", "cannot change on reload (%d -> %d)", old.Conns.IPv6Prefix, c.Conns.IPv6Prefix)
	case old.Conns.Networks != c.Conns.Networks:
		f.Add("conns.networks", "cannot change on reload")
	case old.TLS.RateSlots != c.TLS.RateSlots:
		f.Add("tls.rate_slots", "cannot change on reload (%d -> %d)", old.TLS.RateSlots, c.TLS.RateSlots)
	}
	return f.Err()
}
