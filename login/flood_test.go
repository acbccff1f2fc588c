package login_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/login"
)

// sourceClient returns a client whose connections leave from ip, one of
// the loopback addresses 127.0.0.0/8, so the server sees distinct socket
// peers without any forwarding header.
func sourceClient(t testing.TB, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// loginRig is a real login service on loopback: the middleware, with
// the default username reader and the socket peer as client, in front of
// an upstream that checks passwords.
type loginRig struct {
	clk      *clock.Manual
	store    *login.MemoryStore
	srv      *httptest.Server
	upstream atomic.Int64 // requests that reached the login handler
	events   recorder

	mu       sync.Mutex
	reasons  map[string]int // refusal reason or problem code → count
	degraded int
}

type rigConfig struct {
	limit     int
	perClient login.PerClient
	capacity  int
	shards    int
	lockout   *login.LockoutConfig // Store and Clock filled in
}

func newLoginRig(t *testing.T, rc rigConfig) *loginRig {
	t.Helper()
	g := &loginRig{clk: clock.NewManual(t0), reasons: map[string]int{}}
	var err error
	g.store, err = login.NewMemoryStore(login.MemoryConfig{Capacity: rc.capacity, Shards: rc.shards, Clock: g.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.store.Close)
	cfg := login.Config{Limit: rc.limit, PerClient: rc.perClient, Store: g.store, Clock: g.clk, Listener: g.events.listen}
	if rc.lockout != nil {
		lc := *rc.lockout
		lc.Store, lc.Clock, lc.Listener = newMemoryLockoutStore(t, g.clk), g.clk, g.events.listen
		cfg.Lockout = newLockout(t, lc)
	}
	mw, err := login.NewMiddleware(login.MiddlewareConfig{Limiter: newLimiter(t, cfg), Observe: g.observe})
	if err != nil {
		t.Fatal(err)
	}
	g.srv = httptest.NewServer(mw(http.HandlerFunc(g.upstreamLogin)))
	t.Cleanup(g.srv.Close)
	return g
}

// upstreamLogin knows one account, alice/right; everything else is 401,
// unknown accounts included.
func (g *loginRig) upstreamLogin(w http.ResponseWriter, r *http.Request) {
	g.upstream.Add(1)
	var body struct{ Username, Password string }
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	if login.NormalizeUsername(body.Username) == "alice" && body.Password == "right" {
		_, _ = io.WriteString(w, "welcome")
		return
	}
	http.Error(w, "invalid credentials", http.StatusUnauthorized)
}

func (g *loginRig) observe(_ http.ResponseWriter, _ *http.Request, o login.Outcome) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case o.Code != "":
		g.reasons[o.Code]++
	case o.Decision.Degraded:
		g.degraded++
	case o.Counted && !o.Decision.Allowed:
		g.reasons[string(o.Decision.Reason)]++
	}
}

