package xdp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/ipset"
)

func TestConfigDefaultsAndBounds(t *testing.T) {
	m, err := New(Config{Interface: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	c := m.cfg
	if c.Mode != ModeAuto || c.Flags != DefaultFlags || c.K != DefaultK || c.AllowEntries != 65536 ||
		c.DenyEntries != 1_000_000 || c.ScoreEntries != 500_000 || c.ConntrackEntries != 2_000_000 ||
		c.RingBytes != 4<<20 || c.Interval != 100*time.Millisecond || c.SYNACKWindow != 65535 {
		t.Errorf("defaults %+v", c)
	}
	big, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 2_000_000})
	for _, b := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "interface"},
		{Config{Interface: "a-very-long-interface-name"}, "interface"},
		{Config{Interface: "eth0", Mode: "fast"}, "mode"},
		{Config{Interface: "eth0", K: 25}, "k 25"},
		{Config{Interface: "eth0", K: 0.1}, "k 0.1"},
		{Config{Interface: "eth0", Flags: 1 << 20}, "flags"},
		{Config{Interface: "eth0", MinRate: -1}, "min_rate"},
		{Config{Interface: "eth0", Window: 5}, "window"},
		{Config{Interface: "eth0", RingBytes: 3 << 20}, "power of two"},
		{Config{Interface: "eth0", RingBytes: 1 << 31}, "ring_bytes"},
		{Config{Interface: "eth0", Interval: time.Millisecond}, "interval"},
		{Config{Interface: "eth0", HalfLife: time.Hour}, "half_life"},
		{Config{Interface: "eth0", KernelSYNInterval: 2 * time.Minute}, "kernel_syn_interval"},
		{Config{Interface: "eth0", SYNLimit: MaxScoreLimit + 1}, "syn_limit"},
		{Config{Interface: "eth0", EventBudget: MaxEventBudget + 1}, "event_budget"},
		{Config{Interface: "eth0", SYNACKWindow: 100}, "synack_window"},
		{Config{Interface: "eth0", ConntrackEntries: 1}, "conntrack_entries"},
		{Config{Interface: "eth0", DenyEntries: 1000, Deny: big}, "below the deny list's capacity"},
		{Config{Interface: "eth0", PinPath: "relative"}, "pin_path"},
	} {
		_, err := New(b.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want one naming %q", b.cfg, err, b.want)
		}
	}
	if _, err := New(Config{Mode: ModeOff}); err != nil {
		t.Errorf("mode off needs no interface: %v", err)
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
