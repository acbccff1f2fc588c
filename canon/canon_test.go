package canon

import (
	"errors"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	for _, c := range []struct {
		raw      string
		path     string
		trailing bool
		flags    Flag
	}{
		{"/", "/", false, 0},
		{"/login", "/login", false, 0},
		{"/login/", "/login", true, 0},
		{"/LOGIN", "/LOGIN", false, 0}, // case is kept; matching folds it
		{"/api/v1/items", "/api/v1/items", false, 0},
		{"/login%2F", "/login", true, EncodedSeparator},
		{"/login%2f", "/login", true, EncodedSeparator},
		{"/api%2Fexports", "/api/exports", false, EncodedSeparator},
		{"/api%5Cexports", "/api/exports", false, EncodedSeparator},
		{"/api\\exports", "/api/exports", false, Backslash},
		{"/login;jsessionid=1", "/login", false, Params},
		{"/log;x/in", "/log/in", false, Params},
		{"/a/..;/login", "/login", false, Params | DotSegments}, // Tomcat's "..;" bypass
		{"/a/../login", "/login", false, DotSegments},
		{"/./login", "/login", false, DotSegments},
		{"/login/.", "/login", true, DotSegments},
		{"/login/x/..", "/login", true, DotSegments},
		{"/../../login", "/login", false, DotSegments},
		{"//login", "/login", false, 0},
		{"/login//", "/login", true, 0},
		{"/a//b///c", "/a/b/c", false, 0},
		{"/%6c%6F%67%69%6e", "/login", false, 0},
		{"/%2e%2e/login", "/login", false, DotSegments},
		{"/%2E/login", "/login", false, DotSegments},
		{"/login%00", "/login\x00", false, ControlByte},
		{"/login%0a", "/login\n", false, ControlByte},
		// Raw control bytes (net/http refuses them in a request line; a
		// caller may not have one in front).
		{"/login\x00", "/login\x00", false, ControlByte},
		{"/log\x01in", "/log\x01in", false, ControlByte},
		{"/login\x7f", "/login\x7f", false, ControlByte},
		{"/a\tb", "/a\tb", false, ControlByte},
		{"/login%252F", "/login%2F", false, DoubleEncoded},
		{"/%252e%252e/x", "/%2e%2e/x", false, DoubleEncoded},
		{"/a%2541", "/a%41", false, DoubleEncoded},
		{"/caf%C3%A9", "/café", false, 0},
		{"/.hidden", "/.hidden", false, 0},
		{"/a/...", "/a/...", false, 0},
		{"/%", "", false, 0},
		{"*", "*", false, 0},
	} {
		got, err := Path(c.raw)
		if c.path == "" {
			if !errors.Is(err, ErrInvalidPath) {
				t.Errorf("Path(%q) = %+v, %v; want ErrInvalidPath", c.raw, got, err)
			}
			continue
		}
		if err != nil || got.Path != c.path || got.Trailing != c.trailing || got.Flags != c.flags {
			t.Errorf("Path(%q) = %+v, %v; want {%q %v %b}", c.raw, got, err, c.path, c.trailing, c.flags)
		}
	}
}

func TestPathInvalid(t *testing.T) {
	for _, raw := range []string{"", "login", "http://x/", "/%", "/%4", "/%zz", "/a%g1", "/" + strings.Repeat("a", MaxPathBytes),
		"/x#/../login.php", "/#", "/login#", "/a%2F#b"} {
		if _, err := Path(raw); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Path(%.40q): err %v, want ErrInvalidPath", raw, err)
		}
	}
}

func TestNoRacePathCanonicalDoesNotAllocate(t *testing.T) {
	for _, raw := range []string{"/", "/login", "/api/v1/items/42", "/api/v1/items/"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = Path(raw) }); n != 0 {
			t.Errorf("Path(%q): %v allocs, want 0", raw, n)
		}
	}
}

func TestNoRaceHostDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = Host("admin.example.com:443") }); n != 0 {
		t.Errorf("Host of a lower-case name: %v allocs", n)
	}
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "",
		"admin.example.com":       "admin.example.com",
		"ADMIN.example.com":       "admin.example.com",
		"admin.example.com.":      "admin.example.com",
		"admin.example.com.:8443": "admin.example.com",
		"Admin.Example.Com:80":    "admin.example.com",
		"[::1]:8080":              "[::1]",
		"[2001:DB8::1]":           "[2001:db8::1]",
		"127.0.0.1:9":             "127.0.0.1",
		"localhost..":             "localhost",
	} {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTarget(t *testing.T) {
	for _, c := range []struct{ in, path, auth string }{
		{"/login?user=a", "/login", ""},
		{"/login", "/login", ""},
		{"*", "*", ""},
		{"http://admin.example.com/login?x", "/login", "admin.example.com"},
		{"https://h:8443", "/", "h:8443"},
		{"http://h/a%2Fb", "/a%2Fb", "h"},
		{"/x#/../login.php?a", "/x#/../login.php", ""}, // kept, for Path to refuse
	} {
		p, a := Target(c.in)
		if p != c.path || a != c.auth {
			t.Errorf("Target(%q) = %q, %q; want %q, %q", c.in, p, a, c.path, c.auth)
		}
	}
}

// FuzzPath checks the invariants of every canonical path: it starts with
// "/", has no empty, "." or ".." segment and no trailing "/" (root
// excepted), never panics, and canonicalizing it again (after escaping
// what decoding produced) is the identity.
func FuzzPath(f *testing.F) {
	for _, s := range []string{"/", "/login", "/LOGIN/", "/a/../b", "/a/..;/b", "/%2e%2e/%2F", "//x//", "/a%252F", "/\\x", "/;/;/", "/%00", "/a/b/c/../../../..", "/%", "/x#/../y", "/a%23b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		res, err := Path(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		p := res.Path
		if p == "*" {
			if raw != "*" {
				t.Fatalf("%q gave *", raw)
			}
			return
		}
		if !strings.HasPrefix(p, "/") || (len(p) > 1 && strings.HasSuffix(p, "/")) {
			t.Fatalf("%q → %q: bad shape", raw, p)
		}
		if p != "/" {
			for _, seg := range strings.Split(p[1:], "/") {
				if seg == "" || seg == "." || seg == ".." || strings.Contains(seg, ";") {
					t.Fatalf("%q → %q: segment %q left", raw, p, seg)
				}
			}
		}
		// Re-escaping '%', '#' and control bytes makes the canonical path a
		// valid raw path; it must canonicalize to itself.
		var b strings.Builder
		for i := 0; i < len(p); i++ {
			switch c := p[i]; {
			case c == '%' || c == '#' || c < 0x20 || c == 0x7f || c == '\\':
				b.WriteString("%")
				b.WriteByte("0123456789ABCDEF"[c>>4])
				b.WriteByte("0123456789ABCDEF"[c&15])
			default:
				b.WriteByte(c)
			}
		}
		again, err := Path(b.String())
		if err != nil || again.Path != p {
			t.Fatalf("%q → %q → %q (%v): not idempotent", raw, p, again.Path, err)
		}
	})
}

func BenchmarkPathCanonical(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Path("/api/v1/items/42")
	}
}

func BenchmarkPathVariant(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Path("/API/v1/./items;x=1/42/")
	}
}
