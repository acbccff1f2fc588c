package route

import (
	"errors"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/canon"
)

// FuzzCompile compiles any pattern with any switches (bit 0
// CaseSensitive, 1 StrictSlash, 2 StrictFormat, 3 StrictFrontController)
// and looks up any target. Compile never panics: it accepts the pattern
// or returns a *PatternError, or Collisions for a pattern naming a
// front controller script. A compiled pattern matches the request that
// spells it (wildcards filled in), in upper case unless CaseSensitive,
// with its trailing slash toggled unless StrictSlash; and a lookup of
// any target never panics and names the pattern or none.
func FuzzCompile(f *testing.F) {
	for _, s := range [][2]string{
		{"/login", "/LOGIN/"}, {"/api/", "/api"}, {"/items/{id}", "/items/7.json"},
		{"/files/{p...}", "/files/a/b"}, {"/{$}", "/?r=login"}, {"/index.php/admin", "/index.php/admin"},
		{"/a/{x}/{x}", "/a"}, {"/\u212Aeys", "/keys"}, {"/{x", "/"}, {"/a//b", "//a/b"},
	} {
		for _, sw := range []uint8{0, 3, 8, 15} {
			f.Add(s[0], s[1], sw)
		}
	}
	fc := DefaultFrontControllers()
	f.Fuzz(func(t *testing.T, path, target string, sw uint8) {
		p := Pattern{Name: "p", Path: path, CaseSensitive: sw&1 != 0, StrictSlash: sw&2 != 0,
			StrictFormat: sw&4 != 0, StrictFrontController: sw&8 != 0}
		mt, err := Compile([]Pattern{p}, fc)
		if err != nil {
			_, bad := errors.AsType[*PatternError](err)
			cs, col := errors.AsType[Collisions](err)
			if !bad && !(col && len(cs) == 1 && cs[0].Kind == NamesScript) {
				t.Fatalf("Compile(%q): %v, want a *PatternError or a script collision", path, err)
			}
			return
		}
		if cp, err := canon.Path(target); err == nil {
			_, query, _ := strings.Cut(target, "?")
			if m, err := mt.Lookup("GET", "", cp, query); err == nil && m.Index != -1 && m.Index != 0 {
				t.Fatalf("Lookup(%q) = %+v", target, m)
			}
		}
		req := spelling(path)
		check := func(req string) {
			cp, err := canon.Path(req)
			if err != nil || cp.Path != strings.TrimSuffix(req, "/") && req != "/" {
				return // not a canonical spelling: nothing to say
			}
			if m, err := mt.Lookup("GET", "", cp, ""); err != nil || m.Index != 0 {
				t.Fatalf("pattern %q (switches %04b) does not match %q: %+v, %v", path, sw, req, m, err)
			}
		}
		check(req)
		if !p.CaseSensitive {
			check(asciiUpper(req))
		}
		if !p.StrictSlash && req != "/" {
			if strings.HasSuffix(req, "/") {
				check(strings.TrimSuffix(req, "/"))
			} else {
				check(req + "/")
			}
		}
	})
}

// spelling is a request path pattern matches: wildcards filled in.
func spelling(pattern string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		switch {
		case s == "{$}":
			segs[i] = ""
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "...}"):
			segs[i] = "w/z"
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			segs[i] = "w"
		}
	}
	return strings.Join(segs, "/")
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
