package hosttest

import (
	"runtime"
	"strings"
)

// AllocsPerRunOutside runs f runs times and returns the average number
// (whole, as testing.AllocsPerRun's) of heap allocations per run made
// outside the functions whose names
// contain one of except (an allocation is inside when such a function
// is on its stack), and the average inside them. Every allocation is
// sampled (runtime.MemProfileRate 1) while it runs; call it where the
// test would call testing.AllocsPerRun, after warming up.
//
// It is for a count testing.AllocsPerRun cannot give: the allocations
// of the code under test when a dependency on the same path allocates
// on its own (crypto/tls reading a record).
func AllocsPerRunOutside(runs int, f func(), except ...string) (outside, inside float64) {
	prev := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = prev }()
	before := memProfile()
	for range runs {
		f()
	}
	after := memProfile()
	var out, in int64
	for stk, n := range after {
		d := n - before[stk]
		if d <= 0 {
			continue
		}
		if stackHas(stk, except) {
			in += d
		} else {
			out += d
		}
	}
	return float64(out / int64(runs)), float64(in / int64(runs))
}

// memProfile returns the allocations counted so far per stack, brought
// up to date (the profile is published by garbage collections).
func memProfile() map[[32]uintptr]int64 {
	for range 3 {
		runtime.GC()
	}
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			break
		}
	}
	m := make(map[[32]uintptr]int64, n)
	for _, r := range recs[:n] {
		m[r.Stack0] += r.AllocObjects
	}
	return m
}

func stackHas(stk [32]uintptr, names []string) bool {
	pcs := stk[:]
	for i, pc := range pcs {
		if pc == 0 {
			pcs = pcs[:i]
			break
		}
	}
	frames := runtime.CallersFrames(pcs)
	for {
		fr, more := frames.Next()
		for _, n := range names {
			if strings.Contains(fr.Function, n) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}
