package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/host"
)

// HTTP-01 on the gateway's own cleartext listeners
//
// The CA asks for http://<domain>/.well-known/acme-challenge/<token> on
// port 80, which is usually a cleartext listener of the gateway itself:
// one with redirect_to_https, or one that proxies. With listen[].tls.acme
// and the http-01 challenge, every cleartext listener answers that
// request first (acmeHTTP01, one implementation for net/http and the
// fast engine), and only when it is the CA's: a GET of the challenge
// path with a token of base64url characters, for a Host that is one of
// the managed domains, and a challenge the ACME issuer has pending for
// that domain with that very token (in this process, or in the shared
// storage for a challenge another replica of the cluster presented).
// Anything else (another path, host, method or token, HEAD, a query)
// falls through unchanged to the redirect or the routes.
//
// A proxying listener answers too: the gateway holds the certificates of
// its domains, so a challenge for them is the gateway's own; an
// upstream that ran its own ACME client for the same names would be
// competing with it anyway. Only pending tokens are answered, so every
// other request under /.well-known/acme-challenge/ still reaches the
// upstream.

// acmeChallengePrefix is the path of HTTP-01 challenges (RFC 8555 §8.3).
const acmeChallengePrefix = "/.well-known/acme-challenge/"

// maxACMETokenLen bounds the token of a challenge request looked up
// (RFC 8555 tokens are base64url with at least 128 bits: 22 bytes or
// more; CAs send 43).
const maxACMETokenLen = 256

// acmeLookupTimeout bounds the lookup of a challenge in the storage
// (Redis or files) for one request.
const acmeLookupTimeout = 5 * time.Second

// maxACMEAnswer bounds the answer (a key authorization: the token, a
// dot and the account's thumbprint).
const maxACMEAnswer = 1 << 10

// fastHandler serves on net/http and the fast engine.
type fastHandler interface {
	http.Handler
	host.FastHandler
}

// acmeHTTP01 is the handler of a cleartext listener when the ACME
// listener answers HTTP-01: the challenge first, then next (the
// listener's redirect, or the gateway).
type acmeHTTP01 struct {
	g    *Gateway
	next fastHandler
}

// acmeOffLoop is the note of a challenge request that left its event
// loop (the lookup may wait for the storage).
type acmeOffLoop struct{}

// ServeHTTP answers a request net/http serves.
func (a *acmeHTTP01) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s := a.g.acme; s.wantsHTTP01(r.Method, r.RequestURI, r.Host) && s.answerHTTP01(w, r, time.Time{}) {
		return
	}
	a.next.ServeHTTP(w, r)
}

// ServeHTTP1 answers a request of the fast engine; a challenge request
// is served off the event loop.
func (a *acmeHTTP01) ServeHTTP1(x *h1.Exchange) host.Verdict {
	_, mine := x.Note.(acmeOffLoop)
	if s := a.g.acme; (x.Note == nil || mine) && s.wantsHTTP01(x.Method(), x.Target(), x.Host()) {
		if x.Loop != nil {
			return host.OffLoop(acmeOffLoop{})
		}
		if s.answerHTTP01(x, x.Stub(), x.Deadline) {
			return host.Served
		}
	}
	return a.next.ServeHTTP1(x)
}

// wantsHTTP01 reports whether a request (its method, its request target
// as sent, its Host header) may be the CA's HTTP-01 request for a
// managed domain: the only ones whose challenge is looked up.
func (s *acmeSource) wantsHTTP01(method, target, hostHeader string) bool {
	if s == nil || method != http.MethodGet || !strings.HasPrefix(target, acmeChallengePrefix) {
		return false
	}
	tok := target[len(acmeChallengePrefix):]
	if tok == "" || len(tok) > maxACMETokenLen || !base64URL(tok) {
		return false
	}
	name, ok := redirectHost(hostHeader)
	return ok && s.managed[name] && s.issuer.Load() != nil
}

// base64URL reports whether s holds only base64url characters.
func base64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// answerHTTP01 writes the key authorization of the challenge pending
// for r's host and token, and reports whether it did; false (nothing
// written) when none is pending. r must have passed wantsHTTP01. The
// lookup ends by deadline (zero: acmeLookupTimeout from now).
func (s *acmeSource) answerHTTP01(w http.ResponseWriter, r *http.Request, deadline time.Time) bool {
	iss := s.issuer.Load()
	if iss == nil {
		return false
	}
	if limit := time.Now().Add(acmeLookupTimeout); deadline.IsZero() || deadline.After(limit) {
		deadline = limit
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// certmagic compares the path, the host and the method with the
	// challenge's, and writes its answer to a (a copy of r: it marks
	// the request to close).
	var a acmeAnswer
	if !iss.HandleHTTPChallenge(&a, r.WithContext(ctx)) || a.err != nil || a.code > http.StatusOK || len(a.body) == 0 {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.body)
	return true
}

// errACMEAnswer is a key authorization beyond maxACMEAnswer.
var errACMEAnswer = errors.New("acme: challenge answer too long")

// acmeAnswer keeps what certmagic writes for a challenge, so that the
// gateway writes it (framed the same on every engine).
type acmeAnswer struct {
	h    http.Header
	code int
	body []byte
	err  error
}

func (a *acmeAnswer) Header() http.Header {
	if a.h == nil {
		a.h = http.Header{}
	}
	return a.h
}

func (a *acmeAnswer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *acmeAnswer) Write(p []byte) (int, error) {
	if len(a.body)+len(p) > maxACMEAnswer {
		a.err = errACMEAnswer
		return 0, a.err
	}
	a.body = append(a.body, p...)
	return len(p), nil
}
