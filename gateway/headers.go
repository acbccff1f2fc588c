package gateway

import (
	"net/http"
	"strings"

	"github.com/bulwarkhq/bulwark/internal/fieldname"
	"github.com/bulwarkhq/bulwark/quota"
	"github.com/bulwarkhq/bulwark/wire"
)

// Headers the client must not choose
//
// Some request headers name an identity: the client address (X-Real-IP
// and its many cousins), or what forward-auth established (the quota
// routes' project and subject headers). An upstream that reads one of
// them believes whoever wrote it, so the gateway removes every one the
// client sent, on every route, before any policy runs
// (request_headers.strip; the asserted headers of every quota route and
// Idempotency-Replay are always removed too). The values the gateway
// asserts are set by the proxy after hop-by-hop removal, and a
// Connection token naming a protected header (an asserted, identity or
// forwarding header, or Idempotency-Key) is ignored, so "Connection:
// X-Auth-Project" cannot strip what the gateway set, "Connection:
// Idempotency-Key" cannot hide the key from the upstream, and neither
// can one hide the request ID (X-Request-Id) or the trace context
// (traceparent, tracestate); Idempotency_Key
// and the key's other '_' spellings are removed, so the upstream reads
// the key the receipt is bound to.
//
// Header names compare case-insensitively and with "_" equal to "-":
// several servers (CGI-style environments, some WSGI and PHP setups)
// read X_Real_IP as X-Real-IP.

// DefaultStripHeaders is the default of request_headers.strip: headers
// that name the client and that no client may set. (X-Forwarded-For and
// Forwarded are replaced by the proxy instead, and read only from
// trusted proxies.)
var DefaultStripHeaders = []string{
	"X-Real-IP", "True-Client-IP", "X-Client-IP", "CF-Connecting-IP",
	"Fastly-Client-IP", "X-Cluster-Client-IP", "X-Original-Forwarded-For",
	"Client-IP", "X-ProxyUser-IP", "Forwarded-For", "X-Forwarded",
}

// headerRules is the gateway-wide header policy of one pipeline.
type headerRules struct {
	strip     []string // removed from every request (any spelling)
	protected []string // a Connection token naming one of these is dropped
}

func newHeaderRules(strip, asserted []string) *headerRules {
	hr := &headerRules{}
	add := func(list *[]string, names ...string) {
	next:
		for _, n := range names {
			for _, have := range *list {
				if fieldname.Equal(have, n) {
					continue next
				}
			}
			*list = append(*list, n)
		}
	}
	add(&hr.strip, strip...)
	add(&hr.strip, asserted...)
	add(&hr.strip, quota.HeaderIdempotencyReplay)
	add(&hr.protected, hr.strip...)
	add(&hr.protected, quota.HeaderIdempotencyKey, "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded",
		wire.RequestIDField, "Traceparent", "Tracestate")
	return hr
}

// strips reports whether a request field named name is removed (the
// fast engine's forwarder asks it field by field).
func (hr *headerRules) strips(name []byte) bool {
	for _, s := range hr.strip {
		if fieldname.Equal(name, s) {
			return true
		}
	}
	return keyAlias(name)
}

// keyAlias reports Idempotency_Key and the other '_' spellings of
// Idempotency-Key: CGI-style servers read them as the key, so an upstream
// could deduplicate on another key than the receipt the gateway bound.
// The real field passes; its aliases are removed.
func keyAlias[T string | []byte](name T) bool {
	return fieldname.Underscored(name) && fieldname.Equal(name, quota.HeaderIdempotencyKey)
}

// protects reports whether a Connection token naming name is ignored.
func (hr *headerRules) protects(name []byte) bool {
	for _, s := range hr.protected {
		if fieldname.Equal(name, s) {
			return true
		}
	}
	return false
}

// apply removes the stripped headers and the Connection tokens that name
// protected ones. It allocates only when it changes something.
func (hr *headerRules) apply(h http.Header) {
	for k := range h {
		if keyAlias(k) {
			delete(h, k)
			continue
		}
		for _, s := range hr.strip {
			if fieldname.Equal(k, s) {
				delete(h, k)
				break
			}
		}
	}
	if cs, ok := h["Connection"]; ok {
		if kept, changed := filterTokens(cs, hr.protected); changed {
			if len(kept) == 0 {
				delete(h, "Connection")
			} else {
				h["Connection"] = kept
			}
		}
	}
}

// filterTokens drops the comma-separated tokens of values that name one
// of names; changed is false (and kept nil) when nothing is dropped.
func filterTokens(values []string, names []string) (kept []string, changed bool) {
	drop := func(tok string) bool {
		tok = strings.TrimSpace(tok)
		for _, n := range names {
			if fieldname.Equal(tok, n) {
				return true
			}
		}
		return false
	}
	for _, v := range values {
		for v != "" {
			tok := v
			if i := strings.IndexByte(v, ','); i >= 0 {
				tok, v = v[:i], v[i+1:]
			} else {
				v = ""
			}
			if drop(tok) {
				changed = true
			}
		}
	}
	if !changed {
		return nil, false
	}
	for _, v := range values {
		var toks []string
		for _, tok := range strings.Split(v, ",") {
			if t := strings.TrimSpace(tok); t != "" && !drop(t) {
				toks = append(toks, t)
			}
		}
		if len(toks) > 0 {
			kept = append(kept, strings.Join(toks, ", "))
		}
	}
	return kept, true
}

// filterUpgrade keeps a protocol upgrade only when it is a WebSocket
// handshake on a route that allows WebSockets. Any other upgrade (h2c
// above all: an upstream that answered 101 would carry all later traffic
// of the connection past every policy) is removed, with its Connection
// token and HTTP2-Settings, and the request is forwarded as a plain one,
// as nginx does by default.
func filterUpgrade(h http.Header, websocket bool) {
	up, ok := h["Upgrade"]
	if !ok {
		return
	}
	if websocket && len(up) == 1 && strings.EqualFold(strings.TrimSpace(up[0]), "websocket") {
		return
	}
	delete(h, "Upgrade")
	delete(h, "Http2-Settings")
	if cs, ok := h["Connection"]; ok {
		if kept, changed := filterTokens(cs, []string{"Upgrade", "HTTP2-Settings"}); changed {
			if len(kept) == 0 {
				delete(h, "Connection")
			} else {
				h["Connection"] = kept
			}
		}
	}
}
