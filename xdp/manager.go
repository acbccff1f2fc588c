package xdp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/ipset"
)

// EventKind is the kind of an Event.
type EventKind string

// Event kinds.
const (
	// EventSYNFlood: a source's SYN score crossed its limit (its SYNs are
	// dropped until the score decays).
	EventSYNFlood EventKind = "syn_flood"
	// EventACKFlood: a source's score of ACKs of no known flow crossed
	// ACKLimit.
	EventACKFlood EventKind = "ack_flood"
	// EventRSTFlood: a source's score of invalid RSTs crossed RSTLimit.
	EventRSTFlood EventKind = "rst_flood"
	// EventUDPLimit: a UDP port went over its limit in this second.
	EventUDPLimit EventKind = "udp_limit"
	// EventDefenseOn and EventDefenseOff: defense mode changed.
	EventDefenseOn  EventKind = "defense_on"
	EventDefenseOff EventKind = "defense_off"
)

// Event is a kernel event or a defense transition. It never carries a raw
// address: Source is Config.Fingerprint of the source, or empty.
type Event struct {
	Kind EventKind
	// Time is when userspace received the event (Config.Clock).
	Time time.Time
	// Source is the fingerprint of the flood source (flood kinds only).
	Source string
	// IPv6 tells the source's family (flood kinds only).
	IPv6 bool
	// Port is the UDP port (EventUDPLimit).
	Port uint16
	// Value is the source's score in packets, or the port's packets in
	// the window (EventUDPLimit).
	Value uint32
	// Rate and Threshold are the SYN rate and threshold (defense kinds).
	Rate, Threshold float64
}

// Counters are the program's counters summed over CPUs, since the maps
// were created.
type Counters struct {
	RX         uint64 `json:"rx"`          // frames seen
	Pass       uint64 `json:"pass"`        // XDP_PASS verdicts
	Drop       uint64 `json:"drop"`        // XDP_DROP verdicts
	TX         uint64 `json:"tx"`          // XDP_TX verdicts (cookie SYN-ACKs)
	Allow      uint64 `json:"allow"`       // exempted by the allow list from a drop or a proxy answer
	Deny       uint64 `json:"deny"`        // dropped by the deny list
	Fragment   uint64 `json:"fragment"`    // fragments dropped
	Malformed  uint64 `json:"malformed"`   // malformed or truncated frames dropped
	SYN        uint64 `json:"syn"`         // SYNs seen
	SYNFlood   uint64 `json:"syn_flood"`   // SYNs dropped by their source's score
	KernelSYN  uint64 `json:"kernel_syn"`  // SYNs passed to the kernel while proxying
	CookieOK   uint64 `json:"cookie_ok"`   // ACKs with a valid cookie
	ACKInvalid uint64 `json:"ack_invalid"` // ACKs of no known flow dropped
	RSTInvalid uint64 `json:"rst_invalid"` // RSTs outside the window dropped
	UDPLimit   uint64 `json:"udp_limit"`   // UDP datagrams over a port limit dropped
	FlowHit    uint64 `json:"flow_hit"`    // segments passed by the verified-flow cache
	EventsLost uint64 `json:"events_lost"` // events not delivered (ring full, budget)
	Errors     uint64 `json:"errors"`      // helper failures (frame passed)
}

// counterFields lists Counters' fields in the program's counter order.
func (c *Counters) fields() []*uint64 {
	return []*uint64{&c.RX, &c.Pass, &c.Drop, &c.TX, &c.Allow, &c.Deny, &c.Fragment,
		&c.Malformed, &c.SYN, &c.SYNFlood, &c.KernelSYN, &c.CookieOK, &c.ACKInvalid,
		&c.RSTInvalid, &c.UDPLimit, &c.FlowHit, &c.EventsLost, &c.Errors}
}

// Attach states in Status.Attached.
const (
	AttachedNative  = "native"
	AttachedGeneric = "generic"
	AttachedNone    = "none"
)

// Defense overrides, in Status.DefenseOverride and ConfigUpdate.Defense.
const (
	DefenseAuto = "auto" // the detector decides
	DefenseOn   = "on"   // forced on
	DefenseOff  = "off"  // forced off
)

