package gateway

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
	"github.com/bulwarkhq/bulwark/peer"
	"github.com/bulwarkhq/bulwark/wire"
)

// CodeNotFound is the problem code of a request no route matches.
const CodeNotFound = "not_found"

// router finds the route of a request with a ServeMux built from the
// routes' patterns: the most specific pattern wins, methods and host are
// part of the pattern.
type router struct {
	mux     *http.ServeMux
	metrics *metrics
	none    *routeMetrics
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := rt.mux.Handler(r)
	if route, ok := h.(*route); ok {
		route.ServeHTTP(w, r)
		return
	}
	if pattern != "" {
		// ServeMux's redirect to the canonical path (cleaned path or
		// trailing slash); the redirected request is matched again.
		h.ServeHTTP(w, r)
		return
	}
	rt.metrics.reject(layerRouter, "not_found")
	rt.none.count(http.StatusNotFound, true)
	writeRejection(w, r, wire.Problem{
		Status: http.StatusNotFound,
		Code:   CodeNotFound,
		Title:  "No route matches this request.",
	})
}

// route is one configured route: its policies in order, then the proxy.
type route struct {
	name     string
	clock    clock.Clock
	resolver *peer.Resolver
	limiter  *routeLimiter // nil without rate_limit
	policy   http.Handler  // login → quota → proxy
	metrics  *metrics
	rm       *routeMetrics
}

func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := getRecorder(w)
	defer putRecorder(rec)
	if l := rt.limiter; l != nil {
		d, err := l.allow(r, rt.resolver, rt.clock.Now())
		if err != nil || !d.Allowed {
			reason := "over_limit"
			if err != nil {
				reason = "capacity"
			}
			rt.metrics.reject(layerRoute, reason)
			rt.rm.count(l.status, true)
			l.reject(w, r, rt.name, d)
			return
		}
	}
	rt.policy.ServeHTTP(rec, r)
	rt.rm.count(rec.status, rec.rejected)
}

// proxyHandler times the proxy up to the response headers.
type proxyHandler struct {
	next http.Handler
	rm   *routeMetrics
}

func (p *proxyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec, _ := w.(*recorder)
	start := time.Now()
	if rec != nil {
		rec.start = start
		rec.timed = p.rm
	}
	p.next.ServeHTTP(w, r)
	if rec != nil && rec.timed != nil {
		// No header was written (client gone, aborted response).
		rec.timed.observe(time.Since(start))
		rec.timed = nil
	}
}

// recorder remembers the status of a response and whether a policy
// rejected the request. It passes Flush, Hijack and the rest of
// http.ResponseController through, so streaming and upgrades work.
type recorder struct {
	http.ResponseWriter
	status   int
	rejected bool
	start    time.Time
	timed    *routeMetrics
}

var recorders = sync.Pool{New: func() any { return new(recorder) }}

func getRecorder(w http.ResponseWriter) *recorder {
	rec := recorders.Get().(*recorder)
	*rec = recorder{ResponseWriter: w, status: http.StatusOK}
	return rec
}

func putRecorder(rec *recorder) {
	*rec = recorder{}
	recorders.Put(rec)
}

// markRejected records that a policy answered instead of the upstream.
func markRejected(w http.ResponseWriter) {
	if rec, ok := w.(*recorder); ok {
		rec.rejected = true
	}
}

func (rec *recorder) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		rec.status = code
		rec.headerDone()
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.headerDone()
	return rec.ResponseWriter.Write(b)
}

func (rec *recorder) headerDone() {
	if rec.timed != nil {
		rec.timed.observe(time.Since(rec.start))
		rec.timed = nil
	}
}

// Flush implements http.Flusher.
func (rec *recorder) Flush() {
	rec.headerDone()
	_ = http.NewResponseController(rec.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	rec.headerDone()
	return http.NewResponseController(rec.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }
