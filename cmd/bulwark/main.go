// Command bulwark is the Bulwark gateway: layered abuse and overload
// protection in front of any HTTP service, configured by one YAML file.
//
//	bulwark serve [--config FILE] [--log-format json|text] [--listen ADDR]
//	              [--metrics-listen ADDR|off] [--control-listen ADDR|off]
//	              [--pid-file FILE]
//	bulwark check --config FILE
//	bulwark ctl [--addr URL] [--token TOKEN | --token-file FILE] [--json] COMMAND ...
//	bulwark migrate [flags]
//	bulwark health [--addr HOST:PORT | --url URL] [--timeout D]
//	bulwark version
//
// Without --config, serve runs the embedded quickstart: standalone, on
// 127.0.0.1:8080, in front of a demo echo upstream inside the binary.
//
// SIGHUP makes serve re-read its configuration file (the same as POST
// /v1/reload or `bulwark ctl reload`): a valid file is swapped in keeping
// the state of every unchanged rate limit and every runtime list entry;
// an invalid one is logged problem by problem and the running
// configuration stays. SIGTERM and SIGINT stop: out of rotation for
// limits.shutdown_delay (a second signal cuts it short), then drain.
// SIGUSR2 upgrades without a dropped request: a new process (the binary
// at the same path, the same arguments) takes the listening sockets
// over, and this one drains once the new one is ready (upgrade.go).
// Under a service manager's notify socket ($NOTIFY_SOCKET, systemd's
// Type=notify) serve sends READY=1 once it serves (an upgraded process
// with MAINPID, so that systemd follows it) and STOPPING=1 when a stop
// (not a hand-over) begins.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bulwarkhq/bulwark/conf/yamlconf"
	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/gateway"
	"github.com/bulwarkhq/bulwark/redisconn"
)

// Build stamps, set by scripts/build (and so by the Dockerfile) with
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=SHA -X main.date=2006-01-02T15:04:05Z"
//
// A binary built another way leaves them empty; see [readBuildInfo].
var (
	version = ""
	commit  = ""
	date    = ""
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: bulwark <command> [flags]

commands:
  serve     run the gateway (without --config: the embedded quickstart)
  check     validate a configuration file and list every problem
  ctl       call a running gateway's control API (block, unblock, allow,
            disallow, list, status, reload; "bulwark ctl" for help)
  migrate   apply the PostgreSQL migrations (cluster profile)
  health    ask a running gateway's /readyz: exit 0 when ready, 1 when not
            (a container's health check)
  version   print the version
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "ctl":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runCtl(ctx, args[1:], stdout, stderr, os.Getenv)
	case "migrate":
		return migrate(args[1:], stdout, stderr, os.Getenv)
	case "health":
		return health(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		return printVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "bulwark: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// buildInfo is what `bulwark version` prints and the gateway reports
// (bulwark_build_info, /v1/status).
type buildInfo struct {
	Version string // a module version (v1.2.3, a pseudo-version) or "dev"
	Commit  string // the VCS revision, or ""
	Date    string // when the binary was built, or the commit's time; or ""
}

// readBuildInfo returns the build stamps when scripts/build set them;
// otherwise what the go command recorded in the binary: the module version
// for `go install github.com/bulwarkhq/bulwark/cmd/bulwark@v1.2.3`, and
// the revision and commit time for a build in a checkout (unless
// -buildvcs=false). What nobody recorded stays empty; the version is then
// "dev".
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildInfoFrom(version, commit, date, bi)
}

// buildInfoFrom is readBuildInfo with its inputs explicit (for tests).
func buildInfoFrom(version, commit, date string, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.Date == "":
				b.Date = s.Value
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// String is the line `bulwark version` prints:
//
//	bulwark v1.2.3 (commit 0123456789ab, built 2026-12-01T10:00:00Z, go1.26.8, linux/amd64)
func (b buildInfo) String() string {
	var parts []string
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		parts = append(parts, "commit "+c)
	}
	if b.Date != "" {
		parts = append(parts, "built "+b.Date)
	}
	parts = append(parts, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
	return "bulwark " + b.Version + " (" + strings.Join(parts, ", ") + ")"
}

// parseFlags parses a subcommand's flags the same way for every
// subcommand: --help (or -h) prints the usage to stdout and the process
// exits 0; an unknown or malformed flag prints the problem and the usage
// to stderr and exits 2. It returns -1 to go on. Later messages of the
// subcommand go to stderr.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(buf.Bytes())
		return 0
	case err != nil:
		_, _ = stderr.Write(buf.Bytes())
		return 2
	}
	return -1
}

