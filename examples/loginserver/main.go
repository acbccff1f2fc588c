// Command loginserver is a small reference service that puts Bulwark's
// password-login throttling in front of a real password check: the
// per-(client, account) rolling-window limiter first, then the
// failed-password lockout, then bcrypt over an in-memory user table.
//
//	loginserver [-addr 127.0.0.1:8080] [-store memory|redis] [-redis-addr 127.0.0.1:6379] [-redis-timeout D] [-users FILE]
//
// POST /login with {"username": "...", "password": "..."}:
//
//   - 400 missing_credentials / invalid_login_request: the body is not a
//     JSON object with both fields (not counted);
//   - 429 rate-limit-exceeded with Retry-After and X-RateLimit-*: too many
//     attempts from this client for this account;
//   - 401 invalid_credentials: wrong password, unknown user or locked
//     account — one identical answer, so it reveals neither whether the
//     account exists nor whether it is locked (an unknown user costs the
//     same bcrypt comparison as a known one; a locked account skips it, so
//     timing may show a lock, never an account's existence);
//   - 200 {"status":"ok"}.
//
// Every well-formed attempt counts against the limiter before the password
// is checked, and a successful login does not clear the count. The client
// is the socket peer: run it behind a proxy only with a trusted-proxy
// contract (not wired here). With -store redis, several instances share
// one exact limit and one lockout; if Redis fails, logins continue
// (degraded) and the events are logged. (The Redis client also reports
// dial failures through its own logger on stderr.)
//
// The users file holds "username:bcrypt-hash" lines; without one, a demo
// user "alice" with password "wonderland" is created at start-up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "loginserver:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run parses args, serves until ctx is done and shuts down. ready, when
// set, receives the listening address.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("loginserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	var cfg config
	fs.StringVar(&cfg.Store, "store", "memory", "attempt store: memory or redis")
	fs.StringVar(&cfg.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address for -store redis")
	fs.DurationVar(&cfg.RedisTimeout, "redis-timeout", 0, "Redis dial, read and write timeout, 1ms to 10s (default: dial 1s, read and write 500ms); past it a login is decided degraded")
	fs.StringVar(&cfg.UsersFile, "users", "", `file of "username:bcrypt-hash" lines (default: demo user alice/wonderland)`)
	fs.IntVar(&cfg.BcryptCost, "bcrypt-cost", 10, "bcrypt cost of the demo user's hash (4-31)")
	fs.IntVar(&cfg.Limit, "limit", 0, "attempts per client and account per window (default 5)")
	fs.DurationVar(&cfg.Window, "window", 0, "rolling window (default 60s)")
	fs.IntVar(&cfg.LockoutFailures, "lockout-failures", 0, "failed passwords that lock an account (default 10)")
	fs.DurationVar(&cfg.LockoutWindow, "lockout-window", 0, "window counting failed passwords (default 15m)")
	fs.DurationVar(&cfg.LockoutDuration, "lockout-duration", 0, "how long a lock lasts (default 15m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, nil))

	srv, err := newServer(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	cfg.Logger.Info("loginserver listening", slog.String("addr", ln.Addr().String()), slog.String("store", cfg.Store))
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-errc
	return nil
}
