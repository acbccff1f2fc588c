package host_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/wire"
)

// idEcho answers with the request ID the handler sees, on both engines.
type idEcho struct{}

func (idEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, r.Header.Get(wire.RequestIDField))
}

func (idEcho) ServeHTTP1(x *h1.Exchange) host.Verdict {
	_, _ = x.Write(x.RequestID())
	return host.Served
}

func withRequestIDs(trusted func(netip.Addr) bool) option {
	return func(c *host.Config) { c.RequestIDs = &host.RequestIDs{Trusted: trusted} }
}

func loopbackOnly(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }

// idOf returns a response's request ID, failing unless the header holds
// exactly one valid ID and a problem document repeats it.
func idOf(t *testing.T, what string, r result) string {
	t.Helper()
	v := r.Header.Values(wire.RequestIDField)
	if len(v) != 1 || !wire.ValidRequestID(v[0]) {
		t.Fatalf("%s: %s %q, want one valid ID", what, wire.RequestIDField, v)
	}
	if r.Code != "" {
		var p map[string]any
		if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
			t.Fatalf("%s: body %q: %v", what, r.Body, err)
		}
		if p["request_id"] != v[0] {
			t.Fatalf("%s: problem request_id %v, header %q", what, p["request_id"], v[0])
		}
	}
	return v[0]
}

// Every request gets an ID on every engine: generated, or kept from a
// trusted peer when valid; the handler sees the one the client gets
// back, and the host's own problem documents (before admission, bounds)
// carry it.
func TestRequestIDs(t *testing.T) {
	for _, m := range modes {
		t.Run("mode="+m.Name, func(t *testing.T) { testRequestIDs(t, m) })
	}
}

func testRequestIDs(t *testing.T, m mode) {
	e := start(t, m, host.Limits{MaxURLBytes: 256}, withRequestIDs(loopbackOnly))
	r := e.Do("GET", "/x", nil)
	if r.Status != 503 || r.Code != "not_ready" {
		t.Fatalf("before Activate: %d %q", r.Status, r.Code)
	}
	first := idOf(t, "not_ready", r)
	if len(first) != wire.RequestIDLen {
		t.Errorf("generated ID %q: want %d hex digits", first, wire.RequestIDLen)
	}
	e.H.Activate(idEcho{})
	seen := map[string]bool{first: true}
	for i := 0; i < 3; i++ {
		r := e.Do("GET", "/x", nil)
		id := idOf(t, "generated", r)
		if r.Body != id {
			t.Errorf("the handler saw %q, the client got %q", r.Body, id)
		}
		if seen[id] || len(id) != wire.RequestIDLen {
			t.Errorf("generated ID %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
	// A trusted peer's valid ID is kept.
	r = e.Do("GET", "/x", nil, wire.RequestIDField, "edge-42:a/b+c=")
	if id := idOf(t, "kept", r); id != "edge-42:a/b+c=" || r.Body != id {
		t.Errorf("kept: header %q, handler %q", id, r.Body)
	}
	// An invalid or repeated one is replaced.
	for _, hv := range [][]string{{"a b"}, {strings.Repeat("a", wire.MaxRequestIDLen+1)}, {"one", "two"}, {"<x>"}} {
		var hdr []string
		for _, v := range hv {
			hdr = append(hdr, wire.RequestIDField, v)
		}
		r := e.Do("GET", "/x", nil, hdr...)
		if id := idOf(t, "replaced", r); len(id) != wire.RequestIDLen || r.Body != id {
			t.Errorf("sent %q: header %q, handler %q", hv, id, r.Body)
		}
	}
	// The host's own answers.
	r = e.Do("GET", "/"+strings.Repeat("a", 300), nil, wire.RequestIDField, "edge-43")
	if r.Status != 414 || idOf(t, "url_too_long", r) != "edge-43" {
		t.Errorf("url_too_long: %d %q", r.Status, r.Header.Get(wire.RequestIDField))
	}
}

// Without a trusted peer every ID is generated; without RequestIDs the
// host sets none.
func TestRequestIDsUntrusted(t *testing.T) {
	for _, m := range []mode{modeH1, modeFast, modeLoop} {
		t.Run("mode="+m.Name, func(t *testing.T) {
			e := start(t, m, host.Limits{}, withRequestIDs(nil))
			e.H.Activate(idEcho{})
			r := e.Do("GET", "/x", nil, wire.RequestIDField, "edge-42")
			if id := idOf(t, "untrusted", r); id == "edge-42" || r.Body != id {
				t.Errorf("untrusted peer: header %q, handler %q", id, r.Body)
			}
			off := start(t, m, host.Limits{})
			off.H.Activate(idEcho{})
			r = off.Do("GET", "/x", nil, wire.RequestIDField, "edge-42")
			if v := r.Header.Values(wire.RequestIDField); len(v) != 0 {
				t.Errorf("without RequestIDs: response %s %q", wire.RequestIDField, v)
			}
		})
	}
}
