package limit_test

// Model-based tests. Each algorithm runs a sequence of operations decoded
// from a byte tape (random bytes in TestModel*, fuzzer bytes in Fuzz*)
// against both the real implementation and a naive reference written here,
// and every observable result must agree exactly:
//
//   - fixed window: a list of admission records (window start, units) that
//     is summed on every call;
//   - rolling log: the unbounded list of every admitted timestamp, filtered
//     on every call;
//   - GCRA: a token bucket in exact rational arithmetic (math/big.Rat),
//     tokens = min(Burst, tokens + elapsed/T).
//
// Tolerance rule for GCRA: the reference uses the same emission interval
// T = GCRA.Interval() as the implementation, so decisions must match to the
// nanosecond. The only approximation is T itself, round(1s/Rate); the tape
// runner checks |T - 1e9/Rate| <= 0.5ns and TestGCRAEffectiveRate bounds
// the resulting drift against a float model that uses Rate directly.
//
// Instants are base.Add(offset) with offsets kept in [-span, span], where
// base is time.Now() (monotonic reading) or a fixed wall time, and each
// instant may have its monotonic reading stripped, so mixed readings are
// covered. Clock steps include zero, tiny and window-sized moves both ways,
// huge jumps both ways and exact hits (±1ns) on the next boundary the
// reference knows about.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

const span = 1 << 61 // instants stay within base ± span nanoseconds

// tape yields bytes from the input, then zeros.
type tape struct {
	b []byte
	i int
}

func (t *tape) more() bool { return t.i < len(t.b) }

func (t *tape) byte() byte {
	if t.i >= len(t.b) {
		t.i++
		return 0
	}
	c := t.b[t.i]
	t.i++
	return c
}

func (t *tape) u64() uint64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = t.byte()
	}
	return binary.LittleEndian.Uint64(buf[:])
}

// sim is the simulated clock.
type sim struct {
	base time.Time
	off  int64
}

func newSim(mono bool) *sim {
	if mono {
		return &sim{base: time.Now()}
	}
	return &sim{base: time.Date(2026, 10, 11, 9, 41, 11, 917_000_000, time.UTC)}
}

// step moves the clock as the tape says and returns the new instant.
// boundaries lists instants (offsets) worth hitting exactly.
func (c *sim) step(tp *tape, w time.Duration, boundaries []int64) (time.Time, string) {
	b := tp.byte()
	desc := ""
	switch b & 7 {
	case 0:
		desc = "+0"
	case 1:
		x := int64(tp.byte())
		c.off += x
		desc = fmt.Sprintf("+%dns", x)
	case 2:
		x := int64(tp.u64() % uint64(2*w+1))
		c.off += x
		desc = fmt.Sprintf("+%v", time.Duration(x))
	case 3:
		x := int64(tp.byte())
		c.off -= x
		desc = fmt.Sprintf("-%dns", x)
	case 4:
		x := int64(tp.u64() % uint64(2*w+1))
		c.off -= x
		desc = fmt.Sprintf("-%v", time.Duration(x))
	case 5:
		x := int64(tp.u64() % span)
		c.off = min(c.off+x, span)
		desc = fmt.Sprintf("+huge %v", time.Duration(x))
	case 6:
		x := int64(tp.u64() % span)
		c.off = max(c.off-x, -span)
		desc = fmt.Sprintf("-huge %v", time.Duration(x))
	case 7:
		sel := tp.byte()
		if len(boundaries) > 0 {
			target := boundaries[int(sel)%len(boundaries)] + int64(sel/64%3) - 1
			c.off = min(max(target, -span), span)
		}
		desc = fmt.Sprintf("boundary->%d", c.off)
	}
	c.off = min(max(c.off, -span), span)
	now := c.base.Add(time.Duration(c.off))
	if b&8 != 0 {
		now = now.Round(0) // strip the monotonic reading
		desc += " (wall)"
	}
	return now, desc
}

func (c *sim) at(off int64) time.Time { return c.base.Add(time.Duration(off)) }

// cost decodes a cost n around capacity capN: mostly 1, small values,
// values around the capacity and non-positive ones.
func cost(tp *tape, capN int64) int64 {
	b := tp.byte()
	v := int64(b >> 2)
	switch b & 3 {
	case 0:
		return 1
	case 1:
		return v
	case 2:
		return capN + v%5 - 2
	default:
		return -v
	}
}

