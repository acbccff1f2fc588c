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
	"github.com/bulwarkhq/bulwark/conf"
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
// across CPUs: an item of the udp_limits key.
type UDPLimit struct {
	// Port (port) is the destination port, in [1, 65535]; each port
	// appears once in Config.UDPLimits.
	Port int `yaml:"port"`
	// PPS (pps) is packets per second, in [0, MaxUDPPPS]; 0 is no limit.
	PPS int64 `yaml:"pps"`
	// BPS (bps) is bytes (IP length) per second, in [0, MaxUDPBPS]; 0 is
	// no limit.
	BPS int64 `yaml:"bps"`
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

	MaxUDPLimits = 65536   // ports in Config.UDPLimits
	MaxUDPPPS    = 1 << 40 // packets per second of one port's limit
	MaxUDPBPS    = 1 << 50 // bytes per second of one port's limit

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

// Config configures a Manager. Its yaml tags are the keys of the
// gateway's xdp section; the fields tagged yaml:"-" are not keys (the
// gateway leaves them at their defaults, or sets them at build time: the
// lists, the clock, the hooks). A zero field means its default once
// [Config.WithDefaults] is applied, which New does; [Config.Validate]
// checks the values as they are, naming the key and its range.
type Config struct {
	// Interface (interface) is the network interface to attach to, 1 to
	// 15 bytes. Required unless Mode is off.
	Interface string `yaml:"interface"`
	// Mode (mode) is how to attach: auto (default), native, generic or
	// off.
	Mode Mode `yaml:"mode"`
	// Required (required) makes Start fail with ErrNotAttached (or
	// ErrUnsupported) when the program cannot be attached, instead of
	// serving without XDP.
	Required bool `yaml:"required"`

	// Flags (flags) names the features on: the names of [Flags] but
	// defense, which the manager sets. Nil means DefaultFlags; unless
	// Mode is off at least one is required. [Config.FlagWord] is the
	// flag word the program reads.
	Flags []string `yaml:"flags"`
	// K (k) is the number of standard deviations above the mean SYN
	// rate at which defense mode starts; default 3 (DefaultK), range
	// [0.5, 20] (MinK, MaxK).
	K float64 `yaml:"k"`
	// MinRate (min_rate) is a floor (SYN/s) under the defense threshold,
	// so an idle server's tiny variance does not trip it; default 1000
	// (DefaultMinRate), range [1, 1e9] (MaxMinRate).
	MinRate float64 `yaml:"min_rate"`
	// Warmup is how many samples the baseline needs before defense mode
	// can start; default 50 (5 s at the default interval), range
	// [1, MaxWarmup].
	Warmup int `yaml:"-"`
	// Window caps the sample count of the running mean and variance, so
	// the baseline follows slow drift (an exponentially weighted
	// Welford update once full); default 3000 (5 min), range
	// [MinWindow, MaxWindow].
	Window int `yaml:"-"`
	// EnterSamples is how many consecutive samples above the threshold
	// start defense mode; default 3, range [1, MaxEnterSamples].
	EnterSamples int `yaml:"-"`
	// ExitHold is how long the rate must stay below the exit threshold
	// (mean + K·σ/2, at least MinRate/2) before defense mode ends;
	// default 10 s, range [MinExitHold, MaxExitHold].
	ExitHold time.Duration `yaml:"-"`
	// Interval is how often statistics are read; default 100 ms, range
	// [MinInterval, MaxInterval].
	Interval time.Duration `yaml:"-"`

	// SYNLimit (syn_limit) and SYNLimitDefense (syn_limit_defense) are
	// the per-source SYN score limits (about that many SYNs in a burst;
	// a steady rate r scores r·HalfLife/ln 2), outside and in defense
	// mode; defaults 200 and 50, range [1, 1000000] (MaxScoreLimit).
	// Scores are kept per CPU.
	SYNLimit        int `yaml:"syn_limit"`
	SYNLimitDefense int `yaml:"syn_limit_defense"`
	// ACKLimit (ack_limit) is the per-source limit of ACKs of no known
	// flow in defense mode; default 200, range [1, 1000000].
	ACKLimit int `yaml:"ack_limit"`
	// RSTLimit is the per-source score of invalid RSTs that raises an
	// event; default 50, range [1, MaxScoreLimit]. Invalid RSTs are
	// always dropped.
	RSTLimit int `yaml:"-"`
	// HalfLife (half_life) is the scores' half-life; default 1s, range
	// [1ms, 1m] (MinHalfLife, MaxHalfLife).
	HalfLife time.Duration `yaml:"half_life"`
	// KernelSYNInterval: while proxying, one SYN per destination port
	// this often goes to the kernel, whose own cookie answer keeps the
	// listener accepting cookie ACKs; default 1 s, range [10 ms, 1 min]
	// (the kernel's window is 2 min).
	KernelSYNInterval time.Duration `yaml:"-"`
	// EventBudget bounds ring-buffer events per CPU per second; default
	// 100, range [1, MaxEventBudget].
	EventBudget int `yaml:"-"`
	// SYNACKWindow is the window of cookie SYN-ACKs; default 65535,
	// range [MinSYNACKWindow, 65535].
	SYNACKWindow int `yaml:"-"`
	// UDPLimits (udp_limits) bound UDP traffic per destination port, at
	// most MaxUDPLimits ports, each once.
	UDPLimits []UDPLimit `yaml:"udp_limits"`

	// AllowEntries and DenyEntries size the exact-address and CIDR maps
	// of each list, in [MinMapEntries, MaxListEntries] and not below the
	// list's capacity; 0 (the default) sizes them to the lists'
	// capacities (without a list, 65,536 and 1,000,000).
	AllowEntries int `yaml:"-"`
	DenyEntries  int `yaml:"-"`
	// ScoreEntries (score_entries) sizes the per-source score LRU;
	// default 500000, range [16, 10000000] (MinMapEntries,
	// MaxScoreEntries).
	ScoreEntries int `yaml:"score_entries"`
	// ConntrackEntries (conntrack_entries) sizes the verified-flow LRU;
	// default 2000000, range [16, 50000000] (MinMapEntries,
	// MaxConntrackEntries).
	ConntrackEntries int `yaml:"conntrack_entries"`
	// RingBytes sizes the event ring buffer, a power of two in
	// [64 KiB, 1 GiB]; default 4 MiB.
	RingBytes int `yaml:"-"`

	// PinPath (pin_path) is the directory (on a BPF filesystem) where the
	// list maps are pinned so that a restart keeps them, an absolute path
	// of at most 512 bytes. Empty means DefaultPinRoot/<Interface> when
	// /sys/fs/bpf is a BPF filesystem, and no pinning otherwise. NoPin
	// (no_pin) disables pinning.
	PinPath string `yaml:"pin_path"`
	NoPin   bool   `yaml:"no_pin"`
	// StaticReason is the reason the configuration's own entries carry.
	// On a restart, pinned entries missing from the lists are restored
	// into them (reason "restored", remaining TTL) unless they carried
	// this reason: the configuration reinstalls its own entries and a
	// dropped one must not come back. Default "config".
	StaticReason string `yaml:"-"`

	// Allow and Deny are mirrored into the kernel maps. Either may be nil.
	// Their OnChange must call Manager.OnChange (see its doc).
	Allow *ipset.Set `yaml:"-"`
	Deny  *ipset.Set `yaml:"-"`
	// Clock is the lists' clock (it converts their expiries to the
	// kernel's); nil means the real clock.
	Clock clock.Clock `yaml:"-"`
	// Logger receives lifecycle messages (attach mode, fallbacks,
	// defense transitions). Nil discards.
	Logger *slog.Logger `yaml:"-"`
	// OnEvent, when set, receives kernel events (flood sources crossing a
	// limit, UDP ports starting to drop) and defense transitions. It is
	// called from one goroutine, in order; it must be quick. A panic is
	// recovered and counted.
	OnEvent func(Event) `yaml:"-"`
	// Fingerprint, when set, turns a source address into the opaque
	// Event.Source (e.g. an HMAC); events never carry raw addresses.
	Fingerprint func(netip.Addr) string `yaml:"-"`
}

// DefaultConfig returns the default settings: mode auto, no interface,
// DefaultFlags and every default above; AllowEntries and DenyEntries
// are 0 (sized to the lists).
func DefaultConfig() Config {
	return Config{
		Mode:              ModeAuto,
		Flags:             DefaultFlags.Names(),
		K:                 DefaultK,
		MinRate:           DefaultMinRate,
		Warmup:            DefaultWarmup,
		Window:            DefaultWindow,
		EnterSamples:      DefaultEnterSamples,
		ExitHold:          DefaultExitHold,
		Interval:          DefaultInterval,
		SYNLimit:          DefaultSYNLimit,
		SYNLimitDefense:   DefaultSYNLimitDefense,
		ACKLimit:          DefaultACKLimit,
		RSTLimit:          DefaultRSTLimit,
		HalfLife:          DefaultHalfLife,
		KernelSYNInterval: DefaultKernelSYN,
		EventBudget:       DefaultEventBudget,
		SYNACKWindow:      DefaultSYNACKWindow,
		ScoreEntries:      DefaultScoreEntries,
		ConntrackEntries:  DefaultConntrackEntries,
		RingBytes:         DefaultRingBytes,
		StaticReason:      DefaultStaticReason,
	}
}

// WithDefaults returns c with its zero fields set to the defaults of
// DefaultConfig, a nil Flags to DefaultFlags, and zero AllowEntries and
// DenyEntries to the capacities of Allow and Deny (without a list, to
// DefaultAllowEntries and DefaultDenyEntries). Negative values are kept
// so that Validate reports them.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	setDefault(&c.Mode, d.Mode)
	if c.Flags == nil {
		c.Flags = d.Flags
	}
	setDefault(&c.K, d.K)
	setDefault(&c.MinRate, d.MinRate)
	setDefault(&c.Warmup, d.Warmup)
	setDefault(&c.Window, d.Window)
	setDefault(&c.EnterSamples, d.EnterSamples)
	setDefault(&c.ExitHold, d.ExitHold)
	setDefault(&c.Interval, d.Interval)
	setDefault(&c.SYNLimit, d.SYNLimit)
	setDefault(&c.SYNLimitDefense, d.SYNLimitDefense)
	setDefault(&c.ACKLimit, d.ACKLimit)
	setDefault(&c.RSTLimit, d.RSTLimit)
	setDefault(&c.HalfLife, d.HalfLife)
	setDefault(&c.KernelSYNInterval, d.KernelSYNInterval)
	setDefault(&c.EventBudget, d.EventBudget)
	setDefault(&c.SYNACKWindow, d.SYNACKWindow)
	setDefault(&c.ScoreEntries, d.ScoreEntries)
	setDefault(&c.ConntrackEntries, d.ConntrackEntries)
	setDefault(&c.RingBytes, d.RingBytes)
	setDefault(&c.StaticReason, d.StaticReason)
	setDefault(&c.AllowEntries, listEntries(c.Allow, DefaultAllowEntries))
	setDefault(&c.DenyEntries, listEntries(c.Deny, DefaultDenyEntries))
	return c
}