func (g *loginRig) counts() (map[string]int, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]int, len(g.reasons))
	for k, v := range g.reasons {
		m[k] = v
	}
	return m, g.degraded
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (g *loginRig) attempt(t testing.TB, c *http.Client, user, password string) answer {
	t.Helper()
	body := fmt.Sprintf(`{"username":%q,"password":%q}`, user, password)
	resp, err := c.Post(g.srv.URL+"/login", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Del("Date")
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func equalCounts(got map[string]int, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestLoginFloodPerClient: 10,000 junk usernames from one address, then
// 50 guesses at another account from another address. The per-client
// dimension stops the junk after 20 attempts, so the table holds 21 keys,
// not 10,000; the guesses get the account's 5 attempts, then refusals
// by the account window, then by the client window (attempts the account
// window refused still count against the client).
func TestLoginFloodPerClient(t *testing.T) {
	g := newLoginRig(t, rigConfig{perClient: login.PerClient{Limit: 20}})
	junk := sourceClient(t, "127.0.0.2")
	const n = 10_000
	var (
		next    atomic.Int64
		allowed atomic.Int64
		wg      sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				a := g.attempt(t, junk, "junk-"+strconv.FormatInt(i, 10), "x")
				switch a.status {
				case http.StatusUnauthorized:
					allowed.Add(1)
				case http.StatusTooManyRequests:
				default:
					t.Errorf("junk %d: %d %s", i, a.status, a.body)
				}
				if l := g.store.Len(); l > login.DefaultCapacity {
					t.Errorf("Len %d above the capacity", l)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 20 || g.upstream.Load() != 20 || g.store.Len() != 21 {
		t.Fatalf("junk: %d allowed, %d upstream, Len %d; want 20, 20, 21", allowed.Load(), g.upstream.Load(), g.store.Len())
	}
	if got, deg := g.counts(); deg != 0 || !equalCounts(got, map[string]int{"client": n - 20}) {
		t.Fatalf("junk refusals %v, degraded %d", got, deg)
	}

	guesser := sourceClient(t, "127.0.0.3")
	var statuses []int
	for i := range 50 {
		a := g.attempt(t, guesser, "alice", "guess"+strconv.Itoa(i))
		statuses = append(statuses, a.status)
		if a.status == http.StatusTooManyRequests && (a.header.Get("Retry-After") == "" || a.header.Get("X-RateLimit-Remaining") != "0") {
			t.Fatalf("guess %d: %v", i, a.header)
		}
	}
	for i, st := range statuses {
		if want := map[bool]int{true: 401, false: 429}[i < 5]; st != want {
			t.Fatalf("guess %d: %d, want %d (all: %v)", i, st, want, statuses)
		}
	}
	got, deg := g.counts()
	if deg != 0 || !equalCounts(got, map[string]int{"client": n - 20 + 30, "account": 15}) {
		t.Fatalf("refusals %v, degraded %d", got, deg)
	}
	if g.upstream.Load() != 25 || g.store.Len() != 23 || len(g.events.types()) != 0 {
		t.Fatalf("upstream %d, Len %d, events %v", g.upstream.Load(), g.store.Len(), g.events.types())
	}
}

// TestLoginFloodFullTable: without the per-client dimension one address
// can fill the table (10,000 junk usernames, all admitted). The table
// never grows past its bound and the flood does not turn the throttle
// off: every guess at another account needs a new key and is refused
// with reason capacity — where the throttle used to degrade and let all
// 50 through. Keys already present keep their exact limits, and once the
// junk expires the account can be used again.
func TestLoginFloodFullTable(t *testing.T) {
	g := newLoginRig(t, rigConfig{})
	junk := sourceClient(t, "127.0.0.4")
	const n = login.DefaultCapacity
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				if a := g.attempt(t, junk, "junk-"+strconv.FormatInt(i, 10), "x"); a.status != http.StatusUnauthorized {
					t.Errorf("junk %d: %d %s", i, a.status, a.body)
				}
				if l := g.store.Len(); l > n {
					t.Errorf("Len %d above the capacity", l)
				}
			}
		}()
	}
	wg.Wait()
	if g.store.Len() != n {
		t.Fatalf("Len %d after %d junk usernames", g.store.Len(), n)
	}

	guesser := sourceClient(t, "127.0.0.5")
	for i := range 50 {
		a := g.attempt(t, guesser, "alice", "guess"+strconv.Itoa(i))
		if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "60" || !strings.Contains(a.body, `"errorCode":"rate-limit-exceeded"`) {
			t.Fatalf("guess %d: %d %v %s", i, a.status, a.header, a.body)
		}
		if g.store.Len() > n {
			t.Fatalf("Len %d", g.store.Len())
		}
	}
	if got, deg := g.counts(); deg != 0 || !equalCounts(got, map[string]int{"capacity": 50}) {
		t.Fatalf("refusals %v, degraded %d", got, deg)
	}
	// A junk key present before the table filled counts exactly: it has 4
	// of 5 attempts left, then is refused by its own window.
	for i, want := range []string{"3", "2", "1", "0"} {
		if a := g.attempt(t, junk, "junk-7", "x"); a.status != 401 || a.header.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("junk-7 attempt %d: %d %v", i, a.status, a.header)
		}
	}
	if a := g.attempt(t, junk, "junk-7", "x"); a.status != 429 {
		t.Fatalf("junk-7 over its limit: %d", a.status)
	}
	if got, _ := g.counts(); got["account"] != 1 || g.upstream.Load() != n+4 || len(g.events.types()) != 0 {
		t.Fatalf("refusals %v, upstream %d, events %v", got, g.upstream.Load(), g.events.types())
	}
	// The junk expires with the window; alice is served again.
	g.clk.Advance(login.DefaultWindow)
	if a := g.attempt(t, guesser, "alice", "right"); a.status != 200 || a.header.Get("X-RateLimit-Remaining") != "4" {
		t.Fatalf("after the window: %d %v", a.status, a.header)
	}
}

// TestFullTableManyAddresses: a table full of live keys from 16 addresses
// refuses every attempt that needs a new key — a new address, or a known
// address with a new account — with reason capacity, while the keys
// present keep their exact limits; nothing ever degrades.
func TestFullTableManyAddresses(t *testing.T) {
	const capacity = 64
	g := newLoginRig(t, rigConfig{limit: 3, perClient: login.PerClient{Limit: 10}, capacity: capacity, shards: 1})
	clients := map[string]*http.Client{}
	client := func(ip string) *http.Client {
		if clients[ip] == nil {
			clients[ip] = sourceClient(t, ip)
		}
		return clients[ip]
	}
	// 16 addresses × (1 client key + 3 account keys) = 64 live keys.
	for a := 1; a <= 16; a++ {
		for u := range 3 {
			if r := g.attempt(t, client("127.0.1."+strconv.Itoa(a)), "user"+strconv.Itoa(u), "x"); r.status != 401 {
				t.Fatalf("fill %d/%d: %d %s", a, u, r.status, r.body)
			}
		}
	}
	if g.store.Len() != capacity {
		t.Fatalf("Len %d", g.store.Len())
	}
	// The answer names the policy of the key that did not fit.
	refusedCapacity := func(what string, r answer, policy string) {
		t.Helper()
		if r.status != 429 || r.header.Get("Retry-After") != "60" || r.header.Get("RateLimit-Policy") != policy {
			t.Fatalf("%s: %d %v", what, r.status, r.header)
		}
	}
	for range 3 {
		refusedCapacity("new address", g.attempt(t, client("127.0.1.100"), "user0", "x"), `"login";q=10;w=60`)
		refusedCapacity("known address, new account", g.attempt(t, client("127.0.1.1"), "user9", "x"), `"login";q=3;w=60`)
	}
	// (127.0.1.2, user0) has used 1 of 3: two more, then its own window.
	for i, want := range []string{"1", "0"} {
		if r := g.attempt(t, client("127.0.1.2"), "user0", "x"); r.status != 401 || r.header.Get("X-RateLimit-Remaining") != want || r.header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("existing key attempt %d: %d %v", i, r.status, r.header)
		}
	}
	if r := g.attempt(t, client("127.0.1.2"), "user0", "x"); r.status != 429 || r.header.Get("Retry-After") != "60" {
		t.Fatalf("existing key over its limit: %d %v", r.status, r.header)
	}
	got, deg := g.counts()
	if deg != 0 || !equalCounts(got, map[string]int{"capacity": 6, "account": 1}) || g.store.Len() != capacity || len(g.events.types()) != 0 {
		t.Fatalf("refusals %v, degraded %d, Len %d, events %v", got, deg, g.store.Len(), g.events.types())
	}
	// When the window has passed, the new address gets its quota.
	g.clk.Advance(login.DefaultWindow)
	if r := g.attempt(t, client("127.0.1.100"), "user0", "x"); r.status != 401 || r.header.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("after the window: %d %v", r.status, r.header)
	}
}

