package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/quota"
)

// Living through outages
//
// PostgreSQL (quotas) and Redis (login logs, global limits) are
// dependencies the gateway serves without: a replica that starts while
// one is down comes up like a running replica that lost it — quota routes
// answer 503 quota_unavailable, logins degrade to allowed, global limits
// run on the local share, every other route serves normally — instead of
// exiting. /readyz stays 200 (plain routes stay in rotation) and names
// the dependency in its body; bulwark_dependency_up says the same.
//
// Each dependency has a monitor: a background probe (one goroutine per
// dependency, owned by the gateway, stopped at shutdown) and the results
// the request path reports. It logs one line when the dependency goes
// down, one when it is back, and while it is down a summary at most every
// summaryInterval with the number of failures — never one line per
// request.

// Monitor bounds.
const (
	depProbeInterval = 2 * time.Second
	depProbeTimeout  = 2 * time.Second
	summaryInterval  = 30 * time.Second
)

// depMonitor tracks one dependency.
type depMonitor struct {
	name    string
	log     *slog.Logger
	metrics *metrics
	clock   clock.Clock
	probe   func(context.Context) error // nil: only the request path reports

	up       atomic.Bool
	failures atomic.Uint64 // since the last log line while down

	// nextSummary (Unix nanoseconds of the clock) is when a summary may
	// be logged next: read without the lock by every failure while down.
	nextSummary atomic.Int64

	mu          sync.Mutex // serializes transitions and summaries
	downSince   time.Time
	lastSummary time.Time
}

func newDepMonitor(name string, g *Gateway, probe func(context.Context) error) *depMonitor {
	d := &depMonitor{name: name, log: g.log, metrics: g.metrics, clock: g.clock, probe: probe}
	d.up.Store(true)
	g.metrics.dependency(name, true)
	return d
}

// ok records a success: one log line if the dependency was down.
func (d *depMonitor) ok() {
	if d == nil || d.up.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.up.Load() {
		return
	}
	d.up.Store(true)
	d.metrics.dependency(d.name, true)
	d.log.Info(d.name+" is back", "dependency", d.name, "down_for", d.clock.Now().Sub(d.downSince).Round(time.Millisecond).String(),
		"failures", d.failures.Swap(0))
}

// failed records a failure: one log line when the dependency goes down,
// then at most one summary per summaryInterval.
func (d *depMonitor) failed(reason string) {
	if d == nil {
		return
	}
	d.failures.Add(1)
	now := d.clock.Now()
	if !d.up.Load() {
		if now.UnixNano() < d.nextSummary.Load() {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if now.Sub(d.lastSummary) >= summaryInterval && !d.up.Load() {
			d.lastSummary = now
			d.nextSummary.Store(now.Add(summaryInterval).UnixNano())
			d.log.Warn(d.name+" still unavailable", "dependency", d.name, "down_for", now.Sub(d.downSince).Round(time.Second).String(),
				"failures", d.failures.Swap(0), "reason", reason)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.up.Load() {
		return
	}
	d.up.Store(false)
	d.downSince, d.lastSummary = now, now
	d.nextSummary.Store(now.Add(summaryInterval).UnixNano())
	d.metrics.dependency(d.name, false)
	if hint := reasonHint(reason); hint != "" {
		d.log.Warn(d.name+" unavailable; serving without it", "dependency", d.name, "reason", reason, "hint", hint)
		return
	}
	d.log.Warn(d.name+" unavailable; serving without it", "dependency", d.name, "reason", reason)
}

// report records a success for "" and a failure for any other reason
// (the quota middleware's OnAuth and OnStore).
func (d *depMonitor) report(failure string) {
	if failure == "" {
		d.ok()
		return
	}
	d.failed(failure)
}

// state is "up" or "down".
func (d *depMonitor) state() string {
	if d.up.Load() {
		return "up"
	}
	return "down"
}

// run probes until stop is closed.
func (d *depMonitor) run(stop <-chan struct{}) {
	t := time.NewTicker(depProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), depProbeTimeout)
		err := d.probe(ctx)
		cancel()
		if err != nil {
			d.failed(errorReason(err))
		} else {
			d.ok()
		}
	}
}

// errorReason is a fixed word for a dependency error (error texts may
// carry addresses).
func errorReason(err error) string {
	var ue *quota.UnavailableError
	switch {
	case err == nil:
		return ""
	case isTimeout(err):
		return "timeout"
	case errors.As(err, &ue) && ue.Reason == quota.ReasonTLSRefused:
		return string(quota.ReasonTLSRefused)
	}
	return "error"
}

// reasonHint says what to do about a dependency failure's reason, or "".
func reasonHint(reason string) string {
	if reason == string(quota.ReasonTLSRefused) {
		return "the server has no TLS and the connection requires verify-full: give it a certificate, or set " +
			EnvPostgresTLSMode + "=disable and " + EnvPostgresAllowInsecure + "=true (bulwark check warns about a local server)"
	}
	return ""
}

func isTimeout(err error) bool {
	type timeout interface{ Timeout() bool }
	for e := err; e != nil; {
		if t, ok := e.(timeout); ok && t.Timeout() {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// operatorReadyz is /readyz on the metrics listener: the client
// listener's answer (200 ready, 503 otherwise) with the state of each
// monitored dependency, which the client listener does not disclose.
func (g *Gateway) operatorReadyz(w http.ResponseWriter, _ *http.Request) {
	ready, state := g.readiness()
	doc := struct {
		Status       string            `json:"status"`
		Dependencies map[string]string `json:"dependencies,omitempty"`
	}{Status: state, Dependencies: g.readyDetail()}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	b, _ := json.Marshal(doc)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// readyDetail is the state of each monitored dependency (operators only).
func (g *Gateway) readyDetail() map[string]string {
	if len(g.depMons) == 0 {
		return nil
	}
	m := make(map[string]string, len(g.depMons))
	for _, d := range g.depMons {
		m[d.name] = d.state()
	}
	return m
}

// startMonitors starts the dependency probes.
func (g *Gateway) startMonitors() {
	g.monitorStop = make(chan struct{})
	for _, d := range g.depMons {
		if d.probe != nil {
			g.monitorWG.Add(1)
			go func() {
				defer g.monitorWG.Done()
				d.run(g.monitorStop)
			}()
		}
	}
}

func (g *Gateway) stopMonitors(context.Context) error {
	if g.monitorStop != nil {
		close(g.monitorStop)
		g.monitorWG.Wait()
		g.monitorStop = nil
	}
	return nil
}