// Status is the manager's state, as served by GET /v1/xdp/status. It
// carries no address.
type Status struct {
	Supported bool   `json:"supported"`
	Interface string `json:"interface,omitempty"`
	Mode      Mode   `json:"mode"`
	// Attached is native, generic or none; Reason says why none.
	Attached string `json:"attached"`
	Reason   string `json:"reason,omitempty"`
	// Pinned is the directory of the pinned list maps, if any.
	Pinned string `json:"pinned,omitempty"`

	Flags    []string `json:"flags"`
	FlagWord uint32   `json:"flag_word"`
	K        float64  `json:"k"`

	Defense         bool       `json:"defense"`
	DefenseOverride string     `json:"defense_override"`
	DefenseSince    *time.Time `json:"defense_since,omitempty"`
	DefenseEntered  uint64     `json:"defense_entered"`

	// SYNRate is the last sample (SYN/s); SYNMean and SYNStddev the
	// baseline; Threshold the rate that starts defense mode.
	SYNRate   float64 `json:"syn_rate"`
	SYNMean   float64 `json:"syn_mean"`
	SYNStddev float64 `json:"syn_stddev"`
	Threshold float64 `json:"threshold"`
	Samples   uint64  `json:"samples"`

	Counters Counters `json:"counters"`

	// AllowEntries and DenyEntries count the mirrored entries (exact and
	// CIDR) in the kernel maps.
	AllowEntries int64 `json:"allow_entries"`
	DenyEntries  int64 `json:"deny_entries"`
	// MirrorErrors counts list changes the kernel maps refused.
	MirrorErrors uint64 `json:"mirror_errors"`
	// Restored counts pinned entries put back into the lists at start.
	Restored int `json:"restored"`
	// HookPanics counts recovered panics of Config.OnEvent.
	HookPanics uint64 `json:"hook_panics"`
	// Syncookies is net.ipv4.tcp_syncookies as read at start (-1 unknown).
	Syncookies int      `json:"syncookies"`
	Warnings   []string `json:"warnings,omitempty"`
}

// ConfigUpdate changes the running configuration (PUT /v1/xdp/config).
// Nil fields are left alone.
type ConfigUpdate struct {
	// Flags replaces the flag word (FlagDefense in it is ignored).
	Flags *Flags
	// FlagNames, when not nil, replaces the flag word by the names of
	// its flags, as Config.Flags writes them (an empty list is no
	// flags); each name is checked as Validate checks Config.Flags, at
	// key "flags[i]". Set Flags or FlagNames, not both.
	FlagNames []string
	// K replaces Config.K, in [MinK, MaxK].
	K *float64
	// Defense forces defense mode on or off, or gives it back to the
	// detector ("auto").
	Defense *string
}

// Manager loads the XDP program, attaches it, mirrors the allow and deny
// lists into its maps, reads its statistics every Interval to run the
// defense-mode detector, and hands ring-buffer events to Config.OnEvent.
//
// Typical use:
//
//	var m *xdp.Manager
//	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: n, OnChange: func(c ipset.Change) { m.OnChange(c) }})
//	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: n, OnChange: func(c ipset.Change) { m.OnChange(c) }})
//	m, err := xdp.New(xdp.Config{Interface: "eth0", Allow: allow, Deny: deny})
//	...
//	err = m.Start(ctx) // serves without XDP (and says so) when it cannot attach
//	defer m.Stop()
type Manager struct {
	cfg Config

	// mu guards the fields below and the config map's contents.
	mu        sync.Mutex
	flags     Flags
	k         float64
	override  string
	defense   bool
	since     time.Time
	entered   uint64
	det       *Detector
	lastRate  float64
	counters  Counters
	attached  string
	reason    string
	pinned    string
	restored  int
	syncookie int
	warnings  []string
	started   bool
	stopped   bool

	// live is set while the maps exist and list changes are mirrored.
	live         atomic.Bool
	mirrorErrors atomic.Uint64
	hookPanics   atomic.Uint64
	allowN       atomic.Int64
	denyN        atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
	// kmu guards kern: list mirroring takes it shared, Stop exclusively.
	kmu  sync.RWMutex
	kern *kernel // platform part; nil when not loaded
}

// New applies cfg's defaults, validates it and returns a stopped
// manager. It touches nothing in the kernel.
func New(cfg Config) (*Manager, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		cfg:       cfg,
		flags:     cfg.FlagWord(),
		k:         cfg.K,
		override:  DefenseAuto,
		attached:  AttachedNone,
		syncookie: -1,
		det: NewDetector(DetectorConfig{
			K: cfg.K, MinRate: cfg.MinRate, Warmup: cfg.Warmup, Window: cfg.Window,
			EnterSamples: cfg.EnterSamples, ExitHold: cfg.ExitHold,
		}),
		stop: make(chan struct{}),
	}
	if cfg.Mode == ModeOff {
		m.reason = "xdp.mode is off"
	}
	return m, nil
}

