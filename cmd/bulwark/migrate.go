package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// Environment variables read by "bulwark migrate".
const (
	// envMigrationDSN is the default variable holding the migration role's
	// connection string. A connection string is never taken from the
	// command line, where the process list would show its password.
	envMigrationDSN = "BULWARK_MIGRATION_DSN"
	// envRuntimeRole is the default of -runtime-role.
	envRuntimeRole = "BULWARK_QUOTA_RUNTIME_ROLE"
)

// migrate parses args, runs pgquota.Migrate and returns the process exit
// code: 0 success, 1 failure, 2 usage error. SIGINT/SIGTERM cancel the
// migration, which then rolls back.
//
//	bulwark migrate [-runtime-role NAME] [-dsn-env VAR] [-timeout D] [-insecure-allow-no-tls]
func migrate(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	set := flag.NewFlagSet("bulwark migrate", flag.ContinueOnError)
	role := set.String("runtime-role", getenv(envRuntimeRole),
		"role the gateway serves with; gets exactly SELECT, INSERT, UPDATE on the quota table (default $"+envRuntimeRole+")")
	dsnEnv := set.String("dsn-env", envMigrationDSN, "environment variable holding the migration role's connection string")
	timeout := durationFlag(set, "timeout", pgquota.DefaultMigrateTimeout, fmt.Sprintf("bound on the whole migration, at most %s", pgquota.MaxMigrateTimeout))
	insecure := set.Bool("insecure-allow-no-tls", false, "allow a connection string that is not sslmode=verify-full")
	set.Usage = func() {
		fmt.Fprintf(set.Output(), "usage: bulwark migrate [flags]\n\n"+
			"Applies Bulwark's embedded PostgreSQL migrations with the migration role and\n"+
			"grants the runtime role its least privileges. The connection string is read\n"+
			"from the environment, never from the command line.\n\nflags:\n")
		set.PrintDefaults()
	}
	if code := parseFlags(set, args, stdout, stderr); code >= 0 {
		return code
	}
	if set.NArg() != 0 {
		fmt.Fprintf(stderr, "bulwark migrate: unexpected argument %q\n", set.Arg(0))
		set.Usage()
		return 2
	}
	if *role == "" {
		fmt.Fprintf(stderr, "bulwark migrate: -runtime-role (or $%s) is required\n", envRuntimeRole)
		return 2
	}
	if *timeout <= 0 || *timeout > pgquota.MaxMigrateTimeout {
		fmt.Fprintf(stderr, "bulwark migrate: -timeout %s out of range (0, %s]\n", *timeout, pgquota.MaxMigrateTimeout)
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
	res, err := pgquota.Migrate(ctx, dsn, pgquota.MigrateConfig{RuntimeRole: *role, Timeout: *timeout, InsecureAllowNoTLS: *insecure})
	var ue *quota.UnavailableError
	switch {
	case errors.Is(err, pgquota.ErrNoVerifyFull):
		fmt.Fprintf(stderr, "bulwark migrate: the connection string in $%s does not verify the server (sslmode=verify-full);\n"+
			"bulwark migrate: for a server without TLS (a local one), pass --insecure-allow-no-tls\n", *dsnEnv)
		return 1
	case errors.As(err, &ue) && ue.Reason == quota.ReasonTLSRefused:
		fmt.Fprintf(stderr, "bulwark migrate: %v: the server does not offer TLS; add sslmode=disable to the connection string "+
			"and pass --insecure-allow-no-tls, or enable TLS on the server\n", err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "bulwark migrate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "bulwark migrate: schema at version %d (was %d, applied %d) in %v; runtime role grants set\n",
		res.To, res.From, res.To-res.From, time.Since(began).Round(time.Millisecond))
	return 0
}
