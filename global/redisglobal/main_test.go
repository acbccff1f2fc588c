package redisglobal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/global"
	"github.com/bulwarkhq/bulwark/global/redisglobal"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// The test binary doubles as a load-generating replica: with childEnv set,
// TestMain runs one replica's load instead of the tests (see
// TestFourProcessesExact and scripts/bench-global).
const childEnv = "BULWARK_GLOBAL_CHILD"

// childSpec is what the parent tells a child replica.
type childSpec struct {
	URL      string
	Cluster  bool
	Rate     float64
	Burst    int64
	Callers  int
	Keys     []string
	StartAt  int64 // Unix nanoseconds: all replicas begin together
	Duration time.Duration
	// Pace is each caller's pause between decisions (0: none, a spinning
	// caller). A gateway's callers are request handlers, not spinning
	// loops: pacing offers a steady overload without starving the
	// replica's own worker of CPU on a small machine.
	Pace time.Duration
	// Budget is the node's Config.Budget (0: the default).
	Budget time.Duration
}

// childResult is what a child replica reports on stdout.
type childResult struct {
	Allowed, Rejected int64
	// First and Last are when (Unix nanoseconds) the replica's first
	// decision began and its last one ended.
	First, Last     int64
	ReplicasAtStart int
	Info            map[string]int64
	Stats           global.Stats
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

func runChild(raw string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child: bad spec:", err)
		return 2
	}
	st, err := redisglobal.Open(redisconn.Options{URL: spec.URL, Cluster: spec.Cluster}, redisglobal.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer st.Close()
	var over, total atomic.Int64
	var causes sync.Map
	node, err := global.New(global.Config{Store: st, Budget: spec.Budget, Hooks: global.Hooks{
		Batch: func(b global.Batch) {
			total.Add(1)
			if b.OverBudget {
				over.Add(1)
			}
		},
		Event: func(e global.Event) {
			if e.Kind == global.EventState && e.State == global.Open {
				v, _ := causes.LoadOrStore(string(e.Cause), new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		},
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	lim, err := node.Limiter("proof", limit.GCRA{Rate: spec.Rate, Burst: spec.Burst})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	// Let the heartbeat see the other replicas before the load starts.
	time.Sleep(time.Until(time.Unix(0, spec.StartAt)))
	atStart := node.Replicas()
	end := time.Now().Add(spec.Duration)
	var allowed, rejected atomic.Int64
	var first, last atomic.Int64
	first.Store(1<<63 - 1)
	var wg sync.WaitGroup
	for g := range spec.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for began := time.Now().UnixNano(); ; {
				if f := first.Load(); began >= f || first.CompareAndSwap(f, began) {
					break
				}
			}
			defer func() {
				for ended := time.Now().UnixNano(); ; {
					if l := last.Load(); ended <= l || last.CompareAndSwap(l, ended) {
						break
					}
				}
			}()
			for i := 0; ; i++ {
				key := spec.Keys[(g+i)%len(spec.Keys)]
				if i%64 == 0 && time.Now().After(end) {
					return
				}
				if lim.Allow(key).Allowed {
					allowed.Add(1)
				} else {
					rejected.Add(1)
				}
				if spec.Pace > 0 {
					time.Sleep(spec.Pace)
				}
			}
		}()
	}
	wg.Wait()
	res0 := map[string]int64{"batches": total.Load(), "over_budget": over.Load()}
	causes.Range(func(k, v any) bool { res0["open_"+k.(string)] = v.(*atomic.Int64).Load(); return true })
	res := childResult{Info: res0, Allowed: allowed.Load(), Rejected: rejected.Load(), First: first.Load(), Last: last.Load(),
		ReplicasAtStart: atStart, Stats: node.Stats()}
	_ = node.Close()
	out, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(out))
	return 0
}

// envDuration reads a duration override for long runs (scripts/bench-global).
func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return def
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

var _ = context.Background
