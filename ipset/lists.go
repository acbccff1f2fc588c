package ipset

import (
	"net/netip"
	"strings"

	"github.com/bulwarkhq/bulwark/conf"
)

// ListsConfig configures an allow list and a deny list (allow wins over
// deny, see [Verdict]) with their static entries: the gateway's ipsets
// section. Runtime entries (added through an API) share each list's
// capacity with the static ones.
type ListsConfig struct {
	// Allow (allow) and Deny (deny) are the static entries of each list.
	Allow []StaticEntry `yaml:"allow"`
	Deny  []StaticEntry `yaml:"deny"`
	// AllowCapacity (allow_capacity) and DenyCapacity (deny_capacity)
	// bound each list, static and runtime entries together: [1,
	// MaxCapacity]. Defaults DefaultAllowCapacity (65536) and
	// DefaultDenyCapacity (1000000).
	AllowCapacity int `yaml:"allow_capacity"`
	DenyCapacity  int `yaml:"deny_capacity"`
}

// DefaultListsConfig returns two empty lists of the default capacities.
func DefaultListsConfig() ListsConfig {
	return ListsConfig{AllowCapacity: DefaultAllowCapacity, DenyCapacity: DefaultDenyCapacity}
}

// WithDefaults returns c with zero capacities set to the defaults.
func (c ListsConfig) WithDefaults() ListsConfig {
	if c.AllowCapacity == 0 {
		c.AllowCapacity = DefaultAllowCapacity
	}
	if c.DenyCapacity == 0 {
		c.DenyCapacity = DefaultDenyCapacity
	}
	return c
}

// Validate reports every invalid setting by key, as it is: each
// capacity, each entry (see [StaticEntry.Validate]), no prefix twice in
// one list, and no more static entries than the list holds. The error is
// a conf.Errors wrapping ErrInvalid.
func (c ListsConfig) Validate() error {
	f := conf.Check{Kind: ErrInvalid}
	f.Int("allow_capacity", int64(c.AllowCapacity), 1, MaxCapacity)
	f.Int("deny_capacity", int64(c.DenyCapacity), 1, MaxCapacity)
	for _, l := range []struct {
		name     string
		entries  []StaticEntry
		capacity int
	}{{"allow", c.Allow, c.AllowCapacity}, {"deny", c.Deny, c.DenyCapacity}} {
		if len(l.entries) > l.capacity && l.capacity >= 1 {
			f.Add(l.name, "%d static entries exceed %s_capacity %d", len(l.entries), l.name, l.capacity)
		}
		first := make(map[netip.Prefix]int, len(l.entries))
		for i, e := range l.entries {
			p := conf.Index(l.name, i)
			f.Sub(p, e.Validate())
			pfx := e.Prefix()
			if !pfx.IsValid() {
				continue
			}
			if j, dup := first[pfx]; dup {
				f.Add(conf.Join(p, "ip"), "%s duplicates %s", pfx, conf.Index(l.name, j))
				continue
			}
			first[pfx] = i
		}
	}
	return f.Err()
}

// StaticEntry is one configured list entry, in the text form a file
// writes: either a plain string, the address or prefix alone
// (UnmarshalText), or a mapping {ip, reason}.
type StaticEntry struct {
	// IP (ip) is an address or a CIDR prefix without host bits, as
	// [ParsePrefix] accepts it.
	IP string `yaml:"ip"`
	// Reason (reason) is at most MaxReasonBytes (64) bytes of printable
	// ASCII; the gateway's default is "config".
	Reason string `yaml:"reason"`
}

// UnmarshalText accepts the short form of an entry, a plain string: the
// address or prefix. (YAML scalars only; the {ip, reason} mapping is
// decoded field by field.)
func (e *StaticEntry) UnmarshalText(text []byte) error {
	e.IP = string(text)
	return nil
}

// Prefix returns the entry's prefix, or the zero Prefix when IP does not
// parse (Validate reports that).
func (e StaticEntry) Prefix() netip.Prefix {
	p, err := ParsePrefix(e.IP)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// Validate reports a missing or unparsable address and a reason that is
// too long or not printable, by key. The error is a conf.Errors wrapping
// ErrInvalid.
func (e StaticEntry) Validate() error {
	f := conf.Check{Kind: ErrInvalid}
	if e.IP == "" {
		f.Add("ip", "an address or CIDR prefix is required")
		return f.Err()
	}
	if !ValidReason(e.Reason) {
		f.Add("reason", "want at most %d bytes of printable ASCII", MaxReasonBytes)
	}
	if _, err := ParsePrefix(e.IP); err != nil {
		f.Add("ip", "%s", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return f.Err()
}
