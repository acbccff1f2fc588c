package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/ipset"
)

// Errors.
var (
	// ErrUnsupported means XDP is not available on this platform (it
	// needs Linux). Start returns it only when Config.Required is set.
	ErrUnsupported = errors.New("xdp: not supported on this platform (XDP needs Linux)")
	// ErrNotAttached is returned by Start when Config.Required is set and
	// the program could not be attached in the requested mode.
	ErrNotAttached = errors.New("xdp: program not attached")
	// ErrInvalidConfig wraps every configuration and update error.
	ErrInvalidConfig = errors.New("xdp: invalid configuration")
)

// Mode selects how the program is attached to the interface.
type Mode string

// Attach modes. Auto tries native (driver) mode, then generic mode, then
// runs without XDP; native and generic try only that mode.
const (
	ModeAuto    Mode = "auto"
	ModeNative  Mode = "native"
	ModeGeneric Mode = "generic"
	ModeOff     Mode = "off"
)

// Flags is the runtime flag word the program reads for every packet.
type Flags uint32

// Flags. The first nine bits follow a stable numbering, so {"flags": 3}
// means SYN scoring plus the SYN proxy.
const (
	// FlagSYNFlood scores SYNs per source (IPv6 per /64) with exponential
	// decay and drops them above Config.SYNLimit (SYNLimitDefense in
	// defense mode).
	FlagSYNFlood Flags = 1 << iota
	// FlagSYNProxy answers SYNs with syncookie SYN-ACKs built in XDP while
	// in defense mode, and passes only ACKs that carry a valid cookie or
	// belong to a known flow. The host needs net.ipv4.tcp_syncookies=2.
	FlagSYNProxy
	// FlagRSTValidate drops RSTs outside the receiving socket's window
	// and RSTs for no connection.
	FlagRSTValidate
	// FlagACKFlood scores ACKs of no known flow per source in defense
	// mode and drops them above Config.ACKLimit.
	FlagACKFlood
	// FlagDefense is defense mode. The manager sets and clears it (see
	// [ConfigUpdate.Defense] to force it); Update ignores it in Flags.
	FlagDefense
	// FlagUDPStats counts UDP packets and bytes per destination port.
	FlagUDPStats
	// FlagUDPRateLimit enforces Config.UDPLimits.
	FlagUDPRateLimit
	// FlagCIDRLookup consults the CIDR tries (exact addresses are always
	// looked up).
	FlagCIDRLookup
	// FlagDropFragments drops IPv4 and IPv6 fragments, whose later parts
	// carry no L4 header to check.
	FlagDropFragments
	// FlagSYNProxyAlways runs the SYN proxy outside defense mode too.
	FlagSYNProxyAlways

	flagEnd
)

// DefaultFlags is the flag word used when Config.Flags is zero.
const DefaultFlags = FlagSYNFlood | FlagSYNProxy | FlagRSTValidate | FlagACKFlood |
	FlagUDPStats | FlagUDPRateLimit | FlagCIDRLookup | FlagDropFragments

// AllFlags is every defined flag.
const AllFlags = flagEnd - 1

var flagNames = []string{
	"syn_flood", "syn_proxy", "rst_validate", "ack_flood", "defense",
	"udp_stats", "udp_rate_limit", "cidr_lookup", "drop_fragments", "syn_proxy_always",
}

