package gateway

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// djangoPython is Debian's python3 with python3-django (scripts/
// install-test-deps installs it as root), or "" with the reason.
func djangoPython() (string, string) {
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import django").Run() == nil {
			return py, ""
		}
	}
	return "", "no python3 with Django (Debian package python3-django; scripts/install-test-deps installs it as root)"
}

// startDjango runs testdata/django/loginapp.py and returns its base URL.
func startDjango(t *testing.T) string {
	t.Helper()
	py, why := djangoPython()
	if py == "" {
		if os.Geteuid() == 0 {
			t.Fatal(why) // CI runs as root and installs it: never pass silently there
		}
		t.Skip(why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, py, "testdata/django/loginapp.py")
	cmd.Dir = "."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
				port <- p
				return
			}
		}
		close(port)
	}()
	select {
	case p, ok := <-port:
		if !ok {
			t.Fatalf("django exited: %s", stderr.String())
		}
		return "http://127.0.0.1:" + p
	case <-time.After(2 * time.Minute): // a bound on a loaded machine, not a timing assertion
		t.Fatalf("django did not start: %s", stderr.String())
	}
	return ""
}

// TestDjangoUnicodeUsernames: a real Django login view (its
// AuthenticationForm NFKC-normalizes the username before authenticate)
// logs "ｃａｒｏｌ" in as carol. Through the gateway, guesses at carol
// under fullwidth spellings share carol's budget: 3 reach Django, the
// rest are refused. Keyed by trim + lower-case only, every spelling was
// a fresh budget.
func TestDjangoUnicodeUsernames(t *testing.T) { engines(t, testDjangoUnicodeUsernames) }

func testDjangoUnicodeUsernames(t *testing.T) {
	dj := startDjango(t)
	form := func(base, user, pass string) resp {
		v := url.Values{"username": {user}, "password": {pass}}
		return do(t, "POST", base+"/login/", strings.NewReader(v.Encode()), "Content-Type", "application/x-www-form-urlencoded")
	}
	// Django itself: the fullwidth spelling is carol's account.
	if r := form(dj, "ｃａｒｏｌ", "right"); r.status != 200 || string(r.body) != "welcome carol" {
		t.Fatalf("django, ｃａｒｏｌ/right: %d %q, want carol logged in", r.status, r.body)
	}
	tg := startGateway(t, `
upstreams:
  - {name: django, targets: ["{{DJ}}"]}
routes:
  - name: login
    match: {path: /login/}
    upstream: django
    login: {limit: 3, per_client: {limit: 0}, lockout: {enabled: false}}
`, map[string]string{"DJ": dj}, gwOpts{})
	var got []int
	for _, u := range []string{"carol", "ｃarol", "ｃａrol", "ｃａｒol", "ｃａｒｏl", "ｃａｒｏｌ"} {
		got = append(got, form(tg.url, u, "guess").status)
	}
	if want := []int{401, 401, 401, 429, 429, 429}; !equalInts(got, want) {
		t.Errorf("guesses at carol through the gateway: %v, want %v", got, want)
	}
}
