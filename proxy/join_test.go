package proxy

import "testing"

func TestJoinSlash(t *testing.T) {
	for _, c := range []struct{ prefix, path, want string }{
		{"/base/", "/x", "/base/x"},
		{"/base", "/x", "/base/x"},
		{"/base/", "x", "/base/x"},
		{"/base", "x", "/base/x"},
		{"/base", "", "/base/"},
	} {
		if got := singleJoin(c.prefix, c.path); got != c.want {
			t.Errorf("singleJoin(%q, %q) = %q, want %q", c.prefix, c.path, got, c.want)
		}
		add, drop := joinSlash(c.prefix, []byte(c.path))
		got := c.prefix
		if add {
			got += "/"
		}
		if got += c.path[drop:]; got != c.want {
			t.Errorf("joinSlash(%q, []byte(%q)) joins %q, want %q", c.prefix, c.path, got, c.want)
		}
	}
}
