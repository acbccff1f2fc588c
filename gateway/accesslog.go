package gateway

import (
	"context"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/peer"
)

// accessLog writes one structured line per request (all, sampled) or per
// rejection: route, the layer that answered and why, status, duration,
// upstream, and a keyed client fingerprint, at most maxPerSecond lines a
// second (the rest dropped and counted). It never writes the address, the
// path, a username or a header value: an operator follows one client
// across lines by its fingerprint without learning who it is. The
// fingerprint is an HMAC of the grouped client address under a key made
// for this process, so it is stable for a process's lifetime and differs
// between processes.
type accessLog struct {
	mode    string // off, rejections, all
	sample  float64
	max     int64
	out     *slog.Logger
	keyer   *peer.Keyer
	metrics *metrics
	clock   clock.Clock // the per-second bound's time

	sec atomic.Int64 // the current second (Unix)
	n   atomic.Int64 // lines written in it
}

// accessKeyer is the gateway's fingerprint key, one per process.
func (g *Gateway) accessKeyer() *peer.Keyer {
	g.keyerOnce.Do(func() { g.keyer = peer.NewKeyer() })
	return g.keyer
}

func (g *Gateway) newAccessLog(c AccessLog) *accessLog {
	return &accessLog{mode: c.Mode, sample: c.Sample, max: int64(c.MaxPerSecond), out: g.log, keyer: g.accessKeyer(), metrics: g.metrics, clock: g.clock}
}

// fingerprintDomain separates access-log fingerprints from every other
// use of the key.
const fingerprintDomain = "bulwark/access-log/client"

func (a *accessLog) log(ex *exchange, d time.Duration) {
	if a == nil || a.mode == "off" {
		return
	}
	rejected := ex.layer != "" || ex.shadowLayer != ""
	if !rejected && (a.mode == "rejections" || a.sample < 1 && rand.Float64() >= a.sample) {
		return
	}
	now := a.clock.Now().Unix()
	if s := a.sec.Load(); s != now && a.sec.CompareAndSwap(s, now) {
		a.n.Store(0)
	}
	if a.n.Add(1) > a.max {
		if a.metrics.on() {
			a.metrics.accessDropped.Inc()
		}
		return
	}
	sum := a.keyer.Sum(fingerprintDomain, ex.group, ex.clientOK)
	var fp [16]byte
	hex.Encode(fp[:], sum[:8])
	attrs := [10]slog.Attr{
		slog.String("route", ex.routeName()),
		slog.String("layer", ex.layer),
		slog.String("reason", ex.reason),
		slog.Int("status", ex.status),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
		slog.String("client", string(fp[:])),
	}
	n := 6
	if ex.route != nil && ex.layer == "" {
		attrs[n] = slog.String("upstream", ex.route.upstream)
		n++
	}
	if ex.shadowLayer != "" {
		attrs[n] = slog.String("shadow_layer", ex.shadowLayer)
		attrs[n+1] = slog.String("shadow_reason", ex.shadowReason)
		n += 2
	}
	a.out.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs[:n]...)
}