// TestLockoutFromUpstreamStatus: the upstream's 401s, from 20 addresses,
// lock the account after 10 failures; the account is then refused from
// every address — those 20 and a new one — even with the right password,
// with a Retry-After of the remaining lock. An account that does not exist
// gets exactly the same answers. The lock ends on time.
func TestLockoutFromUpstreamStatus(t *testing.T) {
	g := newLoginRig(t, rigConfig{lockout: &login.LockoutConfig{MaxFailures: 10, Duration: 5 * time.Minute}})
	run := func(user string) []answer {
		var out []answer
		for a := 1; a <= 20; a++ {
			out = append(out, g.attempt(t, sourceClient(t, "127.0.2."+strconv.Itoa(a)), user, "wrong"))
		}
		for a := 1; a <= 20; a++ {
			out = append(out, g.attempt(t, sourceClient(t, "127.0.2."+strconv.Itoa(a)), user, "right"))
		}
		return append(out, g.attempt(t, sourceClient(t, "127.0.2.99"), user, "right"))
	}
	alice := run("alice")
	for i, a := range alice {
		want := 429
		if i < 10 {
			want = 401
		}
		if a.status != want {
			t.Fatalf("alice attempt %d: %d, want %d", i, a.status, want)
		}
		if want == 429 && (a.header.Get("Retry-After") != "300" || a.header.Get("RateLimit") != `"login";r=0;t=300` ||
			a.header.Get("X-RateLimit-Reset") != login.FormatReset(t0.Add(5*time.Minute)) || !strings.Contains(a.body, `"retryAfter":300`)) {
			t.Fatalf("alice attempt %d: %v %s", i, a.header, a.body)
		}
	}
	if got := g.upstream.Load(); got != 10 {
		t.Fatalf("upstream saw %d attempts, want 10", got)
	}
	nobody := run("nobody")
	for i := range alice {
		if alice[i].status != nobody[i].status || alice[i].body != nobody[i].body || fmt.Sprint(alice[i].header) != fmt.Sprint(nobody[i].header) {
			t.Fatalf("attempt %d differs for an unknown account:\n%+v\n%+v", i, alice[i], nobody[i])
		}
	}
	if got, deg := g.counts(); deg != 0 || !equalCounts(got, map[string]int{"locked": 62}) {
		t.Fatalf("refusals %v, degraded %d", got, deg)
	}
	g.clk.Advance(5 * time.Minute)
	if a := g.attempt(t, sourceClient(t, "127.0.2.1"), "alice", "right"); a.status != 200 {
		t.Fatalf("after the lock: %d", a.status)
	}
}

