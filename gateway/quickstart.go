package gateway

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

//go:embed quickstart.yaml
var quickstartYAML string

// QuickstartName is the file name the embedded quickstart configuration
// reports in messages.
const QuickstartName = "quickstart.yaml"

// Quickstart returns the embedded quickstart configuration (standalone,
// 127.0.0.1:8080, shield on, a route limit of 2 requests/s with a burst of
// 5), proxying to demoURL. getenv is the profile gate's environment, as
// for Load.
func Quickstart(demoURL string, getenv func(string) string) (*Config, error) {
	return Parse(QuickstartName, []byte(strings.ReplaceAll(quickstartYAML, "{{DEMO_UPSTREAM}}", demoURL)), getenv)
}

// QuickstartYAML returns the embedded quickstart configuration text, with
// the demo upstream placeholder.
func QuickstartYAML() string { return quickstartYAML }

// maxDemoBody bounds what the demo upstream reads of a request body.
const maxDemoBody = 1 << 20

// DemoHandler is the built-in demo upstream: it answers every request with
// a small JSON document describing it (method, path, query, body size).
// It echoes no header, so it never reflects a client address.
func DemoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, maxDemoBody))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"service":    "bulwark demo upstream",
			"method":     r.Method,
			"path":       r.URL.Path,
			"query":      r.URL.RawQuery,
			"body_bytes": n,
		})
	})
}

// Demo is a running demo upstream on a loopback port.
type Demo struct {
	// URL is the upstream's base URL, e.g. http://127.0.0.1:40123.
	URL string
	srv *http.Server
	ln  net.Listener
}

// StartDemo serves DemoHandler on 127.0.0.1 at a free port.
func StartDemo(log *slog.Logger) (*Demo, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Demo{
		URL: "http://" + ln.Addr().String(),
		ln:  ln,
		srv: &http.Server{
			Handler:           DemoHandler(),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
	}
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("demo upstream stopped", "error", err.Error())
		}
	}()
	return d, nil
}

// Close stops the demo upstream, waiting up to ctx for open requests.
func (d *Demo) Close(ctx context.Context) error {
	if err := d.srv.Shutdown(ctx); err != nil {
		return d.srv.Close()
	}
	return nil
}
