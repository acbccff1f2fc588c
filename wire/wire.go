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

// Problem is an RFC 9457 problem details object. Code is Bulwark's stable
// machine-readable code (see [Codes]). Leave Title and Detail empty: Write
// fills Title with the HTTP status phrase (RFC 9457 §4.2.1 asks exactly
// that of problems whose type is "about:blank") and Detail with the code's
// fixed sentence. Detail must never contain request data or internal
// error text. [New] builds a Problem from a code alone.
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

// complete fills the defaults Write applies: a valid status, the type,
// the title and the code's detail.
func (p Problem) complete() Problem {
	if p.Status < 400 || p.Status > 599 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if p.Detail == "" {
		if ci, ok := registry[p.Code]; ok {
			p.Detail = ci.detail
		}
	}
	return p
}

// Write sends p as application/problem+json with status p.Status. When
// p.RetryAfter > 0 it also sets the Retry-After header. A Status outside
// [400, 599] is a caller bug; it is sent as 500 rather than passed to
// WriteHeader, which would panic on an invalid code. Write never reads the
// request body and never panics.
func Write(w http.ResponseWriter, p Problem) {
	p = p.complete()
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

// WriteClose is Write for a rejection that happens before the request body
// was read, where the connection should not be reused: over HTTP/1.x it
// adds "Connection: close" and expires the request's read side, so unread
// body or pipelined bytes cannot keep the connection busy. (Without the
// expiry net/http, after sending the answer, keeps reading an announced
// body of up to 256 KiB looking for its end, so a client that announces a
// small body and never sends it would hold the connection until the
// server's read timeout.)
//
// Over HTTP/2 and HTTP/3 it is plain Write: the rejection ends only its
// stream. Go's HTTP/2 server turns "Connection: close" into a GOAWAY for
// the whole connection, and one abuser behind a multiplexing load balancer
// would otherwise churn the connection every client shares.
func WriteClose(w http.ResponseWriter, r *http.Request, p Problem) {
	if r == nil || r.ProtoMajor < 2 {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0)) // any past instant
	}
	Write(w, p)
}

// Reject is Write for a rejection that happens before the request body
// was read, on a connection worth keeping: the HTTP/1.x connection is
// closed (as by WriteClose) only when the request announced a body that
// is still unread; a bodiless request keeps its keep-alive connection.
// Over HTTP/2 only the stream ends.
func Reject(w http.ResponseWriter, r *http.Request, p Problem) {
	if r != nil && r.ProtoMajor < 2 && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		WriteClose(w, r, p)
		return
	}
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

// RateLimit describes one rate-limit policy and the client's current
// standing for the IETF RateLimit and RateLimit-Policy header fields
// (draft-ietf-httpapi-ratelimit-headers-10).
type RateLimit struct {
	// Policy names the policy (a short token such as "route", "login",
	// "shield" or a route name; never a client or key).
	Policy string
	// Limit is the quota: units per Window ("q"); 0 discloses no policy
	// (see SetRateLimit).
	Limit int64
	// Window is the policy's time window ("w"), sent in whole seconds (at
	// least 1).
	Window time.Duration
	// Remaining is the units left now ("r"); negative is sent as 0.
	Remaining int64
	// Reset is the time until the quota is fully restored ("t"), sent
	// rounded up to whole seconds; 0 means now.
	Reset time.Duration
}

// SetRateLimit sets the RateLimit-Policy and RateLimit fields for rl:
//
//	RateLimit-Policy: "route";q=100;w=60
//	RateLimit: "route";r=0;t=3
//
// A Limit of 0 leaves RateLimit-Policy out: a policy whose size must not
// be disclosed (the shield's: it is the deployment's capacity) sends only
// the client's standing.
func SetRateLimit(h http.Header, rl RateLimit) {
	remaining := max(rl.Remaining, 0)
	w := max(int64(rl.Window/time.Second), 1)
	r := int64(0)
	if rl.Reset > 0 {
		r = RetryAfterSeconds(rl.Reset)
	}
	name := quotePolicy(rl.Policy)
	if rl.Limit > 0 {
		h.Set("RateLimit-Policy", name+`;q=`+strconv.FormatInt(rl.Limit, 10)+`;w=`+strconv.FormatInt(w, 10))
	}
	h.Set("RateLimit", name+`;r=`+strconv.FormatInt(remaining, 10)+`;t=`+strconv.FormatInt(r, 10))
}

// quotePolicy renders a policy name as a structured-field string. Names
// are configuration words; a character a string cannot carry is replaced.
func quotePolicy(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
