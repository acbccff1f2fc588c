package gateway

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bulwarkhq/bulwark/wire"
)

// otlpReceiver is an OTLP/HTTP traces endpoint on loopback: it decodes
// what the gateway's exporter sends (protobuf, the real wire format)
// and keeps the spans.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool
	url      string
}

func startOTLP(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{services: map[string]bool{}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					rc.services[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				rc.spans = append(rc.spans, ss.GetSpans()...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(s.Close)
	rc.url = s.URL + "/v1/traces"
	return rc
}

// trace returns the spans of trace id (hex), waiting until want of
// them arrived (batches come every batch_timeout).
func (rc *otlpReceiver) trace(t *testing.T, id string, want int) map[string]*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := map[string]*tracepb.Span{}
		rc.mu.Lock()
		for _, s := range rc.spans {
			if hex.EncodeToString(s.GetTraceId()) == id {
				got[s.GetName()] = s
			}
		}
		rc.mu.Unlock()
		if len(got) >= want {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans after 20 s, want %d: %v", id, len(got), want, names(got))
		}
		time.Sleep(10 * time.Millisecond) // the exporter's batches are asynchronous
	}
}

func names(m map[string]*tracepb.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func childOf(t *testing.T, child, parent *tracepb.Span) {
	t.Helper()
	if !bytes.Equal(child.GetParentSpanId(), parent.GetSpanId()) || !bytes.Equal(child.GetTraceId(), parent.GetTraceId()) {
		t.Errorf("%s: parent %x in trace %x, want %s's %x in %x", child.GetName(), child.GetParentSpanId(), child.GetTraceId(),
			parent.GetName(), parent.GetSpanId(), parent.GetTraceId())
	}
}

const tracedRoutes = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 1000, burst: 1000}
  - name: limited
    match: {path: /limited}
    upstream: app
    rate_limit: {qps: 0.01, burst: 1}
shield: {enabled: true, per_peer: 100000, global: 100000, window: 60s}
tracing:
  enabled: true
  endpoint: "{{OTLP}}"
  sample_ratio: 1
  service_name: bulwark-test
  batch_timeout: 10ms
`

const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

// TestTracing: with tracing on, the spans of the layers and the proxy
// reach a real OTLP/HTTP receiver on every engine: a request with a
// valid traceparent continues its caller's trace, the layers' spans are
// children of the request's, and the upstream is sent the proxy's span
// as its parent, with the caller's tracestate; a request without one
// (or with an invalid one) starts a trace, without the tracestate; a
// refusal is on the layer's span and the request's.
func TestTracing(t *testing.T) { engines(t, testTracing) }

func testTracing(t *testing.T) {
	rc := startOTLP(t)
	up := idUpstream(t)
	tg := startGateway(t, tracedRoutes, map[string]string{"APP": up.URL, "OTLP": rc.url}, gwOpts{})

	// A caller's trace, continued.
	r := do(t, "GET", tg.url+"/api/x", nil, "Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "Tracestate", "vendor=1")
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	spans := rc.trace(t, callerTrace, 4)
	req, proxy := spans["bulwark.request"], spans["bulwark.proxy"]
	if req == nil || proxy == nil || spans["bulwark.shield"] == nil || spans["bulwark.rate_limit"] == nil {
		t.Fatalf("spans %v, want bulwark.request, bulwark.shield, bulwark.rate_limit, bulwark.proxy", names(spans))
	}
	if hex.EncodeToString(req.GetParentSpanId()) != callerSpan || req.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("bulwark.request: parent %x kind %v, want the caller's span %s, server", req.GetParentSpanId(), req.GetKind(), callerSpan)
	}
	for _, n := range []string{"bulwark.shield", "bulwark.rate_limit", "bulwark.proxy"} {
		childOf(t, spans[n], req)
	}
	if d := attr(spans["bulwark.rate_limit"], "bulwark.decision").GetStringValue(); d != "allowed" {
		t.Errorf("bulwark.rate_limit decision %q, want allowed", d)
	}
	if proxy.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || attr(proxy, "bulwark.upstream").GetStringValue() != "app" ||
		attr(proxy, "http.response.status_code").GetIntValue() != 200 {
		t.Errorf("bulwark.proxy: kind %v attributes %v", proxy.GetKind(), proxy.GetAttributes())
	}
	want := "00-" + callerTrace + "-" + hex.EncodeToString(proxy.GetSpanId()) + "-01"
	if got := r.header.Get("X-Got-Traceparent"); got != want || r.header.Get("X-Got-Tracestate") != "vendor=1" {
		t.Errorf("upstream got traceparent %q tracestate %q, want %q and the caller's vendor=1", got, r.header.Get("X-Got-Tracestate"), want)
	}
	if id := attr(req, "bulwark.request_id").GetStringValue(); id == "" || id != r.header.Get(wire.RequestIDField) {
		t.Errorf("bulwark.request_id %q, X-Request-Id %q", id, r.header.Get(wire.RequestIDField))
	}
	if attr(req, "http.route").GetStringValue() != "api" || attr(req, "http.response.status_code").GetIntValue() != 200 ||
		attr(req, "http.request.method").GetStringValue() != "GET" {
		t.Errorf("bulwark.request attributes %v", req.GetAttributes())
	}

	// No traceparent, or an invalid one: a trace of the gateway's own.
	for _, tp := range []string{"", "00-" + strings.ToUpper(callerTrace) + "-" + callerSpan + "-01"} {
		var hdr []string
		if tp != "" {
			hdr = []string{"Traceparent", tp, "Tracestate", "vendor=2"}
		}
		r := do(t, "GET", tg.url+"/api/y", nil, hdr...)
		got := r.header.Get("X-Got-Traceparent")
		if len(got) != 55 || r.header.Get("X-Got-Tracestate") != "" {
			t.Fatalf("traceparent %q: upstream got traceparent %q tracestate %q", tp, got, r.header.Get("X-Got-Tracestate"))
		}
		spans := rc.trace(t, got[3:35], 4)
		req, proxy := spans["bulwark.request"], spans["bulwark.proxy"]
		if req == nil || proxy == nil || len(req.GetParentSpanId()) != 0 {
			t.Fatalf("traceparent %q: spans %v, request span's parent %x (want none)", tp, names(spans), req.GetParentSpanId())
		}
		childOf(t, proxy, req)
		if got[36:52] != hex.EncodeToString(proxy.GetSpanId()) {
			t.Errorf("upstream's parent %s, want the proxy span %x", got[36:52], proxy.GetSpanId())
		}
	}

	// A refusal.
	do(t, "GET", tg.url+"/limited", nil)
	r = do(t, "GET", tg.url+"/limited", nil, "Traceparent", "00-"+strings.Repeat("ab", 16)+"-"+callerSpan+"-01")
	if r.status != 429 {
		t.Fatalf("limited: %d", r.status)
	}
	spans = rc.trace(t, strings.Repeat("ab", 16), 3)
	req, rl := spans["bulwark.request"], spans["bulwark.rate_limit"]
	if req == nil || rl == nil || spans["bulwark.proxy"] != nil {
		t.Fatalf("refused: spans %v", names(spans))
	}
	if attr(rl, "bulwark.decision").GetStringValue() != "refused" || attr(req, "bulwark.layer").GetStringValue() != "rate_limit" ||
		attr(req, "http.response.status_code").GetIntValue() != 429 {
		t.Errorf("refused: rate_limit %v, request %v", rl.GetAttributes(), req.GetAttributes())
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.services["bulwark-test"] {
		t.Errorf("service names %v, want bulwark-test", rc.services)
	}
}

// TestTraceContextWithoutTracing: with tracing off a valid traceparent
// reaches the upstream as it came, with its tracestate; an invalid one
// is removed with its tracestate.
func TestTraceContextWithoutTracing(t *testing.T) { engines(t, testTraceContextWithoutTracing) }

func testTraceContextWithoutTracing(t *testing.T) {
	up := idUpstream(t)
	tg := startGateway(t, idRoutes, map[string]string{"APP": up.URL, "DEAD": deadURL(t)}, gwOpts{})
	valid := "00-" + callerTrace + "-" + callerSpan + "-01"
	for _, c := range []struct {
		tp         []string
		wantTP     string
		wantTS     string
		connection string
	}{
		{[]string{valid}, valid, "vendor=1", ""},
		{[]string{valid}, valid, "vendor=1", "Traceparent, Tracestate"}, // a Connection token cannot hide them
		{[]string{"00-" + callerTrace + "-" + callerSpan}, "", "", ""},
		{[]string{valid, valid}, "", "", ""},
		{nil, "", "", ""},
	} {
		hdr := []string{"Tracestate", "vendor=1"}
		for _, v := range c.tp {
			hdr = append(hdr, "Traceparent", v)
		}
		if c.connection != "" {
			hdr = append(hdr, "Connection", c.connection)
		}
		r := do(t, "GET", tg.url+"/api/x", nil, hdr...)
		if r.header.Get("X-Got-Traceparent") != c.wantTP || r.header.Get("X-Got-Tracestate") != c.wantTS {
			t.Errorf("sent %q (Connection %q): upstream got traceparent %q tracestate %q, want %q %q", c.tp, c.connection,
				r.header.Get("X-Got-Traceparent"), r.header.Get("X-Got-Tracestate"), c.wantTP, c.wantTS)
		}
	}
}

// remoteParentRoutes trusts 127.0.0.2 as a proxy and samples none of the
// traces the gateway decides itself.
const remoteParentRoutes = `
upstreams:
  - name: app
    targets: ["{{APP}}"]
routes:
  - {name: api, match: {path: /api/}, upstream: app}
client_ip: {trusted_proxies: {cidrs: [127.0.0.2/32], hops: 1}}
tracing:
  enabled: true
  endpoint: "{{OTLP}}"
  sample_ratio: 0
  batch_timeout: 10ms
{{MODE}}`

// TestTracingRemoteParent: whose sampled flag a continued trace follows
// is tracing.remote_parent_sampling, on every engine. By default only a
// trusted proxy's: a client (127.0.0.1) that asks for its trace to be
// sampled is not (sample_ratio 0), while its trace is still continued
// (the upstream gets its trace ID, unsampled) and no span of it is
// exported; the trusted proxy's (127.0.0.2) is sampled, its spans
// exported under the caller's span. With all, both are followed; with
// none, neither.
func TestTracingRemoteParent(t *testing.T) { engines(t, testTracingRemoteParent) }

func testTracingRemoteParent(t *testing.T) {
	up := idUpstream(t)
	for i, c := range []struct {
		mode              string // remote_parent_sampling ("": the default)
		client, trustedPx bool   // whether the flag of each is followed
	}{
		{"", false, true},
		{RemoteParentTrustedProxies, false, true},
		{RemoteParentAll, true, true},
		{RemoteParentNone, false, false},
	} {
		rc := startOTLP(t)
		mode := ""
		if c.mode != "" {
			mode = "  remote_parent_sampling: " + c.mode + "\n"
		}
		tg := startGateway(t, remoteParentRoutes, map[string]string{"APP": up.URL, "OTLP": rc.url, "MODE": mode}, gwOpts{})
		var unsampled []string
		for j, from := range []struct {
			src    string
			follow bool
		}{{"127.0.0.1", c.client}, {"127.0.0.2", c.trustedPx}} {
			trace := fmt.Sprintf("%08x%024x", i+1, j+1)
			r := doFrom(t, from.src, tg.url+"/api/x", "Traceparent", "00-"+trace+"-"+callerSpan+"-01",
				"X-Forwarded-For", "198.51.100.7")
			got := r.header.Get("X-Got-Traceparent")
			flags := "00"
			if from.follow {
				flags = "01"
			}
			if r.status != 200 || len(got) != 55 || got[3:35] != trace || got[53:] != flags {
				t.Fatalf("mode %q, from %s: %d, upstream got traceparent %q, want trace %s continued with flags %s",
					c.mode, from.src, r.status, got, trace, flags)
			}
			if !from.follow {
				unsampled = append(unsampled, trace)
				continue
			}
			spans := rc.trace(t, trace, 2)
			if req := spans["bulwark.request"]; req == nil || hex.EncodeToString(req.GetParentSpanId()) != callerSpan {
				t.Fatalf("mode %q, from %s: spans %v, want bulwark.request under the caller's span", c.mode, from.src, names(spans))
			}
		}
		// The exporter sends in order: what was followed has arrived, so
		// what was not would have too.
		rc.mu.Lock()
		for _, s := range rc.spans {
			for _, id := range unsampled {
				if hex.EncodeToString(s.GetTraceId()) == id {
					t.Errorf("mode %q: span %s of the trace %s, whose caller's flag is not followed, was exported", c.mode, s.GetName(), id)
				}
			}
		}
		rc.mu.Unlock()
	}
}
