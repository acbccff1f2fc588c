package shield

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/keyed"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"defaults", DefaultConfig(), ""},
		{"maxima", Config{Window: HardMaxWindow, PerPeer: HardMaxPerPeer, Global: HardMaxGlobal, MaxPeers: HardMaxPeers, ScanLimit: HardMaxScanLimit}, ""},
		{"minima", Config{Window: MinWindow, PerPeer: 1, Global: 1, MaxPeers: 1, ScanLimit: 1}, ""},
		{"short window", Config{Window: time.Millisecond}, "shield: invalid config: window: 1ms out of range [1s, 1h]"},
		{"long window", Config{Window: 2 * time.Hour}, "window: 2h out of range [1s, 1h]"},
		{"negative window", Config{Window: -time.Second}, "window: -1s out of range"},
		{"per peer", Config{PerPeer: HardMaxPerPeer + 1}, "per_peer: 1000001 out of range [1, 1000000]"},
		{"negative per peer", Config{PerPeer: -1}, "per_peer: -1 out of range [1, 1000000]"},
		{"global", Config{Global: HardMaxGlobal + 1}, "global: 100000001 out of range [1, 100000000]"},
		{"max peers", Config{MaxPeers: HardMaxPeers + 1}, "max_peers: 1048577 out of range [1, 1048576]"},
		{"scan limit", Config{ScanLimit: HardMaxScanLimit + 1}, "scan_limit: 1025 out of range [1, 1024]"},
		{"negative scan limit", Config{ScanLimit: -5}, "scan_limit: -5 out of range"},
	}
	for _, tt := range tests {
		// Validate checks the values as they are; New fills the zeros
		// with the defaults first.
		err := tt.cfg.WithDefaults().Validate()
		s, nerr := New(tt.cfg)
		if tt.want == "" {
			if err != nil || nerr != nil {
				t.Errorf("%s: Validate = %v, New = %v", tt.name, err, nerr)
			} else {
				s.Close()
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "shield: invalid config: ") {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
		if nerr == nil || s != nil || !errors.Is(nerr, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want an error", tt.name, nerr)
		}
	}
}

// TestConfigValidateNetworks: the network budget's errors are keyed's,
// under networks.
func TestConfigValidateNetworks(t *testing.T) {
	c := DefaultConfig()
	c.Networks = keyed.NetworkBudget{Share: 2}
	err := c.Validate()
	if err == nil || err.Error() != "keyed: invalid config: networks.share: 2 out of range [0, 1]" || !errors.Is(err, keyed.ErrInvalidConfig) {
		t.Fatalf("Validate = %v", err)
	}
	if s, err := New(c); s != nil || !errors.Is(err, keyed.ErrInvalidConfig) {
		t.Fatalf("New = %v, %v", s, err)
	}
}

// TestConfigValidateAsIs checks that Validate does not take a zero for
// the default, and reports every invalid key, not only the first.
func TestConfigValidateAsIs(t *testing.T) {
	err := Config{}.Validate()
	want := "shield: invalid config: window: 0s out of range [1s, 1h]; per_peer: 0 out of range [1, 1000000]; " +
		"global: 0 out of range [1, 100000000]; max_peers: 0 out of range [1, 1048576]; scan_limit: 0 out of range [1, 1024]"
	if err == nil || err.Error() != want {
		t.Fatalf("Config{}.Validate() = %v\nwant %s", err, want)
	}
	var es conf.Errors
	if !errors.As(err, &es) || len(es) != 5 || es[1].Path != "per_peer" {
		t.Fatalf("errors = %#v", es)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if !sameNumbers(c, DefaultConfig()) {
		t.Fatalf("Config{}.WithDefaults() = %+v, want DefaultConfig() %+v", c, DefaultConfig())
	}
	if c.Window != 60*time.Second || c.PerPeer != 300 || c.Global != 1200 || c.MaxPeers != 4096 || c.ScanLimit != 64 {
		t.Fatalf("defaults = %+v", c)
	}
	if neg := (Config{PerPeer: -1}).WithDefaults(); neg.PerPeer != -1 {
		t.Fatalf("WithDefaults changed a negative value: %+v", neg)
	}
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.table.Capacity() != 4096 || s.perPeer != 300 || s.global.limit != 1200 || s.global.window != int64(time.Minute) || s.window != time.Minute {
		t.Fatalf("shield built with %d/%d/%d/%v", s.table.Capacity(), s.perPeer, s.global.limit, s.window)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	base := Config{Window: 30 * time.Second, PerPeer: 10, Global: 20, MaxPeers: 30, ScanLimit: 7}

	got, err := ConfigFromEnv(base, env())
	if err != nil || !sameNumbers(got, base) {
		t.Fatalf("no variables: %+v, %v", got, err)
	}
	got, err = ConfigFromEnv(base, env(EnvWindow, "90s", EnvPerPeer, "100", EnvGlobal, " 5000 ", EnvMaxPeers, "8192"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Window: 90 * time.Second, PerPeer: 100, Global: 5000, MaxPeers: 8192, ScanLimit: 7}
	if !sameNumbers(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	got, err = ConfigFromEnv(Config{}, env(EnvWindow, "1h", EnvPerPeer, "1000000", EnvGlobal, "100000000", EnvMaxPeers, "1048576"))
	if err != nil || got.WithDefaults().Validate() != nil {
		t.Fatalf("maxima: %+v, %v", got, err)
	}

	bad := []struct {
		name, value, want string
	}{
		{EnvWindow, "0s", `BULWARK_SHIELD_WINDOW="0s": must be a Go duration in [1s, 1h0m0s]`},
		{EnvWindow, "999ms", "BULWARK_SHIELD_WINDOW"},
		{EnvWindow, "61m", "BULWARK_SHIELD_WINDOW"},
		{EnvWindow, "60", "BULWARK_SHIELD_WINDOW"}, // a unit is required
		{EnvWindow, "-1m", "BULWARK_SHIELD_WINDOW"},
		{EnvPerPeer, "0", `BULWARK_SHIELD_PER_PEER="0": must be an integer in [1, 1000000]`},
		{EnvPerPeer, "1000001", "BULWARK_SHIELD_PER_PEER"},
		{EnvPerPeer, "3e2", "BULWARK_SHIELD_PER_PEER"},
		{EnvPerPeer, "-5", "BULWARK_SHIELD_PER_PEER"},
		{EnvGlobal, "100000001", `BULWARK_SHIELD_GLOBAL="100000001": must be an integer in [1, 100000000]`},
		{EnvGlobal, "many", "BULWARK_SHIELD_GLOBAL"},
		{EnvMaxPeers, "1048577", `BULWARK_SHIELD_MAX_PEERS="1048577": must be an integer in [1, 1048576]`},
		{EnvMaxPeers, "99999999999999999999999", "BULWARK_SHIELD_MAX_PEERS"},
		{EnvMaxPeers, strings.Repeat("9", 100), `"` + strings.Repeat("9", 32) + `"...`},
	}
	for _, b := range bad {
		_, err := ConfigFromEnv(base, env(b.name, b.value))
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s=%q: err = %v, want %q", b.name, b.value, err, b.want)
		}
		if err != nil && len(err.Error()) > 160 {
			t.Errorf("%s: error echoes too much: %d bytes", b.name, len(err.Error()))
		}
	}
}

func TestConfigFromProcessEnv(t *testing.T) {
	t.Setenv(EnvPerPeer, "42")
	t.Setenv(EnvWindow, "")
	got, err := ConfigFromEnv(Config{}, nil)
	if err != nil || got.PerPeer != 42 || got.Window != 0 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func sameNumbers(a, b Config) bool {
	return a.Window == b.Window && a.PerPeer == b.PerPeer && a.Global == b.Global && a.MaxPeers == b.MaxPeers && a.ScanLimit == b.ScanLimit
}
