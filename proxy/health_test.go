package proxy_test

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/proxy"
)

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 500 && resp.Header.Get("Content-Type") == "application/problem+json" {
		code, _ := readProblem(t, resp)["code"].(string)
		return resp.StatusCode, code
	}
	resp.Body.Close()
	return resp.StatusCode, ""
}

// TestActiveChecksByTicker: the checker goroutine runs a round per tick
// (none at start when ticks are given), requests the check path below
// the target's path prefix, takes a target out after
// unhealthy_threshold failed checks (the proxy then answers 503
// upstream_unhealthy without dialing) and brings it back after
// healthy_threshold passed ones.
func TestActiveChecksByTicker(t *testing.T) { engines(t, testActiveChecksByTicker) }

func testActiveChecksByTicker(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	var checks, requests atomic.Int32
	var checkURI atomic.Value
	target := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/base/healthz") {
			checks.Add(1)
			checkURI.Store(r.URL.RequestURI() + " " + r.Header.Get("User-Agent"))
			w.WriteHeader(int(status.Load()))
			return
		}
		requests.Add(1)
	}))
	base := *target
	base.Path = "/base"
	ticks := make(chan time.Time)
	s, obs := front(t, proxy.Upstream{Targets: []string{base.String()}, Health: proxy.Health{
		Active: &proxy.ActiveCheck{Path: "/healthz?deep=1", UnhealthyThreshold: 2, HealthyThreshold: 1},
	}}, proxy.Options{HealthTicks: ticks})
	p := s.Proxy
	down := func() bool { return p.Health().Targets[0].Down }

	if checks.Load() != 0 {
		t.Fatal("a check ran at start although ticks drive the checker")
	}
	status.Store(http.StatusServiceUnavailable)
	ticks <- time.Time{}
	waitUntil(t, "the first check", func() bool { return checks.Load() == 1 })
	if got, _ := checkURI.Load().(string); got != "/base/healthz?deep=1 bulwark-health-check" {
		t.Errorf("check request %q", got)
	}
	if c, _ := get(t, s.URL+"/x"); c != 200 || down() || !p.Healthy() {
		t.Fatalf("taken out after one failed check of two: %d", c)
	}
	ticks <- time.Time{}
	waitUntil(t, "the target going down", down)
	if p.Healthy() || p.Health().Targets[0].Healthy {
		t.Fatal("Healthy after the target went down")
	}
	before, dials := requests.Load(), p.Stats().Dials
	if c, code := get(t, s.URL+"/x"); c != http.StatusServiceUnavailable || code != proxy.CodeUpstreamUnhealthy {
		t.Fatalf("no target in rotation: %d %q, want 503 upstream_unhealthy", c, code)
	}
	if requests.Load() != before || p.Stats().Dials != dials {
		t.Error("the 503 reached or dialed the upstream")
	}
	if o := obs.last(); o != "unhealthy" {
		t.Errorf("outcome %q, want unhealthy", o)
	}

	status.Store(http.StatusNoContent)
	ticks <- time.Time{}
	waitUntil(t, "the target coming back", func() bool { return !down() })
	if c, _ := get(t, s.URL+"/x"); c != 200 {
		t.Fatalf("back in rotation: %d", c)
	}
}

// TestPassiveFailOn5xx: with fail_on_5xx, max_fails 5xx answers in a
// row eject the target (the 5xx themselves are relayed as they are) for
// eject_for on the proxy's clock; without it, 5xx answers never eject.
func TestPassiveFailOn5xx(t *testing.T) { engines(t, testPassiveFailOn5xx) }

