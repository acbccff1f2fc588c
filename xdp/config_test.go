package xdp

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/ipset"
)

func TestConfigDefaultsAndBounds(t *testing.T) {
	m, err := New(Config{Interface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	c := m.cfg
	if c.Mode != ModeAuto || c.FlagWord() != DefaultFlags || m.flags != DefaultFlags || c.K != DefaultK || c.AllowEntries != 65536 ||
		c.DenyEntries != 1_000_000 || c.ScoreEntries != 500_000 || c.ConntrackEntries != 2_000_000 ||
		c.RingBytes != 4<<20 || c.Interval != 100*time.Millisecond || c.SYNACKWindow != 65535 {
		t.Errorf("defaults %+v", c)
	}
	big, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 2_000_000})
	for _, b := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "interface: required unless mode is off"},
		{Config{Interface: "a-very-long-interface-name"}, `interface: "a-very-long-interface-name": want a network interface name`},
		{Config{Interface: "eth0", Mode: "fast"}, `mode: "fast": want auto, native, generic or off`},
		{Config{Interface: "eth0", K: 25}, "k: 25 out of range [0.5, 20]"},
		{Config{Interface: "eth0", K: 0.1}, "k: 0.1 out of range [0.5, 20]"},
		{Config{Interface: "eth0", Flags: []string{"syn_flood", "nope"}}, `flags[1]: "nope": want one of syn_flood, syn_proxy, rst_validate, ack_flood, udp_stats,`},
		{Config{Interface: "eth0", Flags: []string{"defense"}}, `flags[0]: "defense": want one of`},
		{Config{Interface: "eth0", Flags: []string{}}, "flags: at least one flag"},
		{Config{Interface: "eth0", MinRate: -1}, "min_rate: -1 out of range [1, 1000000000]"},
		{Config{Interface: "eth0", Window: 5}, "window: 5 out of range [10, 1000000]"},
		{Config{Interface: "eth0", RingBytes: 3 << 20}, "ring_bytes: 3145728 is not a power of two"},
		{Config{Interface: "eth0", RingBytes: 1 << 31}, "ring_bytes: 2147483648 out of range"},
		{Config{Interface: "eth0", Interval: time.Millisecond}, "interval: 1ms out of range [10ms, 10s]"},
		{Config{Interface: "eth0", HalfLife: time.Hour}, "half_life: 1h out of range [1ms, 1m]"},
		{Config{Interface: "eth0", KernelSYNInterval: 2 * time.Minute}, "kernel_syn_interval: 2m out of range [10ms, 1m]"},
		{Config{Interface: "eth0", SYNLimit: MaxScoreLimit + 1}, "syn_limit: 1000001 out of range [1, 1000000]"},
		{Config{Interface: "eth0", ACKLimit: -1}, "ack_limit: -1 out of range [1, 1000000]"},
		{Config{Interface: "eth0", EventBudget: MaxEventBudget + 1}, "event_budget: 1000001 out of range [1, 1000000]"},
		{Config{Interface: "eth0", SYNACKWindow: 100}, "synack_window: 100 out of range [1024, 65535]"},
		{Config{Interface: "eth0", ConntrackEntries: 1}, "conntrack_entries: 1 out of range [16, 50000000]"},
		{Config{Interface: "eth0", DenyEntries: 1000, Deny: big}, "deny_entries: 1000 is below the deny list's capacity 2000000"},
		{Config{Interface: "eth0", PinPath: "relative"}, `pin_path: "relative": want an absolute path`},
		{Config{Interface: "eth0", UDPLimits: []UDPLimit{{Port: 53, PPS: 1}, {Port: 0}, {Port: 53, BPS: -1}, {Port: 9, PPS: MaxUDPPPS + 1}}},
			"udp_limits[1].port: 0 out of range [1, 65535]; udp_limits[2].bps: -1 out of range [0, 1125899906842624]; " +
				"udp_limits[2].port: 53 repeats udp_limits[0]; udp_limits[3].pps: 1099511627777 out of range [0, 1099511627776]"},
		{Config{Interface: "eth0", UDPLimits: make([]UDPLimit, MaxUDPLimits+1)}, "udp_limits: 65537 entries, at most 65536"},
	} {
		_, err := New(b.cfg)
		verr := b.cfg.WithDefaults().Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "xdp: invalid configuration: ") || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want one naming %q", b.cfg, err, b.want)
		}
		if verr == nil || verr.Error() != err.Error() {
			t.Errorf("%+v: Validate %v, New %v", b.cfg, verr, err)
		}
	}
	if _, err := New(Config{Mode: ModeOff}); err != nil {
		t.Errorf("mode off needs no interface: %v", err)
	}
	if _, err := New(Config{Mode: ModeOff, Flags: []string{}}); err != nil {
		t.Errorf("mode off needs no flag: %v", err)
	}
}

