package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Unlocking accounts and inspecting quotas
//
// POST /v1/unlock {"username": "...", "route": "..."} lifts the lockout
// of an account on every login route with a lockout (or on route only),
// and POST /v1/quota/show and POST /v1/quota/reset {"project": ...,
// "subject_type": ..., "subject_id": ..., "operation": ...} read and reset
// a quota bucket. They are POSTs with JSON bodies so that usernames and
// subject ids stay out of URLs (and so out of any log that records
// request lines). The gateway does the work (Config.Unlock, QuotaShow,
// QuotaReset); this file checks the bodies and writes the audit lines,
// which name the token, the action and the outcome, never the username
// or the subject.

// UnlockRequest is the body of POST /v1/unlock.
type UnlockRequest struct {
	// Username is the account, as a user types it at login: the
	// gateway normalizes it exactly as the login throttle does.
	Username string `json:"username"`
	// Route, when set, unlocks on that login route only; empty means
	// every login route with a lockout.
	Route string `json:"route,omitempty"`
}

// UnlockResult is the answer of POST /v1/unlock: what each login route
// held for the account, now removed. It never repeats the username.
type UnlockResult struct {
	Routes []UnlockedRoute `json:"routes"`
}

// UnlockedRoute is one login route's part of an [UnlockResult].
type UnlockedRoute struct {
	Route string `json:"route"`
	// Locked reports that the account was locked on the route.
	Locked bool `json:"locked"`
	// Failures is how many failed passwords were counted towards a lock.
	Failures int `json:"failures"`
	// RateLimitWindowSeconds is the route's rate-limit window (its
	// login.window, whole seconds), which an unlock does not lift: that
	// limit is kept per (client address, username), and the operator
	// cannot name the address. A client that used up its attempts at
	// this username still waits at most this long. Omitted when 0.
	RateLimitWindowSeconds int64 `json:"rate_limit_window_seconds,omitempty"`
}

// QuotaBucket is the body of POST /v1/quota/show and /v1/quota/reset:
// the bucket's key.
type QuotaBucket struct {
	Project     string `json:"project"`
	SubjectType string `json:"subject_type"`
	SubjectID   string `json:"subject_id"`
	Operation   string `json:"operation"`
}

// QuotaUsage is the answer of POST /v1/quota/show and /v1/quota/reset.
// For a reset it is the bucket's usage after it, and UsedBefore says how
// many receipts the reset forgot.
type QuotaUsage struct {
	Operation string `json:"operation"`
	Limit     int64  `json:"limit"`
	WindowMs  int64  `json:"window_ms"`
	// Used counts the receipts of the current window (0 when none is
	// running); Remaining is what the window still admits.
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
	// WindowStart and ResetsAt bound the current window, when one runs.
	WindowStart *time.Time `json:"window_start,omitempty"`
	ResetsAt    *time.Time `json:"resets_at,omitempty"`
	// UsedBefore is Used before a reset (reset answers only).
	UsedBefore *int64 `json:"used_before,omitempty"`
}

// ParseUnlock reads the body of an unlock (the API's and the console's):
// exactly one JSON object with a non-empty username and an optional
// route. Errors are *Error values ready to answer.
func ParseUnlock(body []byte) (UnlockRequest, error) {
	var req UnlockRequest
	if !decodeStrict(body, &req) || req.Username == "" {
		return UnlockRequest{}, badRequest(`Body must be {"username": string, "route": string (optional)} with no other members.`)
	}
	return req, nil
}

// ParseQuotaBucket reads the body of a quota show or reset: exactly one
// JSON object with the four members of [QuotaBucket]. The store checks
// their form. Errors are *Error values ready to answer.
func ParseQuotaBucket(body []byte) (QuotaBucket, error) {
	var b QuotaBucket
	if !decodeStrict(body, &b) {
		return QuotaBucket{}, badRequest(`Body must be {"project", "subject_type", "subject_id", "operation": string} with no other members.`)
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON object into v, refusing unknown
// members and trailing data.
func decodeStrict(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}

// AuditResult is the result word of an audit line for err: "ok", the
// problem code of an *Error, or "error".
func AuditResult(err error) string {
	var e *Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e):
		return e.Code
	}
	return "error"
}

// AuditUnlock writes the audit line of an unlock: who (a token id), the
// action, the routes that held something, and the result; never the
// username. attrs are prepended (the console's session tag).
func AuditUnlock(log *slog.Logger, msg, who string, res UnlockResult, err error, attrs ...any) {
	found := 0
	for _, r := range res.Routes {
		if r.Locked || r.Failures > 0 {
			found++
		}
	}
	args := append([]any{"who", who}, attrs...)
	args = append(args, "action", "unlock", "target", "account", "routes", found, "result", AuditResult(err))
	level := slog.LevelInfo
	if err != nil && AuditResult(err) == "error" {
		level = slog.LevelError
	}
	log.Log(context.Background(), level, msg, args...)
}

// AuditQuotaReset writes the audit line of a quota reset: who, the
// operation (a configured name) and the result; never the project or
// the subject.
func AuditQuotaReset(log *slog.Logger, msg, who string, b QuotaBucket, u QuotaUsage, err error, attrs ...any) {
	args := append([]any{"who", who}, attrs...)
	args = append(args, "action", "quota_reset", "target", "quota", "operation", auditName(b.Operation))
	if u.UsedBefore != nil {
		args = append(args, "used_before", *u.UsedBefore)
	}
	args = append(args, "result", AuditResult(err))
	log.Info(msg, args...)
}

// auditName is an operation name as an audit line may carry it: the
// operator's input, so only when it is a plain identifier.
func auditName(s string) string {
	if len(s) == 0 || len(s) > 128 {
		return "-"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return "-"
		}
	}
	return s
}

// operatorRoutes returns the endpoints Config.Unlock, QuotaShow and
// QuotaReset serve.
func (a *api) operatorRoutes() map[string]Endpoint {
	out := map[string]Endpoint{}
	if fn := a.cfg.Unlock; fn != nil {
		out["POST /v1/unlock"] = func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
			req, err := ParseUnlock(body)
			if err != nil {
				return 0, nil, err
			}
			res, err := fn(ctx, req)
			AuditUnlock(a.audit, "control audit", a.who, res, err)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, res, nil
		}
	}
	if fn := a.cfg.QuotaShow; fn != nil {
		out["POST /v1/quota/show"] = func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
			b, err := ParseQuotaBucket(body)
			if err != nil {
				return 0, nil, err
			}
			u, err := fn(ctx, b)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, u, nil
		}
	}
	if fn := a.cfg.QuotaReset; fn != nil {
		out["POST /v1/quota/reset"] = func(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
			b, err := ParseQuotaBucket(body)
			if err != nil {
				return 0, nil, err
			}
			u, err := fn(ctx, b)
			AuditQuotaReset(a.audit, "control audit", a.who, b, u, err)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, u, nil
		}
	}
	return out
}
