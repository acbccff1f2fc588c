package gateway

import (
	"net/http"
	"reflect"
	"testing"
)

func TestHeaderRulesStrip(t *testing.T) {
	hr := newHeaderRules(DefaultStripHeaders, []string{"X-Auth-Project", "X-Auth-Subject"})
	h := http.Header{
		"X-Real-Ip":          {"6.6.6.6"},
		"X_real_ip":          {"6.6.6.6"}, // Go keeps a name with '_' as sent, canonicalized
		"True-Client-Ip":     {"6.6.6.6"},
		"Cf-Connecting-Ip":   {"6.6.6.6"},
		"X-Auth-Project":     {"victim"},
		"X_auth_subject":     {"root"},
		"Idempotency-Replay": {"true"},
		"X-Keep":             {"1"},
		"Idempotency-Key":    {"k1"},
		"X-Forwarded-For":    {"1.2.3.4"}, // replaced by the proxy, not stripped here
	}
	hr.apply(h)
	want := http.Header{"X-Keep": {"1"}, "Idempotency-Key": {"k1"}, "X-Forwarded-For": {"1.2.3.4"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("after strip: %v", h)
	}
}

// Nothing to change: no allocation.
func TestNoRaceHeaderRulesCleanRequestDoesNotAllocate(t *testing.T) {
	hr := newHeaderRules(DefaultStripHeaders, []string{"X-Auth-Project"})
	h := http.Header{"Connection": {"keep-alive"}, "X-A": {"1"}, "Accept": {"*/*"}}
	if n := testing.AllocsPerRun(100, func() { hr.apply(h) }); n != 0 {
		t.Errorf("apply on a clean request: %v allocs", n)
	}
}

func TestHeaderRulesConnectionTokens(t *testing.T) {
	hr := newHeaderRules(DefaultStripHeaders, []string{"X-Auth-Project"})
	for _, c := range []struct {
		in   []string
		want []string // nil: header removed
	}{
		{[]string{"X-Auth-Project"}, nil},
		{[]string{"Idempotency-Key"}, nil},
		{[]string{"keep-alive, Idempotency-Key, X-Hop"}, []string{"keep-alive, X-Hop"}},
		{[]string{"X-Hop", "x_auth_project , forwarded"}, []string{"X-Hop"}},
		{[]string{"close"}, []string{"close"}},
	} {
		h := http.Header{"Connection": append([]string(nil), c.in...)}
		hr.apply(h)
		if got := h["Connection"]; !reflect.DeepEqual(got, c.want) {
			t.Errorf("Connection %q → %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFilterUpgrade(t *testing.T) {
	for _, c := range []struct {
		name      string
		h         http.Header
		websocket bool
		want      http.Header
	}{
		{"websocket allowed", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, true,
			http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}},
		{"websocket not allowed", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, false, http.Header{}},
		{"h2c", http.Header{"Upgrade": {"h2c"}, "Connection": {"Upgrade, HTTP2-Settings"}, "Http2-Settings": {"AAMAAABkAARAAAAAAAIAAAAA"}}, true, http.Header{}},
		{"two protocols", http.Header{"Upgrade": {"websocket", "h2c"}, "Connection": {"keep-alive, Upgrade"}}, true,
			http.Header{"Connection": {"keep-alive"}}},
		{"none", http.Header{"Connection": {"keep-alive"}}, false, http.Header{"Connection": {"keep-alive"}}},
	} {
		filterUpgrade(c.h, c.websocket)
		if !reflect.DeepEqual(c.h, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.h, c.want)
		}
	}
}
