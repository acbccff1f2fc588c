// Package wire writes Bulwark's HTTP answers: RFC 9457 problem details with
// a stable machine code, integer-second Retry-After, and the rate-limit
// header fields. Every protection layer answers through it so that clients
// see one consistent, low-sensitivity format.
//
// Nothing written here may carry a client address, a username, a
// credential, SQL, a connection string or a stack trace: callers pass only
// fixed codes and fixed titles.
package wire

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/bulwarkhq/bulwark/limit"
)

// ContentType is the media type of problem details (RFC 9457).
const ContentType = "application/problem+json"

// Stable problem codes. The seed-fixed ones are kept verbatim.
const (
	CodeAuthenticationRateLimited       = "authentication_rate_limited"
	CodeAuthenticationShieldUnavailable = "authentication_shield_unavailable"
	CodeQuotaExceeded                   = "quota_exceeded"
	CodeQuotaUnavailable                = "quota_unavailable"
	CodeLoginRateLimitExceeded          = "rate-limit-exceeded"
	CodeNotReady                        = "not_ready"
	CodeRateLimited                     = "rate_limited"
)

// Problem is an RFC 9457 problem details object. Code is Bulwark's stable
// machine-readable code; Title is a fixed human sentence for that code.
// Detail must never contain request data or internal error text.
type Problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail,omitempty"`
	// Type defaults to "about:blank" when empty.
	Type string `json:"type"`
	// RetryAfter, when > 0, is echoed as the integer "retryAfter" member
	// (seconds) and also set as the Retry-After header by Write.
	RetryAfter int64 `json:"retryAfter,omitempty"`
	// Extra holds additional members (for example the login layer's
	// "errorCode"). Keys must not collide with the fields above.
	Extra map[string]any `json:"-"`
}

// Write sends p as application/problem+json with status p.Status. When
// p.RetryAfter > 0 it also sets the Retry-After header.
func Write(w http.ResponseWriter, p Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(p.RetryAfter, 10))
	}
	body := p.encode()
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// WriteClose is Write plus "Connection: close", for rejections that happen
// before the request body was read: the server then closes the HTTP/1.1
// connection so unread body or pipelined bytes cannot keep it busy.
func WriteClose(w http.ResponseWriter, p Problem) {
	w.Header().Set("Connection", "close")
	Write(w, p)
}

func (p Problem) encode() []byte {
	m := make(map[string]any, 6+len(p.Extra))
	for k, v := range p.Extra {
		m[k] = v
	}
	m["type"] = p.Type
	m["status"] = p.Status
	m["code"] = p.Code
	m["title"] = p.Title
	if p.Detail != "" {
		m["detail"] = p.Detail
	}
	if p.RetryAfter > 0 {
		m["retryAfter"] = p.RetryAfter
	}
	b, err := json.Marshal(m)
	if err != nil {
		// Only fixed, caller-controlled values reach here; a failure means
		// an unsupported Extra value. Fall back to a minimal fixed body.
		return []byte(`{"type":"about:blank","status":500,"code":"internal","title":"Internal error"}`)
	}
	return append(b, '\n')
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int64 { return limit.CeilSeconds(d) }

// SetRetryAfter sets the Retry-After header to d rounded up to whole
// seconds (at least 1) and returns the value written.
func SetRetryAfter(h http.Header, d time.Duration) int64 {
	s := RetryAfterSeconds(d)
	h.Set("Retry-After", strconv.FormatInt(s, 10))
	return s
}

// SetRateLimit sets the IETF RateLimit and RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers) for a policy named name that
// allows limit units per window, with remaining units left and reset until
// the quota is fully restored.
func SetRateLimit(h http.Header, name string, limit, remaining int64, window, reset time.Duration) {
	if remaining < 0 {
		remaining = 0
	}
	w := int64(window / time.Second)
	if w < 1 {
		w = 1
	}
	r := int64(0)
	if reset > 0 {
		r = RetryAfterSeconds(reset)
	}
	h.Set("RateLimit-Policy", `"`+name+`";q=`+strconv.FormatInt(limit, 10)+`;w=`+strconv.FormatInt(w, 10))
	h.Set("RateLimit", `"`+name+`";r=`+strconv.FormatInt(remaining, 10)+`;t=`+strconv.FormatInt(r, 10))
}
