package pgquota

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"
)

// Environment variables read by [RunMigrateCommand].
const (
	// EnvMigrationDSN is the default variable holding the migration role's
	// connection string. A connection string is never taken from the
	// command line, where the process list would show its password.
	EnvMigrationDSN = "BULWARK_MIGRATION_DSN"
	// EnvRuntimeRole is the default of -runtime-role.
	EnvRuntimeRole = "BULWARK_QUOTA_RUNTIME_ROLE"
)

// RunMigrateCommand implements "bulwark migrate": it parses args (the
// arguments after "migrate"), runs [Migrate] and returns the process exit
// code: 0 success, 1 failure, 2 usage error. getenv reads the environment
// (os.Getenv in main). SIGINT/SIGTERM cancel the migration, which then
// rolls back.
//
//	bulwark migrate [-runtime-role NAME] [-dsn-env VAR] [-timeout D] [-insecure-allow-no-tls]
func RunMigrateCommand(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("bulwark migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("runtime-role", getenv(EnvRuntimeRole),
		"role the gateway serves with; gets exactly SELECT, INSERT, UPDATE on the quota table (default $"+EnvRuntimeRole+")")
	dsnEnv := fs.String("dsn-env", EnvMigrationDSN, "environment variable holding the migration role's connection string")
	timeout := fs.Duration("timeout", DefaultMigrateTimeout, fmt.Sprintf("bound on the whole migration, at most %s", MaxMigrateTimeout))
	insecure := fs.Bool("insecure-allow-no-tls", false, "allow a connection string that is not sslmode=verify-full")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bulwark migrate [flags]\n\n"+
			"Applies Bulwark's embedded PostgreSQL migrations with the migration role and\n"+
			"grants the runtime role its least privileges. The connection string is read\n"+
			"from the environment, never from the command line.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bulwark migrate: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *role == "" {
		fmt.Fprintf(stderr, "bulwark migrate: -runtime-role (or $%s) is required\n", EnvRuntimeRole)
		return 2
	}
	if *timeout <= 0 || *timeout > MaxMigrateTimeout {
		fmt.Fprintf(stderr, "bulwark migrate: -timeout %s out of range (0, %s]\n", *timeout, MaxMigrateTimeout)
		return 2
	}
	dsn := getenv(*dsnEnv)
	if dsn == "" {
		fmt.Fprintf(stderr, "bulwark migrate: $%s is empty; set it to the migration role's connection string\n", *dsnEnv)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	res, err := Migrate(ctx, dsn, MigrateConfig{RuntimeRole: *role, Timeout: *timeout, InsecureAllowNoTLS: *insecure})
	if err != nil {
		fmt.Fprintf(stderr, "bulwark migrate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "bulwark migrate: schema at version %d (was %d, applied %d) in %v; runtime role grants set\n",
		res.To, res.From, res.To-res.From, time.Since(began).Round(time.Millisecond))
	return 0
}
