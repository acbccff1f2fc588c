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

// Stable problem codes of the HTTP host and its bounded JSON API mode. The
// status each one is normally sent with is given in parentheses.
const (
	// CodeDraining: the process is shutting down and admits nothing new (503).
	CodeDraining = "draining"
	// CodeOverloaded: the in-flight admission bound is reached (503).
	CodeOverloaded = "overloaded"
	// CodeTimeout: the request timeout expired before the handler answered (504).
	CodeTimeout = "timeout"
	// CodeRequestTimeout: the client did not send its body in time (408).
	CodeRequestTimeout = "request_timeout"
	// CodeURLTooLong: the request target exceeds the URL bound (414).
	CodeURLTooLong = "url_too_long"
	// CodeTooManyHeaders: the request carries more header fields than allowed (431).
	CodeTooManyHeaders = "too_many_headers"
	// CodePayloadTooLarge: the request body exceeds its bound (413).
	CodePayloadTooLarge = "payload_too_large"
	// CodeUnsupportedMediaType: the body is not application/json (415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeUnsupportedContentEncoding: the body is compressed or otherwise
	// content-coded; only identity is accepted (415).
	CodeUnsupportedContentEncoding = "unsupported_content_encoding"
	// CodeInvalidContentLength: the body ended before its announced
	// Content-Length (400).
	CodeInvalidContentLength = "invalid_content_length"
	// CodeInvalidJSON: the body is not one well-formed JSON value (400).
	CodeInvalidJSON = "invalid_json"
	// CodeInvalidRequest: the request could not be read (400).
	CodeInvalidRequest = "invalid_request"
	// CodeNotFound: no route matches the path (404).
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: the path exists but not for this method (405).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeResponseTooLarge: the handler's answer exceeds the response bound (500).
	CodeResponseTooLarge = "response_too_large"
	// CodeInternal: the handler failed or panicked; nothing more is said (500).
	CodeInternal = "internal"
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
// p.RetryAfter > 0 it also sets the Retry-After header. A Status outside
// [400, 599] is a caller bug; it is sent as 500 rather than passed to
// WriteHeader, which would panic on an invalid code. Write never reads the
// request body and never panics.
func Write(w http.ResponseWriter, p Problem) {
	if p.Status < 400 || p.Status > 599 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	body, ok := p.encode()
	if !ok {
		p.Status, p.RetryAfter = http.StatusInternalServerError, 0
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(p.RetryAfter, 10))
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// WriteClose is Write plus "Connection: close", for rejections that happen
// before the request body was read: the server then closes the HTTP/1.1
// connection so unread body or pipelined bytes cannot keep it busy.
//
// It also expires the request's read side. Without that, net/http, after
// sending the answer, keeps reading an announced body of up to 256 KiB
// looking for its end before it closes, so a client that announces a small
// body and never sends it would hold the connection until the server's read
// timeout. (Over HTTP/2, Go's server turns "Connection: close" into a
// graceful GOAWAY for the whole connection, so HTTP/2 callers usually want
// Write instead.)
func WriteClose(w http.ResponseWriter, p Problem) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0)) // any past instant
	Write(w, p)
}

// internalBody is the fixed answer when a problem cannot be encoded.
const internalBody = `{"code":"internal","status":500,"title":"Internal error","type":"about:blank"}` + "\n"

// fixedProblem has the members of Problem in the sorted order that
// encoding/json uses for maps, so both encodings produce identical bytes.
type fixedProblem struct {
	Code       string `json:"code"`
	Detail     string `json:"detail,omitempty"`
	RetryAfter int64  `json:"retryAfter,omitempty"`
	Status     int    `json:"status"`
	Title      string `json:"title"`
	Type       string `json:"type"`
}

// encode renders p; ok is false when an Extra value cannot be encoded, in
// which case the fixed internal-error body is returned.
func (p Problem) encode() (body []byte, ok bool) {
	var b []byte
	var err error
	if len(p.Extra) == 0 {
		ra := p.RetryAfter
		if ra < 0 {
			ra = 0
		}
		b, err = json.Marshal(fixedProblem{
			Code: p.Code, Detail: p.Detail, RetryAfter: ra,
			Status: p.Status, Title: p.Title, Type: p.Type,
		})
	} else {
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
		b, err = json.Marshal(m)
	}
	if err != nil {
		// Only fixed, caller-controlled values reach here; a failure means
		// an unsupported Extra value. Fall back to a minimal fixed body.
		return []byte(internalBody), false
	}
	return append(b, '\n'), true
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
