package h1

import (
	"strings"
	"testing"
)

// hopFields is RFC 9110 §7.6.1's list as net/http/httputil's hopHeaders
// spells it (the net/http engine's ReverseProxy removes exactly these).
var hopFields = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func TestHopByHop(t *testing.T) {
	for _, f := range hopFields {
		for _, name := range []string{f, strings.ToLower(f), strings.ToUpper(f)} {
			if !HopByHop(name) || !HopByHop([]byte(name)) {
				t.Errorf("HopByHop(%q) = false", name)
			}
		}
	}
	for _, name := range []string{
		"", "Content-Length", "Host", "X-Connection", "Connectio", "Connections",
		"Proxy_Connection", "Keep_Alive", "Tf", "Trailers", "Upgrades", "Proxy-Authorizatio",
	} {
		if HopByHop(name) || HopByHop([]byte(name)) {
			t.Errorf("HopByHop(%q) = true", name)
		}
	}
}

func TestNoRaceHopByHopAllocs(t *testing.T) {
	name := []byte("Proxy-Authorization")
	if n := testing.AllocsPerRun(100, func() { HopByHop(name) }); n != 0 {
		t.Fatalf("HopByHop allocates %v times", n)
	}
}
