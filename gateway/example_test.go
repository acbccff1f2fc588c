package gateway_test

import (
	"errors"
	"fmt"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/gateway"
	"github.com/bulwarkhq/bulwark/proxy"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/route"
)

// Parse validates a configuration strictly and reports every problem with
// its line, key path and allowed range.
func ExampleParse() {
	cfg, err := gateway.Parse("bulwark.yaml", []byte(`
upstreams:
  - name: app
    targets: ["http://127.0.0.1:3000"]
routes:
  - name: api
    match: {path: /api/}
    upstream: app
    rate_limit: {qps: 100, burst: 200}
`), func(string) string { return "" })
	if err != nil {
		fmt.Println(err)
		return
	}
	rl := cfg.Routes[0].RateLimit
	fmt.Println(cfg.Profile, cfg.Listen[0].Addr, cfg.Routes[0].Name, rl.QPS, rl.Burst, rl.Key, rl.Status)

	_, err = gateway.Parse("bulwark.yaml", []byte(`
upstreams:
  - name: app
    targets: ["http://127.0.0.1:3000"]
routes:
  - name: api
    match: {path: /api/}
    upstream: backend
    rate_limit: {qps: 0, colour: red}
`), nil)
	var ce *yamlconf.Error
	if errors.As(err, &ce) {
		for _, p := range ce.Problems {
			fmt.Println(p)
		}
	}
	// Output:
	// standalone 127.0.0.1:8080 api 100 200 client_ip 429
	// bulwark.yaml:9: routes[0].rate_limit.colour: unknown key (known keys: qps, per_minute, per_hour, burst, key, key_fallback, per_client, status, max_keys, headers, scope, mode)
	// bulwark.yaml:8: routes[0].upstream: unknown upstream "backend"
	// bulwark.yaml:9: routes[0].rate_limit.qps: 0 out of range [0.001, 1000000]
}

// A configuration built in Go starts from DefaultConfig and the element
// defaults, and gets exactly the checks a file gets: each section's
// Validate names the bad key relative to the section, Config.Validate
// nests it. Provision then reads what the configuration names (here:
// nothing) and the result is ready for gateway.New.
func ExampleDefaultConfig() {
	cfg := gateway.DefaultConfig()
	up := gateway.DefaultUpstream()
	up.Name, up.Targets = "app", []string{"http://127.0.0.1:3000"}
	rl := ratelimit.DefaultConfig()
	rl.QPS, rl.Burst = 0.001, 1_000_000
	cfg.Upstreams = []proxy.Upstream{up}
	cfg.Routes = []gateway.Route{{Name: "api", Upstream: "app", Match: gateway.Match{Pattern: route.Pattern{Path: "/api/"}}, RateLimit: &rl}}

	var fes gateway.FieldErrors
	if errors.As(rl.Validate(), &fes) {
		fmt.Println("ratelimit.Config.Validate:", fes[0].Path)
	}
	fmt.Println(cfg.Validate())

	rl.Burst = 100
	fmt.Println(cfg.Validate(), cfg.Provision("", nil))
	// Output:
	// ratelimit.Config.Validate: burst
	// routes[0].rate_limit.burst: 1000000 at qps 0.001: an empty bucket takes 277777h46m40s to refill, more than 8784h (lower burst or raise qps)
	// <nil> <nil>
}
