package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/bulwarkhq/bulwark/guard"
)

const guardsConfig = `
listen: {h2c: true}
guards:
  conns:
    max_per_addr: 3
    max_incomplete_per_addr: 3
  slowloris:
    header_timeout: 300ms
  h2:
    max_pings_per_sec: 20
upstreams:
  - name: app
    targets: ["{{UP}}"]
routes:
  - {name: root, upstream: app, match: {path: /}}
`

// The guards run in front of the gateway: an address is capped at
// guards.conns.max_per_addr open connections (refused at accept, before
// any HTTP), other addresses are unaffected, the refusal is counted, and
// a reload raising the cap lets the next connection in.
func TestGuardsCapConnectionsPerAddress(t *testing.T) { engines(t, testGuardsCapConnectionsPerAddress) }

func testGuardsCapConnectionsPerAddress(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tg := startGateway(t, guardsConfig, map[string]string{"UP": up.URL}, gwOpts{})
	addr := tg.g.Addr().String()

	// Three idle connections from 127.0.0.1 use up its allowance ...
	for i := 0; i < 3; i++ {
		c, err := dialFrom(t, "127.0.0.1", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, "3 open connections", func() bool { return tg.counter(t, "bulwark_guard_connections_open") == 3 })
	// ... so the fourth is refused without a byte ...
	assertRefused(t, "127.0.0.1", addr)
	if got := tg.counter(t, "bulwark_guard_connections_refused_total"); got != 1 {
		t.Fatalf("refused connections counted %v, want 1", got)
	}
	// ... while another address is served.
	if code := fetchFrom(t, "127.0.0.2", tg.url+"/"); code != http.StatusOK {
		t.Fatalf("another address got %d", code)
	}

	cfg := *tg.g.Config()
	cfg.Guards.Conns.MaxPerAddr, cfg.Guards.Conns.MaxIncompletePerAddr = 10, 10
	if err := tg.g.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	if code := fetchFrom(t, "127.0.0.1", tg.url+"/"); code != http.StatusOK {
		t.Fatalf("after raising the cap the address got %d", code)
	}

	// The sizes fixed at start are refused on reload, by key.
	cfg2 := *tg.g.Config()
	cfg2.Guards.Conns.AddrTableCapacity *= 2
	err := tg.g.Reload(&cfg2)
	if err == nil || !strings.Contains(err.Error(), "guards.conns.addr_table_capacity") {
		t.Fatalf("reload changing the table size: %v", err)
	}
}

// A request head dribbled slower than guards.slowloris.header_timeout is
// answered 408 by the guard, well before limits.read_header_timeout, and
// counted.
func TestGuardsSlowHeadGets408(t *testing.T) { engines(t, testGuardsSlowHeadGets408) }

func testGuardsSlowHeadGets408(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tg := startGateway(t, guardsConfig, map[string]string{"UP": up.URL}, gwOpts{})
	c, err := net.Dial("tcp", tg.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second)) // < limits.read_header_timeout
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled head: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"request_timeout"`) {
		t.Fatalf("stalled head: %d %s", res.StatusCode, body)
	}
	waitFor(t, "the slow head counted", func() bool {
		return tg.counter(t, "bulwark_guard_slow_closed_total", "reason", guard.SlowHeader) == 1
	})
}

// An HTTP/2 (h2c) connection flooding PINGs gets GOAWAY
// ENHANCE_YOUR_CALM from the frame guard and is closed; the abuse is
// counted by reason. On both HTTP/2 engines: the frame guard is under
// each.
func TestGuardsH2FloodGetsGoaway(t *testing.T) { enginesH2(t, testGuardsH2FloodGetsGoaway) }

func testGuardsH2FloodGetsGoaway(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tg := startGateway(t, guardsConfig, map[string]string{"UP": up.URL}, gwOpts{})
	c, err := net.Dial("tcp", tg.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 0; i < 200; i++ {
			if fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", ga.ErrCode)
			}
			break
		}
	}
	// Closed after the GOAWAY (reads end; the drain is bounded).
	for {
		if _, err := fr.ReadFrame(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("connection left open after GOAWAY")
			}
			break
		}
	}
	waitFor(t, "the flood counted", func() bool {
		return tg.counter(t, "bulwark_guard_h2_abuse_total", "reason", guard.H2PingFlood) == 1
	})
}

// guards.enabled: false takes the guards out: no cap, no guard metrics.
func TestGuardsOff(t *testing.T) { engines(t, testGuardsOff) }

func testGuardsOff(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	cfg := strings.Replace(guardsConfig, "guards:\n", "guards:\n  enabled: false\n", 1)
	tg := startGateway(t, cfg, map[string]string{"UP": up.URL}, gwOpts{})
	for i := 0; i < 5; i++ {
		c, err := dialFrom(t, "127.0.0.1", tg.g.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	if code := fetchFrom(t, "127.0.0.1", tg.url+"/"); code != http.StatusOK {
		t.Fatalf("with the guards off the sixth connection got %d", code)
	}
	mfs, err := tg.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "bulwark_guard_connections_open" {
			t.Error("guard gauges exported with the guards off")
		}
	}
}

func newUpstream(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}
