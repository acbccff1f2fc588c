package proxy

// Health checks
//
// An upstream's targets can be taken out of the round robin two ways,
// each optional:
//
//   - active checks (Health.Active): one goroutine per upstream sends
//     GET path to every target each interval, one target after another;
//     a target that fails unhealthy_threshold checks in a row (no answer
//     within timeout, or a status outside 200-399) is down until it
//     passes healthy_threshold in a row. Targets start healthy, and the
//     first round runs when the proxy is created.
//   - passive ejection (Health.Passive): max_fails consecutive failures
//     of requests to a target (a connection that could not be made; a
//     5xx answer too with fail_on_5xx) eject it for eject_for, read on
//     the proxy's clock when a request next looks at the target (no
//     timer). Any other answer resets its count.
//
// A target is in rotation when neither says otherwise. Requests skip the
// targets out of rotation (the round robin goes on to the next one in
// rotation; retries likewise), and when no target is left the request
// is answered at once with 503 upstream_unhealthy, without dialing.
// Everything a request reads here is an atomic load; the clock is read
// only while some target is ejected.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/wire"
)

// CodeUpstreamUnhealthy: no target of the upstream is in rotation (503).
const CodeUpstreamUnhealthy = wire.CodeUpstreamUnhealthy

// Defaults and bounds of [ActiveCheck] and [PassiveCheck].
const (
	DefaultCheckInterval      = 10 * time.Second
	MinCheckInterval          = time.Second
	MaxCheckInterval          = time.Hour
	DefaultCheckTimeout       = 2 * time.Second
	DefaultHealthyThreshold   = 2
	DefaultUnhealthyThreshold = 3
	// MaxThreshold bounds the thresholds and PassiveCheck.MaxFails.
	MaxThreshold = 100
	// MaxCheckPathBytes bounds ActiveCheck.Path.
	MaxCheckPathBytes = 1024
	DefaultMaxFails   = 3
	DefaultEjectFor   = 30 * time.Second
	MinEjectFor       = time.Second
	MaxEjectFor       = time.Hour
	// maxCheckBody is how much of a check's answer is read (and
	// discarded) before its connection is closed.
	maxCheckBody = 4 << 10
)

// Health is the health section of an upstream (health): both kinds of
// check are off unless their section is present.
type Health struct {
	// Active (active), when set, checks every target in the background.
	Active *ActiveCheck `yaml:"active"`
	// Passive (passive), when set, ejects a target after consecutive
	// failed requests.
	Passive *PassiveCheck `yaml:"passive"`
	// RequiredForReady (required_for_ready) asks the caller's readiness
	// probe to fail while no target of this upstream is in rotation (the
	// gateway's /readyz answers 503 upstream_unhealthy). The proxy itself
	// does not use it; see [Proxy.RequiredForReady].
	RequiredForReady bool `yaml:"required_for_ready"`
}

// ActiveCheck configures the active health checks of an upstream.
type ActiveCheck struct {
	// Path (path) is requested with GET on each target, below the
	// target's path prefix: required, starting with "/", at most
	// MaxCheckPathBytes of printable ASCII without spaces (a query is
	// allowed).
	Path string `yaml:"path"`
	// Interval (interval) between rounds: MinCheckInterval to
	// MaxCheckInterval (default DefaultCheckInterval).
	Interval time.Duration `yaml:"interval"`
	// Timeout (timeout) bounds one check, connection included: MinTimeout
	// to Interval (default DefaultCheckTimeout, lowered to Interval).
	Timeout time.Duration `yaml:"timeout"`
	// HealthyThreshold (healthy_threshold): passed checks in a row that
	// bring a down target back, 1 to MaxThreshold (default 2).
	HealthyThreshold int `yaml:"healthy_threshold"`
	// UnhealthyThreshold (unhealthy_threshold): failed checks in a row
	// that take a target down, 1 to MaxThreshold (default 3).
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
}

