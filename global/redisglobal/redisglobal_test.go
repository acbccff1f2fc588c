package redisglobal_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/internal/testsvc"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/redisconn"
)

func openStore(t testing.TB, o redisconn.Options) *redisglobal.Store {
	t.Helper()
	st, err := redisglobal.Open(o, redisglobal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newNode(t testing.TB, cfg global.Config) *global.Node {
	t.Helper()
	n, err := global.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// strictTiming reports whether the latency bounds of the proofs are
// asserted as tight as on a quiet machine (scripts/test-long sets
// BULWARK_STRICT_TIMING=1); otherwise they are generous, so that the suite
// tells the truth on a loaded machine too: they still catch a decision
// path that waits for Redis, but not scheduling noise.
func strictTiming() bool { return os.Getenv("BULWARK_STRICT_TIMING") == "1" }

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		if time.Since(began) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(began)
}

// The L2 script against a real server: leases never exceed the bucket,
// a partial lease below min grants nothing, retry and reset times are on
// the server clock, the key carries an expiry and lives under one hash tag.
func TestLeaseScript(t *testing.T) {
	rd := testsvc.StartRedis(t)
	st := openStore(t, redisconn.Options{URL: "redis://" + rd.Addr()})
	ctx := context.Background()
	k := global.KeyOf("r", "tenant")
	// One token a minute: no stall of this machine refills one between
	// two calls, so the counts below are exact whatever the load.
	const interval = time.Minute
	leaseOf := func(k global.Key, want, min int64) global.Lease {
		b := []global.Lease{{Key: k, Interval: interval, Burst: 10, Want: want, Min: min}}
		if _, err := st.Lease(ctx, b); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	lease := func(want, min int64) global.Lease { return leaseOf(k, want, min) }
	if l := lease(4, 1); l.Granted != 4 || l.Remaining != 6 || l.ResetAfter <= 3*interval || l.ResetAfter > 4*interval {
		t.Fatalf("first lease %+v", l)
	}
	if l := lease(8, 7); l.Granted != 0 || l.RetryAfter <= 0 || l.RetryAfter > interval {
		t.Fatalf("lease below min %+v", l)
	}
	if l := lease(8, 1); l.Granted != 6 || l.Remaining != 0 {
		t.Fatalf("partial lease %+v", l)
	}
	// Tokens given back: the bucket is as if they had never been leased,
	// never fuller than full.
	give := func(ret, want, min int64) global.Lease {
		b := []global.Lease{{Key: k, Interval: interval, Burst: 10, Want: want, Min: min, Return: ret}}
		if _, err := st.Lease(ctx, b); err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	if l := give(3, 0, 0); l.Granted != 0 || l.Remaining != 3 || l.RetryAfter != 0 || l.Err != nil {
		t.Fatalf("return of 3 %+v", l)
	}
	if l := give(2, 4, 4); l.Granted != 4 || l.Remaining != 1 {
		t.Fatalf("return of 2 with a lease of 4 %+v", l)
	}
	if l := give(100, 0, 0); l.Remaining != 10 || l.ResetAfter != 0 {
		t.Fatalf("return past full %+v", l)
	}
	if n := st.Client().Exists(ctx, st.Key(k)).Val(); n != 0 {
		t.Fatalf("a full bucket's key still exists")
	}
	if l := lease(10, 10); l.Granted != 10 {
		t.Fatalf("lease of the whole burst after returns %+v", l)
	}
	key := st.Key(k)
	if !strings.HasPrefix(key, redisglobal.DefaultPrefix+"{") || !strings.HasSuffix(key, "}") || strings.Contains(key, "tenant") {
		t.Fatalf("key %q", key)
	}
	// The key expires once the bucket would be full again: 10 tokens.
	if ttl := st.Client().PTTL(ctx, key).Val(); ttl <= 9*interval || ttl > 10*interval+time.Second {
		t.Fatalf("key expiry %v", ttl)
	}
	// Script cache flushed: EVALSHA fails with NOSCRIPT, EVAL takes over
	// (on a fresh key, whose bucket is full).
	if err := st.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if l := leaseOf(global.KeyOf("r", "other"), 3, 1); l.Granted != 3 || l.Err != nil {
		t.Fatalf("after SCRIPT FLUSH %+v", l)
	}
	// Heartbeat set: two instances live, then one leaves.
	for _, id := range []string{"a", "b"} {
		if n, err := st.Heartbeat(ctx, id, time.Second); err != nil || n < 1 {
			t.Fatal(n, err)
		}
	}
	if n, _ := st.Heartbeat(ctx, "a", time.Second); n != 2 {
		t.Fatalf("live %d, want 2", n)
	}
	if err := st.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.Heartbeat(ctx, "a", time.Second); n != 1 {
		t.Fatalf("live %d after leave, want 1", n)
	}
}

// Proof: four replica processes (this test binary re-executed) share one
// Redis under steady overload on one key: the total admitted stays within
// 1% of the GCRA bound burst + rate·window, and each process gets a share.
// scripts/bench-global runs the same for 30 s
// (BULWARK_GLOBAL_PROOF_DURATION=30s).
func TestFourProcessesExact(t *testing.T) {
	rd := testsvc.StartRedis(t)
	runReplicas(t, "redis://"+rd.Addr(), false, []string{"hot"})
}

func runReplicas(t *testing.T, url string, cluster bool, keys []string) {
	const procs = 4
	dur := envDuration("BULWARK_GLOBAL_PROOF_DURATION", 5*time.Second)
	rate, burst := 1000.0, int64(100)
	spec := childSpec{URL: url, Cluster: cluster, Rate: rate, Burst: burst, Callers: envInt("BULWARK_GLOBAL_PROOF_CALLERS", 4),
		Keys: keys, StartAt: time.Now().Add(2 * time.Second).UnixNano(), Duration: dur,
		Pace: envDuration("BULWARK_GLOBAL_PROOF_PACE", 250*time.Microsecond)}
	// race-ok: a bigger decision budget; the counts are asserted all the same.
	if raceEnabled || cluster || !strictTiming() {
		// Four replicas and the Redis server(s) share the machine (two
		// cores here, and the rest of the test suite runs beside it):
		// with three cluster nodes, or the race detector slowing every
		// goroutine, CPU contention alone makes decisions wait longer
		// than the default 2 ms for refills queued behind the round trip
		// in flight (5 ms was seen to be too little in CI); they give up,
		// and the breakers open. That is the outage path
		// (TestRedisKilledMidLoad), whose fallback admissions are paid
		// back only after the breaker closes, not the accounting this
		// proof is about: give the decisions a budget no healthy Redis on
		// loopback misses. (50 ms was missed under stress-ng beside the
		// suite: the longest allowed, unless BULWARK_STRICT_TIMING says
		// the machine is quiet and the default budget is proved too.)
		spec.Budget = global.MaxBudget
	}
	raw, _ := json.Marshal(spec)
	var (
		cmds []*exec.Cmd
		outs []*bytes.Buffer
	)
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	var results []childResult
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("replica %d: %v\n%s", i, err, outs[i])
		}
		var res childResult
		sc := bufio.NewScanner(outs[i])
		found := false
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
				found = json.Unmarshal([]byte(line), &res) == nil
			}
		}
		if !found {
			t.Fatalf("replica %d printed no result:\n%s", i, outs[i])
		}
		results = append(results, res)
	}
	var total, decisions int64
	var shares []int64
	first, last := int64(1<<63-1), int64(0)
	for i, r := range results {
		first, last = min(first, r.First), max(last, r.Last)
		total += r.Allowed
		decisions += r.Allowed + r.Rejected
		shares = append(shares, r.Allowed)
		s := r.Stats
		t.Logf("replica %d: allowed %d rejected %d | refills %d batches %d leased %d waits %d timeouts %d fallback %d opened %d replicas %d (%d at start) %v",
			i, r.Allowed, r.Rejected, s.Refills, s.Batches, s.Leased, s.Waits, s.WaitTimeouts, s.Fallback, s.Opened, s.Replicas, r.ReplicasAtStart, r.Info)
	}
	// The bound is the GCRA's over the span the replicas actually decided
	// in, from the first decision's start to the last one's end (all
	// replicas share this host's clock): every admission spends a token
	// L2 granted within that span, and L2 grants at most Burst + Rate·span
	// per key. (All replicas aim at StartAt + Duration, but a loaded
	// machine stretches the span by tens of milliseconds, which is not
	// over-admission.)
	span := time.Duration(last - first)
	ideal := float64(len(keys)) * (float64(burst) + rate*span.Seconds())
	t.Logf("%d processes, %v (decided over %v), %d keys: admitted %d of %d decisions (offered %.0f/s, %.0f× the limit); GCRA bound %.0f (ratio %.4f); per process %v",
		procs, dur, span.Round(time.Millisecond), len(keys), total, decisions, float64(decisions)/dur.Seconds(), float64(decisions)/dur.Seconds()/(rate*float64(len(keys))), ideal, float64(total)/ideal, shares)
	// The span must cover the duration (no replica stopped early). Its
	// upper end is only a sanity bound, generous on purpose: a replica
	// starved of CPU on a loaded machine finishes its last decision late
	// (6.07 s for 5 s was seen beside the suite), and the GCRA bound above
	// is taken over the actual span, so a late end hides no over-admission.
	if span < dur || span > 2*dur+5*time.Second {
		t.Fatalf("replicas decided over %v, want about %v", span, dur)
	}
	if float64(total) > ideal*1.01 {
		var opened uint64
		for _, r := range results {
			opened += r.Stats.Opened
		}
		t.Errorf("admitted %d > 1.01 × bound %.0f (breakers opened %d times: decisions that gave up on Redis were made from the fallback share)", total, ideal, opened)
	}
	if float64(total) < ideal*0.75 {
		t.Errorf("admitted %d < 0.75 × bound %.0f: leases strand too much", total, ideal)
	}
	for i, s := range shares {
		if float64(s) < float64(total)/procs/4 {
			t.Errorf("replica %d admitted %d of %d: not roughly fair", i, s, total)
		}
	}
}

