package proxy

// The rules both engines follow. ServeHTTP (net/http's ReverseProxy and
// a retrying RoundTripper, proxy.go) and ServeHTTP1 (the fast engine,
// forward.go) differ in how they carry a request, not in what they
// decide: which request is tried again, which failure answers what,
// which inbound forwarding field is kept, when a connection that carried
// a body may carry another request. Each of those is decided here, once;
// rules_test.go runs each rule on both engines.
//
// The hop-by-hop list is h1.HopByHop (the fast engine, the gateway's
// forward-auth relay), the same list net/http/httputil's ReverseProxy
// removes on the net/http engine.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/bulwarkhq/bulwark/internal/fieldname"
	"github.com/bulwarkhq/bulwark/internal/tracectx"
	"github.com/bulwarkhq/bulwark/wire"
)

// # Retries

// idempotent reports whether method is idempotent (RFC 9110 §9.2.2):
// the effect of sending it twice is that of sending it once.
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// mayRetry is the retry rule of both engines: a failed attempt is sent
// again, to the next target, only for an idempotent method, asking for
// no protocol upgrade, whose body (if it has one) can be sent again.
// (That no response byte reached the client, the retry budget and Total
// are the engines' own checks on the way.)
func mayRetry(method string, body, replayable, upgrade bool) bool {
	return idempotent(method) && !upgrade && (!body || replayable)
}

// attempts returns where a request's round robin starts and how many
// attempts it may make: one, plus Upstream.Retries when retry (mayRetry)
// holds. Attempt i goes to target nth(first, i, len(targets)).
func (p *Proxy) attempts(retry bool) (first uint64, n int) {
	first = p.next.Add(1) - 1
	n = 1
	if retry {
		n += p.retries
	}
	return first, n
}

// nth is the target of attempt i of a request whose round robin starts
// at first, among n targets.
func nth(first uint64, i, n int) int { return int((first + uint64(i)) % uint64(n)) }

// logRetry logs attempt i (from 0), which follows a failure.
func (p *Proxy) logRetry(i int, last error) {
	p.log.Debug("retrying upstream request", "attempt", i+1, "reason", errorClass(last))
}

// replaysOnStale is net/http's rule for sending a request again, on a
// new connection, when the kept-alive connection it was sent on turns
// out to have been closed by the upstream while idle (nothing came
// back): the request has no body, and an idempotent method or an
// idempotency key (keyed).
func replaysOnStale(method string, body, keyed bool) bool {
	return !body && (idempotent(method) || keyed)
}

// idempotencyKeyFields are the fields whose presence (any value) makes a
// request keyed for replaysOnStale, as for net/http's Transport.
var idempotencyKeyFields = [...]string{"Idempotency-Key", "X-Idempotency-Key"}

// keepsAfterBody is the reuse rule of both engines for an exchange that
// carried a request body: its connection may carry another request only
// when the whole body was written before the answer came, and the answer
// is not an error. An upstream that answers early, or answers 401 or 413
// to an upload, typically reads no more of the body, or reads the rest
// as a request of its own.
func keepsAfterBody(sentFirst bool, status int) bool { return sentFirst && status < 400 }

// joinSlash is how both engines join a target's path prefix and a
// request path with one slash between them: add one when neither has
// it, drop the request path's own (drop = 1) when the prefix ends in
// one.
func joinSlash[T string | []byte](prefix string, path T) (add bool, drop int) {
	as := strings.HasSuffix(prefix, "/")
	bs := len(path) > 0 && path[0] == '/'
	switch {
	case as && bs:
		return false, 1
	case !as && !bs:
		return true, 0
	}
	return false, 0
}

// # Trace context

// keepsTraceContext is the rule of both engines for the W3C trace
// context fields a client sent: its traceparent and tracestate are
// forwarded only when it sent exactly one traceparent field and that is
// valid (tracectx.Parse); otherwise both are removed. A traceparent the
// caller asserts (Options.Assert, Forward.Asserted: the gateway's proxy
// span when it traces) replaces the client's, whose tracestate then
// goes along only if this rule kept it.
// n is the number of traceparent fields, first the first one's value.
func keepsTraceContext[T string | []byte](n int, first T) bool {
	return n == 1 && tracectx.Valid(first)
}

// # Failures

// failure is how a request that no attempt could serve ends: the outcome
// observed, the problem answered and the log line. The client's own
// state (gone, its body malformed, its host's timeout) is each engine's
// to find out; what follows from it is this table.
type failure struct {
	outcome string
	code    string // the problem's code; "" answers nothing (nobody listens)
	close   bool   // the client's connection closes (its body was not read to its end)
	level   slog.Level
	msg     string
}

