// Command bulwark is the Bulwark gateway: layered abuse and overload
// protection in front of any HTTP service, configured by one YAML file.
//
//	bulwark serve [--config FILE] [--log-format json|text]
//	bulwark check --config FILE
//	bulwark migrate [flags]
//	bulwark version
//
// Without --config, serve runs the embedded quickstart: standalone, on
// 127.0.0.1:8080, in front of a demo echo upstream inside the binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bulwarkhq/bulwark/gateway"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: bulwark <command> [flags]

commands:
  serve     run the gateway (without --config: the embedded quickstart)
  check     validate a configuration file and list every problem
  migrate   apply the PostgreSQL migrations (cluster profile)
  version   print the version
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "migrate":
		return runMigrate(args[1:])
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "bulwark %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "bulwark: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bulwark check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file to validate (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: bulwark check --config FILE")
		return 2
	}
	cfg, err := gateway.Load(*path, os.Getenv)
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (profile %s, %d upstreams, %d routes)\n", *path, cfg.Profile, len(cfg.Upstreams), len(cfg.Routes))
	return 0
}

func printConfigError(w io.Writer, err error) {
	var ce *gateway.ConfigError
	if errors.As(err, &ce) {
		for _, p := range ce.Problems {
			fmt.Fprintln(w, p.String())
		}
		fmt.Fprintf(w, "%d problem(s)\n", len(ce.Problems))
		return
	}
	fmt.Fprintln(w, err)
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bulwark serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default: the embedded quickstart)")
	logFormat := fs.String("log-format", "", "json or text (default: the configuration's log.format)")
	listen := fs.String("listen", "", "override listen.addr (host:port)")
	metricsAddr := fs.String("metrics-listen", "", "override metrics.addr (host:port, or \"off\")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bulwark serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}

	var (
		cfg  *gateway.Config
		demo *gateway.Demo
		err  error
	)
	if *path == "" {
		if demo, err = gateway.StartDemo(nil); err != nil {
			fmt.Fprintf(stderr, "bulwark: demo upstream: %v\n", err)
			return 1
		}
		defer demo.Close(context.Background())
		cfg, err = gateway.Quickstart(demo.URL, os.Getenv)
	} else {
		cfg, err = gateway.Load(*path, os.Getenv)
	}
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	if err := cfg.Override(*listen, *metricsAddr); err != nil {
		fmt.Fprintln(stderr, "bulwark:", err)
		return 2
	}
	format := cfg.Log.Format
	if *logFormat != "" {
		format = *logFormat
	}
	log, err := gateway.NewLogger(stderr, format, cfg.Log.Level)
	if err != nil {
		fmt.Fprintln(stderr, "bulwark:", err)
		return 2
	}
	if demo != nil {
		log.Info("quickstart: no --config given; proxying to the built-in demo upstream",
			"try", "for i in $(seq 20); do curl -s -o /dev/null -w '%{http_code}\\n' localhost:8080/; done")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	start := time.Now()
	err = gateway.Run(ctx, cfg, gateway.Deps{
		Logger:     log,
		Registerer: reg,
		Gatherer:   reg,
		Version:    buildVersion(),
	})
	if err != nil {
		log.Error("bulwark stopped with an error", "error", err.Error(), "uptime", time.Since(start).Round(time.Second).String())
		return 1
	}
	return 0
}
