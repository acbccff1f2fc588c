package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

const networksConfig = `
upstreams:
  - {name: app, targets: ["{{APP}}"]}
client_ip:
  trusted_proxies: {cidrs: [127.0.0.1/32], hops: 1}
  networks: {share: {{SHARE}}}
guards: {enabled: false} # every connection comes from the proxy, 127.0.0.1
shield: {enabled: true, max_peers: 1024, per_peer: 100, global: 100000000}
routes:
  - name: login
    match: {path: /login, methods: [POST]}
    upstream: app
    rate_limit: {qps: 1, burst: 10, key: client_ip, max_keys: 1024}
    login: {limit: 5, window: 60s, max_keys: 1024, lockout: {max_failures: 5, max_keys: 1024}}
`

// One IPv6 /48 sends a failed login from each of 3,072 /64s (three times
// every table's capacity) through a trusted proxy; then users of other
// networks log in. With client_ip.networks (the default share 1/16) they
// all do: the /48 took at most its share of the shield's peers, the
// route's client_ip buckets, the login throttle's and the lockout's
// tables. With share 0 (the old behaviour) the same flood locks them out.
// (65,536 /64s against each table: the library tests
// TestNetworkShareOf* in keyed, shield, ratelimit and login.) The clock
// is frozen: on a slow machine the flood outlasts the tables' windows,
// and entries that expired would let users in with share 0 too.
func TestOneNetworkCannotFillTables(t *testing.T) { engines(t, testOneNetworkCannotFillTables) }

func testOneNetworkCannotFillTables(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.PostForm.Get("password") == "right" {
			io.WriteString(w, "welcome")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	shares := []string{"0.0625"}
	if engineOf(t) == EngineNetHTTP {
		shares = append(shares, "0") // the control, on one engine: the flood locks users out
	}
	for _, share := range shares {
		tg := startGateway(t, networksConfig, map[string]string{"APP": up.URL, "SHARE": share}, gwOpts{clock: clock.NewManual(time.Unix(1_700_000_000, 0))})
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		// post returns the status, or 0 when the gateway closed the
		// connection (a shield refusal closes it before the body is read).
		post := func(client *http.Client, from, user, password string) int {
			req, err := http.NewRequest("POST", tg.url+"/login", strings.NewReader("username="+user+"&password="+password))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-Forwarded-For", from)
			res, err := client.Do(req)
			if err != nil {
				return 0
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return res.StatusCode
		}
		const flood = 3072
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < flood; i = int(next.Add(1) - 1) {
					a := netip.MustParseAddr("2001:db8:1::1").As16()
					a[6], a[7] = byte(i>>8), byte(i)
					post(client, netip.AddrFrom16(a).String(), fmt.Sprintf("victim%d", i), "guess")
				}
			}()
		}
		wg.Wait()
		client.CloseIdleConnections()
		users2 := &http.Client{Transport: &http.Transport{}}
		ok := 0
		const users = 200
		for i := range users {
			var from string
			if i%2 == 0 {
				from = netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}).String()
			} else {
				a := netip.MustParseAddr("2001:db8::1").As16()
				a[4], a[5] = 0x80|byte(i>>8), byte(i)
				from = netip.AddrFrom16(a).String()
			}
			if post(users2, from, fmt.Sprintf("user%d", i), "right") == http.StatusOK {
				ok++
			}
		}
		users2.CloseIdleConnections()
		switch share {
		case "0":
			if ok > users/10 {
				t.Errorf("share 0: %d of %d users of other networks logged in after the flood; the tables should have been full", ok, users)
			}
		default:
			if ok != users {
				t.Errorf("share %s: %d of %d users of other networks logged in after one /48 flooded the tables", share, ok, users)
			}
		}
	}
}