// TestLockoutTableFull: a lockout table full of live failure counts
// refuses accounts it cannot track (reason capacity) instead of letting
// their failures go uncounted; accounts it tracks keep their counts.
func TestLockoutTableFull(t *testing.T) {
	clk := clock.NewManual(t0)
	ls, err := login.NewMemoryLockoutStore(login.MemoryConfig{Capacity: 2, Shards: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	lo := newLockout(t, login.LockoutConfig{MaxFailures: 2, Window: time.Minute, Store: ls, Clock: clk, Listener: rec.listen})
	l := newLimiter(t, login.Config{Limit: 100, Store: newMemoryStore(t, clk), Lockout: lo, Clock: clk})
	ctx := context.Background()
	for _, u := range []string{"a", "b"} {
		if st, _ := lo.RecordFailure(ctx, u); st != (login.LockStatus{}) {
			t.Fatalf("%s: %+v", u, st)
		}
	}
	if st, _ := lo.RecordFailure(ctx, "c"); st != (login.LockStatus{Full: true}) {
		t.Fatalf("c: %+v", st)
	}
	want := login.Decision{Limit: 100, ResetAt: t0.Add(time.Minute), RetryAfterSeconds: 60, Reason: login.ReasonCapacity, Window: time.Minute}
	if d := evaluate(t, l, "192.0.2.1", "c"); d != want {
		t.Fatalf("untracked account:\n got %+v\nwant %+v", d, want)
	}
	if d := evaluate(t, l, "192.0.2.1", "a"); !d.Allowed {
		t.Fatalf("tracked account: %+v", d)
	}
	if st, _ := lo.RecordFailure(ctx, "a"); !st.Locked || st.RetryAfterSeconds != 900 {
		t.Fatalf("a's second failure: %+v", st)
	}
	if d := evaluate(t, l, "192.0.2.1", "a"); d.Reason != login.ReasonLocked || d.RetryAfterSeconds != 900 {
		t.Fatalf("locked account: %+v", d)
	}
	if len(rec.types()) != 0 {
		t.Fatalf("a full lockout table emitted %v", rec.types())
	}
	clk.Advance(time.Minute) // b's count expires: room for c
	if d := evaluate(t, l, "192.0.2.1", "c"); !d.Allowed {
		t.Fatalf("c after b expired: %+v", d)
	}
}