// ---------------------------------------------------------------------------
// Fixed window

type refFixed struct {
	active bool
	start  int64
	latest int64
	recs   []refRec // every admission, minus refunds
}

type refRec struct{ start, n int64 }

func (r *refFixed) count() int64 {
	var c int64
	for _, x := range r.recs {
		if x.start == r.start {
			c += x.n
		}
	}
	return c
}

func (r *refFixed) allow(now, lim, w, n int64) limit.Decision {
	d := limit.Decision{Limit: lim}
	if r.active && now < r.latest {
		now = r.latest
		d.ClockRegressed = true
	}
	current := r.active && now < r.start+w
	var used int64
	if current {
		used = r.count()
		d.ResetAfter = time.Duration(r.start + w - now)
	}
	switch {
	case n <= 0:
		d.Allowed = true
		d.Remaining = max(0, lim-used)
		return d
	case n > lim:
		d.RetryAfter = limit.InfDuration
		return d
	case used+n > lim:
		d.RetryAfter = d.ResetAfter
		return d
	}
	if !current {
		r.active, r.start = true, now
		d.ResetAfter = time.Duration(w)
	}
	r.latest = now
	r.recs = append(r.recs, refRec{r.start, n})
	d.Allowed = true
	d.Remaining = lim - r.count()
	return d
}

func (r *refFixed) refund(start, n int64) bool {
	if !r.active || n <= 0 || start != r.start {
		return false
	}
	for i := len(r.recs) - 1; i >= 0 && n > 0; i-- {
		if r.recs[i].start == start {
			take := min(n, r.recs[i].n)
			r.recs[i].n -= take
			n -= take
		}
	}
	return true
}

func (r *refFixed) expired(now, w int64) bool { return !r.active || now-r.start >= w }