// PassiveCheck configures the passive ejection of an upstream's targets.
type PassiveCheck struct {
	// MaxFails (max_fails): consecutive failed requests that eject a
	// target, 1 to MaxThreshold (default DefaultMaxFails).
	MaxFails int `yaml:"max_fails"`
	// FailOn5xx (fail_on_5xx) counts a 5xx answer as a failure; without
	// it only a connection that could not be made is one.
	FailOn5xx bool `yaml:"fail_on_5xx"`
	// EjectFor (eject_for) is how long an ejected target stays out:
	// MinEjectFor to MaxEjectFor (default DefaultEjectFor).
	EjectFor time.Duration `yaml:"eject_for"`
}

// DefaultActiveCheck returns an active check's defaults (Path has none).
func DefaultActiveCheck() ActiveCheck {
	return ActiveCheck{Interval: DefaultCheckInterval, Timeout: DefaultCheckTimeout,
		HealthyThreshold: DefaultHealthyThreshold, UnhealthyThreshold: DefaultUnhealthyThreshold}
}

// DefaultPassiveCheck returns a passive check's defaults.
func DefaultPassiveCheck() PassiveCheck {
	return PassiveCheck{MaxFails: DefaultMaxFails, EjectFor: DefaultEjectFor}
}

// WithDefaults returns h with the zero fields of its sections set to
// the defaults (an active timeout no longer than its interval). The
// sections are copied, never changed in place.
func (h Health) WithDefaults() Health {
	if h.Active != nil {
		a, d := *h.Active, DefaultActiveCheck()
		if a.Interval == 0 {
			a.Interval = d.Interval
		}
		if a.Timeout == 0 {
			a.Timeout = min(d.Timeout, a.Interval)
		}
		if a.HealthyThreshold == 0 {
			a.HealthyThreshold = d.HealthyThreshold
		}
		if a.UnhealthyThreshold == 0 {
			a.UnhealthyThreshold = d.UnhealthyThreshold
		}
		h.Active = &a
	}
	if h.Passive != nil {
		p, d := *h.Passive, DefaultPassiveCheck()
		if p.MaxFails == 0 {
			p.MaxFails = d.MaxFails
		}
		if p.EjectFor == 0 {
			p.EjectFor = d.EjectFor
		}
		h.Passive = &p
	}
	return h
}

// Validate checks the sections that are present, as they are.
func (h Health) Validate() error {
	f := conf.Check{Kind: ErrInvalidUpstream}
	if a := h.Active; a != nil {
		if !checkPath(a.Path) {
			f.Add("active.path", "%q: want a path starting with / of at most %d printable characters without spaces", truncate(a.Path, 64), MaxCheckPathBytes)
		}
		f.Duration("active.interval", a.Interval, MinCheckInterval, MaxCheckInterval)
		hi := MaxCheckInterval
		if a.Interval >= MinTimeout && a.Interval < hi {
			hi = a.Interval
		}
		f.Duration("active.timeout", a.Timeout, MinTimeout, hi)
		f.Int("active.healthy_threshold", int64(a.HealthyThreshold), 1, MaxThreshold)
		f.Int("active.unhealthy_threshold", int64(a.UnhealthyThreshold), 1, MaxThreshold)
	}
	if p := h.Passive; p != nil {
		f.Int("passive.max_fails", int64(p.MaxFails), 1, MaxThreshold)
		f.Duration("passive.eject_for", p.EjectFor, MinEjectFor, MaxEjectFor)
	}
	return f.Err()
}

