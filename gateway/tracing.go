package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulwarkhq/bulwark/conf"
	"github.com/bulwarkhq/bulwark/internal/tracectx"
)

// Tracing
//
// With tracing.enabled, every request is a trace of OpenTelemetry spans,
// exported over OTLP/HTTP (protobuf) to tracing.endpoint by a bounded
// batch queue (tracing.max_queue: a span that finds it full is dropped,
// never waited for). Only this package (and cmd) imports OpenTelemetry
// (internal/deptest); the library packages are traced from here, at the
// steps of the request path both engines share:
//
//	bulwark.request     (server) the request, from the gateway's first
//	                    look to its answer: its method, route name,
//	                    status, request ID, and the layer that answered
//	                    and why
//	  bulwark.lists       the allow and deny lists
//	  bulwark.shield      the shield
//	  bulwark.rate_limit  the route's rate limit
//	  bulwark.login       the login throttle, and what it let through
//	    bulwark.quota       forward-auth and the quota, and what they let through
//	      bulwark.proxy     (client) the exchange with the upstream
//
// A layer span says its decision (bulwark.decision: allowed, refused or
// shadow, with bulwark.reason). No span carries a client address, a
// path, a query, a username or a header value.
//
// A request that comes with a valid W3C traceparent (one field,
// internal/tracectx) continues its trace: bulwark.request is a child of
// the caller's span (the remote parent, in OpenTelemetry's words); any
// other starts a trace, sampled at tracing.sample_ratio. Whether a
// continued trace is sampled as the caller sampled it (the sampled flag
// of its traceparent, as OpenTelemetry's ParentBased sampler does) is
// tracing.remote_parent_sampling: by default only for a caller that is
// one of client_ip.trusted_proxies (the socket peer), so that a client
// on the internet cannot have its requests traced at will. An untrusted
// caller's trace is continued (its trace ID, its span as the parent)
// but sampled at sample_ratio, by a random draw of the gateway's: not by
// the trace ID, which the caller chose. The upstream is sent a
// traceparent naming bulwark.proxy as its parent (the proxy's asserted
// field, after hop-by-hop removal). With tracing off nothing here runs:
// a valid traceparent goes to the upstream as it came, an invalid one is
// removed (package proxy), and the fast path allocates nothing.
//
// The tracing settings need a restart.

// Tracing is the tracing section: OpenTelemetry spans of the layers and
// the proxy, exported over OTLP/HTTP. Off by default.
type Tracing struct {
	// Enabled turns tracing on.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP/HTTP traces URL, path included (a
	// collector's is /v1/traces): http or https, without user info,
	// query or fragment.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the fraction of the traces the gateway starts that
	// are sampled, and of the traces it continues whose caller's
	// sampling decision is not followed (RemoteParentSampling).
	SampleRatio float64 `yaml:"sample_ratio"`
	// RemoteParentSampling says whose sampled flag (the caller's
	// traceparent, the remote parent) decides whether a continued trace
	// is sampled: RemoteParentTrustedProxies (the default),
	// RemoteParentAll or RemoteParentNone.
	RemoteParentSampling string `yaml:"remote_parent_sampling"`
	// ServiceName is the resource's service.name.
	ServiceName string `yaml:"service_name"`
	// MaxQueue bounds the spans waiting for export; beyond it spans are
	// dropped.
	MaxQueue int `yaml:"max_queue"`
	// BatchTimeout is the longest a span waits before its batch is sent.
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// ExportTimeout bounds one export (retries included).
	ExportTimeout time.Duration `yaml:"export_timeout"`
}

// Values of tracing.remote_parent_sampling: whose sampled flag a
// continued trace follows.
const (
	// RemoteParentTrustedProxies follows the flag of a caller that is
	// one of client_ip.trusted_proxies; from any other caller the
	// request is sampled at sample_ratio.
	RemoteParentTrustedProxies = "trusted_proxies"
	// RemoteParentAll follows every caller's flag (OpenTelemetry's
	// ParentBased sampler as it is).
	RemoteParentAll = "all"
	// RemoteParentNone follows no caller's flag: every request is
	// sampled at sample_ratio.
	RemoteParentNone = "none"
)

// Bounds of the tracing settings.
const (
	maxTraceQueue     = 1 << 20
	minTraceQueue     = 64
	maxTraceBatch     = 512 // spans per export, at most max_queue
	minBatchTimeout   = 10 * time.Millisecond
	maxBatchTimeout   = time.Minute
	minExportTimeout  = 100 * time.Millisecond
	maxExportTimeout  = time.Minute
	maxServiceNameLen = 64
)