func runFixed(t *testing.T, fw limit.FixedWindow, mono bool, ops []byte) {
	t.Helper()
	if err := fw.Validate(); err != nil {
		t.Fatalf("bad test parameters: %v", err)
	}
	tp := &tape{b: ops}
	c := newSim(mono)
	var s limit.FixedWindowState
	var ref refFixed
	w := int64(fw.Window)
	prevStart := int64(0)
	for i := 0; tp.more(); i++ {
		var bounds []int64
		if ref.active {
			bounds = []int64{ref.start + w, ref.latest}
		}
		op := tp.byte() % 8
		now, how := c.step(tp, fw.Window, bounds)
		where := func() string {
			return fmt.Sprintf("op %d (kind %d, clock %s, off %d) %+v ref %+v", i, op, how, c.off, fw, ref)
		}
		switch op {
		case 0, 1, 2, 3:
			n := cost(tp, fw.Limit)
			oldStart, wasActive := ref.start, ref.active
			got := fw.AllowN(&s, now, n)
			want := ref.allow(c.off, fw.Limit, w, n)
			if got != want {
				t.Fatalf("%s: AllowN(n=%d)\n got %+v\nwant %+v", where(), n, got, want)
			}
			if wasActive && ref.start != oldStart {
				prevStart = oldStart
			}
		case 4:
			n := cost(tp, fw.Limit)
			got := s.Refund(s.WindowStart(), n)
			if want := ref.refund(ref.start, n); got != want {
				t.Fatalf("%s: Refund(current, %d) = %v, want %v", where(), n, got, want)
			}
		case 5:
			n := cost(tp, fw.Limit)
			stale := prevStart
			if tp.byte()&1 == 0 {
				stale = ref.start + 1
			}
			got := s.Refund(c.at(stale), n)
			if want := ref.refund(stale, n); got != want {
				t.Fatalf("%s: Refund(stale %d, %d) = %v, want %v", where(), stale, n, got, want)
			}
		case 6:
			// Expired only (checked below).
		case 7:
			fw.Limit = 1 + int64(tp.byte())%(2*fw.Limit)
			fw.Limit = min(fw.Limit, limit.MaxLimit)
		}
		if got, want := fw.Expired(&s, now), ref.expired(c.off, w); got != want {
			t.Fatalf("%s: Expired = %v, want %v", where(), got, want)
		}
		if ref.active {
			if !s.WindowStart().Equal(c.at(ref.start)) {
				t.Fatalf("%s: WindowStart %v, want offset %d", where(), s.WindowStart(), ref.start)
			}
			if got, want := s.Count(), ref.count(); got != want {
				t.Fatalf("%s: Count %d, want %d", where(), got, want)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Rolling log

type refRolling struct {
	ts []int64 // every admitted timestamp, ascending
}

// live returns the admitted timestamps newer than now-w (a read-only view).
func (r *refRolling) live(now, w int64) []int64 {
	i := sort.Search(len(r.ts), func(i int) bool { return r.ts[i] > now-w })
	return r.ts[i:]
}

func (r *refRolling) allow(now int64, lim int, w int64) limit.Decision {
	d := limit.Decision{Limit: int64(lim)}
	if len(r.ts) > 0 && now < r.ts[len(r.ts)-1] {
		now = r.ts[len(r.ts)-1]
		d.ClockRegressed = true
	}
	live := r.live(now, w)
	if len(live) >= lim {
		d.RetryAfter = time.Duration(live[len(live)-lim] + w - now)
		d.ResetAfter = time.Duration(live[len(live)-1] + w - now)
		return d
	}
	r.ts = append(r.ts, now)
	d.Allowed = true
	d.Remaining = int64(lim - len(live) - 1)
	d.ResetAfter = time.Duration(w)
	return d
}

// stored is what the implementation keeps: timestamps newer than the
// latest admission minus the window.
func (r *refRolling) stored(w int64) []int64 {
	if len(r.ts) == 0 {
		return nil
	}
	return r.live(r.ts[len(r.ts)-1], w)
}

func (r *refRolling) expired(now, w int64) bool {
	if len(r.ts) == 0 {
		return true
	}
	newest := r.ts[len(r.ts)-1]
	return now >= newest && now-newest >= w
}

func runRolling(t *testing.T, rl limit.RollingLog, mono bool, ops []byte) {
	t.Helper()
	if err := rl.Validate(); err != nil {
		t.Fatalf("bad test parameters: %v", err)
	}
	tp := &tape{b: ops}
	c := newSim(mono)
	var s limit.RollingLogState
	var ref refRolling
	w := int64(rl.Window)
	origLimit := rl.Limit
	for i := 0; tp.more(); i++ {
		var bounds []int64
		if live := ref.live(c.off, w); len(live) > 0 {
			bounds = []int64{live[0] + w, live[len(live)-1] + w, live[len(live)-1]}
			if len(live) >= rl.Limit {
				bounds = append(bounds, live[len(live)-rl.Limit]+w)
			}
		}
		op := tp.byte() % 16
		now, how := c.step(tp, rl.Window, bounds)
		where := func() string {
			return fmt.Sprintf("op %d (kind %d, clock %s, off %d) %+v ref %v", i, op, how, c.off, rl, ref.stored(w))
		}
		switch {
		case op < 12:
			got := rl.Allow(&s, now)
			want := ref.allow(c.off, rl.Limit, w)
			if got != want {
				t.Fatalf("%s: Allow\n got %+v\nwant %+v", where(), got, want)
			}
		case op == 12:
			// Expired only (checked below).
		case op == 13:
			// Change the limit: the state must cope with a buffer of the
			// wrong size and with more entries than the new limit.
			rl.Limit = 1 + int(tp.byte())%(2*origLimit)
			rl.Limit = min(rl.Limit, limit.MaxRollingLimit)
		case op == 14:
			if tp.byte()%8 == 0 {
				s.Reset()
				ref = refRolling{}
			}
		case op == 15:
			rl.Limit = origLimit
		}
		if got, want := rl.Expired(&s, now), ref.expired(c.off, w); got != want {
			t.Fatalf("%s: Expired = %v, want %v", where(), got, want)
		}
		st := ref.stored(w)
		if s.Len() != len(st) {
			t.Fatalf("%s: Len %d, want %d", where(), s.Len(), len(st))
		}
		if len(st) > 0 {
			o, ok1 := s.Oldest()
			nw, ok2 := s.Newest()
			if !ok1 || !ok2 || !o.Equal(c.at(st[0])) || !nw.Equal(c.at(st[len(st)-1])) {
				t.Fatalf("%s: Oldest %v %v Newest %v %v, want offsets %d %d", where(), o, ok1, nw, ok2, st[0], st[len(st)-1])
			}
		}
	}
}

// ---------------------------------------------------------------------------
// GCRA

type refGCRA struct {
	active bool
	last   int64
	tokens *big.Rat
}

func rat(x int64) *big.Rat { return new(big.Rat).SetInt64(x) }

// tokensAt returns the bucket content at now (now >= last).
func (r *refGCRA) tokensAt(now, burst, t int64) *big.Rat {
	if !r.active {
		return rat(burst)
	}
	tok := new(big.Rat).Add(r.tokens, new(big.Rat).SetFrac64(now-r.last, t))
	if tok.Cmp(rat(burst)) > 0 {
		return rat(burst)
	}
	return tok
}

// nsOf converts a token amount times T to integer nanoseconds; it must be
// exact.
func nsOf(tb testing.TB, x *big.Rat, t int64) time.Duration {
	y := new(big.Rat).Mul(x, rat(t))
	if !y.IsInt() {
		tb.Fatalf("reference: %v tokens * %dns is not whole nanoseconds", x, t)
	}
	return time.Duration(y.Num().Int64())
}

func floorRat(x *big.Rat) int64 {
	q := new(big.Int).Quo(x.Num(), x.Denom()) // truncates; x >= 0 here
	return q.Int64()
}

func (r *refGCRA) allow(tb testing.TB, now, burst, t, n int64) limit.Decision {
	d := limit.Decision{Limit: burst}
	if r.active && now < r.last {
		now = r.last
		d.ClockRegressed = true
	}
	tok := r.tokensAt(now, burst, t)
	d.ResetAfter = nsOf(tb, new(big.Rat).Sub(rat(burst), tok), t)
	switch {
	case n <= 0:
		d.Allowed = true
		d.Remaining = floorRat(tok)
		return d
	case n > burst:
		d.RetryAfter = limit.InfDuration
		return d
	case tok.Cmp(rat(n)) < 0:
		d.RetryAfter = nsOf(tb, new(big.Rat).Sub(rat(n), tok), t)
		return d
	}
	r.active, r.last = true, now
	r.tokens = new(big.Rat).Sub(tok, rat(n))
	d.Allowed = true
	d.Remaining = floorRat(r.tokens)
	d.ResetAfter = nsOf(tb, new(big.Rat).Sub(rat(burst), r.tokens), t)
	return d
}

func (r *refGCRA) expired(now, burst, t int64) bool {
	if !r.active {
		return true
	}
	return now >= r.last && r.tokensAt(now, burst, t).Cmp(rat(burst)) == 0
}

// tat returns the reference's theoretical arrival time (bucket full).
func (r *refGCRA) tat(tb testing.TB, burst, t int64) int64 {
	return r.last + int64(nsOf(tb, new(big.Rat).Sub(rat(burst), r.tokens), t))
}

func runGCRA(t *testing.T, g limit.GCRA, mono bool, ops []byte) {
	t.Helper()
	if err := g.Validate(); err != nil {
		t.Fatalf("bad test parameters: %v", err)
	}
	T := int64(g.Interval())
	if diff := math.Abs(float64(T) - 1e9/g.Rate); diff > 0.5 {
		t.Fatalf("Interval() = %dns for Rate %v: off by %vns", T, g.Rate, diff)
	}
	tp := &tape{b: ops}
	c := newSim(mono)
	var s limit.GCRAState
	var ref refGCRA
	// Advance and AllowAtomic run in lockstep on a bare TAT. While time
	// moves forward they must agree with the reference exactly; when the
	// reference sees time go back, they decide at the earlier instant and
	// must never be looser; they are then resynchronized with the
	// reference's TAT.
	tat := int64(limit.FullTAT)
	var ast limit.AtomicGCRAState
	for i := 0; tp.more(); i++ {
		var bounds []int64
		if ref.active {
			tat := ref.tat(t, g.Burst, T)
			bounds = []int64{tat, ref.last, tat - g.Burst*T + T}
		}
		op := tp.byte() % 8
		now, how := c.step(tp, time.Duration(g.Burst*T), bounds)
		where := func() string {
			return fmt.Sprintf("op %d (kind %d, clock %s, off %d) %+v T=%d ref last=%d tokens=%v", i, op, how, c.off, g, T, ref.last, ref.tokens)
		}
		if op < 7 {
			n := cost(tp, g.Burst)
			got := g.AllowN(&s, now, n)
			want := ref.allow(t, c.off, g.Burst, T, n)
			if got != want {
				t.Fatalf("%s: AllowN(n=%d)\n got %+v\nwant %+v", where(), n, got, want)
			}
			next, ad := g.Advance(tat, c.off, n)
			if nn, ok := g.Compile().Next(tat, c.off, n); nn != next || ok != ad.Allowed {
				t.Fatalf("%s: Next = %d, %v; Advance = %d, %+v", where(), nn, ok, next, ad)
			}
			if aa := g.AllowAtomic(&ast, c.off, n); aa != ad || ast.TAT() != next {
				t.Fatalf("%s: AllowAtomic %+v (TAT %d), Advance %+v (next %d)", where(), aa, ast.TAT(), ad, next)
			}
			if !want.ClockRegressed {
				if ad != want {
					t.Fatalf("%s: Advance(n=%d)\n got %+v\nwant %+v", where(), n, ad, want)
				}
			} else if ad.ClockRegressed || ad.Allowed && !want.Allowed || ad.Allowed && ad.Remaining > want.Remaining {
				t.Fatalf("%s: Advance(n=%d) after a regression is looser than the reference\n got %+v\nwant %+v", where(), n, ad, want)
			}
			tat = next
			if ref.active {
				if rt := ref.tat(t, g.Burst, T); tat != rt {
					if !want.ClockRegressed {
						t.Fatalf("%s: Advance TAT %d, reference %d", where(), tat, rt)
					}
					tat = rt
					limit.SetAtomicTAT(&ast, rt)
				}
			}
		}
		if got, want := g.ExpiredAt(tat, c.off), ref.expired(c.off, g.Burst, T); got != want {
			t.Fatalf("%s: ExpiredAt = %v, want %v", where(), got, want)
		}
		if got, want := g.Expired(&s, now), ref.expired(c.off, g.Burst, T); got != want {
			t.Fatalf("%s: Expired = %v, want %v", where(), got, want)
		}
	}
}

// ---------------------------------------------------------------------------
// Random sequences

var windows = []time.Duration{1, 2, 7, 1000, time.Millisecond, time.Second, time.Minute, limit.MaxWindow}

func randTape(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func randWindow(rng *rand.Rand) time.Duration {
	if rng.IntN(4) == 0 {
		return 1 + time.Duration(rng.Int64N(int64(limit.MaxWindow)))
	}
	return windows[rng.IntN(len(windows))]
}

func sequences(t *testing.T) int {
	if testing.Short() {
		return 40
	}
	return 300
}

func TestModelFixedWindow(t *testing.T) {
	limits := []int64{1, 2, 3, 10, 100, limit.MaxLimit}
	for seed := range uint64(sequences(t)) {
		rng := rand.New(rand.NewPCG(seed, 1))
		fw := limit.FixedWindow{Limit: limits[rng.IntN(len(limits))], Window: randWindow(rng)}
		mono := seed%2 == 0
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runFixed(t, fw, mono, randTape(rng, 3000)) })
	}
}

func TestModelRollingLog(t *testing.T) {
	limits := []int{1, 2, 3, 5, 17, 100, limit.MaxRollingLimit}
	for seed := range uint64(sequences(t)) {
		rng := rand.New(rand.NewPCG(seed, 2))
		rl := limit.RollingLog{Limit: limits[rng.IntN(len(limits))], Window: randWindow(rng)}
		mono := seed%2 == 0
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runRolling(t, rl, mono, randTape(rng, 3000)) })
	}
}

func TestModelGCRA(t *testing.T) {
	rates := []float64{limit.MinRate, 0.5, 1, 3, 7, 100, 1e6, 333_333_333, limit.MaxRate}
	bursts := []int64{1, 2, 5, 200, 1_000_000}
	for seed := range uint64(sequences(t)) {
		rng := rand.New(rand.NewPCG(seed, 3))
		g := limit.GCRA{Rate: rates[rng.IntN(len(rates))], Burst: bursts[rng.IntN(len(bursts))]}
		if rng.IntN(4) == 0 {
			g.Rate = limit.MinRate + rng.Float64()*1e4
		}
		g.Burst = min(g.Burst, int64(limit.MaxRefill/g.Interval()))
		mono := seed%2 == 0
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runGCRA(t, g, mono, randTape(rng, 3000)) })
	}
}