func checkPath(s string) bool {
	if len(s) == 0 || len(s) > MaxCheckPathBytes || s[0] != '/' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '#' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// TargetHealth is the state of one target of an upstream with health
// checks.
type TargetHealth struct {
	// Target is the target's index in Upstream.Targets.
	Target int `json:"target"`
	// Healthy: the target is in rotation.
	Healthy bool `json:"healthy"`
	// Down: the active checks took it out.
	Down bool `json:"down,omitempty"`
	// Ejected: a passive ejection is in force.
	Ejected bool `json:"ejected,omitempty"`
}

// HealthStats is the health of a proxy's targets.
type HealthStats struct {
	// Checked reports that the upstream has active or passive checks;
	// without, every target is always in rotation and Targets is nil.
	Checked bool
	Targets []TargetHealth
	// Ejections counts passive ejections since New.
	Ejections uint64
}

// targetState is one target's health. The active run counts belong to
// the round (health.round).
type targetState struct {
	down atomic.Bool
	// ejectedUntil is the end of a passive ejection, in nanoseconds of
	// the proxy's clock since health.epoch; 0: none.
	ejectedUntil atomic.Int64
	fails        atomic.Int32 // consecutive failed requests

	passes, failures int
}

// health is a proxy's health state and its checker.
type health struct {
	p       *Proxy
	active  *ActiveCheck
	passive *PassiveCheck
	clk     clock.Clock
	epoch   time.Time
	targets []targetState

	ejections atomic.Uint64

	// The active checks.
	urls   []string
	client *http.Client
	round  sync.Mutex // one round at a time
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the checker returned
}

func newHealth(p *Proxy, u Upstream, dial func(ctx context.Context, network, addr string) (net.Conn, error), opts Options) *health {
	hc := u.Health
	if hc.Active == nil && hc.Passive == nil {
		return nil
	}
	h := &health{p: p, active: hc.Active, passive: hc.Passive, clk: clock.Or(opts.Clock), targets: make([]targetState, len(p.targets))}
	h.epoch = h.clk.Now()
	if h.active == nil {
		return h
	}
	path, query, _ := strings.Cut(h.active.Path, "?")
	for _, t := range p.targets {
		cu := url.URL{Scheme: t.Scheme, Host: t.Host, Path: path, RawQuery: query}
		if t.Path != "" && t.Path != "/" {
			cu.Path = singleJoin(t.Path, path)
		}
		h.urls = append(h.urls, cu.String())
	}
	h.client = &http.Client{
		Transport: &http.Transport{
			DialContext:            dial,
			DisableKeepAlives:      true,
			TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
			MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		},
		// A redirect is an answer (3xx passes); it is not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.done = make(chan struct{})
	go h.run(opts.HealthTicks)
	return h
}

// run is the checker: a round now and one per interval, or one per
// value of ticks when the caller drives it.
func (h *health) run(ticks <-chan time.Time) {
	defer close(h.done)
	if ticks == nil {
		h.check(h.ctx)
		t := time.NewTicker(h.active.Interval)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-ticks:
		}
		h.check(h.ctx)
	}
}

// close stops the checker and waits for it (a check in flight is
// canceled).
func (h *health) close() {
	if h == nil || h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
	h.client.CloseIdleConnections()
}

// CheckNow runs one round of active checks, one target after another,
// and returns when it is done (or ctx or the proxy is done). It is what
// the checker runs each interval; without active checks it does nothing.
func (p *Proxy) CheckNow(ctx context.Context) {
	h := p.health
	if h == nil || h.active == nil {
		return
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(h.ctx, stop)()
	h.check(ctx)
}

func (h *health) check(ctx context.Context) {
	h.round.Lock()
	defer h.round.Unlock()
	for i := range h.targets {
		if ctx.Err() != nil {
			return
		}
		h.record(i, h.probe(ctx, i))
	}
}

// probe checks target i once.
func (h *health) probe(ctx context.Context, i int) bool {
	ctx, cancel := context.WithTimeout(ctx, h.active.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.urls[i], nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "bulwark-health-check")
	resp, err := h.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxCheckBody)
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// record counts a check of target i; it holds h.round.
func (h *health) record(i int, ok bool) {
	ts, a := &h.targets[i], h.active
	if ok {
		ts.failures = 0
		ts.passes = min(ts.passes+1, a.HealthyThreshold)
		if ts.down.Load() && ts.passes >= a.HealthyThreshold {
			ts.down.Store(false)
			h.p.log.Info("upstream target healthy", "target", i, "passed", ts.passes)
		}
		return
	}
	ts.passes = 0
	ts.failures = min(ts.failures+1, a.UnhealthyThreshold)
	if !ts.down.Load() && ts.failures >= a.UnhealthyThreshold {
		ts.down.Store(true)
		h.p.log.Warn("upstream target unhealthy", "target", i, "failed", ts.failures)
	}
}

// nanos is the clock's reading as nanoseconds since epoch.
func (h *health) nanos() int64 { return int64(h.clk.Now().Sub(h.epoch)) }

// inRotation reports whether target i may be sent a request; *now is the
// clock's reading, read on first need (0: not yet).
func (h *health) inRotation(i int, now *int64) bool {
	ts := &h.targets[i]
	if ts.down.Load() {
		return false
	}
	until := ts.ejectedUntil.Load()
	if until == 0 {
		return true
	}
	if *now == 0 {
		*now = max(h.nanos(), 1)
	}
	if *now < until {
		return false
	}
	ts.ejectedUntil.CompareAndSwap(until, 0) // back in rotation
	return true
}

// connectFailed counts a connection to target i that could not be made.
func (h *health) connectFailed(i int) {
	if h != nil && h.passive != nil {
		h.failed(i)
	}
}

// answered counts an answer of target i with status.
func (h *health) answered(i, status int) {
	if h == nil || h.passive == nil {
		return
	}
	if status >= 500 && h.passive.FailOn5xx {
		h.failed(i)
		return
	}
	if ts := &h.targets[i]; ts.fails.Load() != 0 {
		ts.fails.Store(0)
	}
}

func (h *health) failed(i int) {
	ts := &h.targets[i]
	if ts.fails.Add(1) < int32(h.passive.MaxFails) {
		return
	}
	ts.fails.Store(0)
	until := max(h.nanos()+int64(h.passive.EjectFor), 1) // (0 is "not ejected")
	if ts.ejectedUntil.Swap(until) == 0 {
		h.ejections.Add(1)
		h.p.log.Warn("upstream target ejected", "target", i, "failures", h.passive.MaxFails,
			"for", h.passive.EjectFor.String())
	}
}

// errNoHealthy: no target of the upstream is in rotation.
var errNoHealthy = errors.New("proxy: no healthy upstream target")

// pick returns the target of attempt i of a request whose round robin
// starts at first: nth's, or the next one in rotation after it; ok is
// false when no target is in rotation.
func (p *Proxy) pick(first uint64, i int) (target int, ok bool) {
	n := len(p.targets)
	t := nth(first, i, n)
	h := p.health
	if h == nil {
		return t, true
	}
	var now int64
	for k := 0; k < n; k++ {
		j := t + k
		if j >= n {
			j -= n
		}
		if h.inRotation(j, &now) {
			return j, true
		}
	}
	return 0, false
}

// Healthy reports whether some target of the upstream is in rotation:
// always true without health checks. A request to an upstream that is
// not is answered 503 upstream_unhealthy without dialing.
func (p *Proxy) Healthy() bool {
	if p == nil || p.health == nil {
		return true
	}
	h := p.health
	var now int64
	for i := range h.targets {
		if h.inRotation(i, &now) {
			return true
		}
	}
	return false
}

// RequiredForReady reports Health.RequiredForReady: the caller's
// readiness probe should fail while Healthy is false.
func (p *Proxy) RequiredForReady() bool { return p.requiredForReady }

// Health returns the health of the proxy's targets.
func (p *Proxy) Health() HealthStats {
	h := p.health
	if h == nil {
		return HealthStats{}
	}
	st := HealthStats{Checked: true, Targets: make([]TargetHealth, len(h.targets)), Ejections: h.ejections.Load()}
	var now int64
	for i := range h.targets {
		ts := &h.targets[i]
		down, ejected := ts.down.Load(), false
		if until := ts.ejectedUntil.Load(); until != 0 {
			if now == 0 {
				now = max(h.nanos(), 1)
			}
			ejected = now < until
		}
		st.Targets[i] = TargetHealth{Target: i, Healthy: !down && !ejected, Down: down, Ejected: ejected}
	}
	return st
}
