package main

import (
	"strings"
	"testing"
)

// TestCtlTTLInDays: ctl's --ttl reads durations as the configuration
// does, whole days included; a malformed one is a usage error.
func TestCtlTTLInDays(t *testing.T) {
	a := startCtlAPI(t, ctlTestToken)
	env := map[string]string{
		"BULWARK_CONTROL_ADDR":  a.srv.URL,
		"BULWARK_CONTROL_TOKEN": ctlTestToken,
		"BULWARK_STATE_DIR":     t.TempDir(),
	}
	for _, tc := range []struct{ ttl, prefix, expires string }{
		{"1d", "203.0.113.7/32", "2026-11-30T12:00:00Z"},
		{"1d12h", "203.0.113.8/32", "2026-12-01T00:00:00Z"},
		{"90m", "203.0.113.9/32", "2026-11-29T13:30:00Z"},
	} {
		code, out, errs := ctlRun(env, "block", tc.prefix, "--ttl", tc.ttl)
		if code != 0 || !strings.Contains(out, "blocked "+tc.prefix+" (expires "+tc.expires+")") {
			t.Errorf("block --ttl %s: %d %q %q", tc.ttl, code, out, errs)
		}
	}
	for _, bad := range []string{"1x", "d", "-1d"} {
		if code, _, errs := ctlRun(env, "block", "203.0.113.10/32", "--ttl", bad); code != 2 || !strings.Contains(errs, "--ttl") && !strings.Contains(errs, "-ttl") {
			t.Errorf("block --ttl %s: exit %d %q, want a usage error", bad, code, errs)
		}
	}
}
