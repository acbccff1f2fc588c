package xdp

import (
	"math"
	"testing"
	"time"
)

func detector() *Detector {
	return NewDetector(DetectorConfig{K: 3, MinRate: 100, Warmup: 5, Window: 1000, EnterSamples: 2, ExitHold: time.Second})
}

// feed observes rate n times, 100 ms apart, from *now.
func feed(d *Detector, now *time.Time, rate float64, n int) (on, changed bool) {
	for range n {
		*now = now.Add(100 * time.Millisecond)
		var c bool
		on, c = d.Observe(rate, *now)
		changed = changed || c
	}
	return on, changed
}

func TestDetectorWelford(t *testing.T) {
	d := NewDetector(DetectorConfig{K: 3, MinRate: 1, Warmup: 5, Window: 1000, EnterSamples: 2, ExitHold: time.Second})
	now := time.Unix(0, 0)
	xs := []float64{10, 20, 30, 40, 50}
	for _, x := range xs {
		feed(d, &now, x, 1)
	}
	// Sample mean 30, sample standard deviation sqrt(250).
	if d.Mean() != 30 || math.Abs(d.Stddev()-math.Sqrt(250)) > 1e-9 {
		t.Errorf("mean %v stddev %v, want 30 and %v", d.Mean(), d.Stddev(), math.Sqrt(250))
	}
	if th := d.Threshold(); math.Abs(th-(30+3*math.Sqrt(250))) > 1e-9 {
		t.Errorf("threshold %v", th)
	}
}

func TestDetectorMinRateFloor(t *testing.T) {
	d := detector()
	now := time.Unix(0, 0)
	feed(d, &now, 0, 10) // idle: mean 0, σ 0
	if d.Threshold() != 100 {
		t.Errorf("idle threshold %v, want the floor 100", d.Threshold())
	}
	if on, _ := feed(d, &now, 99, 10); on {
		t.Error("defense below the floor")
	}
}

func TestDetectorEnterAndHysteresis(t *testing.T) {
	d := detector()
	now := time.Unix(0, 0)
	for i := range 50 { // a baseline around 50 with σ≈10
		feed(d, &now, 40+float64(i%3)*10, 1)
	}
	th := d.Threshold()
	if th < 60 || th > 100.0001 {
		t.Fatalf("threshold %v, want the floor 100 (mean+3σ is below it)", th)
	}
	// One sample above is a blip, not an attack.
	if on, _ := feed(d, &now, 1000, 1); on {
		t.Fatal("defense after one sample")
	}
	if on, _ := feed(d, &now, 50, 1); on {
		t.Fatal("defense after a blip")
	}
	on, changed := feed(d, &now, 1000, 2)
	if !on || !changed {
		t.Fatal("no defense after two samples above the threshold")
	}
	// The flood did not move the baseline.
	if d.Mean() > 60 {
		t.Errorf("mean %v learned the flood", d.Mean())
	}
	// Below the threshold but above the exit threshold (max(mean+3σ/2,
	// 50)): still defense.
	if on, _ := feed(d, &now, 90, 30); !on {
		t.Fatal("left defense above the exit threshold")
	}
	// Calm, but not for ExitHold yet; a relapse restarts the hold.
	feed(d, &now, 10, 9)
	feed(d, &now, 1000, 1)
	if on, _ := feed(d, &now, 10, 9); !on {
		t.Fatal("left defense before a full calm ExitHold")
	}
	on, changed = feed(d, &now, 10, 2)
	if on || !changed {
		t.Fatal("still in defense after ExitHold of calm")
	}
}

func TestDetectorWarmup(t *testing.T) {
	d := detector()
	now := time.Unix(0, 0)
	feed(d, &now, 0, 4)
	if on, _ := feed(d, &now, 1000, 1); on {
		t.Fatal("defense before the warm-up")
	}
	// The warm-up learned the 1000 as well: the baseline is now wide.
	if d.Mean() != 200 {
		t.Errorf("mean %v after the warm-up, want 200", d.Mean())
	}
	feed(d, &now, 0, 20)
	if on, _ := feed(d, &now, 1e6, 2); !on {
		t.Fatal("no defense after the warm-up")
	}
}

func TestDetectorWindowFollowsDrift(t *testing.T) {
	d := NewDetector(DetectorConfig{K: 3, MinRate: 1, Warmup: 10, Window: 50, EnterSamples: 3, ExitHold: time.Second})
	now := time.Unix(0, 0)
	// A noisy baseline around 100 (σ≈16), then a slow climb to 200 in
	// steps well inside mean+3σ: the capped window follows it, and
	// defense mode never starts.
	noisy := func(base float64, n int) {
		for i := range n {
			if on, _ := feed(d, &now, base+float64(i%5-2)*10, 1); on {
				t.Fatalf("defense at %v (mean %v σ %v)", base, d.Mean(), d.Stddev())
			}
		}
	}
	noisy(100, 200)
	for b := 105.0; b <= 200; b += 5 {
		noisy(b, 100)
	}
	if m := d.Mean(); math.Abs(m-200) > 5 {
		t.Errorf("mean %v after drifting to 200 with a window of 50, want about 200", m)
	}
	if s := d.Stddev(); s < 10 || s > 25 {
		t.Errorf("stddev %v, want the noise's (about 15)", s)
	}
}

func TestDetectorBadSamples(t *testing.T) {
	d := detector()
	now := time.Unix(0, 0)
	for _, x := range []float64{math.NaN(), math.Inf(1), -5} {
		d.Observe(x, now)
	}
	if d.Mean() != 0 || d.Learned() != 3 {
		t.Errorf("bad samples: mean %v learned %d, want them counted as 0", d.Mean(), d.Learned())
	}
}
