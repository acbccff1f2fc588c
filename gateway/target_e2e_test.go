package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/canon"
)

// One request target: the route is matched on exactly what is
// forwarded. The differential below sends every target of a corpus (and
// the fuzzer's) through the gateway to upstreams that each serve one
// route and echo the target they received; the gateway's own matcher,
// applied to that received target, must name the route whose upstream
// received it. A raw '#' is answered 400 invalid_path and reaches no
// upstream. (Found: "POST /x#/../login.php" was matched as "/x" by the
// catch-all route while net/http forwarded "/x%23/../login.php", which
// nginx + PHP-FPM serve as /login.php.)

const targetRoutesConfig = `
upstreams:
  - {name: login, targets: ["{{LOGIN}}"]}
  - {name: admin, targets: ["{{ADMIN}}"]}
  - {name: all, targets: ["{{ALL}}"]}
routes:
  - {name: login, match: {path: /login.php}, upstream: login}
  - {name: admin, match: {path: /admin/}, upstream: admin}
  - {name: all, match: {path: /}, upstream: all}
control: {enabled: false}
`

// routeTargets is the corpus: spellings of /login.php and /admin/ that
// parsers read differently, raw bytes net/url re-escapes, '#' anywhere,
// and the absolute form.
var routeTargets = []string{
	"/", "/login.php", "/LOGIN.PHP", "/login.php/", "/login.php?a=/../x", "/login.php;x=1",
	"/x/../login.php", "/./login.php", "//login.php", "/x/%2e%2e/login.php", "/x/..;/login.php",
	"/login%2ephp", "/%6c%6f%67%69%6e.php",
	"/x#/../login.php", "/x#", "/login.php#", "/#/login.php", "/x?#/../login.php", "/x?a#b",
	"/x%23/../login.php", "/x%3F/../login.php", "/x?/../login.php", "/x%20/../login.php",
	"/caf\xc3\xa9/../login.php", "/x\xff/../login.php", "/x\"/../login.php", "/x{/../login.php",
	"/x|/../login.php", "/x^/../login.php", "/x`/../login.php", "/x</../login.php", "/x>/../login.php",
	"/x}/../admin/y", "/x[/../login.php", "/x]/../login.php",
	"/x\\..\\login.php", "/x%2F..%2Flogin.php", "/x%5C..%5Clogin.php", "/%252e%252e/login.php", "/x/..%00/login.php",
	"/admin", "/admin/x", "/ADMIN/../admin/x", "/x/../admin/", "/admin/../login.php",
	"http://app/login.php", "http://app/x/../admin/y", "http://app/x#/../login.php", "http://app",
}

// routeUpstreams starts one upstream per route of targetRoutesConfig;
// each answers with its name in X-Route and the target it received as
// the body.
func routeUpstreams(t testing.TB) map[string]string {
	subst := map[string]string{}
	for _, name := range []string{"login", "admin", "all"} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Route", name)
			_, _ = io.WriteString(w, r.RequestURI)
		}))
		t.Cleanup(s.Close)
		subst[strings.ToUpper(name)] = s.URL
	}
	return subst
}

