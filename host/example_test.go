package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/bulwarkhq/bulwark/host"
	"github.com/bulwarkhq/bulwark/wire"
)

func Example() {
	h, err := host.New(host.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	// 1. Bind early: probes answer, the API is 503 not_ready.
	if err := h.Start(); err != nil {
		panic(err)
	}
	base := "http://" + h.Addr().String()
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	fmt.Println("starting /readyz:", get("/readyz"))

	// 2. Readiness: open what the service needs; register its cleanup.
	err = h.Ready(context.Background(), host.Check{Name: "pool", Fn: func(context.Context) error {
		h.OnStop("pool", func(context.Context) error { fmt.Println("pool closed"); return nil })
		return nil
	}})
	if err != nil {
		panic(err) // the host has already closed everything
	}

	// 3. Activate the service's handler.
	api := http.NewServeMux()
	api.HandleFunc("GET /api/v1/hello/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"hello": r.PathValue("name")})
	})
	api.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		wire.Write(w, wire.New(wire.CodeNotFound))
	})
	h.Activate(api)
	fmt.Println("active /readyz:", get("/readyz"))
	fmt.Println("api:", get("/api/v1/hello/bulwark"))
	fmt.Println("unknown:", get("/api/v1/nope"))

	// 4. Drain: admission off, handlers cancelled and awaited, cleanup.
	http.DefaultClient.CloseIdleConnections()
	fmt.Println("shutdown:", h.Shutdown(context.Background()))
	// Output:
	// starting /readyz: 503 {"code":"not_ready","detail":"The service is starting; retry later.","retryAfter":1,"status":503,"title":"Service Unavailable","type":"about:blank"}
	// active /readyz: 200 {"status":"ready"}
	// api: 200 {"hello":"bulwark"}
	// unknown: 404 {"code":"not_found","detail":"Nothing is served at this path.","status":404,"title":"Not Found","type":"about:blank"}
	// pool closed
	// shutdown: <nil>
}
