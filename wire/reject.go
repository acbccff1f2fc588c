package wire

import (
	"net/http"
	"strconv"
)

// Rejection is a refusal a middleware is about to answer: which layer
// refuses, why (a fixed word), the problem it answers with by default,
// and whether that answer ends the HTTP/1.x connection. Every Bulwark
// middleware (ratelimit, login, shield, guard) describes its refusals
// so, for its RejectHandler and OnRejectRequest hooks.
type Rejection struct {
	// Layer is the refusing layer: "ratelimit", "login", "shield" or
	// "guard".
	Layer string
	// Reason is a fixed word fit for a metric label, never request data:
	// the layer's reason ("over_limit", "locked", "peer", "overloaded",
	// ...) or, for a request refused before counting, its problem code.
	Reason string
	// Problem is the layer's default answer. Its RetryAfter, when set, is
	// sent as Retry-After whoever answers.
	Problem Problem
	// Close reports that the answer must end the HTTP/1.x connection
	// (the request's body was not read, or the layer always closes).
	Close bool
}

// RejectHandler answers a refusal in place of a middleware's default
// problem+json answer: an HTML page for browsers, an application's own
// error format. When it runs, the layer has already set the fields
// that belong to the refusal on w.Header() (RateLimit, X-RateLimit-*,
// Retry-After) and, when rej.Close, made the HTTP/1.x connection close
// after the answer, so a handler cannot keep open a connection the layer
// ends. It must write an answer (rej.Write writes the default one), must
// not read the request body, and must not keep w or r.
type RejectHandler func(w http.ResponseWriter, r *http.Request, rej Rejection)

// Write sends rej's default answer: its Problem, with WriteClose when
// rej.Close, else Write.
func (rej Rejection) Write(w http.ResponseWriter, r *http.Request) {
	if rej.Close {
		WriteClose(w, r, rej.Problem)
		return
	}
	Write(w, rej.Problem)
}

// Answer answers rej with h, or with rej.Write when h is nil. Before h
// runs it sets Retry-After from rej.Problem and, when rej.Close, makes
// the HTTP/1.x connection close after the answer.
func (rej Rejection) Answer(w http.ResponseWriter, r *http.Request, h RejectHandler) {
	if h == nil {
		rej.Write(w, r)
		return
	}
	if rej.Problem.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(rej.Problem.RetryAfter, 10))
	}
	if rej.Close {
		endConnection(w, r)
	}
	h(w, r, rej)
}
