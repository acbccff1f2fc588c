package peer

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" means ok == false
	}{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.1:0", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"}, // IPv4-mapped folds to IPv4
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"[fe80::1%eth0]:80", "fe80::1"}, // zone dropped
		{"fe80::1%eth0", "fe80::1"},
		{"[::1]:8080", "::1"},
		{"127.0.0.1:65535", "127.0.0.1"},

		{"", ""},
		{"@", ""},                               // unix socket peer
		{"192.0.2.1:", ""},                      // empty port
		{"192.0.2.1:65536", ""},                 // port out of range
		{"192.0.2.1:http", ""},                  // named port
		{"[192.0.2.1]:80", ""},                  // brackets around IPv4
		{"[192.0.2.1]", ""},                     // brackets around IPv4
		{"2001:db8::1:80:", ""},                 // trailing colon
		{"[2001:db8::1]:", ""},                  // empty port
		{"[2001:db8::1", ""},                    // unterminated bracket
		{"192.0.2.1\n", ""},                     // control character
		{"192.0.2.1\x00:80", ""},                // NUL
		{" 192.0.2.1", ""},                      // space
		{"192.0.2.1 ", ""},                      // space
		{"192.0.2.1:80\x7f", ""},                // DEL
		{"１９２.0.2.1", ""},                       // non-ASCII digits
		{"010.0.2.1", ""},                       // leading zero
		{"unknown", ""},                         // RFC 7239 unknown
		{"example.com:80", ""},                  // host name
		{"1.2.3", ""},                           // short IPv4
		{strings.Repeat("1", MaxAddrLen+1), ""}, // over-long
		{"[fe80::1%" + strings.Repeat("z", MaxAddrLen) + "]:80", ""},
	}
	for _, tt := range tests {
		got, ok := Normalize(tt.in)
		if tt.want == "" {
			if ok || got.IsValid() {
				t.Errorf("Normalize(%q) = %v, %v; want unknown", tt.in, got, ok)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tt.want) {
			t.Errorf("Normalize(%q) = %v, %v; want %s", tt.in, got, ok, tt.want)
		}
	}
}

func TestNormalizeLengthBoundary(t *testing.T) {
	// The longest accepted string is exactly MaxAddrLen bytes.
	zone := strings.Repeat("z", MaxAddrLen-len("[fe80::1%]:80"))
	s := "[fe80::1%" + zone + "]:80"
	if len(s) != MaxAddrLen {
		t.Fatalf("test string is %d bytes", len(s))
	}
	if a, ok := Normalize(s); !ok || a != netip.MustParseAddr("fe80::1") {
		t.Fatalf("Normalize(%d bytes) = %v, %v", len(s), a, ok)
	}
}

func TestNoRaceNormalizeDoesNotAllocate(t *testing.T) {
	for _, s := range []string{"192.0.2.1:1234", "[2001:db8::1]:443", "192.0.2.1", "2001:db8::1"} {
		if n := testing.AllocsPerRun(100, func() { Normalize(s) }); n != 0 {
			t.Errorf("Normalize(%q) allocates %.0f times", s, n)
		}
	}
}