// defaultTracing is off, with what an OpenTelemetry collector on the
// same machine listens on.
func defaultTracing() Tracing {
	return Tracing{
		Endpoint:    "http://127.0.0.1:4318/v1/traces",
		SampleRatio: 0.1, // a trace of every tenth request the gateway starts
		// A caller's sampled flag is a request for the gateway's work
		// (spans, exports): followed only from a trusted proxy.
		RemoteParentSampling: RemoteParentTrustedProxies,
		ServiceName:          "bulwark",
		MaxQueue:             2048, // the SDK's default
		// The SDK's defaults are 5 s and 30 s: a span is seen within a
		// second, and an export cannot hold a drain for long.
		BatchTimeout:  time.Second,
		ExportTimeout: 10 * time.Second,
	}
}

// Validate checks the tracing settings (also when tracing is off, so
// that turning it on needs no other change).
func (t Tracing) Validate() error {
	var f conf.Check
	if err := checkTraceEndpoint(t.Endpoint); err != nil {
		f.Add("endpoint", "%q: %v", conf.RedactURL(t.Endpoint), err)
	}
	f.Float("sample_ratio", t.SampleRatio, 0, 1)
	f.OneOf("remote_parent_sampling", t.RemoteParentSampling, RemoteParentTrustedProxies, RemoteParentAll, RemoteParentNone)
	if n := len(t.ServiceName); n == 0 || n > maxServiceNameLen || strings.ContainsFunc(t.ServiceName, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		f.Add("service_name", "%q: want 1 to %d printable ASCII bytes without spaces", t.ServiceName, maxServiceNameLen)
	}
	f.Int("max_queue", int64(t.MaxQueue), minTraceQueue, maxTraceQueue)
	f.Duration("batch_timeout", t.BatchTimeout, minBatchTimeout, maxBatchTimeout)
	f.Duration("export_timeout", t.ExportTimeout, minExportTimeout, maxExportTimeout)
	return f.Err()
}

func checkTraceEndpoint(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return errors.New("want an http or https URL with a host")
	case u.User != nil, u.RawQuery != "", u.Fragment != "":
		return errors.New("want a URL without user info, query or fragment")
	}
	return nil
}

// tracer is the gateway's OpenTelemetry tracer and its provider.
type tracer struct {
	tp *sdktrace.TracerProvider
	t  trace.Tracer
	// remote is tracing.remote_parent_sampling; ratio sample_ratio.
	remote string
	ratio  float64
}

// followsParent reports whether a continued trace is sampled as its
// caller sampled it; trusted says whether the caller (the socket peer)
// is one of the trusted proxies, and is asked only when it matters.
func (t *tracer) followsParent(trusted func() bool) bool {
	switch t.remote {
	case RemoteParentAll:
		return true
	case RemoteParentTrustedProxies:
		return trusted()
	}
	return false
}

// draw is the gateway's own sampling decision for a continued trace
// whose caller's is not followed: sampled at sample_ratio, by a random
// draw (the trace ID, which TraceIDRatioBased goes by, is the caller's
// choice: one it picked to fall under any ratio would be sampled).
func (t *tracer) draw() bool {
	return t.ratio >= 1 || rand.Float64() < t.ratio
}

// newTracer starts the exporter (which connects when it first sends)
// and the batch queue.
func newTracer(c Tracing, version string, log *slog.Logger) (*tracer, error) {
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(c.Endpoint),
		otlptracehttp.WithTimeout(c.ExportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
			Enabled: true, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: c.ExportTimeout,
		}))
	if err != nil {
		return nil, fmt.Errorf("gateway: tracing: %w", err)
	}
	// The SDK reports export failures through the global handler; they
	// name the endpoint, never a request.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "error", err.Error())
	}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp,
			sdktrace.WithMaxQueueSize(c.MaxQueue),
			sdktrace.WithMaxExportBatchSize(min(maxTraceBatch, c.MaxQueue)),
			sdktrace.WithBatchTimeout(c.BatchTimeout),
			sdktrace.WithExportTimeout(c.ExportTimeout)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", c.ServiceName),
			attribute.String("service.version", version))),
	)
	return &tracer{tp: tp, t: tp.Tracer("github.com/bulwarkhq/bulwark/gateway"), remote: c.RemoteParentSampling, ratio: c.SampleRatio}, nil
}

// startTracing starts the tracer when tracing is on (at Start).
func (g *Gateway) startTracing() error {
	c := g.cfg.Tracing
	if !c.Enabled {
		return nil
	}
	t, err := newTracer(c, g.deps.Version, g.log)
	if err != nil {
		return err
	}
	g.tracer = t
	g.log.Info("tracing on", "sample_ratio", c.SampleRatio, "remote_parent_sampling", c.RemoteParentSampling)
	return nil
}

// stopTracing sends the spans still queued, within ctx (at shutdown).
func (g *Gateway) stopTracing(ctx context.Context) error {
	if g.tracer == nil {
		return nil
	}
	if err := g.tracer.tp.Shutdown(ctx); err != nil {
		g.log.Warn("tracing: spans lost at shutdown", "error", err.Error())
	}
	return nil
}