var (
	// The client's body was malformed or cut short: its fault.
	failInvalidBody = failure{"invalid_body", wire.CodeInvalidBody, true, slog.LevelDebug, "malformed request body"}
	// The client went away (or its host answers its own timeout).
	failCanceled    = failure{"canceled", "", false, slog.LevelDebug, "client canceled upstream request"}
	failTimeout     = failure{"timeout", CodeUpstreamTimeout, false, slog.LevelWarn, "upstream timeout"}
	failInvalid     = failure{"error", CodeUpstreamInvalidResponse, false, slog.LevelWarn, "upstream invalid response"}
	failUnavailable = failure{"error", CodeUpstreamUnavailable, false, slog.LevelWarn, "upstream unavailable"}
	// No target in rotation: the transitions were logged (health.go),
	// not every request they turn away.
	failUnhealthy = failure{"unhealthy", CodeUpstreamUnhealthy, false, slog.LevelDebug, "no healthy upstream target"}
)

// upstreamFailure is the failure of a request whose client still waits,
// after its last attempt failed with err: a timeout (504
// upstream_timeout), a response head that could not be framed (502
// upstream_invalid_response), no target in rotation (503
// upstream_unhealthy), else 502 upstream_unavailable.
func upstreamFailure(err error) failure {
	switch {
	case errors.Is(err, errNoHealthy):
		return failUnhealthy
	case errorClass(err) == "timeout":
		return failTimeout
	case invalidResponse(err):
		return failInvalid
	}
	return failUnavailable
}

// answer logs f, with detail when there is one (never a client address
// or the request's URL), writes f's problem to w and returns f's
// outcome. r is the request, for a failure that closes the connection.
func (p *Proxy) answer(w http.ResponseWriter, r *http.Request, f failure, detail string) string {
	if detail != "" {
		p.log.Log(context.Background(), f.level, f.msg, "error", detail)
	} else {
		p.log.Log(context.Background(), f.level, f.msg)
	}
	switch {
	case f.code == "":
	case f.close:
		wire.WriteClose(w, r, wire.New(f.code))
	default:
		wire.Write(w, wire.New(f.code))
	}
	return f.outcome
}

// # Forwarding fields

// fwdKind is what both engines do with an inbound field before they
// write their own forwarding fields (see the package documentation).
type fwdKind uint8

const (
	fwdRelay     fwdKind = iota // not a forwarding field, or one a trusted proxy's that is relayed
	fwdDrop                     // an alias from anyone; any X-Forwarded-* from an untrusted client
	fwdFor                      // X-Forwarded-For from a trusted proxy: the chain is extended
	fwdHost                     // X-Forwarded-Host from a trusted proxy: kept if single (edgeValue)
	fwdProto                    // X-Forwarded-Proto from a trusted proxy: kept if single (edgeValue)
	fwdForwarded                // Forwarded: replaced, extended when trusted and well-formed
)

// forwarding classifies the inbound field name (any case) for a request
// whose forwarding fields come from a trusted proxy or not. It does not
// allocate.
func forwarding[T string | []byte](name T, trusted bool) fwdKind {
	const xf = "x-forwarded-"
	switch {
	case forwardingAlias(name):
		return fwdDrop
	case len(name) > len(xf) && fieldname.Equal(name[:len(xf)], xf):
		// (No '_' in name: that was an alias.)
		switch {
		case !trusted:
			return fwdDrop // only a trusted proxy may speak about earlier hops
		case fieldname.Equal(name, "x-forwarded-for"):
			return fwdFor
		case fieldname.Equal(name, "x-forwarded-host"):
			return fwdHost
		case fieldname.Equal(name, "x-forwarded-proto"):
			return fwdProto
		}
	case fieldname.Equal(name, "forwarded"):
		return fwdForwarded
	}
	return fwdRelay
}

// edgeValue returns what a trusted proxy said about the original
// request in X-Forwarded-Host or X-Forwarded-Proto (vs, the field's
// values), kept only when it is one non-empty value.
func edgeValue[T string | []byte](vs []T) (T, bool) {
	if len(vs) == 1 && len(vs[0]) > 0 {
		return vs[0], true
	}
	var zero T
	return zero, false
}

