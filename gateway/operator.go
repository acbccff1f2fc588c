package gateway

import (
	"context"
	"errors"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/limit"
	"github.com/bulwarkhq/bulwark/login"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/wire"
)

// Unlocking accounts and inspecting quotas
//
// `ctl unlock USERNAME`, POST /v1/unlock and the console's unlock form
// lift the lockout of an account on every login route with a lockout
// (or on one route): each route's Lockout keys the username exactly as
// its throttle does (login.Lockout.Unlock: the route's folding and
// secret), in its own store (the memory table, or Redis under the
// route's prefix). The per-(client address, username) rate-limit window
// is not lifted (its key holds the client's address, which the operator
// does not have, and the store is not scanned for it): the answer gives
// each route's window, the longest a client that used up its attempts
// at the username still waits. `ctl quota show|reset`, POST /v1/quota/show|reset and
// the console's quota form read and reset a bucket of the cluster
// profile's PostgreSQL store (pgquota.Store.Show, Reset). Audit lines
// (package control, package console) name the token, never the username
// or the subject; nothing here logs either.

// Unlock lifts the lockout of req.Username on every login route with a
// lockout, or on req.Route. Errors are *control.Error values: 400
// invalid_request (no usable username), 404 not_found (no such route),
// 404 account_not_locked (nothing to lift), 503 store_unavailable.
func (g *Gateway) Unlock(ctx context.Context, req control.UnlockRequest) (control.UnlockResult, error) {
	res := control.UnlockResult{Routes: []control.UnlockedRoute{}}
	p := g.cur.Load()
	if p == nil {
		return res, &control.Error{Code: wire.CodeNotReady}
	}
	some, found := false, false
	for _, rt := range p.routes {
		if rt.login == nil || (req.Route != "" && rt.name != req.Route) {
			continue
		}
		lo := rt.login.throttle.Limiter().Lockout()
		if lo == nil {
			continue
		}
		some = true
		u, err := lo.Unlock(ctx, req.Username)
		switch {
		case errors.Is(err, login.ErrMissingCredentials), errors.Is(err, login.ErrInvalidUsername):
			return res, &control.Error{Code: wire.CodeInvalidRequest, Detail: "username must be 1 to 256 bytes of UTF-8 once trimmed and folded.", Err: err}
		case err != nil:
			return res, &control.Error{Code: wire.CodeStoreUnavailable, Err: err}
		}
		res.Routes = append(res.Routes, control.UnlockedRoute{Route: rt.name, Locked: u.Locked, Failures: u.Failures,
			RateLimitWindowSeconds: limit.CeilSeconds(rt.login.throttle.Limiter().Window())})
		found = found || u.Found()
	}
	switch {
	case !some && req.Route != "":
		return res, &control.Error{Code: wire.CodeNotFound, Detail: "No login route with a lockout has that name."}
	case !some:
		return res, &control.Error{Code: wire.CodeNotFound, Detail: "No login route has a lockout."}
	case !found:
		return res, &control.Error{Code: wire.CodeAccountNotLocked}
	}
	return res, nil
}

// QuotaShow returns the usage of a quota bucket. Errors are
// *control.Error values: 400 invalid_request, 404 not_found (no quota
// store: no route has a quota), 404 quota_bucket_not_found, 503
// store_unavailable.
func (g *Gateway) QuotaShow(ctx context.Context, b control.QuotaBucket) (control.QuotaUsage, error) {
	if g.quota == nil {
		return control.QuotaUsage{}, noQuota
	}
	u, err := g.quota.Show(ctx, quotaBucket(b))
	if err != nil {
		return control.QuotaUsage{}, quotaError(err)
	}
	return quotaUsage(b.Operation, u), nil
}

// QuotaReset forgets the receipts of a quota bucket's current window
// and returns its usage after the reset, with UsedBefore. Errors as
// QuotaShow's.
func (g *Gateway) QuotaReset(ctx context.Context, b control.QuotaBucket) (control.QuotaUsage, error) {
	if g.quota == nil {
		return control.QuotaUsage{}, noQuota
	}
	before, err := g.quota.Reset(ctx, quotaBucket(b))
	if err != nil {
		return control.QuotaUsage{}, quotaError(err)
	}
	used := before.Used
	after := before
	after.Used, after.Remaining = 0, after.Limit
	out := quotaUsage(b.Operation, after)
	out.UsedBefore = &used
	return out, nil
}

var noQuota = &control.Error{Code: wire.CodeNotFound, Detail: "No route has a quota."}

func quotaBucket(b control.QuotaBucket) quota.Bucket {
	return quota.Bucket{Project: b.Project, SubjectType: b.SubjectType, SubjectID: b.SubjectID, Operation: b.Operation}
}

func quotaUsage(op string, u quota.Usage) control.QuotaUsage {
	out := control.QuotaUsage{Operation: op, Limit: u.Limit, WindowMs: u.Window.Milliseconds(), Used: u.Used, Remaining: u.Remaining}
	if !u.WindowStart.IsZero() {
		s, r := u.WindowStart.UTC(), u.ResetsAt.UTC()
		out.WindowStart, out.ResetsAt = &s, &r
	}
	return out
}

// quotaError maps a quota.Inspector error to its answer. An invalid
// field's error names the field and the rule, never the value.
func quotaError(err error) error {
	var ie *quota.InvalidRequestError
	switch {
	case errors.As(err, &ie):
		return &control.Error{Code: wire.CodeInvalidRequest, Detail: "Invalid " + ie.Field + ": " + ie.Reason + ".", Err: err}
	case errors.Is(err, quota.ErrUnknownOperation):
		return &control.Error{Code: wire.CodeQuotaBucketNotFound, Detail: "No route has a quota with that operation.", Err: err}
	case errors.Is(err, quota.ErrBucketNotFound):
		return &control.Error{Code: wire.CodeQuotaBucketNotFound, Err: err}
	}
	return &control.Error{Code: wire.CodeStoreUnavailable, Err: err}
}
