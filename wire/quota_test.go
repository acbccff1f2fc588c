package wire_test

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

func TestQuotaProblem(t *testing.T) {
	cases := []struct {
		name       string
		d          quota.Decision
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"allowed", quota.Decision{Allowed: true, Limit: 8, Remaining: 3}, nil, 0, "", ""},
		{"replayed", quota.Decision{Allowed: true, Replayed: true}, nil, 0, "", ""},
		{"exceeded", quota.Decision{Limit: 8, RetryAfter: 1500 * time.Millisecond}, nil, 429, wire.CodeQuotaExceeded, "2"},
		{"exceeded exact", quota.Decision{Limit: 8, RetryAfter: 59 * time.Second}, nil, 429, wire.CodeQuotaExceeded, "59"},
		{"exceeded zero", quota.Decision{Limit: 8}, nil, 429, wire.CodeQuotaExceeded, "1"},
		{"unavailable", quota.Decision{}, quota.Unavailable(quota.ReasonCorrupt, "", "window start is in the future", nil), 503, wire.CodeQuotaUnavailable, "1"},
		{"unavailable sqlstate", quota.Decision{}, quota.Unavailable(quota.ReasonServer, "42501", "", nil), 503, wire.CodeQuotaUnavailable, "1"},
		{"unknown operation", quota.Decision{}, quota.ErrUnknownOperation, 503, wire.CodeQuotaUnavailable, "1"},
		{"unexpected error", quota.Decision{Allowed: true}, errors.New("boom: password=hunter2"), 503, wire.CodeQuotaUnavailable, "1"},
		{"invalid", quota.Decision{}, &quota.InvalidRequestError{Field: "receipt id", Reason: "empty"}, 400, wire.CodeQuotaInvalidRequest, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			wrote := wire.WriteQuota(rec, httptest.NewRequest("POST", "/", nil), c.d, c.err)
			if wrote != (c.status != 0) {
				t.Fatalf("WriteQuota wrote=%v", wrote)
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
			for _, leak := range []string{"future", "42501", "hunter2", "receipt", "unavailable:", "remaining", "limit"} {
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

func ExampleWriteQuota() {
	// A denied decision from a quota.Consumer.
	d := quota.Decision{Limit: 30, RetryAfter: 12300 * time.Millisecond}
	rec := httptest.NewRecorder()
	if wire.WriteQuota(rec, httptest.NewRequest("POST", "/", nil), d, nil) {
		fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
		fmt.Print(rec.Body.String())
	}
	// Any error that is not a malformed request fails closed.
	rec = httptest.NewRecorder()
	wire.WriteQuota(rec, httptest.NewRequest("POST", "/", nil), quota.Decision{}, quota.Unavailable(quota.ReasonTimeout, "", "", nil))
	fmt.Println(rec.Code, http.StatusText(rec.Code))
	// Output:
	// 429 13
	// {"code":"quota_exceeded","detail":"The quota for this operation is exhausted; retry later.","retryAfter":13,"status":429,"title":"Too Many Requests","type":"about:blank"}
	// 503 Service Unavailable
}