// forwardingAlias reports a field name that is not X-Forwarded-* but
// reads as one where '_' and '-' are the same: CGI-style servers (PHP,
// WSGI and CGI gateways) see X_Forwarded_For as HTTP_X_FORWARDED_FOR,
// exactly like X-Forwarded-For. A genuine proxy writes the hyphenated
// names, so both engines drop these from every client, trusted or not.
func forwardingAlias[T string | []byte](name T) bool {
	const xf = "x-forwarded-"
	return len(name) > len(xf) && fieldname.Underscored(name) && fieldname.Equal(name[:len(xf)], xf)
}

// maxForwardedBytes bounds an inbound Forwarded header that is extended.
const maxForwardedBytes = 8 << 10

// validForwarded reports whether s is a well-formed RFC 7239 Forwarded
// field value: elements separated by ",", pairs by ";", each pair
// token "=" (token / quoted-string). Empty elements are tolerated.
func validForwarded(s string) bool {
	if len(s) > maxForwardedBytes {
		return false
	}
	i := 0
	skipOWS := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	token := func() bool {
		j := i
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		return i > j
	}
	for {
		skipOWS()
		if i == len(s) {
			return true
		}
		if s[i] == ',' || s[i] == ';' {
			i++ // empty element or pair
			continue
		}
		if !token() {
			return false
		}
		if i == len(s) || s[i] != '=' {
			return false
		}
		i++
		if i < len(s) && s[i] == '"' {
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' {
					// quoted-pair: "\" (HTAB / SP / VCHAR / obs-text)
					if i+1 >= len(s) || s[i+1] < 0x20 && s[i+1] != '\t' || s[i+1] == 0x7f {
						return false
					}
					i += 2
					continue
				}
				i++
				if c == '"' {
					closed = true
					break
				}
				if c < 0x20 && c != '\t' || c == 0x7f {
					return false
				}
			}
			if !closed {
				return false
			}
		} else if !token() {
			return false
		}
		skipOWS()
		if i == len(s) {
			return true
		}
		if s[i] != ',' && s[i] != ';' {
			return false
		}
		i++
	}
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// appendForwardedElement appends one RFC 7239 element to b. Values that
// are not tokens are quoted; an IPv6 node is always quoted with
// brackets.
func appendForwardedElement(b []byte, remoteAddr, host, proto string) []byte {
	node := ""
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		node = h
	}
	return appendForwardedNode(b, node, host, proto)
}

// appendForwardedNode is appendForwardedElement for a node already split
// off its port ("" for none: "unknown").
func appendForwardedNode(b []byte, node, host, proto string) []byte {
	if node == "" {
		node = "unknown"
	}
	b = append(b, "for="...)
	if strings.Contains(node, ":") {
		b = append(b, `"[`...)
		b = append(b, node...)
		b = append(b, `]"`...)
	} else {
		b = append(b, node...)
	}
	if host != "" {
		b = append(b, ";host="...)
		b = appendQuotedIfNeeded(b, host)
	}
	b = append(b, ";proto="...)
	return append(b, proto...)
}

// appendQuotedIfNeeded appends s, as a quoted-string (RFC 9110 §5.6.4)
// unless it is a token.
func appendQuotedIfNeeded(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			b = append(b, '"')
			for j := 0; j < len(s); j++ {
				if s[j] == '\\' || s[j] == '"' {
					b = append(b, '\\')
				}
				b = append(b, s[j])
			}
			return append(b, '"')
		}
	}
	return append(b, s...)
}

// # Timeouts and errors

var (
	errConnectTimeout = &timeoutError{"connect timeout"}
	errPerTryTimeout  = &timeoutError{"per-try timeout"}
	errTotalTimeout   = &timeoutError{"total timeout"}
)

type timeoutError struct{ what string }

func (e *timeoutError) Error() string { return "proxy: " + e.what }
func (e *timeoutError) Timeout() bool { return true }

// Temporary is part of net.Error; a timeout says nothing about later tries.
func (e *timeoutError) Temporary() bool { return false }

// errorClass maps an error to timeout, canceled or error.
func errorClass(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "error"
}

// invalidResponse reports whether err says the upstream's response head
// could not be framed (h1.ParseResponse refused it, or it switched
// protocols unasked), as opposed to the upstream being unreachable,
// closing or timing out. Both engines read responses with the same
// parser (forward.go, transport.go).
func invalidResponse(err error) bool { return errors.Is(err, errBadResponse) }

// describe renders err for a log line without the request URL (which can
// carry query secrets): a *url.Error is reduced to its cause.
func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
