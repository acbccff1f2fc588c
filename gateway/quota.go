package gateway

import (
	"net/http"

	"github.com/bulwarkhq/bulwark/quota"
)

// A quota route runs the quota package's forward-auth middleware
// unchanged (Idempotency-Key, the forward-auth call, the bounded body
// bound to the receipt, the charge, and the library's answers). The
// gateway supplies the store (the cluster profile's PostgreSQL), the
// canonical path the receipt binds, the identity headers it asserts to
// the upstream after hop-by-hop processing, the metrics and the
// dependency monitors.

// quotaMiddleware wraps next (the rest of the route) with the route's
// quota.
func (g *Gateway) quotaMiddleware(route string, q Quota, next http.Handler) (http.Handler, error) {
	mw, err := quota.NewMiddleware(quota.MiddlewareConfig{
		Consumer:      g.quota,
		Operation:     q.Operation,
		AuthURL:       q.Auth.URL,
		ProjectHeader: q.Auth.ProjectHeader,
		SubjectHeader: q.Auth.SubjectHeader,
		SubjectType:   q.Auth.SubjectType,
		AuthTimeout:   q.Auth.Timeout,
		MaxBodyBytes:  q.MaxBodyBytes,
		Logger:        g.log.With("route", route),
		Target: func(r *http.Request) string {
			if ex := exchangeOf(r); ex != nil {
				return ex.path.Path
			}
			return "/"
		},
		Assert: func(r *http.Request, name, value string) {
			if ex := exchangeOf(r); ex != nil {
				ex.assert(name, value)
			}
		},
		Observe: func(w http.ResponseWriter, r *http.Request, o quota.Outcome) {
			markRejected(w)
			if ex := exchangeOf(r); ex != nil {
				ex.refuse(g.metrics, layerQuota, o.Reason, o.Status)
				return
			}
			g.metrics.reject(layerQuota, o.Reason, "")
		},
		OnAuth:  g.authMon.report,
		OnStore: g.pgMon.report,
	})
	if err != nil {
		return nil, err
	}
	return mw(next), nil
}
