package quota_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/wire"
)

func TestProblemFor(t *testing.T) {
	cases := []struct {
		name       string
		d          quota.Decision
		err        error
		status     int
		code       string
		retryAfter string
		rateLimit  [2]string // RateLimit-Policy, RateLimit
	}{
		{"allowed", quota.Decision{Allowed: true, Limit: 8, Remaining: 3, Window: time.Minute}, nil, 0, "", "", [2]string{}},
		{"replayed", quota.Decision{Allowed: true, Replayed: true, Limit: 8, Window: time.Minute}, nil, 0, "", "", [2]string{}},
		{"exceeded", quota.Decision{Denial: quota.DenialExhausted, Limit: 8, Window: time.Minute, RetryAfter: 1500 * time.Millisecond},
			nil, 429, wire.CodeQuotaExceeded, "2", [2]string{`"quota";q=8;w=60`, `"quota";r=0;t=2`}},
		{"exceeded exact", quota.Decision{Denial: quota.DenialExhausted, Limit: 1000, Window: 5 * time.Minute, RetryAfter: 59 * time.Second},
			nil, 429, wire.CodeQuotaExceeded, "59", [2]string{`"quota";q=1000;w=300`, `"quota";r=0;t=59`}},
		{"exceeded zero", quota.Decision{Denial: quota.DenialExhausted, Limit: 8, Window: time.Second},
			nil, 429, wire.CodeQuotaExceeded, "1", [2]string{`"quota";q=8;w=1`, `"quota";r=0;t=0`}},
		// A hand-built denial without Denial, limit or window: still
		// quota_exceeded, without RateLimit fields it cannot fill.
		{"exceeded bare", quota.Decision{RetryAfter: time.Second}, nil, 429, wire.CodeQuotaExceeded, "1", [2]string{}},
		{"key reused", quota.Decision{Denial: quota.DenialKeyReused, Limit: 8, Window: time.Minute, Remaining: 5, RetryAfter: 30 * time.Second},
			nil, 422, wire.CodeIdempotencyKeyReused, "", [2]string{}},
		{"replay limit", quota.Decision{Denial: quota.DenialReplayLimit, Limit: 8, Window: time.Minute, Remaining: 5, RetryAfter: 41200 * time.Millisecond},
			nil, 429, wire.CodeIdempotencyReplayLimit, "42", [2]string{}},
		{"replay limit zero", quota.Decision{Denial: quota.DenialReplayLimit, Limit: 8, Window: time.Minute},
			nil, 429, wire.CodeIdempotencyReplayLimit, "1", [2]string{}},
		{"unknown denial", quota.Decision{Denial: 99, Limit: 8, Window: time.Minute, RetryAfter: time.Second},
			nil, 429, wire.CodeQuotaExceeded, "1", [2]string{`"quota";q=8;w=60`, `"quota";r=0;t=1`}},
		{"unavailable", quota.Decision{}, quota.Unavailable(quota.ReasonCorrupt, "", "window start is in the future", nil), 503, wire.CodeQuotaUnavailable, "1", [2]string{}},
		{"unavailable sqlstate", quota.Decision{}, quota.Unavailable(quota.ReasonServer, "42501", "", nil), 503, wire.CodeQuotaUnavailable, "1", [2]string{}},
		{"unknown operation", quota.Decision{}, quota.ErrUnknownOperation, 503, wire.CodeQuotaUnavailable, "1", [2]string{}},
		{"unexpected error", quota.Decision{Allowed: true}, errors.New("boom: password=hunter2"), 503, wire.CodeQuotaUnavailable, "1", [2]string{}},
		// An error wins over a decision that came with it.
		{"error with denial", quota.Decision{Denial: quota.DenialKeyReused, Limit: 8, Window: time.Minute}, quota.Unavailable(quota.ReasonTimeout, "", "", nil),
			503, wire.CodeQuotaUnavailable, "1", [2]string{}},
		{"invalid", quota.Decision{}, &quota.InvalidRequestError{Field: "receipt id", Reason: "empty"}, 400, wire.CodeQuotaInvalidRequest, "", [2]string{}},
		{"invalid fingerprint", quota.Decision{}, &quota.InvalidRequestError{Field: "fingerprint", Reason: "missing (all zero)"}, 400, wire.CodeQuotaInvalidRequest, "", [2]string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			wrote := quota.Reject(rec, httptest.NewRequest("POST", "/", nil), c.d, c.err)
			if wrote != (c.status != 0) {
				t.Fatalf("Reject wrote=%v", wrote)
			}
			if !wrote {
				if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
					t.Fatal("an allowed decision must write nothing")
				}
				return
			}
			if rec.Code != c.status || rec.Header().Get("Retry-After") != c.retryAfter {
				t.Fatalf("status %d Retry-After %q; want %d %q", rec.Code, rec.Header().Get("Retry-After"), c.status, c.retryAfter)
			}
			if got := [2]string{rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit")}; got != c.rateLimit {
				t.Fatalf("RateLimit-Policy, RateLimit = %q; want %q", got, c.rateLimit)
			}
			if p, ok := quota.ProblemFor(c.d, c.err); !ok || p.Status != c.status || p.Code != c.code {
				t.Fatalf("ProblemFor = %+v, %v", p, ok)
			}
			if ct := rec.Header().Get("Content-Type"); ct != wire.ContentType {
				t.Fatalf("Content-Type %q", ct)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body["code"] != c.code || body["status"] != float64(c.status) {
				t.Fatalf("body %v", body)
			}
			// Only fixed members: no counts, limits, identifiers or error text.
			for k := range body {
				switch k {
				case "type", "status", "code", "title", "retryAfter":
				case "detail":
					if _, want, _ := wire.Lookup(c.code); body[k] != want {
						t.Fatalf("detail %v is not the code's fixed sentence", body[k])
					}
				default:
					t.Fatalf("unexpected member %q in %v", k, body)
				}
			}
			raw := rec.Body.String()
			// (The members are checked above; this catches values.)
			for _, leak := range []string{"future", "42501", "hunter2", "receipt", "fingerprint", "unavailable:", "remaining",
				"timeout", `"limit"`, "q=", ":8,", ":5,", "1000", "300"} {
				if strings.Contains(strings.ToLower(raw), leak) {
					t.Fatalf("body %s leaks %q", raw, leak)
				}
			}
			if c.retryAfter != "" && fmt.Sprint(body["retryAfter"]) != c.retryAfter {
				t.Fatalf("retryAfter member %v, header %s", body["retryAfter"], c.retryAfter)
			}
		})
	}
}

