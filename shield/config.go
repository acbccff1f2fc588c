package shield

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
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

// Config configures a [Shield]. Zero numeric fields take the defaults
// above; a negative or too large value is an error.
type Config struct {
	// Window is the length of the per-peer and global fixed windows,
	// in [MinWindow, HardMaxWindow]. Default DefaultWindow.
	Window time.Duration
	// PerPeer is how many requests one peer may make per window,
	// in [1, HardMaxPerPeer]. Default DefaultPerPeer.
	PerPeer int
	// Global is how many requests the whole process admits per window,
	// in [1, HardMaxGlobal]. Default DefaultGlobal.
	Global int
	// MaxPeers is the hard capacity of the peer table, in
	// [1, HardMaxPeers]. Default DefaultMaxPeers.
	MaxPeers int
	// ScanLimit is how many old entries a new peer may inspect to reclaim
	// expired ones, in [1, HardMaxScanLimit]. Default DefaultScanLimit.
	ScanLimit int
	// Clock tells time; nil means the real monotonic clock.
	Clock clock.Clock
	// Hook, when set, is called synchronously for every rejection with
	// only its outcome and reason; see [Event]. A panicking hook is
	// recovered and changes nothing.
	Hook func(Event)
	// Networks, when its Share is set, bounds the part of the peer table
	// the peers of one network (an IPv4 /24, an IPv6 /48 by default) may
	// fill within one window: a new peer beyond it is refused with
	// ReasonCapacity, as if the table were full, while peers of other
	// networks still get in. The zero value is off. Only [Shield.Admit]
	// and [Shield.AdmitKeyFrom] know the address it needs.
	Networks keyed.NetworkBudget
}

// withDefaults returns c with zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.PerPeer == 0 {
		c.PerPeer = DefaultPerPeer
	}
	if c.Global == 0 {
		c.Global = DefaultGlobal
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.ScanLimit == 0 {
		c.ScanLimit = DefaultScanLimit
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// Validate reports whether c, with defaults applied to its zero fields, is
// within the hard bounds. The error wraps ErrInvalidConfig and names the
// setting and its allowed range.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Window < MinWindow || c.Window > HardMaxWindow {
		return fmt.Errorf("%w: Window is %v, must be in [%v, %v]", ErrInvalidConfig, c.Window, MinWindow, HardMaxWindow)
	}
	if err := intRange("PerPeer", c.PerPeer, HardMaxPerPeer); err != nil {
		return err
	}
	if err := intRange("Global", c.Global, HardMaxGlobal); err != nil {
		return err
	}
	if err := intRange("MaxPeers", c.MaxPeers, HardMaxPeers); err != nil {
		return err
	}
	if err := c.Networks.Validate(); err != nil {
		return fmt.Errorf("%w: Networks: %v", ErrInvalidConfig, err)
	}
	return intRange("ScanLimit", c.ScanLimit, HardMaxScanLimit)
}

func intRange(name string, v, hi int) error {
	if v < 1 || v > hi {
		return fmt.Errorf("%w: %s is %d, must be in [1, %d]", ErrInvalidConfig, name, v, hi)
	}
	return nil
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