// TestModelRollingLogLongBusy keeps a log busy for far longer than the
// offset re-anchoring threshold (~39h) and years beyond, one admission just
// inside each window, checking against the reference throughout.
func TestModelRollingLogLongBusy(t *testing.T) {
	for _, mono := range []bool{true, false} {
		rl := limit.RollingLog{Limit: 3, Window: limit.MaxWindow}
		var ops []byte
		for range 20_000 {
			// op 0 = Allow; clock class 2 with a step just under the window.
			var step [8]byte
			binary.LittleEndian.PutUint64(step[:], uint64(limit.MaxWindow-1-time.Duration(len(ops)%7)))
			ops = append(ops, 0, 2)
			ops = append(ops, step[:]...)
		}
		runRolling(t, rl, mono, ops)
	}
}

// ---------------------------------------------------------------------------
// Fuzz targets: the same runners on fuzzer-chosen parameters and tapes.

func FuzzFixedWindow(f *testing.F) {
	f.Add(uint32(0), uint64(999), false, []byte{0, 1, 5, 0, 0, 1, 0, 0, 7, 0, 4, 0, 0})
	f.Add(uint32(4), uint64(59_999_999_999), true, []byte("\x00\x02\xff\xff\xff\xff\x00\x00\x00\x00\x01\x04\x07\x80\x05\x06\x01\x06\x00\x00\x00\x00\x00\x00\x01\x02\x03\x02\x07\x40"))
	f.Add(uint32(2), uint64(0), true, []byte{0, 1, 1, 0, 1, 0, 2, 0, 3, 0, 0, 3, 1, 2, 6, 3, 5, 0, 1, 7})
	f.Add(uint32(limit.MaxLimit-1), uint64(limit.MaxWindow-1), false, []byte{0, 0, 6, 0, 0, 2, 1, 5, 255, 255, 255, 255, 255, 255, 255, 255, 7, 7, 7, 7})
	f.Fuzz(func(t *testing.T, lim uint32, window uint64, mono bool, ops []byte) {
		fw := limit.FixedWindow{
			Limit:  1 + int64(lim%limit.MaxLimit),
			Window: 1 + time.Duration(window%uint64(limit.MaxWindow)),
		}
		runFixed(t, fw, mono, ops)
	})
}

