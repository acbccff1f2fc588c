package console

import (
	"context"
	"strings"
	"testing"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/wire"
)

// TestConsoleUnlockAndQuota: the console's unlock and quota endpoints
// pass the parsed body to Config.Unlock, QuotaShow and QuotaReset and
// send their answers; they need a session, the page's origin and a JSON
// body like every change; errors are the *control.Error's problems; the
// audit lines carry the session tag and never the username or subject;
// without the functions the endpoints are 404.
func TestConsoleUnlockAndQuota(t *testing.T) {
	var gotUnlock control.UnlockRequest
	var gotBucket control.QuotaBucket
	used := int64(3)
	f := newFixture(t, func(c *Config) {
		c.Unlock = func(_ context.Context, req control.UnlockRequest) (control.UnlockResult, error) {
			gotUnlock = req
			if req.Username == "nobody" {
				return control.UnlockResult{Routes: []control.UnlockedRoute{{Route: "login"}}}, &control.Error{Code: wire.CodeAccountNotLocked}
			}
			return control.UnlockResult{Routes: []control.UnlockedRoute{{Route: "login", Locked: true, Failures: 2}}}, nil
		}
		c.QuotaShow = func(_ context.Context, b control.QuotaBucket) (control.QuotaUsage, error) {
			gotBucket = b
			if b.SubjectID == "down" {
				return control.QuotaUsage{}, &control.Error{Code: wire.CodeStoreUnavailable}
			}
			return control.QuotaUsage{Operation: b.Operation, Limit: 5, Used: 3, Remaining: 2, WindowMs: 60000}, nil
		}
		c.QuotaReset = func(_ context.Context, b control.QuotaBucket) (control.QuotaUsage, error) {
			gotBucket = b
			return control.QuotaUsage{Operation: b.Operation, Limit: 5, Remaining: 5, WindowMs: 60000, UsedBefore: &used}, nil
		}
	})
	ck := f.login()

	w := f.change("POST", "/ui/api/unlock", `{"username": "Zelda9", "route": "login"}`, ck)
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"routes":[{"route":"login","locked":true,"failures":2}]}` {
		t.Fatalf("unlock: %d %s", w.Code, w.Body)
	}
	if gotUnlock != (control.UnlockRequest{Username: "Zelda9", Route: "login"}) {
		t.Errorf("Unlock got %+v", gotUnlock)
	}
	if w := f.change("POST", "/ui/api/unlock", `{"username": "nobody"}`, ck); w.Code != 404 || code(w) != "account_not_locked" {
		t.Errorf("nothing to unlock: %d %s", w.Code, w.Body)
	}
	for _, body := range []string{`{}`, `{"username": ""}`, `{"username": "a", "x": 1}`, `[]`} {
		if w := f.change("POST", "/ui/api/unlock", body, ck); w.Code != 400 || code(w) != "invalid_request" {
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
		}
	}
	// The checks every change gets.
	if w := f.change("POST", "/ui/api/unlock", `{"username": "Zelda9"}`, nil); w.Code != 401 || code(w) != "session_required" {
		t.Errorf("without a session: %d %s", w.Code, w.Body)
	}
	if w := f.do("POST", "/ui/api/unlock", `{"username": "Zelda9"}`, "Content-Type", "application/json", "Cookie", ck.String(),
		"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"); w.Code != 403 || code(w) != "cross_origin" {
		t.Errorf("cross-site: %d %s", w.Code, w.Body)
	}
	if w := f.change("POST", "/ui/api/unlock", `username=Zelda9`, ck, "Content-Type", "application/x-www-form-urlencoded"); w.Code != 415 {
		t.Errorf("a form body: %d %s", w.Code, w.Body)
	}
	if w := f.get("/ui/api/unlock", ck); w.Code != 405 {
		t.Errorf("GET: %d", w.Code)
	}

	const bucket = `{"project": "acme", "subject_type": "user", "subject_id": "yara", "operation": "exports"}`
	w = f.change("POST", "/ui/api/quota/show", bucket, ck)
	if u := decode[control.QuotaUsage](t, w); w.Code != 200 || u.Used != 3 || u.Remaining != 2 || u.Operation != "exports" {
		t.Errorf("show: %d %s", w.Code, w.Body)
	}
	if gotBucket != (control.QuotaBucket{Project: "acme", SubjectType: "user", SubjectID: "yara", Operation: "exports"}) {
		t.Errorf("QuotaShow got %+v", gotBucket)
	}
	w = f.change("POST", "/ui/api/quota/reset", bucket, ck)
	if u := decode[control.QuotaUsage](t, w); w.Code != 200 || u.UsedBefore == nil || *u.UsedBefore != 3 || u.Remaining != 5 {
		t.Errorf("reset: %d %s", w.Code, w.Body)
	}
	if w := f.change("POST", "/ui/api/quota/show", strings.Replace(bucket, "yara", "down", 1), ck); w.Code != 503 || code(w) != "store_unavailable" {
		t.Errorf("store down: %d %s", w.Code, w.Body)
	}
	if w := f.change("POST", "/ui/api/quota/show", `{"project": "acme"} `+"x", ck); w.Code != 400 {
		t.Errorf("bad body: %d %s", w.Code, w.Body)
	}

	audit := f.audit.String()
	if !strings.Contains(audit, `"who":"`+control.TokenID(token)+`","session":"`) ||
		!strings.Contains(audit, `"action":"unlock","target":"account","routes":1,"result":"ok"`) ||
		!strings.Contains(audit, `"action":"unlock","target":"account","routes":0,"result":"account_not_locked"`) ||
		!strings.Contains(audit, `"action":"quota_reset","target":"quota","operation":"exports","used_before":3,"result":"ok"`) {
		t.Errorf("audit lines:\n%s", audit)
	}
	for _, s := range []string{"Zelda9", "nobody", "acme", "yara"} {
		if strings.Contains(audit, s) {
			t.Errorf("the audit names %q:\n%s", s, audit)
		}
	}

	off := newFixture(t, nil)
	ck = off.login()
	for _, p := range []string{"/ui/api/unlock", "/ui/api/quota/show", "/ui/api/quota/reset"} {
		if w := off.change("POST", p, `{"username": "a"}`, ck); w.Code != 404 {
			t.Errorf("%s without the function: %d %s", p, w.Code, w.Body)
		}
	}
}