// Names returns the names of the set flags, in bit order.
func (f Flags) Names() []string {
	out := []string{}
	for i, n := range flagNames {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

func (f Flags) String() string { return strings.Join(f.Names(), ",") }

// ParseFlags parses a comma-separated list of flag names ("syn_flood,
// syn_proxy") or a decimal or 0x-prefixed flag word. An empty string is
// no flags.
func ParseFlags(s string) (Flags, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if len(s) > 256 {
		return 0, fmt.Errorf("%w: flags: at most 256 bytes", ErrInvalidConfig)
	}
	if s[0] >= '0' && s[0] <= '9' {
		n, err := strconv.ParseUint(s, 0, 32)
		if err != nil || Flags(n)&^AllFlags != 0 {
			return 0, fmt.Errorf("%w: flags: %q is not a flag word within 0x%x", ErrInvalidConfig, s, uint32(AllFlags))
		}
		return Flags(n), nil
	}
	var f Flags
	for _, name := range strings.Split(s, ",") {
		g, err := FlagByName(strings.TrimSpace(name))
		if err != nil {
			return 0, err
		}
		f |= g
	}
	return f, nil
}

// FlagByName returns the flag called name.
func FlagByName(name string) (Flags, error) {
	if i := slices.Index(flagNames, name); i >= 0 {
		return 1 << i, nil
	}
	return 0, fmt.Errorf("%w: unknown flag %q (known: %s)", ErrInvalidConfig, name, strings.Join(flagNames, ", "))
}

// UDPLimit bounds the UDP traffic to one destination port per second,
// across CPUs. A zero field is no limit.
type UDPLimit struct {
	PPS uint64 // packets per second
	BPS uint64 // bytes (IP length) per second
}

// Defaults and bounds of Config. Each range is inclusive.
const (
	DefaultK            = 3.0
	MinK, MaxK          = 0.5, 20.0
	DefaultMinRate      = 1000.0 // SYN/s below which defense never starts
	MaxMinRate          = 1e9
	DefaultWarmup       = 50 // samples (5 s at 100 ms)
	MaxWarmup           = 36000
	DefaultWindow       = 3000 // samples the baseline remembers (5 min)
	MinWindow           = 10
	MaxWindow           = 1_000_000
	DefaultEnterSamples = 3
	MaxEnterSamples     = 100
	DefaultExitHold     = 10 * time.Second
	MinExitHold         = 100 * time.Millisecond
	MaxExitHold         = time.Hour
	DefaultInterval     = 100 * time.Millisecond
	MinInterval         = 10 * time.Millisecond
	MaxInterval         = 10 * time.Second

	DefaultSYNLimit        = 200 // score units: about that many SYNs in a burst
	DefaultSYNLimitDefense = 50
	DefaultACKLimit        = 200
	DefaultRSTLimit        = 50
	MaxScoreLimit          = 1_000_000
	DefaultHalfLife        = time.Second
	MinHalfLife            = time.Millisecond
	MaxHalfLife            = time.Minute
	DefaultKernelSYN       = time.Second
	MinKernelSYN           = 10 * time.Millisecond
	MaxKernelSYN           = time.Minute
	DefaultEventBudget     = 100 // events per CPU per second
	MaxEventBudget         = 1_000_000
	DefaultSYNACKWindow    = 65535
	MinSYNACKWindow        = 1024

	DefaultAllowEntries     = ipset.DefaultAllowCapacity // 65,536
	DefaultDenyEntries      = ipset.DefaultDenyCapacity  // 1,000,000
	DefaultScoreEntries     = 500_000
	DefaultConntrackEntries = 2_000_000
	MinMapEntries           = 16
	MaxListEntries          = ipset.MaxCapacity // 10,000,000
	MaxScoreEntries         = 10_000_000
	MaxConntrackEntries     = 50_000_000
	DefaultRingBytes        = 4 << 20
	MinRingBytes            = 64 << 10
	MaxRingBytes            = 1 << 30

	// DefaultPinRoot is where maps are pinned, one directory per
	// interface, when /sys/fs/bpf is a BPF filesystem.
	DefaultPinRoot = "/sys/fs/bpf/bulwark"
	// DefaultStaticReason marks entries the configuration installs; see
	// Config.StaticReason.
	DefaultStaticReason = "config"
)

// Config configures a Manager. The zero value of every field means its
// default; New rejects values outside the documented ranges with an
// error naming the field.
type Config struct {
	// Interface is the network interface to attach to. Required unless
	// Mode is off.
	Interface string
	// Mode is how to attach: auto (default), native, generic or off.
	Mode Mode
	// Required makes Start fail with ErrNotAttached (or ErrUnsupported)
	// when the program cannot be attached, instead of serving without XDP.
	Required bool

	// Flags is the initial flag word; zero means DefaultFlags.
	Flags Flags
	// K is the number of standard deviations above the mean SYN rate at
	// which defense mode starts, in [MinK, MaxK]; default 3.
	K float64
	// MinRate is a floor (SYN/s) under the defense threshold, so an idle
	// server's tiny variance does not trip it; default 1000.
	MinRate float64
	// Warmup is how many samples the baseline needs before defense mode
	// can start; default 50 (5 s at the default interval).
	Warmup int
	// Window caps the sample count of the running mean and variance, so
	// the baseline follows slow drift (an exponentially weighted
	// Welford update once full); default 3000 (5 min).
	Window int
	// EnterSamples is how many consecutive samples above the threshold
	// start defense mode; default 3.
	EnterSamples int
	// ExitHold is how long the rate must stay below the exit threshold
	// (mean + K·σ/2, at least MinRate/2) before defense mode ends;
	// default 10 s.
	ExitHold time.Duration
	// Interval is how often statistics are read; default 100 ms.
	Interval time.Duration

	// SYNLimit and SYNLimitDefense are the per-source SYN score limits
	// (about that many SYNs in a burst; a steady rate r scores
	// r·HalfLife/ln 2), outside and in defense mode; defaults 200 and 50,
	// range [1, MaxScoreLimit]. Scores are kept per CPU.
	SYNLimit, SYNLimitDefense uint32
	// ACKLimit is the per-source limit of ACKs of no known flow in
	// defense mode; default 200.
	ACKLimit uint32
	// RSTLimit is the per-source score of invalid RSTs that raises an
	// event; default 50. Invalid RSTs are always dropped.
	RSTLimit uint32
	// HalfLife is the scores' half-life; default 1 s, range [1 ms, 1 min].
	HalfLife time.Duration
	// KernelSYNInterval: while proxying, one SYN per destination port
	// this often goes to the kernel, whose own cookie answer keeps the
	// listener accepting cookie ACKs; default 1 s, range [10 ms, 1 min]
	// (the kernel's window is 2 min).
	KernelSYNInterval time.Duration
	// EventBudget bounds ring-buffer events per CPU per second; default
	// 100, range [0, MaxEventBudget] (0 sends none).
	EventBudget uint32
	// SYNACKWindow is the window of cookie SYN-ACKs; default 65535.
	SYNACKWindow uint16
	// UDPLimits bounds UDP traffic per destination port.
	UDPLimits map[uint16]UDPLimit

	// AllowEntries and DenyEntries size the exact-address and CIDR maps
	// of each list; they default to the lists' capacities (else 65,536
	// and 1,000,000) and must not be below them.
	AllowEntries, DenyEntries int
	// ScoreEntries sizes the per-source score LRU; default 500,000.
	ScoreEntries int
	// ConntrackEntries sizes the verified-flow LRU; default 2,000,000.
	ConntrackEntries int
	// RingBytes sizes the event ring buffer, a power of two in
	// [64 KiB, 1 GiB]; default 4 MiB.
	RingBytes int

	// PinPath is the directory (on a BPF filesystem) where the list maps
	// are pinned so that a restart keeps them. Empty means
	// DefaultPinRoot/<Interface> when /sys/fs/bpf is a BPF filesystem, and
	// no pinning otherwise. NoPin disables pinning.
	PinPath string
	NoPin   bool
	// StaticReason is the reason the configuration's own entries carry.
	// On a restart, pinned entries missing from the lists are restored
	// into them (reason "restored", remaining TTL) unless they carried
	// this reason: the configuration reinstalls its own entries and a
	// dropped one must not come back. Default "config".
	StaticReason string

	// Allow and Deny are mirrored into the kernel maps. Either may be nil.
	// Their OnChange must call Manager.OnChange (see its doc).
	Allow, Deny *ipset.Set
	// Clock is the lists' clock (it converts their expiries to the
	// kernel's); nil means the real clock.
	Clock clock.Clock
	// Logger receives lifecycle messages (attach mode, fallbacks,
	// defense transitions). Nil discards.
	Logger *slog.Logger
	// OnEvent, when set, receives kernel events (flood sources crossing a
	// limit, UDP ports starting to drop) and defense transitions. It is
	// called from one goroutine, in order; it must be quick. A panic is
	// recovered and counted.
	OnEvent func(Event)
	// Fingerprint, when set, turns a source address into the opaque
	// Event.Source (e.g. an HMAC); events never carry raw addresses.
	Fingerprint func(netip.Addr) string
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
}

// normalize fills defaults and checks every bound.
func (c *Config) normalize() error {
	switch c.Mode {
	case "":
		c.Mode = ModeAuto
	case ModeAuto, ModeNative, ModeGeneric, ModeOff:
	default:
		return invalid("mode %q: must be auto, native, generic or off", c.Mode)
	}
	if c.Mode != ModeOff {
		if c.Interface == "" || len(c.Interface) > 15 || strings.ContainsAny(c.Interface, "/ \t\n") {
			return invalid("interface %q: must be a network interface name (1 to 15 bytes)", c.Interface)
		}
	}
	if c.Flags == 0 {
		c.Flags = DefaultFlags
	}
	if c.Flags&^AllFlags != 0 {
		return invalid("flags 0x%x: unknown bits (known: 0x%x)", uint32(c.Flags), uint32(AllFlags))
	}
	c.Flags &^= FlagDefense
	if err := checkK(&c.K); err != nil {
		return err
	}
	fdef(&c.MinRate, DefaultMinRate)
	if !(c.MinRate >= 1 && c.MinRate <= MaxMinRate) {
		return invalid("min_rate %v out of range [1, %v]", c.MinRate, MaxMinRate)
	}
	for _, r := range []struct {
		name     string
		v        *int
		def, max int
		min      int
	}{
		{"warmup", &c.Warmup, DefaultWarmup, MaxWarmup, 1},
		{"window", &c.Window, DefaultWindow, MaxWindow, MinWindow},
		{"enter_samples", &c.EnterSamples, DefaultEnterSamples, MaxEnterSamples, 1},
		{"score_entries", &c.ScoreEntries, DefaultScoreEntries, MaxScoreEntries, MinMapEntries},
		{"conntrack_entries", &c.ConntrackEntries, DefaultConntrackEntries, MaxConntrackEntries, MinMapEntries},
		{"ring_bytes", &c.RingBytes, DefaultRingBytes, MaxRingBytes, MinRingBytes},
	} {
		if *r.v == 0 {
			*r.v = r.def
		}
		if *r.v < r.min || *r.v > r.max {
			return invalid("%s %d out of range [%d, %d]", r.name, *r.v, r.min, r.max)
		}
	}
	if c.RingBytes&(c.RingBytes-1) != 0 {
		return invalid("ring_bytes %d must be a power of two", c.RingBytes)
	}
	for _, d := range []struct {
		name          string
		v             *time.Duration
		def, min, max time.Duration
	}{
		{"exit_hold", &c.ExitHold, DefaultExitHold, MinExitHold, MaxExitHold},
		{"interval", &c.Interval, DefaultInterval, MinInterval, MaxInterval},
		{"half_life", &c.HalfLife, DefaultHalfLife, MinHalfLife, MaxHalfLife},
		{"kernel_syn_interval", &c.KernelSYNInterval, DefaultKernelSYN, MinKernelSYN, MaxKernelSYN},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < d.min || *d.v > d.max {
			return invalid("%s %v out of range [%v, %v]", d.name, *d.v, d.min, d.max)
		}
	}
	for _, l := range []struct {
		name string
		v    *uint32
		def  uint32
	}{
		{"syn_limit", &c.SYNLimit, DefaultSYNLimit},
		{"syn_limit_defense", &c.SYNLimitDefense, DefaultSYNLimitDefense},
		{"ack_limit", &c.ACKLimit, DefaultACKLimit},
		{"rst_limit", &c.RSTLimit, DefaultRSTLimit},
	} {
		if *l.v == 0 {
			*l.v = l.def
		}
		if *l.v > MaxScoreLimit {
			return invalid("%s %d out of range [1, %d]", l.name, *l.v, MaxScoreLimit)
		}
	}
	if c.EventBudget == 0 {
		c.EventBudget = DefaultEventBudget
	}
	if c.EventBudget > MaxEventBudget {
		return invalid("event_budget %d out of range [0, %d]", c.EventBudget, MaxEventBudget)
	}
	if c.SYNACKWindow == 0 {
		c.SYNACKWindow = DefaultSYNACKWindow
	}
	if c.SYNACKWindow < MinSYNACKWindow {
		return invalid("synack_window %d out of range [%d, 65535]", c.SYNACKWindow, MinSYNACKWindow)
	}
	if len(c.UDPLimits) > 65536 {
		return invalid("udp_limits: at most 65536 ports")
	}
	for _, s := range []struct {
		name string
		v    *int
		set  *ipset.Set
		def  int
	}{
		{"allow_entries", &c.AllowEntries, c.Allow, DefaultAllowEntries},
		{"deny_entries", &c.DenyEntries, c.Deny, DefaultDenyEntries},
	} {
		if *s.v == 0 {
			*s.v = s.def
			if s.set != nil {
				*s.v = s.set.Capacity()
			}
		}
		if *s.v < MinMapEntries || *s.v > MaxListEntries {
			return invalid("%s %d out of range [%d, %d]", s.name, *s.v, MinMapEntries, MaxListEntries)
		}
		if s.set != nil && *s.v < s.set.Capacity() {
			return invalid("%s %d is below the %s list's capacity %d", s.name, *s.v, s.set.Name(), s.set.Capacity())
		}
	}
	if c.Allow != nil && c.Deny != nil && c.Allow.Name() == c.Deny.Name() {
		return invalid("the allow and deny lists must have different names (both %q)", c.Allow.Name())
	}
	if c.PinPath != "" && (c.PinPath[0] != '/' || len(c.PinPath) > 512) {
		return invalid("pin_path %q must be an absolute path of at most 512 bytes", c.PinPath)
	}
	if c.StaticReason == "" {
		c.StaticReason = DefaultStaticReason
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func fdef(v *float64, def float64) {
	if *v == 0 {
		*v = def
	}
}

func checkK(k *float64) error {
	fdef(k, DefaultK)
	if math.IsNaN(*k) || *k < MinK || *k > MaxK {
		return invalid("k %v out of range [%v, %v]", *k, MinK, MaxK)
	}
	return nil
}

// Validate reports whether New would accept c: every bound, with the
// error naming the field and its range. It changes nothing.
func (c Config) Validate() error { return c.normalize() }
