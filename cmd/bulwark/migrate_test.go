package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/internal/testsvc"
)

// TestMigrate runs "bulwark migrate" against a real PostgreSQL with a
// migration role and a runtime role: it applies the schema, refuses a
// connection string without verify-full TLS unless told, takes the
// connection string only from the environment and never prints it.
func TestMigrate(t *testing.T) {
	const (
		db       = "quota"
		migRole  = "bulwark_migrator"
		runRole  = "bulwark_runtime"
		migPass  = "mig-S3cret-pw-7c1e"
		runPass  = "run-S3cret-pw-90ab"
		badPass  = "wrong-Pa55word-x"
		wantDone = "schema at version 2 (was 0, applied 2)"
		wantNoop = "schema at version 2 (was 2, applied 0)"
	)
	pg := testsvc.StartPostgres(t)
	pg.CreateDatabase(t, db)
	pg.CreateRole(t, migRole, migPass)
	pg.CreateRole(t, runRole, runPass)
	pg.Exec(t, "GRANT CREATE ON DATABASE "+db+" TO "+migRole)
	env := map[string]string{
		envMigrationDSN: pg.DSNFor(migRole, migPass, db),
		envRuntimeRole:  runRole,
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := migrate(args, &out, &errb, func(k string) string { return env[k] })
		return code, out.String(), errb.String()
	}
	// The refusal names the command's flag, not the library's Go field.
	if code, _, errs := run(); code != 1 || !strings.Contains(errs, "verify-full") ||
		!strings.Contains(errs, "--insecure-allow-no-tls") || strings.Contains(errs, "InsecureAllowNoTLS") {
		t.Fatalf("migrate without TLS = %d, %q", code, errs)
	}
	// verify-full against a server without TLS says so, and what to do.
	noTLS := env[envMigrationDSN]
	env[envMigrationDSN] = strings.Replace(noTLS, "sslmode=disable", "sslmode=verify-full", 1)
	if code, _, errs := run(); code != 1 || !strings.Contains(errs, "tls_refused") ||
		!strings.Contains(errs, "does not offer TLS") || !strings.Contains(errs, "--insecure-allow-no-tls") {
		t.Fatalf("migrate with verify-full to a server without TLS = %d, %q", code, errs)
	}
	env[envMigrationDSN] = noTLS
	if code, out, errs := run("-insecure-allow-no-tls"); code != 0 || !strings.Contains(out, wantDone) {
		t.Fatalf("migrate = %d, %q, %q", code, out, errs)
	}
	if code, out, errs := run("-insecure-allow-no-tls"); code != 0 || !strings.Contains(out, wantNoop) {
		t.Fatalf("second migrate = %d, %q, %q", code, out, errs)
	}
	if code, out, _ := run("-h"); code != 0 || !strings.Contains(out, "usage: bulwark migrate") {
		t.Fatalf("-h = %d, stdout %q", code, out)
	}
	if code, _, _ := run("-bogus"); code != 2 {
		t.Fatalf("-bogus = %d", code)
	}
	if code, _, _ := run("-insecure-allow-no-tls", "extra"); code != 2 {
		t.Fatalf("extra argument = %d", code)
	}
	if code, _, _ := run("-insecure-allow-no-tls", "-timeout", "1h"); code != 2 {
		t.Fatalf("-timeout 1h = %d", code)
	}
	if code, _, errs := run("-insecure-allow-no-tls", "-dsn-env", "NOT_SET"); code != 2 || !strings.Contains(errs, "$NOT_SET is empty") {
		t.Fatalf("missing DSN = %d, %q", code, errs)
	}
	env[envMigrationDSN] = pg.DSNFor(migRole, badPass, db)
	code, out, errs := run("-insecure-allow-no-tls")
	if code != 1 || strings.Contains(errs+out, badPass) || strings.Contains(errs+out, "postgres://") {
		t.Fatalf("wrong password = %d, %q", code, errs)
	}
	delete(env, envRuntimeRole)
	if code, _, _ := run("-insecure-allow-no-tls"); code != 2 {
		t.Fatalf("missing runtime role = %d", code)
	}
}