func FuzzRollingLog(f *testing.F) {
	f.Add(uint16(4), uint64(59_999_999_999), true, []byte{0, 0, 0, 1, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 7, 0, 0, 7, 64, 0, 7, 128})
	f.Add(uint16(0), uint64(9), false, []byte{0, 1, 3, 0, 1, 3, 0, 3, 9, 0, 7, 0, 0, 7, 64, 13, 0, 200, 0, 0, 15, 0})
	f.Add(uint16(2), uint64(0), true, []byte{0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8, 0})
	f.Add(uint16(limit.MaxRollingLimit-1), uint64(limit.MaxWindow-1), false, []byte{0, 1, 0, 2, 255, 255, 255, 255, 255, 255, 255, 255, 14, 0, 0, 13, 0, 3})
	f.Fuzz(func(t *testing.T, lim uint16, window uint64, mono bool, ops []byte) {
		rl := limit.RollingLog{
			Limit:  1 + int(lim)%limit.MaxRollingLimit,
			Window: 1 + time.Duration(window%uint64(limit.MaxWindow)),
		}
		runRolling(t, rl, mono, ops)
	})
}

func FuzzGCRA(f *testing.F) {
	f.Add(uint64(9_999_999), uint64(4), true, []byte{0, 0, 1, 0, 1, 0, 2, 3, 0, 2, 7, 0, 0, 7, 64, 0, 7, 128, 7, 0})
	f.Add(uint64(333_333_332), uint64(1), false, []byte{0, 1, 5, 0, 3, 5, 1, 6, 9, 0, 2, 9, 9, 9, 9, 9, 0, 0, 0, 0})
	f.Add(uint64(0), uint64(999_999), true, []byte{0, 0, 2, 0, 0, 6, 0, 5, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 3})
	f.Add(uint64(limit.MaxWindow-1), uint64(0), false, []byte{0, 0, 0, 0, 2, 255, 255, 255, 255, 255, 255, 255, 255, 0})
	f.Fuzz(func(t *testing.T, interval, burst uint64, mono bool, ops []byte) {
		g := limit.GCRA{Rate: 1e9 / float64(1+interval%uint64(limit.MaxWindow))}
		if g.Rate < limit.MinRate {
			g.Rate = limit.MinRate
		}
		T := g.Interval()
		g.Burst = 1 + int64(burst%uint64(min(limit.MaxBurst, int64(limit.MaxRefill/T))))
		runGCRA(t, g, mono, ops)
	})
}
