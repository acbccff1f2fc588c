package canon

import (
	"strings"
	"testing"
)

// FuzzHost checks Host on any input: it never panics; the result is the
// lower-cased form of a prefix of the input, with no ASCII upper case
// and no trailing dot; ASCII case and an added port do not change it;
// and a result that is an ASCII name without ':' is its own canonical
// form.
func FuzzHost(f *testing.F) {
	for _, s := range []string{"", "admin.example.com", "ADMIN.Example.Com.:443", "[::1]:8080", "[2001:DB8::1]", "[::1", "a:b:c", "..", "localhost..:80", "İ.example", "\xff:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got := Host(h)
		if strings.HasSuffix(got, ".") {
			t.Fatalf("Host(%q) = %q ends with a dot", h, got)
		}
		for i := 0; i < len(got); i++ {
			if c := got[i]; c >= 'A' && c <= 'Z' {
				t.Fatalf("Host(%q) = %q has upper case", h, got)
			}
		}
		prefix := false
		for i := 0; i <= len(h) && !prefix; i++ {
			prefix = strings.ToLower(h[:i]) == got
		}
		if !prefix {
			t.Fatalf("Host(%q) = %q is not the lower case of a prefix", h, got)
		}
		if up := asciiUpper(h); Host(up) != got {
			t.Fatalf("Host(%q) = %q but Host(%q) = %q", h, got, up, Host(up))
		}
		if !strings.ContainsAny(h, ":[") {
			if p := Host(h + ":443"); p != got {
				t.Fatalf("Host(%q) = %q but with a port %q", h, got, p)
			}
		}
		if isASCII(got) && !strings.Contains(got, ":") {
			if again := Host(got); again != got {
				t.Fatalf("Host(%q) = %q, Host of that %q", h, got, again)
			}
		}
	})
}

// FuzzTarget checks Target on any input: it never panics; the path has
// no query; an origin-form target gives itself (without its query) and
// no authority; an absolute-form one gives a path starting with "/"
// and an authority without "/", both taken from the target in order.
func FuzzTarget(f *testing.F) {
	for _, s := range []string{"", "*", "/", "/a?b", "/a#b?c", "http://h/p?q", "http://h", "HTTPS://User@Host:1/x/../y", "h/p", "://x", "http://h?x/y", "*?x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		path, auth := Target(target)
		base, _, _ := strings.Cut(target, "?")
		if strings.Contains(path, "?") {
			t.Fatalf("Target(%q) path %q has a query", target, path)
		}
		if base == "" || base[0] == '/' || base == "*" {
			if path != base || auth != "" {
				t.Fatalf("Target(%q) = %q, %q; want %q, \"\"", target, path, auth, base)
			}
			return
		}
		if auth == "" && path == base {
			if strings.Contains(base, "://") && strings.Index(base, "://")+3 < len(base) {
				// An absolute form must give its authority, unless the
				// authority is empty ("http:///p").
				rest := base[strings.Index(base, "://")+3:]
				if rest != "" && rest[0] != '/' {
					t.Fatalf("Target(%q): absolute form not split", target)
				}
			}
			return
		}
		if !strings.HasPrefix(path, "/") || strings.Contains(auth, "/") {
			t.Fatalf("Target(%q) = %q, %q: bad shape", target, path, auth)
		}
		if want := auth + strings.TrimPrefix(path, "/"); path == "/" && !strings.HasSuffix(base, auth) && !strings.HasSuffix(base, auth+"/") || path != "/" && !strings.HasSuffix(base, auth+path) {
			t.Fatalf("Target(%q) = %q, %q: not the target's tail (%q)", target, path, auth, want)
		}
		if p, a := Target(base[:strings.Index(base, "://")+3] + auth + path); p != path || a != auth {
			t.Fatalf("Target(%q) = %q, %q; rebuilt: %q, %q", target, path, auth, p, a)
		}
	})
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