// routeOf is the gateway's own route for a target an upstream received
// (its matcher, on the canonical path).
func routeOf(tg *testGateway, received string) string {
	path, query, _ := strings.Cut(received, "?")
	cp, err := canon.Path(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	p := tg.g.cur.Load()
	m, err := p.matcher.Lookup("GET", "app", cp, query)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if m.Index >= 0 {
		return p.routes[m.Index].name
	}
	return "(no route)"
}

// checkTarget judges one exchange: sent is the target the client sent,
// status, route (X-Route) and body the answer.
func checkTarget(t testing.TB, tg *testGateway, sent string, status int, route string, body []byte) {
	t.Helper()
	if route != "" {
		if want := routeOf(tg, string(body)); route != want {
			t.Errorf("%q: the gateway sent it to route %q, but the upstream received %q, which is route %q", sent, route, body, want)
		}
	}
	switch {
	case strings.Contains(sent, "#"):
		if status != http.StatusBadRequest || route != "" || problemCode(body) != "invalid_path" {
			t.Errorf("%q: answer %d route %q %s; want 400 invalid_path from the gateway", sent, status, route, body)
		}
	case route == "":
		// The gateway answered itself: only an ambiguous encoding may
		// be refused here (every path has a route).
		if status != http.StatusBadRequest || problemCode(body) != "invalid_path" {
			t.Errorf("%q: the gateway answered %d %s", sent, status, body)
		}
	}
}

// TestRouteTargetIsForwardedTarget runs the corpus on every listener
// kind: HTTP/1.1 cleartext, HTTP/1.1 over TLS, HTTP/2 over TLS and h2c,
// on every engine.
func TestRouteTargetIsForwardedTarget(t *testing.T) { engines(t, testRouteTargetIsForwardedTarget) }

func testRouteTargetIsForwardedTarget(t *testing.T) {
	subst := routeUpstreams(t)
	dir := t.TempDir()
	pool := writeCert(t, dir)
	for _, kind := range []string{"http1", "tls", "h2", "h2c"} {
		t.Run(kind, func(t *testing.T) {
			yaml := targetRoutesConfig
			scheme := "http"
			tr := &http.Transport{}
			switch kind {
			case "tls", "h2":
				yaml += "listen: {tls: {cert_file: " + filepath.Join(dir, "cert.pem") + ", key_file: " + filepath.Join(dir, "key.pem") + "}}\n"
				scheme = "https"
				tr.TLSClientConfig = &tls.Config{RootCAs: pool}
				if kind == "h2" {
					tr.ForceAttemptHTTP2 = true
				} else {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
			case "h2c":
				yaml += "listen: {h2c: true}\n"
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			tg := startGateway(t, yaml, subst, gwOpts{})
			c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			defer tr.CloseIdleConnections()
			base := scheme + "://" + tg.g.Addr().String() + "/"
			for _, sent := range routeTargets {
				req, err := http.NewRequest("POST", base, strings.NewReader("user=alice&pass=guess"))
				if err != nil {
					t.Fatal(err)
				}
				req.URL.Opaque = sent // sent as is
				if strings.HasPrefix(sent, "//") {
					// An opaque "//x" is sent as "scheme://x".
					req.URL.Opaque, req.URL.Path = "", sent
				}
				res, err := c.Do(req)
				if err != nil {
					if strings.HasPrefix(sent, "http://") && kind != "http1" && kind != "tls" {
						continue // no absolute form in HTTP/2
					}
					t.Errorf("%q: %v", sent, err)
					continue
				}
				if want := kind == "h2" || kind == "h2c"; (res.ProtoMajor == 2) != want {
					t.Fatalf("%s: the client spoke %s", kind, res.Proto)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				checkTarget(t, tg, sent, res.StatusCode, res.Header.Get("X-Route"), body)
			}
		})
	}
}

// FuzzRouteTarget sends each target raw over HTTP/1.1 to a gateway on
// every engine and judges the exchange as the corpus test does.
func FuzzRouteTarget(f *testing.F) {
	for _, s := range routeTargets {
		f.Add(s)
	}
	subst := routeUpstreams(f)
	yaml := targetRoutesConfig
	for k, v := range subst {
		yaml = strings.ReplaceAll(yaml, "{{"+k+"}}", v)
	}
	var gws []*testGateway
	for _, e := range []string{EngineAuto, EngineGoroutine, EngineNetHTTP} {
		cfg, err := Parse("target.yaml", []byte(yaml), nil)
		if err != nil {
			f.Fatal(err)
		}
		setEngine(cfg, e)
		gws = append(gws, startConfig(f, cfg, gwOpts{}))
	}
	var dials atomic.Uint32
	f.Fuzz(func(t *testing.T, sent string) {
		if sent == "" || len(sent) > 2048 || strings.ContainsAny(sent, " \r\n") {
			return // not one request target
		}
		for _, tg := range gws {
			// A source address of its own for each connection: the
			// host's per-client connection rate would reset the next.
			n := dials.Add(1)
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, byte(64+n>>16&63), byte(n>>8), byte(n))}}
			c, err := d.Dial("tcp", tg.g.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(c, "GET "+sent+" HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				t.Fatalf("%q (engine %s): %v", sent, tg.g.cfg.Listen[0].Engine, err)
			}
			body, _ := io.ReadAll(res.Body)
			c.Close()
			if res.StatusCode == http.StatusBadRequest && problemCode(body) == "" {
				continue // the HTTP/1.1 parser refused the request line
			}
			checkTarget(t, tg, sent, res.StatusCode, res.Header.Get("X-Route"), body)
		}
	})
}
