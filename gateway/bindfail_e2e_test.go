package gateway

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestListenerBindFailureLogsNoCleanStop: when the client listener is up
// but the metrics or control listener cannot bind, Start returns the
// error and the clean-up logs neither "draining" nor "stopped cleanly"
// (which, before the caller's error line, read as a normal stop).
func TestListenerBindFailureLogsNoCleanStop(t *testing.T) {
	for _, which := range []string{"metrics", "control"} {
		t.Run(which, func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			metrics, control := "127.0.0.1:0", "127.0.0.1:0"
			if which == "metrics" {
				metrics = busy.Addr().String()
			} else {
				control = busy.Addr().String()
			}
			cfg, err := Parse("b.yaml", []byte(`
listen: {addr: "127.0.0.1:0"}
metrics: {addr: "`+metrics+`"}
control: {addr: "`+control+`"}
upstreams: [{name: app, targets: ["http://127.0.0.1:1"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
`), nil)
			if err != nil {
				t.Fatal(err)
			}
			logs := &syncBuffer{}
			g, err := New(cfg, Deps{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			err = g.Start(context.Background())
			if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), which) {
				t.Fatalf("Start with the %s address busy: %v", which, err)
			}
			if l := logs.String(); strings.Contains(l, "stopped cleanly") || strings.Contains(l, "draining") {
				t.Errorf("a failed start logged a normal stop:\n%s", l)
			}
		})
	}
}