// Start loads and attaches the program and starts mirroring and
// sampling. When the program cannot be loaded or attached it logs why,
// reports Attached "none" with the reason in Status, and returns nil (the
// gateway keeps serving without XDP) unless Config.Required is set. It
// must be called from the network namespace of the interface. Start may
// be called once.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return fmt.Errorf("xdp: Start called twice")
	}
	m.started = true
	m.mu.Unlock()
	if m.cfg.Mode == ModeOff {
		m.cfg.Logger.Info("xdp: off (xdp.mode is off)")
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := m.startKernel()
	if err == nil {
		m.wg.Add(1)
		go m.loop()
		return nil
	}
	m.mu.Lock()
	m.attached, m.reason = AttachedNone, err.Error()
	m.mu.Unlock()
	m.cfg.Logger.Warn("xdp: not attached; serving without XDP", "interface", m.cfg.Interface, "mode", string(m.cfg.Mode), "reason", err.Error())
	if m.cfg.Required {
		return err
	}
	return nil
}

// Stop detaches the program and releases everything but the pinned maps
// (so a restart keeps the lists). It waits for the manager's goroutines
// and is safe to call more than once and without Start.
func (m *Manager) Stop() error {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil
	}
	m.stopped = true
	m.mu.Unlock()
	close(m.stop)
	m.live.Store(false)
	err := m.stopKernel()
	m.wg.Wait()
	m.mu.Lock()
	if m.attached != AttachedNone {
		m.attached, m.reason = AttachedNone, "stopped"
	}
	m.mu.Unlock()
	if err == nil {
		m.cfg.Logger.Info("xdp: detached", "interface", m.cfg.Interface)
	}
	return err
}

// OnChange mirrors one change of the allow or deny list into the kernel
// maps. Wire it as (or call it from) the lists' ipset.Config.OnChange; it
// is safe on a nil *Manager and before Start (Start copies the lists
// whole), and it never calls back into the set. Changes of other sets are
// ignored.
func (m *Manager) OnChange(c ipset.Change) {
	if m == nil || !m.live.Load() {
		return
	}
	var allow bool
	switch {
	case m.cfg.Allow != nil && c.Set == m.cfg.Allow.Name():
		allow = true
	case m.cfg.Deny != nil && c.Set == m.cfg.Deny.Name():
	default:
		return
	}
	var err error
	var turned bool
	switch c.Op {
	case ipset.Added, ipset.Updated:
		turned, err = m.put(allow, c.Entry)
	case ipset.Removed, ipset.Expired:
		turned, err = m.del(allow, c.Entry.Prefix)
	}
	if err != nil {
		m.mirrorErrors.Add(1)
	}
	if turned {
		m.refreshConfig()
	}
}

// refreshConfig rewrites the config map (the lists' non-empty bits).
func (m *Manager) refreshConfig() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.writeConfigLocked(); err != nil {
		m.mirrorErrors.Add(1)
	}
}

// Update applies u atomically: either every field is valid and applied,
// or none is.
func (m *Manager) Update(u ConfigUpdate) error {
	f := conf.Check{Kind: ErrInvalidConfig}
	var word *Flags
	switch {
	case u.Flags != nil && u.FlagNames != nil:
		f.Add("flags", "set by word or by names, not both")
	case u.FlagNames != nil:
		w := flagWord(&f, "flags", u.FlagNames)
		word = &w
	case u.Flags != nil:
		if *u.Flags&^AllFlags != 0 {
			f.Add("flags", "0x%x has unknown bits (known: 0x%x)", uint32(*u.Flags), uint32(AllFlags))
		}
		w := *u.Flags &^ FlagDefense
		word = &w
	}
	k := m.K()
	if u.K != nil {
		k = *u.K
		f.Float("k", k, MinK, MaxK)
	}
	if u.Defense != nil {
		f.OneOf("defense", *u.Defense, DefenseAuto, DefenseOn, DefenseOff)
	}
	if err := f.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if word != nil {
		m.flags = *word
	}
	if u.K != nil {
		m.k = k
		m.det.SetK(k)
	}
	var ev *Event
	if u.Defense != nil {
		m.override = *u.Defense
		ev = m.applyDefenseLocked(m.cfg.Clock.Now())
	}
	m.cfg.Logger.Info("xdp: configuration updated", "flags", m.flags.String(), "k", m.k, "defense", m.override)
	err := m.writeConfigLocked()
	m.mu.Unlock()
	if ev != nil {
		m.deliver(*ev)
	}
	return err
}

