package guard

import (
	"math"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// OverloadState is the overload manager's state. Each state includes the
// actions of the ones below it.
type OverloadState int32

const (
	// Normal: no action.
	Normal OverloadState = iota
	// StopAccepting: listeners stop accepting new connections (they wait
	// in the kernel's backlog).
	StopAccepting
	// NoKeepAlive: responses also carry "Connection: close" (HTTP/2:
	// GOAWAY once the connection is idle).
	NoKeepAlive
	// Shedding: new requests are also answered 503 overloaded.
	Shedding
)

var stateNames = [...]string{"normal", "stop_accepting", "disable_keepalive", "shedding"}

// String returns a fixed name suitable as a metric label or log value.
func (s OverloadState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// overload is the overload manager. Pressure is read from three resources:
// open connections (Guard.conns), in-flight requests and the heap. The
// request and connection paths compare the new count against precomputed
// integer thresholds and take the mutex only when a state change is
// possible; the heap is sampled at most once per SampleInterval, lazily,
// on those paths and from a listener paused by StopAccepting. There is no
// goroutine.
type overload struct {
	g        *Guard
	state    atomic.Int32
	th       atomic.Pointer[thresholds]
	inflight atomic.Int64
	heap     atomic.Uint64 // last sample
	sampled  atomic.Int64  // mono time of the last sample
	readHeap func() uint64

	mu      sync.Mutex // serializes evaluations, transitions and hooks
	changed chan struct{}

	sampleMu sync.Mutex
	samples  []metrics.Sample
}

// thresholds is the immutable, precomputed view of an OverloadConfig.
type thresholds struct {
	levels   [4]float64 // levels[s] is the pressure that enters state s (s >= 1)
	hyst     float64
	interval int64 // ns
	conns    resource
	inflight resource
	heap     resource // limit 0: off
}

// resource holds, for one resource, the smallest value that enters each
// state (enter) and the value below which each state may be left (exit).
type resource struct {
	limit float64
	enter [4]int64
	exit  [4]int64
}

func newThresholds(c OverloadConfig) *thresholds {
	t := &thresholds{
		levels:   [4]float64{0, c.StopAcceptAt, c.DisableKeepAliveAt, c.ShedAt},
		hyst:     c.Hysteresis,
		interval: int64(c.SampleInterval),
	}
	t.conns = t.resource(float64(c.MaxConns))
	t.inflight = t.resource(float64(c.MaxInFlight))
	if c.HeapBytes > 0 {
		t.heap = t.resource(float64(c.HeapBytes))
	}
	return t
}

func (t *thresholds) resource(limit float64) resource {
	r := resource{limit: limit}
	for s := 1; s < 4; s++ {
		r.enter[s] = int64(math.Ceil(t.levels[s] * limit))
		r.exit[s] = int64(math.Ceil((t.levels[s] - t.hyst) * limit))
	}
	return r
}

// mayChange reports whether value v of resource r could move the state s
// (up: v enters the next state; down: v is below the exit of s).
func (r *resource) mayChange(s OverloadState, v int64) bool {
	if r.limit == 0 {
		return false
	}
	if s < Shedding && v >= r.enter[s+1] {
		return true
	}
	return s > Normal && v < r.exit[s]
}

func (o *overload) init(g *Guard, c OverloadConfig, readHeap func() uint64) {
	o.g = g
	o.changed = make(chan struct{})
	o.readHeap = readHeap
	if o.readHeap == nil {
		o.samples = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		o.readHeap = o.readRuntimeHeap
	}
	o.th.Store(newThresholds(c))
}

func (o *overload) reload(c OverloadConfig) {
	o.th.Store(newThresholds(c))
	o.sampled.Store(0)
	o.evaluate()
}

// State returns the current state.
func (o *overload) State() OverloadState { return OverloadState(o.state.Load()) }

func (o *overload) changedCh() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

func (o *overload) readRuntimeHeap() uint64 {
	o.sampleMu.Lock()
	defer o.sampleMu.Unlock()
	metrics.Read(o.samples)
	if o.samples[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return o.samples[0].Value.Uint64()
}

// maybeSample reads the heap if the last reading is older than the sample
// interval, and evaluates the state if the reading may change it.
func (o *overload) maybeSample(now int64) {
	t := o.th.Load()
	if t.heap.limit == 0 {
		return
	}
	last := o.sampled.Load()
	if last != 0 && now-last < t.interval {
		return
	}
	if !o.sampled.CompareAndSwap(last, now) {
		return // another caller samples
	}
	h := o.readHeap()
	o.heap.Store(h)
	if t.heap.mayChange(o.State(), int64(h)) {
		o.evaluate()
	}
}

// poll is called by a paused listener: resample and re-evaluate.
func (o *overload) poll() {
	now := o.g.mono()
	o.maybeSample(now)
	o.evaluate()
}

func (o *overload) connOpened(n int64) {
	t := o.th.Load()
	if t.heap.limit != 0 {
		o.maybeSample(o.g.mono())
	}
	if t.conns.mayChange(o.State(), n) {
		o.evaluate()
	}
}

func (o *overload) connClosed(n int64) {
	if t := o.th.Load(); t.conns.mayChange(o.State(), n) {
		o.evaluate()
	}
}

// requestStarted counts one request in flight and returns the state it
// must be served under: the state at its arrival. The pressure it adds
// applies to the requests after it.
func (o *overload) requestStarted() OverloadState {
	s := o.State()
	n := o.inflight.Add(1)
	t := o.th.Load()
	if t.heap.limit != 0 {
		o.maybeSample(o.g.mono())
	}
	if t.inflight.mayChange(o.State(), n) {
		o.evaluate()
	}
	return s
}

func (o *overload) requestEnded() {
	n := o.inflight.Add(-1)
	if t := o.th.Load(); t.inflight.mayChange(o.State(), n) {
		o.evaluate()
	}
}

// pressure returns the highest value/limit of the monitored resources.
func (o *overload) pressure(t *thresholds) (p float64, conns, inflight int64, heap uint64) {
	conns = o.g.conns.Load()
	inflight = o.inflight.Load()
	heap = o.heap.Load()
	p = float64(conns) / t.conns.limit
	p = max(p, float64(inflight)/t.inflight.limit)
	if t.heap.limit != 0 {
		p = max(p, float64(heap)/t.heap.limit)
	}
	return p, conns, inflight, heap
}

// evaluate recomputes the state from the current readings, with
// hysteresis on the way down, and reports a change.
func (o *overload) evaluate() {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.th.Load()
	p, conns, inflight, heap := o.pressure(t)
	cur := o.State()
	up := Normal
	for s := Shedding; s > Normal; s-- {
		if p >= t.levels[s] {
			up = s
			break
		}
	}
	next := cur
	if up > cur {
		next = up
	} else {
		for next > up && p < t.levels[next]-t.hyst {
			next--
		}
	}
	if next == cur {
		return
	}
	o.state.Store(int32(next))
	close(o.changed)
	o.changed = make(chan struct{})
	log := o.g.log
	args := []any{"from", cur.String(), "to", next.String(), "pressure", math.Round(p*1000) / 1000,
		"conns", conns, "in_flight", inflight}
	if t.heap.limit != 0 {
		args = append(args, "heap_bytes", heap)
	}
	if next > cur {
		log.Warn("guard: overload state raised", args...)
	} else {
		log.Info("guard: overload state lowered", args...)
	}
	if f := o.g.hooks.Overload; f != nil {
		func() {
			defer swallow()
			f(cur, next)
		}()
	}
}