// reqTrace is a traced request's: its span, and the span the next
// layer's is a child of.
type reqTrace struct {
	t   *tracer
	req trace.Span
	// ctx holds the current parent: the request's span, or the span of a
	// layer that runs the rest of the request (login, quota).
	ctx context.Context
	// parent is the traceparent the upstream is sent (the proxy's span),
	// set while the proxy runs.
	parent string
}

// beginTrace starts the request's span: a child of the caller's when it
// sent one valid traceparent (n fields, the first first), sampled as the
// caller sampled it when tracing.remote_parent_sampling follows this
// caller (trusted: whether the socket peer is a trusted proxy), else by
// the gateway's own draw, which replaces the caller's sampled flag
// before the ParentBased sampler reads it.
func beginTrace[T string | []byte](t *tracer, n int, first T, trusted func() bool, method string, start time.Time) *reqTrace {
	ctx := context.Background()
	if pp, ok := tracectx.Parse(first); ok && n == 1 {
		flags := trace.TraceFlags(pp.Flags)
		if !t.followsParent(trusted) {
			flags = flags.WithSampled(t.draw())
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: pp.TraceID, SpanID: pp.SpanID, TraceFlags: flags, Remote: true,
		}))
	}
	ctx, sp := t.t.Start(ctx, "bulwark.request", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("http.request.method", method)))
	return &reqTrace{t: t, req: sp, ctx: ctx}
}

// endTrace ends the request's span with what the request met.
func (rs *reqState) endTrace(end time.Time) {
	rt := rs.trace
	if rt == nil {
		return
	}
	sp := rt.req
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attribute.Int("http.response.status_code", rs.status))
	if rs.route != nil {
		attrs = append(attrs, attribute.String("http.route", rs.route.name))
	}
	if rs.id != "" {
		attrs = append(attrs, attribute.String("bulwark.request_id", strings.Clone(rs.id)))
	}
	if rs.layer != "" {
		attrs = append(attrs, attribute.String("bulwark.layer", rs.layer), attribute.String("bulwark.reason", rs.reason))
	}
	sp.SetAttributes(attrs...)
	sp.End(trace.WithTimestamp(end))
}

// layerSpan is the span of one layer of a traced request; nil (a request
// not traced) does nothing.
type layerSpan struct {
	rs    *reqState
	sp    trace.Span
	prev  context.Context
	layer string // the layer's name in rs.layer, when it refuses
}

// startLayer starts the span name of layer (rs.layer's name for it, ""
// for the proxy) as a child of the current one, and makes it the
// current one until end.
func (rs *reqState) startLayer(name, layer string, kind trace.SpanKind) *layerSpan {
	rt := rs.trace
	if rt == nil {
		return nil
	}
	ctx, sp := rt.t.t.Start(rt.ctx, name, trace.WithSpanKind(kind))
	ls := &layerSpan{rs: rs, sp: sp, prev: rt.ctx, layer: layer}
	rt.ctx = ctx
	return ls
}

// end ends the layer's span with its decision.
func (ls *layerSpan) end() {
	if ls == nil {
		return
	}
	rs := ls.rs
	switch {
	case ls.layer == "":
	case rs.layer == ls.layer:
		ls.sp.SetAttributes(attribute.String("bulwark.decision", "refused"), attribute.String("bulwark.reason", rs.reason))
	case rs.shadowLayer == ls.layer:
		ls.sp.SetAttributes(attribute.String("bulwark.decision", "shadow"), attribute.String("bulwark.reason", rs.shadowReason))
	default:
		ls.sp.SetAttributes(attribute.String("bulwark.decision", "allowed"))
	}
	ls.sp.End()
	rs.trace.ctx = ls.prev
}

// endWith ends the layer's span with the decision its caller records
// after it (refused, and why).
func (ls *layerSpan) endWith(refused bool, reason string) {
	if ls == nil {
		return
	}
	if refused {
		ls.sp.SetAttributes(attribute.String("bulwark.decision", "refused"), attribute.String("bulwark.reason", reason))
		ls.layer = ""
	}
	ls.end()
}

// startProxy starts the proxy's span and returns the traceparent the
// upstream is sent, naming it ("" for a request not traced).
func (rs *reqState) startProxy(upstream string) (*layerSpan, string) {
	ls := rs.startLayer("bulwark.proxy", "", trace.SpanKindClient)
	if ls == nil {
		return nil, ""
	}
	ls.sp.SetAttributes(attribute.String("bulwark.upstream", upstream))
	sc := ls.sp.SpanContext()
	tp := string(tracectx.Append(make([]byte, 0, tracectx.Len), sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags())))
	rs.trace.parent = tp
	return ls, tp
}

// endProxy ends the proxy's span with the status the client got (0:
// none, the host answers).
func (ls *layerSpan) endProxy(status int) {
	if ls == nil {
		return
	}
	if status != 0 {
		ls.sp.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	ls.rs.trace.parent = ""
	ls.end()
}