func testPassiveFailOn5xx(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusInternalServerError)
	target := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	clk := clock.NewManual(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	s, _ := front(t, proxy.Upstream{Targets: urls(target), Health: proxy.Health{
		Passive: &proxy.PassiveCheck{MaxFails: 2, FailOn5xx: true, EjectFor: 10 * time.Second},
	}}, proxy.Options{Clock: clk})
	for i := 0; i < 2; i++ {
		if c, _ := get(t, s.URL); c != 500 {
			t.Fatalf("answer %d: %d, want the upstream's 500", i, c)
		}
	}
	if c, code := get(t, s.URL); c != 503 || code != proxy.CodeUpstreamUnhealthy {
		t.Fatalf("after two 5xx: %d %q, want 503 upstream_unhealthy", c, code)
	}
	if st := s.Proxy.Health(); !st.Targets[0].Ejected || st.Ejections != 1 {
		t.Errorf("health %+v", st)
	}
	clk.Advance(9 * time.Second)
	if c, _ := get(t, s.URL); c != 503 {
		t.Fatalf("before eject_for: %d", c)
	}
	status.Store(http.StatusOK)
	clk.Advance(time.Second)
	if c, _ := get(t, s.URL); c != 200 {
		t.Fatalf("after eject_for: %d", c)
	}

	other := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }))
	s2, _ := front(t, proxy.Upstream{Targets: urls(other), Health: proxy.Health{
		Passive: &proxy.PassiveCheck{MaxFails: 1, EjectFor: 10 * time.Second},
	}}, proxy.Options{Clock: clk})
	for i := 0; i < 3; i++ {
		if c, _ := get(t, s2.URL); c != 502 {
			t.Fatalf("without fail_on_5xx, answer %d: %d, want the upstream's own 502", i, c)
		}
	}
}

// TestPassiveEjectionSkipsTarget: a refused connection counts against
// its target; once it is ejected, every request goes to the other
// target, the first attempt included.
func TestPassiveEjectionSkipsTarget(t *testing.T) { engines(t, testPassiveEjectionSkipsTarget) }

func testPassiveEjectionSkipsTarget(t *testing.T) {
	good := upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	dead := &url.URL{Scheme: "http", Host: closedAddr(t)}
	s, _ := front(t, proxy.Upstream{Targets: urls(dead, good), Retries: 0, Health: proxy.Health{
		Passive: &proxy.PassiveCheck{MaxFails: 1, EjectFor: time.Minute},
	}}, proxy.Options{Clock: clock.NewManual(time.Unix(1e9, 0))})
	if c, code := get(t, s.URL); c != 502 || code != proxy.CodeUpstreamUnavailable {
		t.Fatalf("first request, to the dead target: %d %q", c, code)
	}
	for i := 0; i < 6; i++ {
		if c, _ := get(t, s.URL); c != 200 {
			t.Fatalf("request %d after the ejection: %d", i, c)
		}
	}
	st := s.Proxy.Health()
	if !st.Targets[0].Ejected || st.Targets[0].Healthy || !st.Targets[1].Healthy || st.Ejections != 1 {
		t.Errorf("health %+v", st)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestHealthValidate: every health key is checked with its range, by
// key.
func TestHealthValidate(t *testing.T) {
	u := proxy.Upstream{Name: "app", Targets: []string{"http://127.0.0.1:1"}, Health: proxy.Health{
		Active:  &proxy.ActiveCheck{Path: "no-slash", Interval: 500 * time.Millisecond, Timeout: time.Hour, HealthyThreshold: 101},
		Passive: &proxy.PassiveCheck{MaxFails: -1, EjectFor: 2 * time.Hour},
	}}
	_, err := proxy.New(u, proxy.Options{})
	if !errors.Is(err, proxy.ErrInvalidUpstream) {
		t.Fatalf("New: %v", err)
	}
	for _, want := range []string{
		"health.active.path: \"no-slash\"",
		"health.active.interval: 500ms out of range [1s, 1h]",
		"health.active.timeout: 1h out of range [1ms, 500ms]",
		"health.active.healthy_threshold: 101 out of range [1, 100]",
		"health.passive.max_fails: -1 out of range [1, 100]",
		"health.passive.eject_for: 2h out of range [1s, 1h]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	a := proxy.ActiveCheck{Path: "/h", Interval: time.Second}
	u.Health = proxy.Health{Active: &a}
	got := u.WithDefaults().Health.Active
	if got.Timeout != time.Second || got.HealthyThreshold != 2 || got.UnhealthyThreshold != 3 || a.Timeout != 0 {
		t.Errorf("defaults %+v (the caller's section must stay unchanged: %+v)", *got, a)
	}
}
