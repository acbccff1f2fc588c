package pgquota

import (
	"context"
	"fmt"
	"slices"

	"github.com/bulwarkhq/bulwark/quota"
)

// Check is the readiness check (shape func(context.Context) error). Run as
// the runtime role, it fails when:
//   - the database cannot be asked (matches [quota.ErrUnavailable]);
//   - the migration history is not exactly the embedded migrations with
//     their checksums, or a constraint the decision relies on is missing
//     ([ErrSchemaMismatch]);
//   - the connected role is a superuser, owns (or is a member of the owner
//     of) the schema or a table, holds CREATE on the schema, holds DELETE,
//     TRUNCATE, REFERENCES or TRIGGER on the quota table, anything but
//     SELECT on the history table, or lacks USAGE/SELECT/INSERT/UPDATE
//     ([ErrPrivileges]).
//
// The call is bounded by CallTimeout.
func (s *Store) Check(ctx context.Context) error {
	if s.closed.Load() {
		return quota.Unavailable(quota.ReasonClosed, "", "", nil)
	}
	ms, err := Migrations()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()

	hist, err := readHistory(ctx, s.pool)
	if err != nil {
		switch sqlState(err) {
		case "42P01", "3F000": // undefined table, undefined schema
			return fmt.Errorf("%w: schema not migrated", ErrSchemaMismatch)
		case "42501": // insufficient privilege
			return fmt.Errorf("%w: runtime role cannot read the schema history", ErrPrivileges)
		}
		return unavailable(ctx, err)
	}
	if err := compareHistory(hist, ms, false); err != nil {
		return err
	}

	rows, err := s.pool.Query(ctx, constraintsSQL)
	if err != nil {
		return unavailable(ctx, err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return unavailable(ctx, err)
		}
		if len(names) < 64 {
			names = append(names, n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return unavailable(ctx, err)
	}
	for _, want := range requiredConstraints {
		if !slices.Contains(names, want) {
			return fmt.Errorf("%w: constraint %s is missing", ErrSchemaMismatch, want)
		}
	}

	var p struct {
		super, schemaUsage, schemaCreate            bool
		sel, ins, upd, extra, histSelect, histExtra bool
		ownsSchema, ownsTable, ownsHistory          bool
	}
	err = s.pool.QueryRow(ctx, privilegesSQL).Scan(
		&p.super, &p.schemaUsage, &p.schemaCreate,
		&p.sel, &p.ins, &p.upd, &p.extra, &p.histSelect, &p.histExtra,
		&p.ownsSchema, &p.ownsTable, &p.ownsHistory)
	if err != nil {
		return unavailable(ctx, err)
	}
	switch {
	case p.super:
		return fmt.Errorf("%w: runtime role is a superuser", ErrPrivileges)
	case p.ownsSchema || p.ownsTable || p.ownsHistory:
		return fmt.Errorf("%w: runtime role owns a quota schema object", ErrPrivileges)
	case p.schemaCreate:
		return fmt.Errorf("%w: runtime role holds CREATE on the schema", ErrPrivileges)
	case p.extra:
		return fmt.Errorf("%w: runtime role holds more than SELECT, INSERT, UPDATE on the quota table", ErrPrivileges)
	case p.histExtra:
		return fmt.Errorf("%w: runtime role holds more than SELECT on the history table", ErrPrivileges)
	case !p.schemaUsage || !p.sel || !p.ins || !p.upd || !p.histSelect:
		return fmt.Errorf("%w: runtime role lacks a required privilege", ErrPrivileges)
	}
	return nil
}
