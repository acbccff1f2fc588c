package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/clock"
)

// The access log's own formatting (with NewLogger's logger) writes what
// slog's handlers write for the same line, in both formats, so log
// pipelines see one shape whichever path wrote it.
func TestAccessLineMatchesSlog(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 12, 1, 23, 20, 35, 573674843, time.UTC))
	states := []*reqState{
		{clientOK: true, group: netip.MustParseAddr("192.0.2.7"), route: &route{name: "api", upstream: "app"}, status: 200},
		{clientOK: true, group: netip.MustParseAddr("2001:db8::"), route: &route{name: "login"}, layer: "login", reason: "per_user", status: 429},
		{status: 404, layer: "router", reason: "not_found"},
		{clientOK: true, group: netip.MustParseAddr("192.0.2.7"), route: &route{name: "x", upstream: "u"}, status: 200,
			shadowLayer: "rate_limit", shadowReason: "over_limit"},
	}
	for _, format := range []string{"json", "text"} {
		var direct, viaSlog bytes.Buffer
		log, err := NewLogger(&direct, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		g := &Gateway{log: log, clock: clk}
		a := g.newAccessLog(AccessLog{Mode: "all", Sample: 1, MaxPerSecond: 100})
		if a.sink == nil {
			t.Fatalf("%s: NewLogger's logger not recognised", format)
		}
		b := g.newAccessLog(AccessLog{Mode: "all", Sample: 1, MaxPerSecond: 100})
		var h slog.Handler = slog.NewJSONHandler(&viaSlog, nil)
		if format == "text" {
			h = slog.NewTextHandler(&viaSlog, nil)
		}
		b.out, b.sink = slog.New(&fixedTime{h, clk.Now()}), nil
		for _, rs := range states {
			a.log(rs, 1500*time.Microsecond)
			b.log(rs, 1500*time.Microsecond)
		}
		if direct.String() != viaSlog.String() {
			t.Errorf("%s:\ndirect %s\nslog   %s", format, direct.String(), viaSlog.String())
		}
	}
}

// fixedTime stamps records with one instant (slog takes time.Now).
type fixedTime struct {
	slog.Handler
	at time.Time
}

func (h *fixedTime) Handle(ctx context.Context, r slog.Record) error {
	r.Time = h.at
	return h.Handler.Handle(ctx, r)
}

// The fingerprint follows a client across lines without naming it.
func TestAccessFingerprint(t *testing.T) {
	var buf bytes.Buffer
	log, _ := NewLogger(&buf, "json", "info")
	g := &Gateway{log: log, clock: clock.NewManual(time.Unix(1, 0))}
	a := g.newAccessLog(AccessLog{Mode: "all", Sample: 1, MaxPerSecond: 100})
	fp := func(addr string, ok bool) string {
		buf.Reset()
		rs := &reqState{clientOK: ok, status: 200}
		if ok {
			rs.group = netip.MustParseAddr(addr)
		}
		a.log(rs, 0)
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", buf.String(), err)
		}
		if strings.Contains(buf.String(), addr) && ok {
			t.Fatalf("the address is in the line: %s", buf.String())
		}
		return m["client"].(string)
	}
	x, y := fp("192.0.2.7", true), fp("192.0.2.8", true)
	if x == y || len(x) != 32 || x != fp("192.0.2.7", true) {
		t.Fatalf("fingerprints %q %q: want 32 hex digits, stable, distinct", x, y)
	}
	if fp("", false) != "-" {
		t.Fatal("an unknown client is not -")
	}
	// Another process (another key): another fingerprint.
	g2 := &Gateway{log: log, clock: g.clock}
	a = g2.newAccessLog(AccessLog{Mode: "all", Sample: 1, MaxPerSecond: 100})
	if fp("192.0.2.7", true) == x {
		t.Fatal("two processes share fingerprints")
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "api", `a"b\c`, "tab\there", "\x00\x1f\x7f", "é"} {
		var got string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil || got != s {
			t.Errorf("%q: %q %v", s, got, err)
		}
	}
}
