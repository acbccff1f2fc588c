package gateway

import (
	"fmt"
	"net/http"

	"github.com/bulwarkhq/bulwark/shield"
	"github.com/prometheus/client_golang/prometheus"
)

// The shield
//
// shield (shield.enabled) is the pre-authentication shield of package
// shield: step 4 of the request path, per grouped client and per
// process, skipped for an allowed client. Its state is kept across a
// reload while its settings are unchanged; shield.mode shadow counts
// what it would refuse and lets the request through.

// buildShield makes the pipeline's shield (nil when shield.enabled is
// false), keeping the previous one while its settings are unchanged.
// Its refusals are counted by its hook.
func (b *builder) buildShield(cfg *Config) (*shield.Shield, error) {
	if !cfg.Shield.Enabled {
		return nil, nil
	}
	g := b.g
	sc := cfg.Shield.Config
	sc.Clock = g.deps.Clock
	sc.Networks = cfg.ClientIP.Networks
	sc.Hook = func(e shield.Event) {
		if g.cur.Load() != nil && g.cur.Load().shadowShield {
			g.metrics.wouldRejectShadow(layerShield, string(e.Reason), "")
			return
		}
		g.metrics.shieldEvent(string(e.Outcome), string(e.Reason))
	}
	sk := cfg.Shield
	sk.RefundOnLogin = false // not the shield's own setting: toggling it keeps the windows
	s, err := keep(b, fmt.Sprintf("shield/%#v", sk), func() (*shield.Shield, error) { return shield.New(sc) })
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return s, nil
}

// admit runs the shield for the request (step 4). It reports false when
// the shield answered it; a shadow shield only records the refusal.
func (p *pipeline) admit(w http.ResponseWriter, r *http.Request, rs *reqState) bool {
	var a shield.Admission
	if rs.shieldKey != nil {
		// The connection's fingerprint, made once; the client's
		// address for the network budget.
		if rs.clientOK {
			a = p.shield.AdmitKeyFrom(*rs.shieldKey, rs.group)
		} else {
			a = p.shield.AdmitKey(*rs.shieldKey)
		}
	} else {
		a = p.shield.Admit(rs.group, rs.clientOK)
	}
	rs.admission = a
	if a.Allowed {
		return true
	}
	if p.shadowShield {
		rs.shadowLayer, rs.shadowReason = layerShield, string(a.Reason)
		return true
	}
	rs.layer, rs.reason, rs.status = layerShield, string(a.Reason), http.StatusTooManyRequests
	if a.Outcome != shield.OutcomeRateLimited {
		rs.status = http.StatusServiceUnavailable
	}
	shield.WriteRejection(w, r, &a)
	return false
}

// shieldMetrics are the shield's series.
type shieldMetrics struct {
	shieldEvents *prometheus.CounterVec
}

func newShieldMetrics() shieldMetrics {
	return shieldMetrics{
		shieldEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bulwark_shield_events_total",
			Help: "Pre-authentication shield rejections, by outcome and reason.",
		}, []string{"outcome", "reason"}),
	}
}

func (m *metrics) shieldEvent(outcome, reason string) {
	m.tally.add(layerShield, reason, unmatchedRoute)
	if m.on() {
		m.shieldEvents.WithLabelValues(outcome, reason).Inc()
		m.rejections.WithLabelValues(layerShield, reason, unmatchedRoute).Inc()
	}
}
