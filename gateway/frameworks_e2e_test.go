package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real framework routers as upstreams: what they route to one handler,
// the gateway must count as one route. Debian packages (installed by
// scripts/install-test-deps as root): ruby-actionpack, ruby-rack and
// ruby-webrick for the Rails router; php-cli, php-symfony-http-foundation
// and php-symfony-routing for the Symfony front controller.

// needFramework fails the test when probe does not run (as root, where
// scripts/install-test-deps installs the packages), or skips it with the
// reason (elsewhere).
func needFramework(t *testing.T, what, pkgs string, probe ...string) {
	t.Helper()
	out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s not available (%v: %s); install Debian's %s (scripts/install-test-deps does it as root)", what, err, strings.TrimSpace(string(out)), pkgs)
	if os.Getuid() == 0 {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// framework is a running framework upstream.
type framework struct {
	url string // http://127.0.0.1:PORT
}

// hits asks the framework how many requests reached its login handler.
func (f *framework) hits(t *testing.T) int {
	t.Helper()
	res, err := http.Get(f.url + "/hits")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("hits: %d %q", res.StatusCode, b)
	}
	return n
}

// startProcess runs cmd until the test ends and waits until addr accepts
// connections (at most 30 s: a loaded machine starts Ruby slowly).
func startProcess(t *testing.T, cmd *exec.Cmd, addr func() string) string {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	a := addr()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
			return "http://" + a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not listening on %s: %v", cmd.Path, a, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRails serves testdata/frameworks/rails_router.rb.
func startRails(t *testing.T) *framework {
	t.Helper()
	needFramework(t, "the Rails router", "ruby-actionpack ruby-rack ruby-webrick",
		"ruby", "-e", `require "action_dispatch"; require "rack/handler/webrick"`)
	script, err := filepath.Abs("testdata/frameworks/rails_router.rb")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ruby", script, "0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	url := startProcess(t, cmd, func() string {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("rails router: %v", err)
		}
		port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if !ok {
			t.Fatalf("rails router said %q", line)
		}
		return "127.0.0.1:" + port
	})
	return &framework{url: url}
}

// startSymfony serves testdata/frameworks/symfony/index.php with php -S.
func startSymfony(t *testing.T) *framework {
	t.Helper()
	needFramework(t, "the Symfony front controller", "php-cli php-symfony-http-foundation php-symfony-routing",
		"php", "-r", `require_once "Symfony/Component/HttpFoundation/autoload.php"; require_once "Symfony/Component/Routing/autoload.php";`)
	dir, err := filepath.Abs("testdata/frameworks/symfony")
	if err != nil {
		t.Fatal(err)
	}
	// php -S takes a fixed port: take a free one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command("php", "-S", addr, "-t", dir, filepath.Join(dir, "index.php"))
	cmd.Env = append(os.Environ(), "BULWARK_TEST_HITS="+filepath.Join(t.TempDir(), "hits"))
	return &framework{url: startProcess(t, cmd, func() string { return addr })}
}

const frameworkConfig = `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
routes:
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: app
    login: {limit: 3, window: 60s, per_client: {limit: 0}, lockout: {enabled: false}}
  - name: all
    match: {path: /}
    upstream: app
`

// guess posts n password guesses for one username through the gateway,
// cycling through spellings, and returns how many the framework's login
// handler answered (200) and how many the gateway refused (429).
func guess(t *testing.T, base string, n int, spellings []string, wantBody string) (answered, refused int) {
	t.Helper()
	for i := range n {
		target := spellings[i%len(spellings)]
		r := do(t, "POST", base+target, strings.NewReader(fmt.Sprintf("username=victim&password=guess%d", i)),
			"Content-Type", "application/x-www-form-urlencoded")
		switch r.status {
		case http.StatusOK:
			answered++
			if !strings.Contains(string(r.body), wantBody) {
				t.Fatalf("%s: body %q, want it to hold %q", target, r.body, wantBody)
			}
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("%s: %d %s", target, r.status, r.body)
		}
	}
	return answered, refused
}

// Rails routes "/login.json" (any ".format") to the "/login" action: the
// login throttle of the route "/login" counts those guesses too, and the
// path reaches Rails unchanged (the format is still there).
func TestRailsFormatSuffixThrottled(t *testing.T) { engines(t, testRailsFormatSuffixThrottled) }

func testRailsFormatSuffixThrottled(t *testing.T) {
	rails := startRails(t)
	tg := startGateway(t, frameworkConfig, map[string]string{"APP": rails.url}, gwOpts{})
	answered, refused := guess(t, tg.url, 12, []string{"/login.json", "/login.xml", "/login.json/", "/login.html"}, "format=")
	if answered != 3 || refused != 9 {
		t.Fatalf("through .format spellings: %d answered, %d refused; want 3 and 9 (login.limit 3)", answered, refused)
	}
	if h := rails.hits(t); h != 3 {
		t.Fatalf("the Rails login action ran %d times, want 3", h)
	}
	// The plain spelling is the same (client, username): already spent.
	if answered, _ := guess(t, tg.url, 2, []string{"/login"}, ""); answered != 0 {
		t.Fatalf("/login after 3 guesses via /login.json: %d answered", answered)
	}
	// The path is forwarded as sent.
	r := do(t, "POST", tg.url+"/login.json", strings.NewReader("username=other&password=x"), "Content-Type", "application/x-www-form-urlencoded")
	if r.status != 200 || !strings.Contains(string(r.body), "path=/login.json format=json") {
		t.Fatalf("forwarded: %d %q, want Rails to see /login.json", r.status, r.body)
	}
}

// A Symfony front controller routes "/index.php/login" to "/login": the
// login throttle counts those guesses, and the path reaches PHP
// unchanged.
func TestSymfonyFrontControllerThrottled(t *testing.T) {
	engines(t, testSymfonyFrontControllerThrottled)
}

func testSymfonyFrontControllerThrottled(t *testing.T) {
	sf := startSymfony(t)
	tg := startGateway(t, frameworkConfig, map[string]string{"APP": sf.url}, gwOpts{})
	answered, refused := guess(t, tg.url, 12, []string{"/index.php/login", "/index.php/login?x=1", "/login"}, "login uri=")
	if answered != 3 || refused != 9 {
		t.Fatalf("through /index.php/login: %d answered, %d refused; want 3 and 9 (login.limit 3)", answered, refused)
	}
	if h := sf.hits(t); h != 3 {
		t.Fatalf("the Symfony login controller ran %d times, want 3", h)
	}
	r := do(t, "POST", tg.url+"/index.php/login", strings.NewReader("username=other&password=x"), "Content-Type", "application/x-www-form-urlencoded")
	if r.status != 200 || !strings.Contains(string(r.body), "uri=/index.php/login") {
		t.Fatalf("forwarded: %d %q, want PHP to see /index.php/login", r.status, r.body)
	}
}

// bulwark check (Parse) refuses two routes that are one route through a
// framework's equivalence, and bad front_controllers entries.
func TestCheckFrameworkCollisions(t *testing.T) {
	base := "upstreams: [{name: app, targets: [\"http://127.0.0.1:1\"]}]\n"
	for _, c := range []struct{ yaml, want string }{
		{"routes:\n  - {name: a, match: {path: /login}, upstream: app}\n  - {name: b, match: {path: /login.json}, upstream: app}\n", "routes[1].match: routes \"a\" and \"b\" are one route for frameworks that read a final \".format\""},
		{"routes:\n  - {name: a, match: {path: /login}, upstream: app}\n  - {name: b, match: {path: /index.php/login, strict_front_controller: true}, upstream: app}\n", "one route behind a PHP front controller"},
		{"routes:\n  - {name: a, match: {path: /index.php/login}, upstream: app}\n", "strict_front_controller: true"},
		{"routes:\n  - {name: a, match: {path: /}, upstream: app}\nfront_controllers: {scripts: [index.php, a/b.php, INDEX.PHP]}\n", "front_controllers.scripts[1]"},
		{"routes:\n  - {name: a, match: {path: /}, upstream: app}\nfront_controllers: {scripts: [index.php, INDEX.PHP]}\n", "front_controllers.scripts[1]: \"INDEX.PHP\" repeats"},
		{"routes:\n  - {name: a, match: {path: /}, upstream: app}\nfront_controllers: {query_params: [\"a=b\"]}\n", "front_controllers.query_params[0]"},
	} {
		_, err := Parse("test.yaml", []byte(base+c.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a problem holding %q", c.yaml, err, c.want)
		}
	}
	for _, ok := range []string{
		"routes:\n  - {name: a, match: {path: /login, strict_format: true}, upstream: app}\n  - {name: b, match: {path: /login.json}, upstream: app}\n",
		"routes:\n  - {name: a, match: {path: /index.php/login}, upstream: app}\nfront_controllers: {scripts: []}\n",
	} {
		if _, err := Parse("test.yaml", []byte(base+ok), nil); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
