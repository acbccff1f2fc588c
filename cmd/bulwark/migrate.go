package main

import (
	"os"

	"github.com/bulwarkhq/bulwark/quota/pgquota"
)

// runMigrate implements "bulwark migrate" (args are the arguments after
// "migrate"); it returns the process exit code. The migration role's
// connection string comes from $BULWARK_MIGRATION_DSN, never from a flag.
func runMigrate(args []string) int {
	return pgquota.RunMigrateCommand(args, os.Stdout, os.Stderr, os.Getenv)
}
