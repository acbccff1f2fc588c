package pgquota

import (
	"context"
	"errors"
	"strings"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/jackc/pgx/v5/pgconn"
)

// Readiness and migration sentinels. Errors returned by [Store.Check] and
// [Migrate] wrap one of them (or match [quota.ErrUnavailable] when the
// database could not be asked).
var (
	// ErrSchemaMismatch: the migration history is not exactly the one this
	// binary embeds (missing, extra or newer versions, or a checksum that
	// differs), or a constraint the decision relies on is missing.
	ErrSchemaMismatch = errors.New("pgquota: schema does not match this binary")
	// ErrPrivileges: the runtime role holds more (or fewer) privileges than
	// exactly USAGE on the schema, SELECT/INSERT/UPDATE on the quota table
	// and SELECT on the history table.
	ErrPrivileges = errors.New("pgquota: runtime role privileges are not the expected ones")
	// ErrNoVerifyFull: the connection string does not verify the server
	// (anything but sslmode=verify-full) and InsecureAllowNoTLS is not
	// set. The error also matches [quota.ErrConfig].
	ErrNoVerifyFull = errors.New("pgquota: connection string does not verify the server")
)

// errTLSRefused is pgconn's message when the server answers the TLS
// request with "no" (it has no TLS); pgconn has no sentinel for it.
const errTLSRefused = "server refused TLS connection"

// noVerifyFull is the error of a connection string that does not verify
// the server.
func noVerifyFull() error {
	return &quota.ConfigError{Package: "pgquota", Setting: "connection string",
		Reason: "TLS must be sslmode=verify-full unless InsecureAllowNoTLS is set", Err: ErrNoVerifyFull}
}

// unavailable converts any error from pgx into a quota.UnavailableError
// without keeping its text: driver messages can name the host, the user,
// the database or a row.
func unavailable(ctx context.Context, err error) error {
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.Canceled):
		return quota.Unavailable(quota.ReasonCanceled, "", "", context.Canceled)
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return quota.Unavailable(quota.ReasonTimeout, "", "", context.DeadlineExceeded)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return classifySQLState(pgErr.Code)
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return quota.Unavailable(quota.ReasonTimeout, "", "", context.DeadlineExceeded)
	}
	if strings.Contains(err.Error(), errTLSRefused) {
		return quota.Unavailable(quota.ReasonTLSRefused, "", "", nil)
	}
	return quota.Unavailable(quota.ReasonUnreachable, "", "", nil)
}

func classifySQLState(code string) error {
	switch {
	case code == "57014": // query_canceled: statement_timeout
		return quota.Unavailable(quota.ReasonTimeout, code, "", nil)
	case code == "55P03": // lock_not_available: lock_timeout
		return quota.Unavailable(quota.ReasonTimeout, code, "", nil)
	case len(code) == 5 && (code[:2] == "08" || code[:2] == "28"), // connection exception, authorization
		code == "3D000",                                   // database does not exist
		code == "57P01", code == "57P02", code == "57P03": // shutdown, crash, cannot connect now
		return quota.Unavailable(quota.ReasonUnreachable, code, "", nil)
	}
	return quota.Unavailable(quota.ReasonServer, code, "", nil)
}

func corrupt(detail string) error {
	return quota.Unavailable(quota.ReasonCorrupt, "", detail, nil)
}

// sqlState returns the SQLSTATE of a server error, else "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
