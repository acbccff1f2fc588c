package shield

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/keyed"
)

// Defaults (seed 000). They suit one replica of a small control plane;
// measure behind the real ingress before relying on them.
const (
	// DefaultWindow is the length of both fixed windows.
	DefaultWindow = 60 * time.Second
	// DefaultPerPeer is the per-peer budget per window.
	DefaultPerPeer = 300
	// DefaultGlobal is the process-wide budget per window.
	DefaultGlobal = 1200
	// DefaultMaxPeers is the peer table's hard capacity.
	DefaultMaxPeers = 4096
	// DefaultScanLimit is how many old entries one new peer may inspect
	// for lazy reclaim.
	DefaultScanLimit = 64
)

// Hard bounds, checked by [Config.Validate] and by New. They keep memory
// (MaxPeers × about 100 bytes), per-request work (ScanLimit) and the
// counters within safe limits whatever the configuration says.
const (
	MinWindow        = time.Second
	HardMaxWindow    = time.Hour
	HardMaxPerPeer   = 1_000_000
	HardMaxGlobal    = 100_000_000
	HardMaxPeers     = 1 << 20
	HardMaxScanLimit = 1024
)

// Environment variables read by [ConfigFromEnv].
const (
	EnvWindow   = "BULWARK_SHIELD_WINDOW"    // Go duration, e.g. "60s"
	EnvPerPeer  = "BULWARK_SHIELD_PER_PEER"  // integer
	EnvGlobal   = "BULWARK_SHIELD_GLOBAL"    // integer
	EnvMaxPeers = "BULWARK_SHIELD_MAX_PEERS" // integer
)

// ErrInvalidConfig is wrapped by every configuration error; the message
// names the setting and its allowed range.
var ErrInvalidConfig = errors.New("shield: invalid config")

// Config configures a [Shield]. Its yaml tags are the keys of the
// gateway's shield section. Zero numeric fields take the defaults above
// once [Config.WithDefaults] is applied, which New does; [Config.Validate]
// checks the values as they are.
type Config struct {
	// Window (window) is the length of the per-peer and global fixed
	// windows. Default 60s (DefaultWindow), range [1s, 1h] (MinWindow,
	// HardMaxWindow).
	Window time.Duration `yaml:"window"`
	// PerPeer (per_peer) is how many requests one peer may make per
	// window. Default 300 (DefaultPerPeer), range [1, 1000000]
	// (HardMaxPerPeer).
	PerPeer int `yaml:"per_peer"`
	// Global (global) is how many requests the whole process admits per
	// window. Default 1200 (DefaultGlobal), range [1, 100000000]
	// (HardMaxGlobal).
	Global int `yaml:"global"`
	// MaxPeers (max_peers) is the hard capacity of the peer table, about
	// 100 bytes a peer, allocated up front. Default 4096
	// (DefaultMaxPeers), range [1, 1048576] (HardMaxPeers).
	MaxPeers int `yaml:"max_peers"`
	// ScanLimit is how many old entries a new peer may inspect to reclaim
	// expired ones, in [1, HardMaxScanLimit]. Default DefaultScanLimit.
	// Not a configuration key.
	ScanLimit int `yaml:"-"`
	// Clock tells time; nil means the real monotonic clock.
	Clock clock.Clock `yaml:"-"`
	// Hook, when set, is called synchronously for every rejection with
	// only its outcome and reason; see [Event]. A panicking hook is
	// recovered and changes nothing.
	Hook func(Event) `yaml:"-"`
	// Networks, when its Share is set, bounds the part of the peer table
	// the peers of one network (an IPv4 /24, an IPv6 /48 by default) may
	// fill within one window: a new peer beyond it is refused with
	// ReasonCapacity, as if the table were full, while peers of other
	// networks still get in. The zero value is off. Only [Shield.Admit]
	// and [Shield.AdmitKeyFrom] know the address it needs. Not a key of
	// the shield section: the gateway sets it from client_ip.networks.
	Networks keyed.NetworkBudget `yaml:"-"`
}

// DefaultConfig returns the default settings: DefaultWindow,
// DefaultPerPeer, DefaultGlobal, DefaultMaxPeers and DefaultScanLimit,
// no network budget, the real clock and no hook.
func DefaultConfig() Config {
	return Config{
		Window:    DefaultWindow,
		PerPeer:   DefaultPerPeer,
		Global:    DefaultGlobal,
		MaxPeers:  DefaultMaxPeers,
		ScanLimit: DefaultScanLimit,
	}
}

// WithDefaults returns c with its zero numeric fields set to the
// defaults. Negative values are kept so that Validate reports them.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.PerPeer == 0 {
		c.PerPeer = d.PerPeer
	}
	if c.Global == 0 {
		c.Global = d.Global
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = d.MaxPeers
	}
	if c.ScanLimit == 0 {
		c.ScanLimit = d.ScanLimit
	}
	return c
}

// Validate reports every setting of c outside its hard bounds, as it is
// (apply WithDefaults first for zeros to mean the defaults). The error
// is a conf.Errors naming each key and its range; its errors wrap
// ErrInvalidConfig, those of Networks keyed.ErrInvalidConfig.
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrInvalidConfig}
	f.Duration("window", c.Window, MinWindow, HardMaxWindow)
	f.Int("per_peer", int64(c.PerPeer), 1, HardMaxPerPeer)
	f.Int("global", int64(c.Global), 1, HardMaxGlobal)
	f.Int("max_peers", int64(c.MaxPeers), 1, HardMaxPeers)
	f.Int("scan_limit", int64(c.ScanLimit), 1, HardMaxScanLimit)
	f.Sub("networks", c.Networks.WithDefaults().Validate())
	return f.Err()
}

// ConfigFromEnv returns base with the settings overridden by the
// environment variables EnvWindow, EnvPerPeer, EnvGlobal and EnvMaxPeers,
// as read by getenv (nil means os.Getenv). An unset or empty variable
// leaves the base value alone. A value that does not parse or is out of
// range — including 0 — is an error naming the variable and the allowed
// range, meant to stop start-up.
func ConfigFromEnv(base Config, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(EnvWindow)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinWindow || d > HardMaxWindow {
			return base, fmt.Errorf("%w: %s=%s: must be a Go duration in [%v, %v]", ErrInvalidConfig, EnvWindow, quote(v), MinWindow, HardMaxWindow)
		}
		base.Window = d
	}
	for _, e := range []struct {
		name string
		dst  *int
		hi   int
	}{
		{EnvPerPeer, &base.PerPeer, HardMaxPerPeer},
		{EnvGlobal, &base.Global, HardMaxGlobal},
		{EnvMaxPeers, &base.MaxPeers, HardMaxPeers},
	} {
		v := strings.TrimSpace(getenv(e.name))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > e.hi {
			return base, fmt.Errorf("%w: %s=%s: must be an integer in [1, %d]", ErrInvalidConfig, e.name, quote(v), e.hi)
		}
		*e.dst = n
	}
	return base, nil
}

// quote quotes an operator-supplied value for an error, cut to a length
// that keeps the message readable.
func quote(v string) string {
	const maxEcho = 32
	if len(v) > maxEcho {
		return strconv.Quote(v[:maxEcho]) + "..."
	}
	return strconv.Quote(v)
}
