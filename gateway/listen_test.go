package gateway

import (
	"reflect"
	"strings"
	"testing"
)

// TestListenOneOrList: listen is one mapping (one listener, its keys
// named listen.key as before) or a list of them (named listen[i].key);
// keys left out take the listener defaults in both forms, and --listen
// replaces the first listener's address.
func TestListenOneOrList(t *testing.T) {
	cfg, err := Parse("bulwark.yaml", []byte("listen: {engine: nethttp}\n"+minimal), env().get)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Listeners{{Addr: "127.0.0.1:8080", Engine: EngineNetHTTP, HTTP2Engine: HTTP2EngineNetHTTP}}); !reflect.DeepEqual(cfg.Listen, want) {
		t.Fatalf("one mapping: %+v, want %+v", cfg.Listen, want)
	}
	// listen: left null is the default listener, as before.
	cfg, err = Parse("bulwark.yaml", []byte("listen: ~\n"+minimal), env().get)
	if err != nil || !reflect.DeepEqual(cfg.Listen, Listeners{DefaultListen()}) {
		t.Fatalf("listen: ~: %v %+v", err, cfg)
	}
	cfg, err = Parse("bulwark.yaml", []byte(`
listen:
  - {addr: "127.0.0.1:9000"}
  - {name: tls, addr: "127.0.0.1:9443", engine: goroutine, tls: {cert_file: testdata/tls/cert.pem, key_file: testdata/tls/key.pem}}
  - {addr: "127.0.0.1:9080", redirect_to_https: tls, guards: {conns: {max_per_addr: 4, max_incomplete_per_addr: 2}}}
`+minimal), env().get)
	if err != nil {
		t.Fatal(err)
	}
	want := Listeners{
		{Addr: "127.0.0.1:9000", Engine: EngineAuto, HTTP2Engine: HTTP2EngineNetHTTP},
		{Name: "tls", Addr: "127.0.0.1:9443", Engine: EngineGoroutine, HTTP2Engine: HTTP2EngineNetHTTP, TLS: cfg.Listen[1].TLS},
		{Addr: "127.0.0.1:9080", Engine: EngineAuto, HTTP2Engine: HTTP2EngineNetHTTP, RedirectToHTTPS: "tls", Guards: cfg.Listen[2].Guards},
	}
	if !reflect.DeepEqual(cfg.Listen, want) || cfg.Listen[1].TLS == nil || cfg.Listen[2].Guards.Conns.MaxPerAddr != 4 {
		t.Fatalf("a list: %+v", cfg.Listen)
	}
	if len(cfg.Listen[1].TLS.loaded) != 1 {
		t.Fatalf("certificates: %v", cfg.Listen[1].TLS.loaded)
	}
	if err := cfg.Override("127.0.0.1:7000", ""); err != nil || cfg.Listen[0].Addr != "127.0.0.1:7000" || cfg.Listen[1].Addr != "127.0.0.1:9443" {
		t.Fatalf("--listen: %v %+v", err, cfg.Listen)
	}

	// Problems are named as written.
	for _, c := range []struct{ yaml, want string }{
		{"listen: {addr: nowhere}\n", `bulwark.yaml:1: listen.addr: "nowhere": want host:port`},
		{"listen:\n  - {addr: nowhere}\n", `bulwark.yaml:2: listen[0].addr: "nowhere": want host:port`},
		{"listen: {adr: x}\n", `bulwark.yaml:1: listen.adr: unknown key (known keys: name, addr, tls, h2c, engine, http2_engine, redirect_to_https, guards, proxy_protocol)`},
		{"listen: 8080\n", `bulwark.yaml:1: listen: want a mapping or a list of mappings, got "8080"`},
	} {
		_, err := Parse("bulwark.yaml", []byte(c.yaml+minimal), env().get)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %s", c.yaml, err, c.want)
		}
	}
}