// setDefault sets *v to def if *v is zero.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// listEntries is the map size of list s: its capacity, or def.
func listEntries(s *ipset.Set, def int) int {
	if s != nil {
		return s.Capacity()
	}
	return def
}

// settableFlags are the flags a configuration may name.
const settableFlags = AllFlags &^ FlagDefense

// FlagWord returns the flag word of c.Flags (a name Validate refuses
// counts for nothing).
func (c Config) FlagWord() Flags { return flagWord(nil, "flags", c.Flags) }

// flagWord returns the word of the settable flags in names and records,
// at key[i] in f (unless f is nil), each name that is not one. It is the
// one check of flag names: Config.Validate and Config.FlagWord (the
// file's flags) and Manager.Update (ConfigUpdate.FlagNames, the control
// API's) use it.
func flagWord(f *conf.Check, key string, names []string) Flags {
	var w Flags
	for i, name := range names {
		fl, err := FlagByName(name)
		if err != nil || fl&settableFlags == 0 {
			if f != nil {
				f.Add(conf.Index(key, i), "%q: want one of %s", name, strings.Join(settableFlags.Names(), ", "))
			}
			continue
		}
		w |= fl
	}
	return w
}

// Validate reports every setting of c outside its bounds, as it is
// (apply WithDefaults first for zeros to mean the defaults). The error is
// a conf.Errors naming each key ("syn_limit: 0 out of range [1,
// 1000000]") and wrapping ErrInvalidConfig. It changes nothing.
func (c Config) Validate() error {
	f := conf.Check{Kind: ErrInvalidConfig}
	f.OneOf("mode", string(c.Mode), string(ModeAuto), string(ModeNative), string(ModeGeneric), string(ModeOff))
	if c.Mode != ModeOff {
		switch {
		case c.Interface == "":
			f.Add("interface", "required unless mode is off")
		case len(c.Interface) > 15 || strings.ContainsAny(c.Interface, "/ \t\n"):
			f.Add("interface", "%q: want a network interface name (1 to 15 bytes)", c.Interface)
		}
	}
	flagWord(&f, "flags", c.Flags)
	if c.Mode != ModeOff && len(c.Flags) == 0 {
		f.Add("flags", "at least one flag (set mode: off to turn the layer off)")
	}
	f.Float("k", c.K, MinK, MaxK)
	f.Float("min_rate", c.MinRate, 1, MaxMinRate)
	f.Int("warmup", int64(c.Warmup), 1, MaxWarmup)
	f.Int("window", int64(c.Window), MinWindow, MaxWindow)
	f.Int("enter_samples", int64(c.EnterSamples), 1, MaxEnterSamples)
	f.Duration("exit_hold", c.ExitHold, MinExitHold, MaxExitHold)
	f.Duration("interval", c.Interval, MinInterval, MaxInterval)
	f.Int("syn_limit", int64(c.SYNLimit), 1, MaxScoreLimit)
	f.Int("syn_limit_defense", int64(c.SYNLimitDefense), 1, MaxScoreLimit)
	f.Int("ack_limit", int64(c.ACKLimit), 1, MaxScoreLimit)
	f.Int("rst_limit", int64(c.RSTLimit), 1, MaxScoreLimit)
	f.Duration("half_life", c.HalfLife, MinHalfLife, MaxHalfLife)
	f.Duration("kernel_syn_interval", c.KernelSYNInterval, MinKernelSYN, MaxKernelSYN)
	f.Int("event_budget", int64(c.EventBudget), 1, MaxEventBudget)
	f.Int("synack_window", int64(c.SYNACKWindow), MinSYNACKWindow, math.MaxUint16)
	if len(c.UDPLimits) > MaxUDPLimits {
		f.Add("udp_limits", "%d entries, at most %d", len(c.UDPLimits), MaxUDPLimits)
	}
	seen := make(map[int]int, len(c.UDPLimits))
	for i, u := range c.UDPLimits {
		p := conf.Index("udp_limits", i)
		f.Int(p+".port", int64(u.Port), 1, math.MaxUint16)
		f.Int(p+".pps", u.PPS, 0, MaxUDPPPS)
		f.Int(p+".bps", u.BPS, 0, MaxUDPBPS)
		if j, dup := seen[u.Port]; dup {
			f.Add(p+".port", "%d repeats udp_limits[%d]", u.Port, j)
		}
		seen[u.Port] = i
	}
	for _, s := range []struct {
		key string
		v   int
		set *ipset.Set
	}{{"allow_entries", c.AllowEntries, c.Allow}, {"deny_entries", c.DenyEntries, c.Deny}} {
		switch {
		case s.v == 0: // sized to the list
		case s.v < MinMapEntries || s.v > MaxListEntries:
			f.Int(s.key, int64(s.v), MinMapEntries, MaxListEntries)
		case s.set != nil && s.v < s.set.Capacity():
			f.Add(s.key, "%d is below the %s list's capacity %d", s.v, s.set.Name(), s.set.Capacity())
		}
	}
	if c.Allow != nil && c.Deny != nil && c.Allow.Name() == c.Deny.Name() {
		f.Add("", "the allow and deny lists must have different names (both %q)", c.Allow.Name())
	}
	f.Int("score_entries", int64(c.ScoreEntries), MinMapEntries, MaxScoreEntries)
	f.Int("conntrack_entries", int64(c.ConntrackEntries), MinMapEntries, MaxConntrackEntries)
	f.Int("ring_bytes", int64(c.RingBytes), MinRingBytes, MaxRingBytes)
	if c.RingBytes > 0 && c.RingBytes&(c.RingBytes-1) != 0 {
		f.Add("ring_bytes", "%d is not a power of two", c.RingBytes)
	}
	if c.PinPath != "" && (c.PinPath[0] != '/' || len(c.PinPath) > 512) {
		f.Add("pin_path", "%q: want an absolute path of at most 512 bytes", c.PinPath)
	}
	if c.StaticReason == "" {
		f.Add("static_reason", "required")
	}
	return f.Err()
}