// K returns the current K.
func (m *Manager) K() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.k
}

// Status returns a snapshot of the manager's state.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	word := m.flags
	if m.defense {
		word |= FlagDefense
	}
	s := Status{
		Supported:       supported,
		Interface:       m.cfg.Interface,
		Mode:            m.cfg.Mode,
		Attached:        m.attached,
		Reason:          m.reason,
		Pinned:          m.pinned,
		Flags:           word.Names(),
		FlagWord:        uint32(word),
		K:               m.k,
		Defense:         m.defense,
		DefenseOverride: m.override,
		DefenseEntered:  m.entered,
		SYNRate:         m.lastRate,
		SYNMean:         m.det.Mean(),
		SYNStddev:       m.det.Stddev(),
		Threshold:       m.det.Threshold(),
		Samples:         m.det.Learned(),
		Counters:        m.counters,
		AllowEntries:    m.allowN.Load(),
		DenyEntries:     m.denyN.Load(),
		MirrorErrors:    m.mirrorErrors.Load(),
		Restored:        m.restored,
		HookPanics:      m.hookPanics.Load(),
		Syncookies:      m.syncookie,
		Warnings:        append([]string(nil), m.warnings...),
	}
	if m.defense {
		t := m.since
		s.DefenseSince = &t
	}
	return s
}

// loop samples the statistics every Interval until Stop.
func (m *Manager) loop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	var last uint64
	var lastAt time.Time
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		c, err := m.readCounters()
		if err != nil {
			continue
		}
		now := time.Now()
		var ev *Event
		m.mu.Lock()
		m.counters = c
		if !lastAt.IsZero() {
			dt := now.Sub(lastAt).Seconds()
			rate := 0.0
			if dt > 0 && c.SYN >= last {
				rate = float64(c.SYN-last) / dt
			}
			ev = m.sampleLocked(rate, m.cfg.Clock.Now())
		}
		m.mu.Unlock()
		if ev != nil {
			m.deliver(*ev)
		}
		last, lastAt = c.SYN, now
	}
}

// sampleLocked feeds one rate sample to the detector and applies its
// decision; it returns the event to deliver once unlocked, if any.
func (m *Manager) sampleLocked(rate float64, now time.Time) *Event {
	m.lastRate = rate
	m.det.Observe(rate, now)
	return m.applyDefenseLocked(now)
}

// applyDefenseLocked sets defense mode from the override and the
// detector and writes the flag word on a change, returning the event to
// deliver once m.mu is released.
func (m *Manager) applyDefenseLocked(now time.Time) *Event {
	want := m.det.Defense()
	switch m.override {
	case DefenseOn:
		want = true
	case DefenseOff:
		want = false
	}
	if want == m.defense {
		return nil
	}
	m.defense = want
	ev := Event{Kind: EventDefenseOff, Time: now, Rate: m.lastRate, Threshold: m.det.Threshold()}
	if want {
		m.since = now
		m.entered++
		ev.Kind = EventDefenseOn
		m.cfg.Logger.Warn("xdp: defense mode on", "syn_rate", m.lastRate, "threshold", ev.Threshold, "override", m.override)
	} else {
		m.cfg.Logger.Info("xdp: defense mode off", "syn_rate", m.lastRate, "override", m.override)
	}
	if err := m.writeConfigLocked(); err != nil {
		m.cfg.Logger.Error("xdp: cannot write the flag word", "error", err.Error())
	}
	return &ev
}

// deliver calls the event hook, recovering a panic.
func (m *Manager) deliver(e Event) {
	if m.cfg.OnEvent == nil {
		return
	}
	defer func() {
		if recover() != nil {
			m.hookPanics.Add(1)
		}
	}()
	m.cfg.OnEvent(e)
}

// source returns the fingerprint of an event's address.
func (m *Manager) source(a netip.Addr) string {
	if m.cfg.Fingerprint == nil || !a.IsValid() {
		return ""
	}
	return m.cfg.Fingerprint(a)
}
