package proxy

import "testing"

func TestForwardingAlias(t *testing.T) {
	for name, want := range map[string]bool{
		"X_Forwarded_For":       true,
		"x_forwarded_for":       true,
		"X-Forwarded_For":       true,
		"X_Forwarded-Host":      true,
		"X-Forwarded-Client_IP": true,
		"X-Forwarded-For":       false, // the real one: handled by the forwarding rules
		"X-Forwarded-":          false,
		"X_Forwarded_":          false,
		"X-Real_IP":             false, // request_headers.strip's business
		"Forwarded":             false,
		"Y_Forwarded_For":       false,
		"X_Forwardee_For":       false,
		"":                      false,
	} {
		if got := forwardingAlias(name); got != want {
			t.Errorf("forwardingAlias(%q) = %v, want %v", name, got, want)
		}
		if got := forwardingAlias([]byte(name)); got != want {
			t.Errorf("forwardingAlias([]byte(%q)) = %v, want %v", name, got, want)
		}
	}
}
