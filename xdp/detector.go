package xdp

import (
	"math"
	"time"
)

// DetectorConfig configures a Detector; see the fields of the same names
// in Config.
type DetectorConfig struct {
	K            float64
	MinRate      float64
	Warmup       int
	Window       int
	EnterSamples int
	ExitHold     time.Duration
}

// Detector decides defense mode from a series of SYN-rate samples. It
// keeps Welford's running mean and variance of the rate, with the sample
// count capped at Window so that, once full, each sample weighs 1/Window
// and the baseline follows slow drift. The first Warmup samples are all
// learned; after that the baseline learns only outside defense mode and
// never from a sample above the threshold, so a flood does not teach it
// that floods are normal. The price: a lasting step of legitimate SYNs
// above the threshold keeps defense mode on (the SYN proxy serves those
// clients) until the operator raises K or forces defense off.
//
// Defense starts when EnterSamples consecutive samples exceed
//
//	threshold = max(mean + K·σ, MinRate)
//
// once at least Warmup samples were learned, and ends when the rate has
// stayed below max(mean + K·σ/2, MinRate/2) for ExitHold. A Detector is
// not safe for concurrent use; it is pure (time comes from the caller).
type Detector struct {
	cfg        DetectorConfig
	n          float64
	mean, m2   float64
	vr         float64 // variance
	learned    uint64
	defense    bool
	above      int
	calmSince  time.Time
	calm       bool
	lastThresh float64
}

// NewDetector returns a detector; cfg must hold valid values (New
// validates them as part of Config).
func NewDetector(cfg DetectorConfig) *Detector { return &Detector{cfg: cfg} }

// SetK changes K; the baseline is kept.
func (d *Detector) SetK(k float64) { d.cfg.K = k }

// Observe adds a sample taken at now and reports whether defense mode is
// on afterwards and whether that changed.
func (d *Detector) Observe(rate float64, now time.Time) (defense, changed bool) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		rate = 0
	}
	th := d.Threshold()
	d.lastThresh = th
	if !d.defense {
		if d.learned < uint64(d.cfg.Warmup) {
			d.learn(rate) // the warm-up learns every sample
			return false, false
		}
		if rate > th {
			d.above++
		} else {
			d.above = 0
			d.learn(rate)
		}
		if d.above >= d.cfg.EnterSamples && d.learned >= uint64(d.cfg.Warmup) {
			d.defense, d.above, d.calm = true, 0, false
			return true, true
		}
		return false, false
	}
	if rate < d.exitThreshold() {
		if !d.calm {
			d.calm, d.calmSince = true, now
		}
		if now.Sub(d.calmSince) >= d.cfg.ExitHold {
			d.defense, d.calm = false, false
			return false, true
		}
	} else {
		d.calm = false
	}
	return true, false
}

func (d *Detector) learn(x float64) {
	d.learned++
	if d.n < float64(d.cfg.Window) {
		// Welford's update.
		d.n++
		delta := x - d.mean
		d.mean += delta / d.n
		d.m2 += delta * (x - d.mean)
		if d.n >= 2 {
			d.vr = d.m2 / (d.n - 1)
		}
		return
	}
	// Full: the exponentially weighted form of the same update, each
	// sample weighing 1/Window.
	a := 1 / d.n
	delta := x - d.mean
	d.mean += a * delta
	d.vr = (1 - a) * (d.vr + a*delta*delta)
}

// Mean returns the baseline mean rate.
func (d *Detector) Mean() float64 { return d.mean }

// Stddev returns the baseline standard deviation.
func (d *Detector) Stddev() float64 {
	return math.Sqrt(math.Max(d.vr, 0))
}

// Threshold returns the current defense threshold.
func (d *Detector) Threshold() float64 {
	return math.Max(d.mean+d.cfg.K*d.Stddev(), d.cfg.MinRate)
}

func (d *Detector) exitThreshold() float64 {
	return math.Max(d.mean+d.cfg.K*d.Stddev()/2, d.cfg.MinRate/2)
}

// Learned returns how many samples the baseline has learned.
func (d *Detector) Learned() uint64 { return d.learned }

// Defense reports whether defense mode is on.
func (d *Detector) Defense() bool { return d.defense }
