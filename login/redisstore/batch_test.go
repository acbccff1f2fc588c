package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
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
)

// commandCalls returns the server's call count of one command (from
// INFO commandstats), 0 if it never ran.
func commandCalls(t testing.TB, info, name string) int {
	t.Helper()
	_, rest, ok := strings.Cut(info, "cmdstat_"+name+":calls=")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConcurrentCallersSharePipelines: 64 concurrent callers of one store
// send their scripts in fewer round trips than decisions, every script
// still runs once on the server (commandstats), and each account's limit
// holds exactly.
func TestConcurrentCallersSharePipelines(t *testing.T) {
	rd := testsvc.StartRedis(t)
	admin, _ := newClient(t, rd.Addr())
	c, cnt := newClient(t, rd.Addr())
	s, err := redisstore.New(c, redisstore.Config{Pipelines: 2})
	if err != nil {
		t.Fatal(err)
	}
	l, err := login.New(login.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	evaluate(t, l, "192.0.2.1", "warmup") // loads the script
	admin.ConfigResetStat(ctx)
	cnt.reset()
	s0 := s.Stats()
	const callers, perCaller, accounts = 64, 20, 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		allowed [accounts]atomic.Int32
	)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range perCaller {
				a := (g + i) % accounts
				d, err := l.Evaluate(ctx, "192.0.2.9", "user"+strconv.Itoa(a))
				if err != nil || d.Degraded {
					t.Errorf("%+v %v", d, err)
					return
				}
				if d.Allowed {
					allowed[a].Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for a := range allowed {
		if n := allowed[a].Load(); n != 5 {
			t.Errorf("account %d: %d allowed, want exactly 5", a, n)
		}
	}
	st := s.Stats()
	ops, trips := st.Ops-s0.Ops, st.Pipelines-s0.Pipelines
	if ops != callers*perCaller {
		t.Fatalf("%d operations for %d decisions", ops, callers*perCaller)
	}
	if trips >= ops {
		t.Fatalf("%d round trips for %d operations: nothing was coalesced", trips, ops)
	}
	// A new pooled connection's handshake goes through the hooks too, as
	// HELLO and a pipeline (CLIENT SETINFO); count only the store's
	// requests.
	_, names := cnt.reset()
	hooked := 0
	for _, n := range names {
		switch n {
		case "evalsha", "pipeline":
			hooked++
		case "hello":
			hooked--
		}
	}
	if uint64(hooked) != trips {
		t.Fatalf("client sent %d requests (%v), store counted %d round trips", hooked, names, trips)
	}
	if n := commandCalls(t, admin.Info(ctx, "commandstats").Val(), "evalsha"); n != int(ops) {
		t.Fatalf("server ran %d EVALSHA for %d operations", n, ops)
	}
	t.Logf("%d decisions in %d round trips", ops, trips)
}

// TestPipelineAfterScriptFlush: a server that lost its script cache
// answers a whole pipeline NOSCRIPT; the store sends those scripts again
// with EVAL and no decision degrades.
func TestPipelineAfterScriptFlush(t *testing.T) {
	rd := testsvc.StartRedis(t)
	admin, _ := newClient(t, rd.Addr())
	c, _ := newClient(t, rd.Addr())
	s, err := redisstore.New(c, redisstore.Config{Pipelines: 1})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := login.New(login.Config{Store: s})
	ctx := context.Background()
	for round := range 3 {
		admin.ScriptFlush(ctx)
		admin.ConfigResetStat(ctx)
		s0 := s.Stats()
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := evaluate(t, l, "192.0.2."+strconv.Itoa(g), "u"+strconv.Itoa(round))
				if d.Degraded || !d.Allowed {
					t.Errorf("%+v", d)
				}
			}()
		}
		wg.Wait()
		info := admin.Info(ctx, "commandstats").Val()
		if e := commandCalls(t, info, "eval"); e < 1 {
			t.Fatalf("no EVAL after SCRIPT FLUSH:\n%s", info)
		}
		if st := s.Stats(); st.Pipelines-s0.Pipelines == st.Ops-s0.Ops {
			t.Logf("round %d: nothing coalesced (scheduling); the EVAL fallback ran alone", round)
		}
	}
}

// pause stops the server from answering clients (CLIENT PAUSE ALL) for d.
func pause(t testing.TB, addr string, d time.Duration) {
	t.Helper()
	admin, _ := newClient(t, addr)
	if err := admin.Do(context.Background(), "client", "pause", d.Milliseconds(), "all").Err(); err != nil {
		t.Fatal(err)
	}
}

// pauseWrites pauses the server's write commands (scripts included) for
// up to a minute, until the returned function resumes them (also at the
// end of the test): a pause that ends by an event, not by a clock.
func pauseWrites(t testing.TB, addr string) (resume func()) {
	t.Helper()
	admin, _ := newClient(t, addr)
	if err := admin.Do(context.Background(), "client", "pause", time.Minute.Milliseconds(), "write").Err(); err != nil {
		t.Fatal(err)
	}
	resume = sync.OnceFunc(func() {
		if err := admin.Do(context.Background(), "client", "unpause").Err(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(resume)
	return resume
}

// TestFullQueueRefuses: with one pipeline in flight (the server paused)
// and a queue of one, a third concurrent operation fails at once with
// ErrBusy, which the limiter answers by refusing the attempt for capacity
// (fail closed) without any cache event; once the server answers, the
// first two are decided normally. "At once" is an order, not a time: the
// refusal comes while the server is still paused, before either queued
// operation is answered.
func TestFullQueueRefuses(t *testing.T) {
	rd := testsvc.StartRedis(t)
	// A read timeout far longer than the pause can last on a loaded
	// machine: the queued operations wait for the server, not a clock.
	c := redis.NewClient(&redis.Options{Addr: rd.Addr(), DialTimeout: time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Config{Pipelines: 1, QueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l, _ := login.New(login.Config{Store: s, Listener: rec.listen})
	evaluate(t, l, "192.0.2.1", "warmup")
	resume := pauseWrites(t, rd.Addr())
	s0 := s.Stats()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d := evaluate(t, l, "192.0.2.1", "user"+strconv.Itoa(i)); !d.Allowed || d.Degraded {
				t.Errorf("queued attempt: %+v", d)
			}
			answered.Add(1)
		}()
		waitFor(t, func() bool { return s.Stats().Ops-s0.Ops == uint64(i+1) })
	}
	d := evaluate(t, l, "192.0.2.1", "user3")
	if d.Allowed || d.Degraded || d.Reason != login.ReasonCapacity || d.RetryAfterSeconds != 60 {
		t.Fatalf("attempt beyond the queue: %+v", d)
	}
	_, err = s.Hit(context.Background(), login.Key{9}, 5, time.Minute)
	if !errors.Is(err, redisstore.ErrBusy) || !errors.Is(err, login.ErrStoreFull) {
		t.Fatalf("Hit on a full queue: %v", err)
	}
	if n := answered.Load(); n != 0 {
		t.Fatalf("ErrBusy came after %d queued operations were answered: it waited for the server", n)
	}
	resume()
	wg.Wait()
	if st := s.Stats(); st.Busy-s0.Busy != 2 {
		t.Fatalf("busy %d, want 2", st.Busy-s0.Busy)
	}
	if got := rec.types(); got != "" {
		t.Fatalf("a full queue emitted events: %q", got)
	}
}

// TestCancelledWaitersLeaveAndQueueMoves: callers whose context ends
// while queued behind a stalled pipeline return at once with a degraded
// decision (and no cache event: the caller left, the cache did not fail),
// their operations are never sent, and later callers are served.
func TestCancelledWaitersLeaveAndQueueMoves(t *testing.T) {
	rd := testsvc.StartRedis(t)
	admin, _ := newClient(t, rd.Addr())
	c, _ := newClient(t, rd.Addr())
	s, err := redisstore.New(c, redisstore.Config{Pipelines: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l, _ := login.New(login.Config{Store: s, Listener: rec.listen})
	bg := context.Background()
	evaluate(t, l, "192.0.2.1", "warmup")
	admin.ConfigResetStat(bg)
	pause(t, rd.Addr(), 700*time.Millisecond)
	s0 := s.Stats()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the leader, stuck in the paused server
		defer wg.Done()
		if d := evaluate(t, l, "192.0.2.1", "leader"); !d.Allowed || d.Degraded {
			t.Errorf("leader: %+v", d)
		}
	}()
	waitFor(t, func() bool { return s.Stats().Ops-s0.Ops == 1 })
	ctx, cancel := context.WithCancel(bg)
	var left sync.WaitGroup
	for i := range 8 {
		left.Add(1)
		go func() {
			defer left.Done()
			d, err := l.Evaluate(ctx, "192.0.2.2", "gone"+strconv.Itoa(i))
			if err != nil || !d.Degraded {
				t.Errorf("cancelled waiter: %+v %v", d, err)
			}
		}()
	}
	waitFor(t, func() bool { return s.Stats().Ops-s0.Ops == 9 })
	cancel()
	left.Wait() // returns while the server is still paused
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d := evaluate(t, l, "192.0.2.3", "later"+strconv.Itoa(i)); !d.Allowed || d.Degraded {
				t.Errorf("later: %+v", d)
			}
		}()
	}
	wg.Wait()
	if n := commandCalls(t, admin.Info(bg, "commandstats").Val(), "evalsha"); n != 5 {
		t.Fatalf("server ran %d scripts, want 5 (leader and 4 later; the 8 cancelled never sent)", n)
	}
	if got := rec.types(); got != "" {
		t.Fatalf("events %q", got)
	}
}

// TestRandomCancellationsNeverStall: 32 callers, a quarter of them with
// contexts that end at random moments, 2 pipelines: every caller returns
// and every live decision is counted (the leader slot is always passed
// on, even by a caller promoted just as its context ended).
func TestRandomCancellationsNeverStall(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c, _ := newClient(t, rd.Addr())
	s, err := redisstore.New(c, redisstore.Config{Pipelines: 1, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := login.New(login.Config{Store: s, Limit: login.MaxLimit})
	var wg sync.WaitGroup
	var ok, cancelled atomic.Int64
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				if g%4 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(200))*time.Microsecond)
				}
				d, err := l.Evaluate(ctx, "192.0.2.4", "u"+strconv.Itoa(g)+"-"+strconv.Itoa(i))
				cancel()
				switch {
				case err != nil:
					t.Error(err)
					return
				case d.Degraded && g%4 == 0:
					cancelled.Add(1)
				case d.Degraded || !d.Allowed:
					t.Errorf("%+v", d)
					return
				default:
					ok.Add(1)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("callers stalled")
	}
	t.Logf("%d decided, %d cancelled, %+v", ok.Load(), cancelled.Load(), s.Stats())
}

func TestConfigBounds(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c, _ := newClient(t, rd.Addr())
	for _, tc := range []struct {
		cfg  redisstore.Config
		want string
	}{
		{redisstore.Config{MaxBatch: -1}, "MaxBatch must be between 1 and 1024 (0 means 64), got -1"},
		{redisstore.Config{MaxBatch: 1025}, "MaxBatch must be between 1 and 1024"},
		{redisstore.Config{Pipelines: 257}, "Pipelines must be between 1 and 256 (0 means 2), got 257"},
		{redisstore.Config{QueueSize: 1<<20 + 1}, "QueueSize must be between 1 and 1048576"},
	} {
		if _, err := redisstore.New(c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := redisstore.New(c, redisstore.Config{MaxBatch: 1, Pipelines: 1, QueueSize: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestLockoutAndClientWindowInPipelines: the lock read (a plain PTTL) and
// both windows' scripts of concurrent decisions share pipelines; a locked
// account is refused by every caller, and the per-client window of
// another address holds exactly.
func TestLockoutAndClientWindowInPipelines(t *testing.T) {
	rd := testsvc.StartRedis(t)
	c, _ := newClient(t, rd.Addr())
	s, err := redisstore.New(c, redisstore.Config{Pipelines: 1})
	if err != nil {
		t.Fatal(err)
	}
	lo, err := login.NewLockout(login.LockoutConfig{MaxFailures: 2, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	l, err := login.New(login.Config{Store: s, Lockout: lo, PerClient: login.PerClient{Limit: 7}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := lo.RecordFailure(ctx, "mallory"); err != nil {
			t.Fatal(err)
		}
	}
	s0 := s.Stats()
	var (
		wg              sync.WaitGroup
		locked, allowed atomic.Int32
	)
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g%2 == 0 {
				if d := evaluate(t, l, "192.0.2.50", "mallory"); d.Reason == login.ReasonLocked {
					locked.Add(1)
				}
				return
			}
			d := evaluate(t, l, "192.0.2.51", "u"+strconv.Itoa(g))
			switch {
			case d.Degraded:
				t.Errorf("%+v", d)
			case d.Allowed:
				allowed.Add(1)
			case d.Reason != login.ReasonClient:
				t.Errorf("%+v", d)
			}
		}()
	}
	wg.Wait()
	if locked.Load() != 20 || allowed.Load() != 7 {
		t.Fatalf("locked %d (want 20), allowed %d (want exactly 7)", locked.Load(), allowed.Load())
	}
	st := s.Stats()
	t.Logf("%d operations in %d round trips", st.Ops-s0.Ops, st.Pipelines-s0.Pipelines)
}
