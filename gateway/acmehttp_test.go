package gateway

import (
	"strings"
	"testing"

	"github.com/caddyserver/certmagic"
)

// TestACMEWantsHTTP01: a cleartext listener looks a challenge up only
// for a GET of the challenge path with a base64url token of at most
// maxACMETokenLen bytes, no query, for a Host that is a managed domain
// (any case, a trailing dot, a port), and only once the issuer runs;
// everything else falls through without a lookup.
func TestACMEWantsHTTP01(t *testing.T) {
	s := &acmeSource{managed: map[string]bool{"www.example.com": true}}
	tok := strings.Repeat("Ab1-_", 8) + "xyz"
	if s.wantsHTTP01("GET", acmeChallengePrefix+tok, "www.example.com") {
		t.Error("looked up before the issuer started")
	}
	s.issuer.Store(&certmagic.ACMEIssuer{})
	for _, c := range []struct {
		method, target, host string
		want                 bool
	}{
		{"GET", acmeChallengePrefix + tok, "www.example.com", true},
		{"GET", acmeChallengePrefix + tok, "WWW.Example.COM.:80", true},
		{"GET", acmeChallengePrefix + strings.Repeat("a", maxACMETokenLen), "www.example.com", true},
		{"GET", acmeChallengePrefix + strings.Repeat("a", maxACMETokenLen+1), "www.example.com", false},
		{"HEAD", acmeChallengePrefix + tok, "www.example.com", false},
		{"POST", acmeChallengePrefix + tok, "www.example.com", false},
		{"GET", acmeChallengePrefix + tok, "other.example.com", false},
		{"GET", acmeChallengePrefix + tok, "example.com", false},
		{"GET", acmeChallengePrefix + tok, "www.example.com:x", false},
		{"GET", acmeChallengePrefix + tok, "", false},
		{"GET", acmeChallengePrefix + tok + "?a=1", "www.example.com", false},
		{"GET", acmeChallengePrefix, "www.example.com", false},
		{"GET", acmeChallengePrefix + "a/b", "www.example.com", false},
		{"GET", acmeChallengePrefix + "a%2Fb", "www.example.com", false},
		{"GET", acmeChallengePrefix + "a.b", "www.example.com", false},
		{"GET", "http://www.example.com" + acmeChallengePrefix + tok, "www.example.com", false},
		{"GET", "/x" + acmeChallengePrefix + tok, "www.example.com", false},
		{"GET", "/.well-known/acme-challenge", "www.example.com", false},
	} {
		if got := s.wantsHTTP01(c.method, c.target, c.host); got != c.want {
			t.Errorf("%s %q Host %q: %v, want %v", c.method, c.target, c.host, got, c.want)
		}
	}
	var none *acmeSource
	if none.wantsHTTP01("GET", acmeChallengePrefix+tok, "www.example.com") {
		t.Error("a gateway without ACME looked up a challenge")
	}
}