// setUsage gives a FlagSet a usage text: the synopsis, then its flags.
func setUsage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
}

func printVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bulwark version", flag.ContinueOnError)
	setUsage(fs, "bulwark version")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bulwark version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintln(stdout, readBuildInfo().String())
	return 0
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bulwark check", flag.ContinueOnError)
	setUsage(fs, "bulwark check --config FILE")
	path := fs.String("config", "", "configuration file to validate (required)")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
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
	for _, w := range append(cfg.Warnings(), cfg.CertificateWarnings(time.Now())...) {
		fmt.Fprintln(stderr, "warning: "+w.String())
	}
	fmt.Fprintf(stdout, "%s: ok (profile %s, %d upstreams, %d routes)\n", *path, cfg.Profile, len(cfg.Upstreams), len(cfg.Routes))
	return 0
}

func printConfigError(w io.Writer, err error) {
	var ce *yamlconf.Error
	if errors.As(err, &ce) {
		for _, p := range ce.Problems {
			fmt.Fprintln(w, p.String())
		}
		fmt.Fprintf(w, "%d problem(s)\n", len(ce.Problems))
		return
	}
	fmt.Fprintln(w, err)
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bulwark serve", flag.ContinueOnError)
	setUsage(fs, "bulwark serve [--config FILE] [flags]")
	path := fs.String("config", "", "configuration file (default: the embedded quickstart)")
	logFormat := fs.String("log-format", "", "json or text (default: the configuration's log.format)")
	listen := fs.String("listen", "", "override listen.addr, the first listener's (host:port)")
	metricsAddr := fs.String("metrics-listen", "", "override metrics.addr (host:port, or \"off\")")
	controlAddr := fs.String("control-listen", "", "override control.addr (host:port, or \"off\")")
	pidFile := fs.String("pid-file", "", "write the serving process's PID to FILE once ready, again after each upgrade (systemd's PIDFile=)")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bulwark serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}

	var (
		cfg    *gateway.Config
		demo   *gateway.Demo
		source func() (*gateway.Config, error)
		err    error
	)
	override := func(c *gateway.Config) error {
		if err := c.Override(*listen, *metricsAddr); err != nil {
			return err
		}
		return c.OverrideControl(*controlAddr)
	}
	if *path == "" {
		if demo, err = gateway.StartDemo(nil); err != nil {
			fmt.Fprintf(stderr, "bulwark: demo upstream: %v\n", err)
			return 1
		}
		defer demo.Close(context.Background())
		cfg, err = gateway.Quickstart(demo.URL, os.Getenv)
	} else {
		cfg, err = gateway.Load(*path, os.Getenv)
		// A reload re-reads the same file with the same overrides.
		source = func() (*gateway.Config, error) {
			c, err := gateway.Load(*path, os.Getenv)
			if err != nil {
				return nil, err
			}
			if err := override(c); err != nil {
				return nil, &yamlconf.Error{Problems: []yamlconf.Problem{{File: *path, Msg: err.Error()}}}
			}
			return c, nil
		}
	}
	if err != nil {
		printConfigError(stderr, err)
		return 1
	}
	if err := override(cfg); err != nil {
		fmt.Fprintln(stderr, "bulwark:", err)
		return 2
	}
	format := cfg.Log.Format
	if *logFormat != "" {
		format = *logFormat
	}
	log, err := gateway.NewLogger(stderr, format, cfg.Log.Level)
	if err == nil {
		// go-redis logs through a process-wide logger, with the server's
		// address in its dial errors: route it through ours, redacted and
		// rate-limited.
		redisconn.InstallLogger(log.Handler())
	}
	if err != nil {
		fmt.Fprintln(stderr, "bulwark:", err)
		return 2
	}
	if msg := memoryDefaults(os.Getenv, os.ReadFile); msg != "" {
		log.Info("memory: " + msg)
	}
	if demo != nil {
		log.Info("quickstart: no --config given; proxying to the built-in demo upstream",
			"try", "for i in $(seq 20); do curl -s -o /dev/null -w '%{http_code}\\n' localhost:8080/; done")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// SIGHUP is caught before anything starts: its default action would
	// kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	start := time.Now()
	fail := func(err error) int {
		log.Error("bulwark stopped with an error", "error", err.Error(), "uptime", time.Since(start).Round(time.Second).String())
		return 1
	}
	// Without a configured token the gateway generates one and stores it
	// in the state directory, where `bulwark ctl` finds it.
	stateDir, err := control.StateDir(os.Getenv)
	if err != nil && cfg.Control.Enabled {
		log.Warn("control API: no state directory for a generated token; without control.token_file or BULWARK_CONTROL_TOKEN the API runs unauthenticated on loopback", "error", err.Error())
	}
	if err == nil {
		derived := stateDir
		if stateDir, err = stateDirOrNone(stateDir, derivedStateDir(os.Getenv, os.Geteuid())); err != nil {
			log.Warn("no writable state directory: running without one", "dir", derived, "error", err.Error(),
				"effect", "fingerprints per process, runtime lists in memory only, a control API without a generated token (unauthenticated, loopback only, no console)",
				"hint", "set BULWARK_STATE_DIR to a writable directory")
		}
	}
	// SIGUSR2 upgrades (upgrade.go): caught from the start too.
	usr2 := make(chan os.Signal, 1)
	if len(upgradeSignals) > 0 {
		signal.Notify(usr2, upgradeSignals...)
		defer signal.Stop(usr2)
	}
	up := newUpgrader(*pidFile)
	defer up.stop()
	g, err := gateway.New(cfg, gateway.Deps{
		StateDir:   stateDir,
		Logger:     log,
		Registerer: reg,
		Gatherer:   reg,
		Version:    readBuildInfo().Version,
		Source:     source,
		Listen:     up.listen,
	})
	if err != nil {
		return fail(err)
	}
	if err := g.Start(ctx); err != nil {
		return fail(err)
	}
	if err := up.ready(log); err != nil {
		// Serving, but the PID file (or the previous process) failed:
		// systemd would lose track of an upgrade; say so and go on.
		log.Error("upgrade: readiness not recorded", "error", err.Error())
	}
	// Under systemd (Type=notify) the unit is started only now, with
	// every listener bound and /readyz answering 200.
	notify := func(state string) {
		if err := sdNotify(os.Getenv, state); err != nil {
			log.Warn("sd_notify failed", "state", state, "error", err.Error())
		}
	}
	notify(readyState(up.upgraded(), os.Getpid()))
	upgraded := make(chan error, 1)
	upgrading, handover := false, false
	for ctx.Err() == nil && !handover {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading the configuration")
			// The gateway logs the outcome, every problem included.
			_ = g.ReloadFromSource(ctx)
		case <-usr2:
			if upgrading {
				log.Warn("SIGUSR2: an upgrade is already under way")
				continue
			}
			log.Info("SIGUSR2: upgrading: starting a new process on the same sockets")
			upgrading = true
			go func() { upgraded <- up.upgrade(ctx) }()
		case err := <-upgraded:
			upgrading = false
			if err != nil {
				log.Error("upgrade failed; this process serves on", "error", err.Error())
				continue
			}
			log.Info("upgrade: the new process is ready; handing over")
			handover = true
		case <-ctx.Done():
		}
	}
	// A second SIGTERM or SIGINT cuts limits.shutdown_delay short.
	stopCtx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	if handover {
		err = g.Handover(stopCtx)
	} else {
		up.stop() // cancels an upgrade under way
		notify("STOPPING=1\nSTATUS=stopping")
		log.Info("stop requested", "shutdown_delay", cfg.Limits.ShutdownDelay.String(), "drain_timeout", cfg.Limits.DrainTimeout.String())
		err = g.Stop(stopCtx)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}
