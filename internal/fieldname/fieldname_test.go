package fieldname

import "testing"

func TestEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"X-Real-IP", "x_real_ip", true}, {"X-Real-IP", "X-Real-IPs", false}, {"A-B", "a-c", false}, {"", "", true}, {"X_A", "X-A", true}, {"X_A", "XxA", false}} {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("Equal(%q, %q) = %v", c.a, c.b, got)
		}
		if got := Equal([]byte(c.a), c.b); got != c.want {
			t.Errorf("Equal([]byte(%q), %q) = %v", c.a, c.b, got)
		}
	}
}

func TestUnderscored(t *testing.T) {
	for name, want := range map[string]bool{"X_A": true, "X-A": false, "_": true, "": false} {
		if got := Underscored(name); got != want {
			t.Errorf("Underscored(%q) = %v", name, got)
		}
	}
}

func TestToken(t *testing.T) {
	for s, want := range map[string]bool{
		"X-Api-Key": true, "x_api_key": true, "!#$%&'*+-.^_`|~09azAZ": true,
		"": false, "X Api": false, "X:Api": false, "X\"": false, "é": false, "a\x00": false, "(a)": false,
	} {
		if got := Token(s); got != want {
			t.Errorf("Token(%q) = %v, want %v", s, got, want)
		}
	}
}
