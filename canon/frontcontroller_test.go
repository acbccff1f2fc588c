package canon

import (
	"errors"
	"testing"
)

var phpScripts = []string{"index.php", "app.php", "app_dev.php"}
var phpParams = []string{"route", "r", "q", "rest_route"}

func TestScript(t *testing.T) {
	for _, tc := range []struct {
		in, want    string
		found, last bool
	}{
		{"/index.php/login", "/login", true, false},
		{"/INDEX.PHP/login", "/login", true, false},
		{"/app_dev.php/login", "/login", true, false},
		{"/blog/index.php/login", "/blog/login", true, false},
		{"/index.php", "/", true, true},
		{"/index.php/", "/", true, true},
		{"/blog/index.php", "/blog", true, true},
		{"/login", "/login", false, false},
		{"/index.phpx/login", "/index.phpx/login", false, false},
		{"/xindex.php/login", "/xindex.php/login", false, false},
		{"/index.php/index.php/login", "/index.php/login", true, false},
	} {
		p, err := Path(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, found, last := Script(p, phpScripts)
		if got.Path != tc.want || found != tc.found || last != tc.last {
			t.Errorf("Script(%q) = %q, %v, %v; want %q, %v, %v", tc.in, got.Path, found, last, tc.want, tc.found, tc.last)
		}
	}
}

func TestQueryRoute(t *testing.T) {
	for _, tc := range []struct {
		query, want string
		found       bool
		bad         bool
	}{
		{"route=/login", "/login", true, false},
		{"route=account/login", "/account/login", true, false},
		{"r=site%2Flogin", "/site/login", true, false},
		{"q=user/login&destination=x", "/user/login", true, false},
		{"rest_route=/wp/v2/users", "/wp/v2/users", true, false},
		{"rest.route=/wp/v2/users", "/wp/v2/users", true, false}, // PHP reads '.' in a name as '_'
		{"rest+route=/wp/v2/users", "/wp/v2/users", true, false}, // and ' ' too
		{"/login", "/login", true, false},
		{"/LOGIN&x=1", "/LOGIN", true, false},
		{"route=/LOGIN/", "/LOGIN", true, false},
		{"route=/a/../login", "/login", true, false},
		{"page=2", "", false, false},
		{"", "", false, false},
		{"r[]=/login", "", false, false}, // an array, not a route
		{"route=/login&route=/login", "/login", true, false},
		{"route=/a&route=/login", "", false, true},
		{"route=/a&r=/login", "", false, true},
		{"/a&route=/login", "", false, true},
		{"route=%25zz", "/%zz", true, false},
		{"route=%2541dmin", "/%41dmin", true, false}, // decoded once, like PHP
	} {
		got, found, err := QueryRoute(tc.query, phpParams)
		if tc.bad {
			if !errors.Is(err, ErrInvalidPath) {
				t.Errorf("QueryRoute(%q) = %q, %v, %v; want ErrInvalidPath", tc.query, got.Path, found, err)
			}
			continue
		}
		if err != nil || found != tc.found || got.Path != tc.want {
			t.Errorf("QueryRoute(%q) = %q, %v, %v; want %q, %v", tc.query, got.Path, found, err, tc.want, tc.found)
		}
		if got.Flags&DoubleEncoded != 0 {
			t.Errorf("QueryRoute(%q): DoubleEncoded flag on a decoded value", tc.query)
		}
	}
	if _, found, _ := QueryRoute("route=/login", nil); found {
		t.Error("no params: found a route parameter")
	}
	if p, found, _ := QueryRoute("/login", nil); !found || p.Path != "/login" {
		t.Error("no params: the ?/path form is not read")
	}
}

func FuzzQueryRoute(f *testing.F) {
	for _, s := range []string{"route=/login", "r=site%2Flogin", "/login&x", "route=/a&r=/b", "q=%zz", "rest.route=/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		p, found, err := QueryRoute(q, phpParams)
		if err != nil || !found {
			return
		}
		if p.Path == "" || p.Path[0] != '/' || p.Path != "/" && p.Path[len(p.Path)-1] == '/' {
			t.Fatalf("QueryRoute(%q) = %q: not a canonical path", q, p.Path)
		}
		if p.Flags&DoubleEncoded != 0 {
			t.Fatalf("QueryRoute(%q): DoubleEncoded on a decoded value", q)
		}
	})
}