// TestListenerGuardConfig: a listener's own guards take every key they
// set and the guards section's value for every other; the section's
// guard is unchanged.
func TestListenerGuardConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Guards.Slow.HeaderTimeout = 3_000_000_000
	cfg.Guards.Conns.MaxPerAddr = 50
	lg := &ListenGuards{}
	lg.Conns.MaxPerAddr = 5
	lg.H2.MaxPingsPerSec = 7
	gc, set := cfg.guardConfigFor(lg)
	if gc.Conns.MaxPerAddr != 5 || gc.H2.MaxPingsPerSec != 7 || gc.Slow.HeaderTimeout != cfg.Guards.Slow.HeaderTimeout {
		t.Fatalf("overlay: %+v", gc)
	}
	if !set["conns.max_per_addr"] || !set["h2.max_pings_per_sec"] || len(set) != 2 {
		t.Fatalf("set keys %v", set)
	}
	if main := cfg.guardConfig(); main.Conns.MaxPerAddr != 50 || main.H2.MaxPingsPerSec == 7 {
		t.Fatalf("the section's guard changed: %+v", main)
	}
}

// TestHTTPSLocation: the redirect keeps the path and query as sent,
// takes the host from the Host header (or an absolute-form target) in
// canonical form, and refuses what is not a host.
func TestHTTPSLocation(t *testing.T) {
	for _, c := range []struct{ host, target, port, want, outcome string }{
		{"Example.com", "/a?b=c", "", "https://example.com/a?b=c", redirectOK},
		{"example.com:8080", "/", ":8443", "https://example.com:8443/", redirectOK},
		{"example.com.", "*", "", "https://example.com/", redirectOK},
		{"ignored.example", "http://Other.Example:80/p?q", "", "https://other.example/p?q", redirectOK},
		{"ignored.example", "http://other.example?q", "", "https://other.example/?q", redirectOK},
		{"[2001:DB8::1]:80", "/x", ":8443", "https://[2001:db8::1]:8443/x", redirectOK},
		{"192.0.2.1", "/x", "", "https://192.0.2.1/x", redirectOK},
		{"", "/", "", "", redirectBad},
		{"a b", "/", "", "", redirectBad},
		{"evil.example/x", "/", "", "", redirectBad},
		{"user@evil.example", "/", "", "", redirectBad},
		{"x.example", "http://user@evil.example/", "", "", redirectBad},
		{"x.example:", "/", "", "https://x.example/", redirectOK},
		{"x.example:123456", "/", "", "", redirectBad},
		{"[::1%eth0]", "/", "", "", redirectBad},
		{"[192.0.2.1]", "/", "", "", redirectBad},
		{"[::1", "/", "", "", redirectBad},
		{"x.example", "/a\x7fb", "", "", redirectBad},
		{"x.example", "/" + strings.Repeat("a", maxLocationBytes), "", "", redirectTooLong},
		{strings.Repeat("a", 64) + ".example", "/", "", "", redirectBad},
	} {
		got, outcome := httpsLocation(c.host, c.target, c.port)
		if got != c.want || outcome != c.outcome {
			t.Errorf("httpsLocation(%q, %q, %q) = %q %s, want %q %s", c.host, c.target, c.port, got, outcome, c.want, c.outcome)
		}
	}
}

// FuzzHTTPSLocation: whatever the Host header and target, a redirect
// is an https URL whose authority is a canonical host (and the port
// given), with no byte a header cannot carry, within maxLocationBytes.
func FuzzHTTPSLocation(f *testing.F) {
	f.Add("example.com", "/a?b")
	f.Add("[::1]:80", "*")
	f.Add("x", "http://y.example/z")
	f.Add("a..b", "/")
	f.Fuzz(func(t *testing.T, host, target string) {
		loc, outcome := httpsLocation(host, target, ":8443")
		if outcome != redirectOK {
			if loc != "" {
				t.Fatalf("refused (%s) with a location %q", outcome, loc)
			}
			return
		}
		rest, ok := strings.CutPrefix(loc, "https://")
		if !ok || len(loc) > maxLocationBytes {
			t.Fatalf("location %q", loc)
		}
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			t.Fatalf("no path in %q", loc)
		}
		authority := rest[:i]
		name, port, ok := strings.Cut(authority, "]:")
		if ok {
			name += "]"
		} else if name, port, ok = strings.Cut(authority, ":"); !ok {
			t.Fatalf("no port in %q", loc)
		}
		if port != "8443" {
			t.Fatalf("port %q in %q", port, loc)
		}
		if h, ok := redirectHost(name); !ok || h != name {
			t.Fatalf("authority %q of %q is not a canonical host", authority, loc)
		}
		for j := 0; j < len(loc); j++ {
			if c := loc[j]; c <= ' ' || c == 0x7f {
				t.Fatalf("byte %#x in %q", c, loc)
			}
		}
	})
}
