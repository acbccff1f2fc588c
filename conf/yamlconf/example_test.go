package yamlconf_test

import (
	"fmt"
	"reflect"
	"time"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
)

// Limiter is a library's configuration type: it carries its YAML keys.
type Limiter struct {
	QPS    float64       `yaml:"qps"`
	Window time.Duration `yaml:"window"`
}

// Config composes sections; Routes' items take their defaults too.
type Config struct {
	Name   string   `yaml:"name"`
	Routes []Route  `yaml:"routes"`
	Limit  *Limiter `yaml:"limit"`
}

// Route is a list item.
type Route struct {
	Path    string `yaml:"path"`
	Limiter `yaml:",inline"`
}

func Example() {
	opts := yamlconf.Options{
		File:     "app.yaml",
		MaxBytes: 1 << 20, MaxNodes: 100_000, MaxProblems: 100,
		Default: func(t reflect.Type) reflect.Value {
			switch t {
			case reflect.TypeFor[Config]():
				return reflect.ValueOf(Config{Name: "app"})
			case reflect.TypeFor[Route]():
				return reflect.ValueOf(Route{Path: "/", Limiter: Limiter{QPS: 10, Window: time.Second}})
			}
			return reflect.Value{}
		},
	}

	var cfg Config
	doc := yamlconf.Decode([]byte("routes:\n  - path: /api\n    qps: 2.5\n  - window: 1m\n"), &cfg, opts)
	fmt.Println(len(doc.Problems), cfg.Name, cfg.Routes, cfg.Limit, doc.Lines["routes[1].window"])

	doc = yamlconf.Decode([]byte("name: x\nroutes:\n  - path: /\n    qps: fast\n    burst: 3\nlimit: {window: soon}\n"), &cfg, opts)
	err := &yamlconf.Error{Problems: doc.Problems}
	fmt.Println(err)
	// Output:
	// 0 app [{/api {2.5 1s}} {/ {10 1m0s}}] <nil> 4
	// app.yaml:4: routes[0].qps: want a number, got "fast"
	// app.yaml:5: routes[0].burst: unknown key (known keys: path, qps, window)
	// app.yaml:6: limit.window: bad duration "soon" (want e.g. 500ms, 30s, 5m, 1d)
}
