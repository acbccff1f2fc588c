package redisstore_test

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/login/redisstore"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// counter is a go-redis hook that counts the commands a client sends: each
// Process is one request/response round trip, each pipeline one more.
type counter struct {
	mu    sync.Mutex
	trips int
	names []string
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.trips++
		c.names = append(c.names, cmd.Name())
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.trips++
		c.names = append(c.names, "pipeline")
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *counter) reset() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, names := c.trips, c.names
	c.trips, c.names = 0, nil
	return n, names
}

// newClient returns a fresh client (its own pool) with short timeouts and
// no retries, like Open.
func newClient(t testing.TB, addr string) (*redis.Client, *counter) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	cnt := &counter{}
	c.AddHook(cnt)
	return c, cnt
}

func newStore(t testing.TB, c redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type recorder struct {
	mu  sync.Mutex
	evs []login.Event
}

func (r *recorder) listen(e login.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, e)
}

func (r *recorder) types() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, e := range r.evs {
		s = append(s, string(e.Type))
	}
	return strings.Join(s, ",")
}

func evaluate(t testing.TB, l *login.Limiter, ip, user string) login.Decision {
	t.Helper()
	d, err := l.Evaluate(context.Background(), ip, user)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func serverMicros(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// TestConcurrentExactAcrossInstances: 50 goroutines split over two limiter
// instances with separate clients against one Redis → exactly 5 allowed.
func TestConcurrentExactAcrossInstances(t *testing.T) {
	rd := testsvc.StartRedis(t)
	var lims [2]*login.Limiter
	for i := range lims {
		c, _ := newClient(t, rd.Addr())
		l, err := login.New(login.Config{Store: newStore(t, c)})
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	for round := range 3 { // three different accounts, same exactness
		user := "carol" + strconv.Itoa(round)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			allowed atomic.Int32
		)
		for g := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := lims[g%2].Evaluate(context.Background(), "192.0.2.7", user)
				switch {
				case err != nil || d.Degraded:
					t.Errorf("%+v %v", d, err)
				case d.Allowed:
					allowed.Add(1)
				case d.Remaining != 0 || d.RetryAfterSeconds < 1 || d.RetryAfterSeconds > 60:
					t.Errorf("bad rejection %+v", d)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := allowed.Load(); n != 5 {
			t.Fatalf("round %d: %d of 50 allowed, want exactly 5", round, n)
		}
	}
}

// TestRollingOnServerTime plants attempts at chosen server instants and
// checks the script's trim (<= now-window), count and next slot.
func TestRollingOnServerTime(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c, _ := newClient(t, rd.Addr())
	s := newStore(t, c)
	ctx := context.Background()
	const window = 60 * time.Second
	var key login.Key
	key[0] = 1
	zkey := "bulwark:login:rw:{" + hex.EncodeToString(key[:]) + "}"

	now := serverMicros(t, c)
	inside := now - window.Microseconds() + 10_000_000 // leaves in 10 s
	// Four attempts exactly at now-window: the script's now is >= ours, so
	// they are at or before its now-window and must be forgotten.
	old := now - window.Microseconds()
	plant(t, c, zkey, old, old, old, old, inside)
	h, err := s.Hit(ctx, key, 2, window)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Allowed || h.Count != 2 {
		t.Fatalf("%+v: boundary attempts were not forgotten", h)
	}
	admittedAt := h.At
	// ResetAt = oldest + window, computed only from what Redis returned.
	if got, want := h.At.Add(h.NextSlot), time.UnixMicro(inside).Add(window); !got.Equal(want) {
		t.Fatalf("next slot %v, want %v", got, want)
	}
	if got := readLog(t, c, zkey); len(got) != 2 || got[0] != inside || !time.UnixMicro(got[1]).Equal(admittedAt) {
		t.Fatalf("log %v, want [%d %d]", got, inside, admittedAt.UnixMicro())
	}
	// Full: rejected, nothing added, wait = 10 s minus the elapsed time.
	h, err = s.Hit(ctx, key, 2, window)
	if err != nil {
		t.Fatal(err)
	}
	if h.Allowed || h.Count != 2 || h.NextSlot <= 9*time.Second || h.NextSlot > 10*time.Second {
		t.Fatalf("%+v", h)
	}
	if got := readLog(t, c, zkey); len(got) != 2 {
		t.Fatalf("a rejection changed the log: %v", got)
	}
	if ttl := c.PTTL(ctx, zkey).Val(); ttl <= 0 || ttl > window {
		t.Fatalf("PTTL %v", ttl)
	}

	// A log holding more than the limit (it was lowered): the next slot
	// frees when enough attempts have left, not when the oldest leaves.
	plant(t, c, zkey, append(readLog(t, c, zkey), inside+20_000_000)...)
	h, err = s.Hit(ctx, key, 1, window)
	if err != nil {
		t.Fatal(err)
	}
	// The log holds inside, inside+20s and the admitted attempt; with limit
	// 1 a slot frees only when all three have left: when the newest does.
	if want := admittedAt.Add(window); h.Allowed || h.Count != 3 || !h.At.Add(h.NextSlot).Equal(want) {
		t.Fatalf("lowered limit: %+v, next slot %v, want %v", h, h.At.Add(h.NextSlot), want)
	}
	c.Del(ctx, zkey)

	// Through the Limiter: retry rounds up, ResetAt is the server instant.
	l, err := login.New(login.Config{Limit: 1, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	first := evaluate(t, l, "192.0.2.1", "alice")
	second := evaluate(t, l, "192.0.2.1", "alice")
	if !first.Allowed || first.Remaining != 0 || second.Allowed || !second.ResetAt.Equal(first.ResetAt) ||
		second.RetryAfterSeconds < 59 || second.RetryAfterSeconds > 60 || second.ResetAt.Location() != time.UTC {
		t.Fatalf("first %+v\nsecond %+v", first, second)
	}
	if d := time.Until(first.ResetAt); d < 55*time.Second || d > 65*time.Second {
		t.Fatalf("ResetAt %v is not about a window away", first.ResetAt)
	}
}

// plant writes a rate-limit log holding the given server instants (µs),
// sorted, as the hit script keeps it, with an expiry of a minute.
func plant(t testing.TB, c *redis.Client, key string, at ...int64) {
	t.Helper()
	slices.Sort(at)
	var b strings.Builder
	for _, v := range at {
		fmt.Fprintf(&b, "%016d", v)
	}
	if err := c.Set(context.Background(), key, b.String(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

// readLog returns the instants of a rate-limit log.
func readLog(t testing.TB, c *redis.Client, key string) []int64 {
	t.Helper()
	s, err := c.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(s)%16 != 0 {
		t.Fatalf("log of %d bytes", len(s))
	}
	var out []int64
	for i := 0; i < len(s); i += 16 {
		v, err := strconv.ParseInt(s[i:i+16], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestOneRoundTrip: each Evaluate sends exactly one command, EVALSHA, as
// both the client hook and the server's command statistics show.
func TestOneRoundTrip(t *testing.T) {
	rd := testsvc.StartRedis(t)
	admin, _ := newClient(t, rd.Addr())
	c, cnt := newClient(t, rd.Addr())
	l, err := login.New(login.Config{Store: newStore(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Load the script once (the first EVALSHA finds no script and falls
	// back to EVAL).
	evaluate(t, l, "192.0.2.1", "warmup")
	cnt.reset()
	admin.ConfigResetStat(ctx)
	const n = 100
	for i := range n {
		evaluate(t, l, "192.0.2."+strconv.Itoa(i%7), "user"+strconv.Itoa(i%3))
	}
	trips, names := cnt.reset()
	if trips != n {
		t.Fatalf("%d round trips for %d decisions: %v", trips, n, names)
	}
	for _, name := range names {
		if name != "evalsha" {
			t.Fatalf("sent %q", name)
		}
	}
	stats := admin.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_evalsha:calls="+strconv.Itoa(n)+",") {
		t.Fatalf("server stats:\n%s", stats)
	}
	if strings.Contains(stats, "cmdstat_eval:") {
		t.Fatalf("EVAL after warm-up:\n%s", stats)
	}
	// A server that lost its script cache costs one extra round trip, once.
	admin.ScriptFlush(ctx)
	evaluate(t, l, "192.0.2.1", "after-flush")
	evaluate(t, l, "192.0.2.1", "after-flush")
	if trips, names := cnt.reset(); trips != 3 || strings.Join(names, " ") != "evalsha eval evalsha" {
		t.Fatalf("after SCRIPT FLUSH: %d %v", trips, names)
	}
}

// TestKeys: keys carry the prefix and a hash tag, expire, and contain no
// address or username.
func TestKeys(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c, _ := newClient(t, rd.Addr())
	s, err := redisstore.New(c, redisstore.Config{Prefix: "app1:"})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := login.New(login.Config{Store: s})
	lo, _ := login.NewLockout(login.LockoutConfig{MaxFailures: 2, Store: s})
	ctx := context.Background()
	evaluate(t, l, "198.51.100.23", "Alice")
	lo.RecordFailure(ctx, "Alice")
	lo.RecordFailure(ctx, "bob")
	lo.RecordFailure(ctx, "bob") // locks bob
	keys := c.Keys(ctx, "*").Val()
	re := regexp.MustCompile(`^app1:(rw:\{[0-9a-f]{64}\}|lk:\{[0-9a-f]{64}\}:[nl])$`)
	if len(keys) != 3 {
		t.Fatalf("keys %v", keys)
	}
	for _, k := range keys {
		if !re.MatchString(k) {
			t.Errorf("key %q", k)
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no expiry", k)
		}
		dump := c.Dump(ctx, k).Val()
		for _, secret := range []string{"alice", "Alice", "bob", "198.51.100.23"} {
			if strings.Contains(k, secret) || strings.Contains(dump, secret) {
				t.Errorf("%s leaks %q", k, secret)
			}
		}
	}
	for _, bad := range []string{"a{b", "a}b", "a b", strings.Repeat("x", 65), "é"} {
		if _, err := redisstore.New(c, redisstore.Config{Prefix: bad}); err == nil || !strings.HasPrefix(err.Error(), "redisstore: Prefix") {
			t.Errorf("prefix %q: %v", bad, err)
		}
	}
	if _, err := redisstore.New(nil, redisstore.Config{}); err == nil {
		t.Error("nil client accepted")
	}
}

func TestOpenValidation(t *testing.T) {
	for _, c := range []struct {
		o    redisstore.Options
		want string
	}{
		{redisstore.Options{}, "Addr is required"},
		{redisstore.Options{Addr: "x:1", DB: 16}, "DB must be"},
		{redisstore.Options{Addr: "x:1", PoolSize: 1001}, "PoolSize must be"},
		{redisstore.Options{Addr: "x:1", ReadTimeout: time.Hour}, "ReadTimeout must be"},
		{redisstore.Options{Addr: "x:1", DialTimeout: -1}, "DialTimeout must be"},
		{redisstore.Options{Addr: "x:1", Config: redisstore.Config{Prefix: "{"}}, "Prefix"},
	} {
		if s, err := redisstore.Open(c.o); err == nil || s != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}

// TestKilledMidRun: Redis crashes under 8 concurrent callers. Every call
// still answers (degraded once Redis is gone), CACHE_UNAVAILABLE is
// emitted once, and after a restart CACHE_RECOVERED waits until a write
// has succeeded too: a read-only rejection is not enough.
func TestKilledMidRun(t *testing.T) {
	rd := testsvc.StartRedis(t)
	s, err := redisstore.Open(redisstore.Options{Addr: rd.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := &recorder{}
	l, err := login.New(login.Config{Store: s, Listener: rec.listen, CacheName: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		healthy  atomic.Int32
		degraded atomic.Int32
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.Evaluate(context.Background(), "192.0.2."+strconv.Itoa(g), "user"+strconv.Itoa(i))
				switch {
				case err != nil:
					t.Error(err)
					return
				case d.Degraded:
					if d != (login.Decision{Allowed: true, Limit: 5, Remaining: -1, Degraded: true}) {
						t.Errorf("degraded %+v", d)
					}
					degraded.Add(1)
				default:
					healthy.Add(1)
				}
			}
		}()
	}
	waitFor(t, func() bool { return healthy.Load() > 50 })
	rd.Kill()
	waitFor(t, func() bool { return degraded.Load() > 50 })
	close(stop)
	wg.Wait()
	if got := rec.types(); got != "CACHE_UNAVAILABLE" {
		t.Fatalf("events after the crash: %q", got)
	}

	rd.Restart()
	// Another replica, healthy all along, fills bob's window.
	c2, _ := newClient(t, rd.Addr())
	other, _ := login.New(login.Config{Store: newStore(t, c2)})
	for range 5 {
		if d := evaluate(t, other, "192.0.2.1", "bob"); !d.Allowed {
			t.Fatalf("%+v", d)
		}
	}
	// Our instance reads bob's full window: a read succeeded, the failed
	// write has not, so no recovery yet. (A pooled connection broken by
	// the crash may fail once more; that is still the same outage.)
	waitFor(t, func() bool { return !evaluate(t, l, "192.0.2.1", "bob").Degraded })
	if d := evaluate(t, l, "192.0.2.1", "bob"); d.Allowed || d.Degraded || d.RetryAfterSeconds < 1 {
		t.Fatalf("bob: %+v", d)
	}
	if got := rec.types(); got != "CACHE_UNAVAILABLE" {
		t.Fatalf("a read-only success recovered: %q", got)
	}
	if d := evaluate(t, l, "192.0.2.1", "alice"); !d.Allowed || d.Degraded || d.Remaining != 4 {
		t.Fatalf("alice: %+v", d)
	}
	if got := rec.types(); got != "CACHE_UNAVAILABLE,CACHE_RECOVERED" {
		t.Fatalf("events %q", got)
	}
}

// TestLockoutAcrossInstancesAndCrash: failures from two replicas count
// together; a crash skips the protection; after the restart, recovery
// needs both a read and a write to succeed.
func TestLockoutAcrossInstancesAndCrash(t *testing.T) {
	rd := testsvc.StartRedis(t)
	ctx := context.Background()
	rec := &recorder{}
	var los [2]*login.Lockout
	for i := range los {
		s, err := redisstore.Open(redisstore.Options{Addr: rd.Addr(), DialTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		cfg := login.LockoutConfig{MaxFailures: 3, Duration: time.Minute, Store: s}
		if i == 0 {
			cfg.Listener = rec.listen
		}
		if los[i], err = login.NewLockout(cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		st, err := los[i%2].RecordFailure(ctx, "alice")
		if err != nil || st.Degraded || st.Locked != (i == 2) {
			t.Fatalf("failure %d: %+v %v", i, st, err)
		}
	}
	if st, _ := los[1].Check(ctx, " ALICE"); !st.Locked || st.RetryAfterSeconds != 60 {
		t.Fatalf("other replica sees %+v", st)
	}
	if st, _ := los[1].Check(ctx, "bob"); st.Locked || st.Degraded {
		t.Fatalf("bob %+v", st)
	}

	rd.Kill()
	for _, f := range []func(context.Context, string) (login.LockStatus, error){los[0].Check, los[0].RecordFailure, los[0].Check} {
		if st, err := f(ctx, "alice"); err != nil || st != (login.LockStatus{Degraded: true}) {
			t.Fatalf("during the crash: %+v %v", st, err)
		}
	}
	if got := rec.types(); got != "CACHE_UNAVAILABLE" {
		t.Fatalf("events %q", got)
	}
	rd.Restart()
	waitFor(t, func() bool { st, _ := los[0].Check(ctx, "alice"); return !st.Degraded })
	if got := rec.types(); got != "CACHE_UNAVAILABLE" {
		t.Fatalf("a read recovered a failed write: %q", got)
	}
	if st, _ := los[0].RecordFailure(ctx, "alice"); st.Degraded || st.Locked {
		t.Fatalf("%+v (the restarted server is empty)", st)
	}
	if got := rec.types(); got != "CACHE_UNAVAILABLE,CACHE_RECOVERED" {
		t.Fatalf("events %q", got)
	}
	if st, _ := los[0].RecordSuccess(ctx, "alice"); st.Degraded {
		t.Fatalf("%+v", st)
	}
}

// waitFor polls cond (it waits on real servers and real goroutines, not on
// time passing for the code under test).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Open with a URL: a real 3-master Redis Cluster, two instances with their
// own clients, 50 concurrent logins of one account → exactly 5 allowed;
// the URL never shows in errors.
func TestOpenURLClusterExact(t *testing.T) {
	c := testsvc.StartRedisCluster(t, 3)
	var lims, lims2d [2]*login.Limiter
	for i := range lims {
		s, err := redisstore.Open(redisstore.Options{URL: c.URL(), Cluster: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		l, err := login.New(login.Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
		if lims2d[i], err = login.New(login.Config{Store: s, PerClient: login.PerClient{Limit: 7}}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var allowed atomic.Int32
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := evaluate(t, lims[g%2], "192.0.2.8", "dave")
			if d.Degraded {
				t.Errorf("degraded %+v", d)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := allowed.Load(); n != 5 {
		t.Fatalf("allowed %d, want 5", n)
	}
	// Both windows on a cluster (two keys in two slots: two scripts in
	// turn): one address, 40 accounts → exactly 7.
	allowed.Store(0)
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := evaluate(t, lims2d[g%2], "192.0.2.9", "user"+strconv.Itoa(g))
			if d.Degraded || !d.Allowed && d.Reason != login.ReasonClient {
				t.Errorf("%+v", d)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := allowed.Load(); n != 7 {
		t.Fatalf("per-client on a cluster: allowed %d, want 7", n)
	}
	for _, o := range []redisstore.Options{
		{URL: "redis://user:s3cret@[bad"},
		{URL: "redis://h:1", Addr: "h:1"},
		{URL: "redis://h:1", TLS: &tls.Config{}},
	} {
		_, err := redisstore.Open(o)
		if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "h:1") {
			t.Errorf("Open(%q): %v", o.URL, err)
		}
	}
}

// TestOpenTLS: over rediss:// with the CA's file (and the client
// certificate the server requires), two replicas' limiters hold the limit
// exactly; a store that does not trust the server's certificate degrades
// (fails open, like any unreachable cache) and redisconn.Check says why,
// without the password or the address.
func TestOpenTLS(t *testing.T) {
	rd := testsvc.StartRedisTLS(t, testsvc.RedisTLSOptions{RequireClientCert: true})
	tl := rd.TLS()
	var lims [2]*login.Limiter
	for i := range lims {
		s, err := redisstore.Open(redisstore.Options{URL: rd.URL(), CAFile: tl.CA.File, CertFile: tl.Client.CertFile, KeyFile: tl.Client.KeyFile})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if lims[i], err = login.New(login.Config{Store: s}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var allowed atomic.Int32
	for g := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := evaluate(t, lims[g%2], "192.0.2.9", "erin")
			if d.Degraded {
				t.Errorf("degraded %+v", d)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := allowed.Load(); n != 5 {
		t.Fatalf("allowed %d, want 5", n)
	}

	other := testsvc.NewCA(t, "not the server's CA")
	s, err := redisstore.Open(redisstore.Options{URL: "rediss://default:pw-s3cret@" + rd.Addr(), CAFile: other.File,
		CertFile: tl.Client.CertFile, KeyFile: tl.Client.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rec := &recorder{}
	l, _ := login.New(login.Config{Store: s, Listener: rec.listen})
	if d := evaluate(t, l, "192.0.2.9", "erin"); !d.Degraded || !d.Allowed {
		t.Fatalf("untrusted server: %+v", d)
	}
	if got := rec.types(); got != "CACHE_UNAVAILABLE" {
		t.Fatalf("events %q", got)
	}
	err = redisconn.Check(context.Background(), s.Client())
	if !errors.Is(err, redisconn.ErrUntrusted) || strings.Contains(err.Error(), "pw-s3cret") || strings.Contains(err.Error(), rd.Addr()) {
		t.Fatalf("Check: %v", err)
	}
	if _, err := redisstore.Open(redisstore.Options{Addr: rd.Addr(), CAFile: tl.CA.File}); err == nil || !strings.Contains(err.Error(), "need Options.URL") {
		t.Fatalf("Addr with CAFile: %v", err)
	}
}

// TestBothWindowsOneScript: with the per-client dimension on, a decision
// is one script on one server (both windows in one EVALSHA); a client
// window that refuses writes nothing in the account window (no key is
// made); two replicas hold both limits exactly.
func TestBothWindowsOneScript(t *testing.T) {
	rd := testsvc.StartRedis(t)
	admin, _ := newClient(t, rd.Addr())
	ctx := context.Background()
	var lims [2]*login.Limiter
	var cnts [2]*counter
	for i := range lims {
		c, cnt := newClient(t, rd.Addr())
		l, err := login.New(login.Config{Store: newStore(t, c), PerClient: login.PerClient{Limit: 7}})
		if err != nil {
			t.Fatal(err)
		}
		lims[i], cnts[i] = l, cnt
		evaluate(t, l, "198.51.100.200", "warmup")
		cnt.reset()
	}
	admin.ConfigResetStat(ctx)
	// 40 attempts from one address at 40 accounts: exactly 7 pass the
	// client window. 40 attempts from another address at one account:
	// the first 7 pass the client window, 5 of them the account window.
	var wg sync.WaitGroup
	var spread, one, refusedByAccount atomic.Int32
	for g := range 80 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip, user := "192.0.2.1", "acct"+strconv.Itoa(g)
			if g%2 == 1 {
				ip, user = "192.0.2.2", "dora"
			}
			d := evaluate(t, lims[g/2%2], ip, user)
			switch {
			case d.Degraded:
				t.Errorf("%+v", d)
			case d.Allowed && g%2 == 0:
				spread.Add(1)
			case d.Allowed:
				one.Add(1)
			case d.Reason == login.ReasonAccount && g%2 == 1:
				refusedByAccount.Add(1)
			case d.Reason != login.ReasonClient:
				t.Errorf("g %d: %+v", g, d)
			}
		}()
	}
	wg.Wait()
	if spread.Load() != 7 || one.Load() != 5 || refusedByAccount.Load() != 2 {
		t.Fatalf("one address, many accounts: %d allowed (want 7); one account: %d allowed (want 5), %d refused by the account window (want 2)",
			spread.Load(), one.Load(), refusedByAccount.Load())
	}
	info := admin.Info(ctx, "commandstats").Val()
	if n := commandCalls(t, info, "evalsha"); n != 80 {
		t.Fatalf("%d scripts for 80 decisions, want one each", n)
	}
	// 1 client key + 7 account keys for the first address, 1 + 1 for the
	// second, 1 + 1 for the warm-up: the 33 accounts the client window
	// refused never got a key.
	if n := admin.DBSize(ctx).Val(); n != 12 {
		t.Fatalf("%d keys, want 12", n)
	}
	for _, cnt := range cnts {
		_, names := cnt.reset()
		for _, n := range names {
			if n != "evalsha" && n != "pipeline" && n != "hello" {
				t.Fatalf("sent %v", names)
			}
		}
	}
}

// TestPairFallsBackOnCrossSlot: a plain client on one Redis Cluster node
// (as behind a proxy that insists on one slot per script) gets CROSSSLOT
// for a two-key script; the store then decides the windows one by one,
// from then on, and the decision is still exact.
func TestPairFallsBackOnCrossSlot(t *testing.T) {
	cl := testsvc.StartRedisCluster(t, 3)
	ctx := context.Background()
	node := cl.Nodes[0]
	c, cnt := newClient(t, node.Addr())
	s := newStore(t, c)
	// Find two keys whose slots this node serves, in different slots.
	owned := func(k login.Key) (int64, bool) {
		slot := c.ClusterKeySlot(ctx, "bulwark:login:rw:{"+hex.EncodeToString(k[:])+"}").Val()
		for _, sh := range c.ClusterShards(ctx).Val() {
			for _, r := range sh.Slots {
				for _, n := range sh.Nodes {
					if int64(r.Start) <= slot && slot <= int64(r.End) && n.Role == "master" && n.IP+":"+strconv.FormatInt(n.Port, 10) == node.Addr() {
						return slot, true
					}
				}
			}
		}
		return slot, false
	}
	var keys []login.Key
	var slots []int64
	for i := 0; len(keys) < 2; i++ {
		var k login.Key
		k[0], k[1] = byte(i), byte(i>>8)
		if slot, ok := owned(k); ok && (len(slots) == 0 || slots[0] != slot) {
			keys, slots = append(keys, k), append(slots, slot)
		}
	}
	cnt.reset()
	for i := range 4 {
		f, sec, err := s.HitPair(ctx, keys[0], 4, time.Minute, keys[1], 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !f.Allowed || f.Count != i+1 || sec.Allowed != (i < 2) || sec.Count != min(i+1, 2) {
			t.Fatalf("attempt %d: first %+v second %+v", i, f, sec)
		}
	}
	if f, sec, err := s.HitPair(ctx, keys[0], 4, time.Minute, keys[1], 2, time.Minute); err != nil || f.Allowed || sec != (login.Hit{}) {
		t.Fatalf("client window full: %+v %+v %v", f, sec, err)
	}
	_, names := cnt.reset()
	// The first pair: one two-key script (CROSSSLOT), then two scripts;
	// afterwards two per pair (one when the first window refuses).
	if got := strings.Count(strings.Join(names, " "), "evalsha"); got != 1+2*4+1 {
		t.Fatalf("%d scripts: %v", got, names)
	}
}

// TestMalformedLogWritesNothing: a log that is not a whole number of
// instants fails the script before it writes anything: the pair's first
// window is not counted when the second's log is damaged.
func TestMalformedLogWritesNothing(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c, _ := newClient(t, rd.Addr())
	s := newStore(t, c)
	ctx := context.Background()
	k1, k2 := login.Key{1}, login.Key{2}
	logKey := func(k login.Key) string { return "bulwark:login:rw:{" + hex.EncodeToString(k[:]) + "}" }
	c.Set(ctx, logKey(k2), "12345", time.Minute)
	if _, _, err := s.HitPair(ctx, k1, 5, time.Minute, k2, 5, time.Minute); err == nil || !strings.Contains(err.Error(), "malformed log") {
		t.Fatalf("pair with a damaged second log: %v", err)
	}
	if n := c.Exists(ctx, logKey(k1)).Val(); n != 0 {
		t.Fatal("the first window was written although the script failed")
	}
	if _, err := s.Hit(ctx, k2, 5, time.Minute); err == nil {
		t.Fatal("Hit on a damaged log succeeded")
	}
	// The first window refusing: the second log is never read.
	plant(t, c, logKey(k1), serverMicros(t, c))
	if f, sec, err := s.HitPair(ctx, k1, 1, time.Minute, k2, 5, time.Minute); err != nil || f.Allowed || sec != (login.Hit{}) {
		t.Fatalf("%+v %+v %v", f, sec, err)
	}
}

// TestUnlock: on Redis, a lock one replica's failures set is lifted by
// another replica's Unlock under another spelling; both keys of the
// account are gone; failures counted without a lock are reported and
// forgotten; an account with nothing is not Found; a dead server is an
// error, not a silent success.
func TestUnlock(t *testing.T) {
	rd := testsvc.StartRedis(t)
	ctx := context.Background()
	c, _ := newClient(t, rd.Addr())
	var los [2]*login.Lockout
	for i := range los {
		var err error
		if los[i], err = login.NewLockout(login.LockoutConfig{MaxFailures: 3, Duration: time.Minute, Store: newStore(t, c)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := los[0].RecordFailure(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := los[1].Check(ctx, "alice"); !st.Locked {
		t.Fatalf("not locked: %+v", st)
	}
	u, err := los[1].Unlock(ctx, "ＡＬＩＣＥ")
	if err != nil || u != (login.Unlocked{Locked: true}) {
		t.Fatalf("unlock: %+v %v", u, err)
	}
	if st, _ := los[0].Check(ctx, "alice"); st.Locked || st.Degraded {
		t.Fatalf("after the unlock: %+v", st)
	}
	if keys, err := c.Keys(ctx, redisstore.DefaultPrefix+"lk:*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("lockout keys left: %v %v", keys, err)
	}
	for range 2 {
		los[0].RecordFailure(ctx, "bob")
	}
	if u, err := los[1].Unlock(ctx, "Bob"); err != nil || u != (login.Unlocked{Failures: 2}) {
		t.Fatalf("unlock of two failures: %+v %v", u, err)
	}
	if st, _ := los[0].RecordFailure(ctx, "bob"); st.Locked {
		t.Fatalf("a failure after forgetting locked: %+v", st)
	}
	if u, err := los[1].Unlock(ctx, "carol"); err != nil || u.Found() {
		t.Fatalf("unlock of nothing: %+v %v", u, err)
	}
	rd.Kill()
	if _, err := los[1].Unlock(ctx, "alice"); err == nil {
		t.Fatal("unlock with Redis down: no error")
	}
}