// TestConfigValidateAsIs checks that Validate does not take a zero for
// the default, reports every invalid key, not only the first, and that
// DefaultConfig and WithDefaults agree.
func TestConfigValidateAsIs(t *testing.T) {
	err := Config{Interface: "eth0", Flags: []string{"syn_flood"}, StaticReason: "config"}.Validate()
	want := "xdp: invalid configuration: mode: \"\": want auto, native, generic or off; k: 0 out of range [0.5, 20]; " +
		"min_rate: 0 out of range [1, 1000000000]; warmup: 0 out of range [1, 36000]; window: 0 out of range [10, 1000000]; " +
		"enter_samples: 0 out of range [1, 100]; exit_hold: 0s out of range [100ms, 1h]; interval: 0s out of range [10ms, 10s]; " +
		"syn_limit: 0 out of range [1, 1000000]; syn_limit_defense: 0 out of range [1, 1000000]; ack_limit: 0 out of range [1, 1000000]; " +
		"rst_limit: 0 out of range [1, 1000000]; half_life: 0s out of range [1ms, 1m]; kernel_syn_interval: 0s out of range [10ms, 1m]; " +
		"event_budget: 0 out of range [1, 1000000]; synack_window: 0 out of range [1024, 65535]; " +
		"score_entries: 0 out of range [16, 10000000]; conntrack_entries: 0 out of range [16, 50000000]; " +
		"ring_bytes: 0 out of range [65536, 1073741824]"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v\nwant %s", err, want)
	}
	var es conf.Errors
	if !errors.As(err, &es) || len(es) != 19 || es[1].Path != "k" || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("errors = %#v", es)
	}
	d := DefaultConfig()
	d.Interface = "eth0"
	if err := d.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	w := Config{Interface: "eth0"}.WithDefaults()
	w.AllowEntries, w.DenyEntries = 0, 0 // sized to the lists: none here
	if !reflect.DeepEqual(w, d) {
		t.Fatalf("WithDefaults %+v\nDefaultConfig %+v", w, d)
	}
	if neg := (Config{SYNLimit: -1}).WithDefaults(); neg.SYNLimit != -1 {
		t.Fatalf("WithDefaults changed a negative value: %+v", neg)
	}
	if got := (Config{Flags: []string{"syn_proxy", "defense", "nope", "drop_fragments"}}).FlagWord(); got != FlagSYNProxy|FlagDropFragments {
		t.Fatalf("FlagWord = %v", got)
	}
}

func TestParseFlags(t *testing.T) {
	for in, want := range map[string]Flags{
		"":                     0,
		"3":                    FlagSYNFlood | FlagSYNProxy,
		"0x100":                FlagDropFragments,
		"syn_flood, udp_stats": FlagSYNFlood | FlagUDPStats,
	} {
		if got, err := ParseFlags(in); err != nil || got != want {
			t.Errorf("ParseFlags(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"nope", "1048576", "syn_flood,", "-1"} {
		if _, err := ParseFlags(in); err == nil {
			t.Errorf("ParseFlags(%q) accepted", in)
		}
	}
	if s := (FlagSYNFlood | FlagSYNProxyAlways).String(); s != "syn_flood,syn_proxy_always" {
		t.Errorf("String %q", s)
	}
}

func TestModeOffAndStopWithoutStart(t *testing.T) {
	m, err := New(Config{Mode: ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
	m, _ = New(Config{Mode: ModeOff, Required: true})
	if err := m.Start(context.Background()); err != nil {
		t.Errorf("Start in mode off: %v", err)
	}
	if err := m.Start(context.Background()); err == nil {
		t.Error("second Start accepted")
	}
	st := m.Status()
	if st.Attached != AttachedNone || st.Reason != "xdp.mode is off" {
		t.Errorf("status %+v", st)
	}
	m.Stop()
	m.Stop()
	var nilM *Manager
	nilM.OnChange(ipset.Change{}) // safe before the manager exists
}

// TestUpdateValidates: Update reports every invalid field by key and
// applies none of them.
func TestUpdateValidates(t *testing.T) {
	m, err := New(Config{Mode: ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	bad, k, def := Flags(1<<20), 25.0, "maybe"
	err = m.Update(ConfigUpdate{Flags: &bad, K: &k, Defense: &def})
	want := `xdp: invalid configuration: flags: 0x100000 has unknown bits (known: 0x3ff); k: 25 out of range [0.5, 20]; defense: "maybe": want auto, on or off`
	if !errors.Is(err, ErrInvalidConfig) || err.Error() != want {
		t.Fatalf("Update = %v\nwant %s", err, want)
	}
	good, k := FlagCIDRLookup, 4.0
	err = m.Update(ConfigUpdate{Flags: &good, K: &k, Defense: &def})
	if st := m.Status(); err == nil || st.K != DefaultK || !slices.Equal(st.Flags, DefaultFlags.Names()) {
		t.Fatalf("a partly invalid update was applied: %v, %+v", err, st)
	}
	if err := m.Update(ConfigUpdate{Flags: &good, K: &k}); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); st.K != 4 || !slices.Equal(st.Flags, []string{"cidr_lookup"}) {
		t.Fatalf("status after update %+v", st)
	}
	// Flag names are checked as Validate checks Config.Flags, by index.
	err = m.Update(ConfigUpdate{FlagNames: []string{"syn_flood", "nope", "defense"}, K: &k})
	want = `xdp: invalid configuration: flags[1]: "nope": want one of ` + strings.Join(settableFlags.Names(), ", ") +
		`; flags[2]: "defense": want one of ` + strings.Join(settableFlags.Names(), ", ")
	if !errors.Is(err, ErrInvalidConfig) || err.Error() != want {
		t.Fatalf("Update(FlagNames) = %v\nwant %s", err, want)
	}
	if err := m.Update(ConfigUpdate{Flags: &good, FlagNames: []string{}}); err == nil || !strings.Contains(err.Error(), "flags: set by word or by names, not both") {
		t.Fatalf("Update(Flags and FlagNames) = %v", err)
	}
	if err := m.Update(ConfigUpdate{FlagNames: []string{"syn_flood", "ack_flood"}}); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); !slices.Equal(st.Flags, []string{"syn_flood", "ack_flood"}) {
		t.Fatalf("flags after FlagNames update %v", st.Flags)
	}
	if err := m.Update(ConfigUpdate{FlagNames: []string{}}); err != nil || m.Status().FlagWord != 0 {
		t.Fatalf("Update(no flag names) = %v, word %d", err, m.Status().FlagWord)
	}
}