func ExampleReject() {
	// A denied decision from a quota.Consumer: the quota is exhausted.
	d := quota.Decision{Denial: quota.DenialExhausted, Limit: 30, Window: time.Minute, RetryAfter: 12300 * time.Millisecond}
	rec := httptest.NewRecorder()
	if quota.Reject(rec, httptest.NewRequest("POST", "/", nil), d, nil) {
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
		fmt.Print(rec.Body.String())
		fmt.Println(rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
	}
	// The Idempotency-Key was counted for another request; then, the
	// same request was replayed too often.
	for _, denial := range []quota.Denial{quota.DenialKeyReused, quota.DenialReplayLimit} {
		d.Denial = denial
		rec = httptest.NewRecorder()
		quota.Reject(rec, httptest.NewRequest("POST", "/", nil), d, nil)
		fmt.Printf("%d Retry-After=%q\n", rec.Code, rec.Header().Get("Retry-After"))
		fmt.Print(rec.Body.String())
	}
	// Any error that is not a malformed request fails closed.
	rec = httptest.NewRecorder()
	quota.Reject(rec, httptest.NewRequest("POST", "/", nil), quota.Decision{}, quota.Unavailable(quota.ReasonTimeout, "", "", nil))
	fmt.Println(rec.Code, http.StatusText(rec.Code))
	// Output:
	// 429 13
	// {"code":"quota_exceeded","detail":"The quota for this operation is exhausted; retry later.","retryAfter":13,"status":429,"title":"Too Many Requests","type":"about:blank"}
	// "quota";q=30;w=60 "quota";r=0;t=13
	// 422 Retry-After=""
	// {"code":"idempotency_key_reused","detail":"This Idempotency-Key was used for a different request.","status":422,"title":"Unprocessable Entity","type":"about:blank"}
	// 429 Retry-After="13"
	// {"code":"idempotency_replay_limit","detail":"This request was replayed too many times with its Idempotency-Key.","retryAfter":13,"status":429,"title":"Too Many Requests","type":"about:blank"}
	// 503 Service Unavailable
}
