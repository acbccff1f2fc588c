package gateway

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/control"
)

// TestControlTokenFailuresThrottled: failed control-API token attempts
// from one address are refused with 429 once its budget is spent (the
// right token too, from there); the right token from another address
// still works; every refusal is one audit line that names neither the
// token nor the address. The gateway runs on a frozen clock, so no
// budget refills however slowly the machine runs the 100 guesses.
func TestControlTokenFailuresThrottled(t *testing.T) { engines(t, testControlTokenFailuresThrottled) }

func testControlTokenFailuresThrottled(t *testing.T) {
	up := echoUpstream(t, "app")
	tg := startGateway(t, oneRoute, map[string]string{"APP": up.URL}, gwOpts{getenv: env(EnvControlToken, testToken).get, clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
	call := func(c *http.Client, tok string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", tg.control+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	attacker := clientFrom(t, "127.0.81.1")
	const tries = 100
	var unauthorized, limited int
	for i := 0; i < tries; i++ {
		switch s := call(attacker, "bad-token-guess-"+strconv.Itoa(i)); s {
		case 401:
			unauthorized++
		case 429:
			limited++
		default:
			t.Fatalf("guess %d: %d", i, s)
		}
	}
	if unauthorized != control.DefaultFailedTokensPerMinute || limited != tries-unauthorized {
		t.Errorf("%d guesses: %d answered 401 and %d 429, want %d and the rest", tries, unauthorized, limited, control.DefaultFailedTokensPerMinute)
	}
	if s := call(attacker, testToken); s != 429 {
		t.Errorf("the right token from the throttled address: %d, want 429", s)
	}
	if s := call(clientFrom(t, "127.0.81.2"), testToken); s != 200 {
		t.Errorf("the right token from another address: %d, want 200", s)
	}
	logs := tg.logs.String()
	if n := strings.Count(logs, `"msg":"control api refused a token"`); n != tries+1 {
		t.Errorf("%d audit lines for %d refusals", n, tries+1)
	}
	for _, leak := range []string{"bad-token-guess", testToken, "127.0.81.1"} {
		if strings.Contains(logs, leak) {
			t.Errorf("the log carries %q", leak)
		}
	}
}
