package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/wire"
)

// TestCtlUnlockAndQuota: ctl unlock USERNAME [--route R] and ctl quota
// show|reset P ST SID OP send what the API expects, print its answers
// (the username never), exit 1 with the problem code on an API error
// and 2 on a usage error. (Against a gateway's real stores:
// gateway.TestUnlockAndQuotaCluster drives the same client.)
func TestCtlUnlockAndQuota(t *testing.T) {
	allow, _ := ipset.New(ipset.Config{Name: "allow", Capacity: 10})
	deny, _ := ipset.New(ipset.Config{Name: "deny", Capacity: 10})
	srv := httptest.NewUnstartedServer(nil)
	var unlocks []control.UnlockRequest
	var buckets []control.QuotaBucket
	resets := time.Date(2026, 12, 7, 12, 5, 0, 0, time.UTC)
	used := int64(4)
	h, err := control.New(control.Config{
		Allow: allow, Deny: deny, Token: ctlTestToken, Addr: srv.Listener.Addr().String(),
		Audit: slog.New(slog.DiscardHandler),
		Unlock: func(_ context.Context, req control.UnlockRequest) (control.UnlockResult, error) {
			unlocks = append(unlocks, req)
			if req.Username == "nobody" {
				return control.UnlockResult{}, &control.Error{Code: wire.CodeAccountNotLocked}
			}
			return control.UnlockResult{Routes: []control.UnlockedRoute{{Route: "login", Locked: true, Failures: 0, RateLimitWindowSeconds: 60}, {Route: "admin", Failures: 2, RateLimitWindowSeconds: 300}, {Route: "sso"}}}, nil
		},
		QuotaShow: func(_ context.Context, b control.QuotaBucket) (control.QuotaUsage, error) {
			buckets = append(buckets, b)
			if b.SubjectID == "ghost" {
				return control.QuotaUsage{}, &control.Error{Code: wire.CodeQuotaBucketNotFound}
			}
			return control.QuotaUsage{Operation: b.Operation, Limit: 5, Used: 4, Remaining: 1, WindowMs: 60000, ResetsAt: &resets}, nil
		},
		QuotaReset: func(_ context.Context, b control.QuotaBucket) (control.QuotaUsage, error) {
			buckets = append(buckets, b)
			return control.QuotaUsage{Operation: b.Operation, Limit: 5, Remaining: 5, WindowMs: 60000, ResetsAt: &resets, UsedBefore: &used}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	env := map[string]string{"BULWARK_CONTROL_ADDR": srv.URL, "BULWARK_CONTROL_TOKEN": ctlTestToken, "BULWARK_STATE_DIR": t.TempDir()}
	run := func(args ...string) (int, string, string) { return ctlRun(env, args...) }

	code, out, errs := run("unlock", "Alice", "--route", "login")
	if want := "route login: unlocked (0 failed passwords forgotten)\nroute admin: not locked; 2 failed passwords forgotten\nroute sso: nothing to unlock\nnot lifted: the rate limit per (client address, username); a client that used up its attempts waits up to 300s\n"; code != 0 || out != want {
		t.Fatalf("ctl unlock: %d %q %q", code, out, errs)
	}
	if len(unlocks) != 1 || unlocks[0] != (control.UnlockRequest{Username: "Alice", Route: "login"}) || strings.Contains(out, "Alice") {
		t.Errorf("unlock requests %+v", unlocks)
	}
	if code, _, errs := run("unlock", "nobody"); code != 1 || !strings.Contains(errs, "404 account_not_locked") {
		t.Errorf("nothing to unlock: %d %q", code, errs)
	}
	if code, _, _ := run("unlock"); code != 2 {
		t.Errorf("unlock without a username: %d", code)
	}
	if code, _, _ := run("unlock", "a", "b"); code != 2 {
		t.Errorf("unlock with two usernames: %d", code)
	}

	code, out, errs = run("quota", "show", "acme", "user", "alice", "exports")
	if want := "exports: 4 of 5 used, 1 remaining per 1m0s; window resets 2026-12-07T12:05:00Z\n"; code != 0 || out != want {
		t.Fatalf("ctl quota show: %d %q %q", code, out, errs)
	}
	code, out, errs = run("quota", "reset", "acme", "user", "alice", "exports")
	if want := "reset: 4 receipts forgotten\nexports: 0 of 5 used, 5 remaining per 1m0s; window resets 2026-12-07T12:05:00Z\n"; code != 0 || out != want {
		t.Fatalf("ctl quota reset: %d %q %q", code, out, errs)
	}
	if code, out, _ := run("--json", "quota", "reset", "acme", "user", "alice", "exports"); code != 0 || !strings.Contains(out, `"used_before": 4`) {
		t.Errorf("ctl --json quota reset: %d %q", code, out)
	}
	want := control.QuotaBucket{Project: "acme", SubjectType: "user", SubjectID: "alice", Operation: "exports"}
	if len(buckets) != 3 || buckets[0] != want || buckets[1] != want {
		t.Errorf("buckets %+v", buckets)
	}
	if code, _, errs := run("quota", "show", "acme", "user", "ghost", "exports"); code != 1 || !strings.Contains(errs, "404 quota_bucket_not_found") {
		t.Errorf("a bucket never charged: %d %q", code, errs)
	}
	for _, args := range [][]string{{"quota"}, {"quota", "show", "acme", "user", "alice"}, {"quota", "drop", "a", "b", "c", "d"}} {
		if code, _, _ := run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