// Proof: Redis killed under load. No decision fails, the breaker opens
// within 500 ms, the replica enforces its fallback share (1/2, two
// replicas) aligned with L2's last state, and after a restart the breaker
// closes within OpenFor plus one probe and leases resume.
func TestRedisKilledMidLoad(t *testing.T) {
	rd := testsvc.StartRedis(t)
	o := redisconn.Options{URL: "redis://" + rd.Addr()}
	var mu sync.Mutex
	var events []global.Event
	hooks := global.Hooks{Event: func(e global.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	// A budget no healthy Redis on loopback misses, even with the race
	// detector and the rest of the suite on two loaded cores (see
	// runReplicas; 50 ms was missed under load): the breaker must be
	// closed before the kill for the test to see it open because of the
	// kill; errors open it whatever the budget.
	const budget = global.MaxBudget
	n1 := newNode(t, global.Config{Store: openStore(t, o), Hooks: hooks, Summary: time.Second, Budget: budget})
	n2 := newNode(t, global.Config{Store: openStore(t, o), Budget: budget})
	waitFor(t, "two replicas", 5*time.Second, func() bool { return n1.Replicas() == 2 })
	g := limit.GCRA{Rate: 200, Burst: 100}
	l1, _ := n1.Limiter("api", g)
	l2, _ := n2.Limiter("api", g)

	var stop atomic.Bool
	var allowed1 atomic.Int64
	var wg sync.WaitGroup
	for i, l := range []*global.Limiter{l1, l2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				d := l.Allow("hot")
				if d.Allowed && i == 0 {
					allowed1.Add(1)
				}
				if !d.Allowed && d.RetryAfter <= 0 {
					t.Errorf("rejection without retry time %+v", d)
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if n1.State() != global.Closed {
		t.Fatalf("breaker %v before the outage", n1.State())
	}
	rd.Kill()
	// The breaker opens because of the kill (failed round trips), within
	// 500 ms on a quiet machine (BULWARK_STRICT_TIMING); on a loaded one
	// the callers and the worker may wait seconds for a CPU, so only the
	// opening itself is asserted, within 20 s.
	opened := waitFor(t, "breaker open", 20*time.Second, func() bool { return n1.State() != global.Closed })
	t.Logf("breaker open %v after the kill", opened)
	if strictTiming() && opened > 500*time.Millisecond {
		t.Errorf("breaker opened %v after the kill, want within 500 ms", opened)
	}
	// Fallback share: 1/2 of 200/s, aligned with the hot key's empty L2
	// bucket: about 100/s on this replica, no fresh burst. The bound is
	// on the time that really passed (a loaded machine sleeps longer);
	// admitting nothing at all fails too.
	before, began := allowed1.Load(), time.Now()
	time.Sleep(time.Second)
	got, el := allowed1.Load()-before, time.Since(began)
	share := n1.Share()
	t.Logf("fallback: share %.2f, admitted %d in %v (share of the limit: %.0f/s + burst %.0f)", share, got, el.Round(time.Millisecond), g.Rate*share, float64(g.Burst)*share)
	if share != 0.5 || float64(got) > g.Rate*share*el.Seconds()*1.1+float64(g.Burst)*share || got == 0 || strictTiming() && got < int64(g.Rate*share/2) {
		t.Errorf("fallback admitted %d in %v at share %.2f", got, el, share)
	}
	rd.Restart()
	closed := waitFor(t, "breaker closed", 20*time.Second, func() bool { return n1.State() == global.Closed && n2.State() == global.Closed })
	t.Logf("breaker closed %v after the restart began (OpenFor %v)", closed, global.DefaultOpenFor)
	if strictTiming() && closed > global.DefaultOpenFor+time.Second {
		t.Errorf("recovery took %v", closed)
	}
	refills := n1.Stats().Refills
	waitFor(t, "leases resume", 5*time.Second, func() bool { return n1.Stats().Refills > refills })
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var seq []string
	for _, e := range events {
		if e.Kind == global.EventState {
			seq = append(seq, e.State.String())
		}
	}
	if len(seq) < 3 || seq[0] != "open" || seq[len(seq)-1] != "closed" {
		t.Errorf("state events %v", seq)
	}
	// One event per state change: a few probes per second at most, never
	// one per decision.
	if len(seq) > 40 {
		t.Errorf("%d state events for one outage", len(seq))
	}
}

// relay forwards TCP connections to target, delaying every chunk the
// server sends by delay (the client's writes pass at once).
type relay struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
}

func startRelay(t testing.TB, target string, delay time.Duration) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, delay: delay}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *relay) serve() {
	defer r.wg.Done()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		conns = append(conns, c, s)
		r.wg.Add(2)
		go func() { defer r.wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
		go func() {
			defer r.wg.Done()
			defer c.Close()
			type chunk struct {
				at time.Time
				b  []byte
			}
			ch := make(chan chunk, 1024)
			go func() {
				defer close(ch)
				for {
					buf := make([]byte, 32<<10)
					k, err := s.Read(buf)
					if k > 0 {
						ch <- chunk{time.Now().Add(r.delay), buf[:k]}
					}
					if err != nil {
						return
					}
				}
			}()
			for ck := range ch {
				time.Sleep(time.Until(ck.at))
				if _, err := c.Write(ck.b); err != nil {
					return
				}
			}
		}()
	}
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// Proof: a delay on every Redis reply does not reach the decisions:
// with +50 ms the p99 of a decision moves by less than 1 ms (decisions
// never wait longer than the 2 ms budget, and the breaker moves them to
// the local share), asserted that tightly by scripts/test-long
// (BULWARK_STRICT_TIMING). The regular suite adds a whole second, so that
// "under half the added delay" holds on a machine however loaded.
func TestDelayedRedisKeepsLatency(t *testing.T) {
	rd := testsvc.StartRedis(t)
	measure := func(addr string) (p50, p99 time.Duration, st global.Stats) {
		n := newNode(t, global.Config{Store: openStore(t, redisconn.Options{URL: "redis://" + addr})})
		l, _ := n.Limiter("lat", limit.GCRA{Rate: 100_000, Burst: 1000})
		keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		var lat []time.Duration
		end := time.Now().Add(3 * time.Second)
		for i := 0; time.Now().Before(end); i++ {
			began := time.Now()
			l.Allow(keys[i%len(keys)])
			lat = append(lat, time.Since(began))
			if i%16 == 0 {
				time.Sleep(100 * time.Microsecond) // a steady, not saturating, load
			}
		}
		slices.Sort(lat)
		return lat[len(lat)/2], lat[len(lat)*99/100], n.Stats()
	}
	d50, d99, ds := measure(rd.Addr())
	delay := time.Second
	if strictTiming() {
		delay = 50 * time.Millisecond
	}
	r := startRelay(t, rd.Addr(), delay)
	s50, s99, ss := measure(r.addr())
	t.Logf("direct:  p50 %v p99 %v (refills %d, fallback %d)", d50, d99, ds.Refills, ds.Fallback)
	t.Logf("+%v:  p50 %v p99 %v (refills %d, fallback %d, opened %d, wait timeouts %d)", delay, s50, s99, ss.Refills, ss.Fallback, ss.Opened, ss.WaitTimeouts)
	// On a quiet machine (BULWARK_STRICT_TIMING, scripts/test-long) the
	// p99 moves by less than 1 ms. On a loaded one scheduling noise alone
	// moves it by more; what must hold there is that decisions do not wait
	// for the slow replies: a p99 under half the added delay.
	if strictTiming() && s99-d99 >= time.Millisecond {
		t.Errorf("p99 moved by %v with +%v on Redis replies", s99-d99, delay)
	}
	if s99 >= delay/2 {
		t.Errorf("p99 %v with +%v on Redis replies: decisions wait for the replies", s99, delay)
	}
	if ss.Opened == 0 {
		t.Errorf("breaker never opened on %v replies", delay)
	}
}

// Proof: a real 3-master Redis Cluster. Four replica processes on keys
// spread over the masters stay within 1% of the bound, and every key's
// state lives in exactly one slot of one master.
func TestClusterExactAndOneSlot(t *testing.T) {
	c := testsvc.StartRedisCluster(t, 3)
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	runReplicas(t, c.URL(), true, keys)

	st := openStore(t, redisconn.Options{URL: c.URL(), Cluster: true})
	cc := st.Client().(*redis.ClusterClient)
	ctx := context.Background()
	// The replicas' buckets expire as soon as they are full again (within
	// 100 ms of the load's end), which a loaded machine may take longer
	// than to get here: lease from each key once more, with an interval
	// that keeps it for a minute, so the check does not race the expiry.
	var touch []global.Lease
	for _, k := range keys {
		touch = append(touch, global.Lease{Key: global.KeyOf("proof", k), Interval: time.Second, Burst: 60, Want: 60, Min: 1})
	}
	if _, err := st.Lease(ctx, touch); err != nil {
		t.Fatal(err)
	}
	masters := map[string]bool{}
	for _, k := range keys {
		key := st.Key(global.KeyOf("proof", k))
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var holders []string
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := m.Exists(ctx, key).Result()
			if err == nil && n == 1 {
				mu.Lock()
				holders = append(holders, m.Options().Addr)
				mu.Unlock()
				if s, err := m.ClusterCountKeysInSlot(ctx, int(slot)).Result(); err != nil || s < 1 {
					t.Errorf("key %s: slot %d holds %d keys on its master (%v)", k, slot, s, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(holders) != 1 {
			t.Errorf("key %s (slot %d) held by %v, want exactly one master", k, slot, holders)
		}
		if len(holders) == 1 {
			masters[holders[0]] = true
		}
	}
	t.Logf("%d keys spread over %d masters", len(keys), len(masters))
	if len(masters) < 2 {
		t.Errorf("keys landed on %d master(s); the test wants them spread", len(masters))
	}
}

// TestTLS: over rediss:// with the CA's file and the client certificate
// the server requires, two nodes share one bucket exactly (the frozen
// burst is all they admit) with every decision made globally; a node that
// does not trust the server's certificate never reaches it: its breaker
// opens, it serves the local share, and redisconn.Check says why without
// the password or the address.
func TestTLS(t *testing.T) {
	rd := testsvc.StartRedisTLS(t, testsvc.RedisTLSOptions{RequireClientCert: true})
	tl := rd.TLS()
	o := redisconn.Options{URL: rd.URL(), CAFile: tl.CA.File, CertFile: tl.Client.CertFile, KeyFile: tl.Client.KeyFile}
	g := limit.GCRA{Rate: 0.001, Burst: 40} // no refill within the test
	var lims [2]*global.Limiter
	for i := range lims {
		st := openStore(t, o)
		// Handshake first (slow under the race detector), so that no
		// decision below waits for a TLS handshake.
		if err := redisconn.Check(context.Background(), st.Client()); err != nil {
			t.Fatal(err)
		}
		n := newNode(t, global.Config{Store: st, Budget: global.MaxBudget, MaxLease: 4})
		l, err := n.Limiter("tls", g)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if lims[i%2].Allow("k").Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range lims {
		if s := l.Node().Stats(); s.Fallback != 0 || s.Opened != 0 || s.Refills == 0 {
			t.Fatalf("not global: %+v", s)
		}
	}
	if n := allowed.Load(); n > g.Burst || n < g.Burst-8 {
		t.Fatalf("admitted %d of burst %d", n, g.Burst)
	}

	other := testsvc.NewCA(t, "not the server's CA")
	bad := o
	bad.URL, bad.CAFile = "rediss://default:pw-s3cret@"+rd.Addr(), other.File
	st := openStore(t, bad)
	n := newNode(t, global.Config{Store: st, Failures: 1})
	l, _ := n.Limiter("tls", g)
	waitFor(t, "the breaker to open", 10*time.Second, func() bool { l.Allow("k"); return n.Stats().Opened > 0 })
	err := redisconn.Check(context.Background(), st.Client())
	if !errors.Is(err, redisconn.ErrUntrusted) || strings.Contains(err.Error(), "pw-s3cret") || strings.Contains(err.Error(), rd.Addr()) {
		t.Fatalf("Check: %v", err)
	}
}
