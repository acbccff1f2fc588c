package control

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/wire"
)

// ClientReasonPrefix starts the reason of a list entry made from a client
// fingerprint ({"client": FP} rather than {"ip": ...}). Such an entry is
// shown by its fingerprint, never by its prefix, so that no answer turns
// a fingerprint into an address; the rest of the reason is the
// operator's. An entry given by address cannot take a reason with this
// prefix.
const ClientReasonPrefix = "client:"

// ErrUnknownClient is matched (errors.Is) by a Config.Client error for a
// value that is not a fingerprint the gateway wrote.
var ErrUnknownClient = errors.New("control: unknown client fingerprint")

// Target is what an add or remove names: a prefix, and the fingerprint
// it was given by ("" when given by address).
type Target struct {
	Prefix netip.Prefix
	Client string
}

// String is the target in audit lines: the prefix, or "client:FP" for a
// fingerprint (never the prefix behind it).
func (t Target) String() string {
	if t.Client != "" {
		return ClientReasonPrefix + t.Client
	}
	return t.Prefix.String()
}

// Reason is the reason stored with the entry: the operator's, marked for
// a fingerprint.
func (t Target) Reason(reason string) string {
	if t.Client != "" {
		return ClientReasonPrefix + reason
	}
	return reason
}

const targetDetail = "Give ip or client (a fingerprint from the access log), not both."

// ParseTarget reads the target of an add or remove: exactly one of ip and
// client, a client resolved with resolve (nil: fingerprints are not
// supported). Errors are *Error values ready to answer.
func ParseTarget(ip, client string, resolve func(string) (netip.Prefix, error)) (Target, error) {
	switch {
	case ip != "" && client != "":
		return Target{}, badRequest(targetDetail)
	case client != "":
		if resolve == nil {
			return Target{}, badRequest("This server does not resolve client fingerprints.")
		}
		p, err := resolve(client)
		if err != nil {
			if errors.Is(err, ErrUnknownClient) {
				return Target{}, &Error{Code: wire.CodeUnknownClient, Err: err}
			}
			return Target{}, &Error{Code: wire.CodeInternal, Err: err}
		}
		return Target{Prefix: p, Client: strings.ToLower(client)}, nil
	}
	p, err := ipset.ParsePrefix(ip)
	if err != nil {
		return Target{}, badRequest(detailFor(err, "ip must be an IPv4/IPv6 address or CIDR prefix without host bits."))
	}
	return Target{Prefix: p}, nil
}

// CheckAdd validates the rest of an add: the TTL in milliseconds and,
// for an address, a reason that does not claim a fingerprint.
func CheckAdd(t Target, ttlMs int64, reason string) error {
	maxMs := int64(ipset.MaxTTL / time.Millisecond)
	if ttlMs < 0 || ttlMs > maxMs {
		return badRequest(fmt.Sprintf("ttl_ms must be in [0, %d]; 0 or absent means no expiry.", maxMs))
	}
	if t.Client == "" && strings.HasPrefix(reason, ClientReasonPrefix) {
		return badRequest("reason must not start with " + ClientReasonPrefix + " (it marks entries made from a fingerprint).")
	}
	if t.Client != "" && len(ClientReasonPrefix)+len(reason) > ipset.MaxReasonBytes {
		return badRequest(fmt.Sprintf("reason must be at most %d bytes with client.", ipset.MaxReasonBytes-len(ClientReasonPrefix)))
	}
	return nil
}

// WireEntry is a list entry as the API shows it: an entry made from a
// fingerprint shows the fingerprint of its client (fp) and the operator's
// reason, never its prefix.
func WireEntry(e ipset.Entry, fp func(netip.Addr) string) Entry {
	w := Entry{IP: e.Prefix.String(), Reason: e.Reason}
	if rest, ok := strings.CutPrefix(e.Reason, ClientReasonPrefix); ok {
		w.IP, w.Reason = "", rest
		if fp != nil {
			w.Client = fp(e.Prefix.Addr())
		} else {
			w.Client = "-"
		}
	}
	if !e.Expires.IsZero() {
		t := e.Expires.UTC().Round(time.Millisecond)
		w.ExpiresAt = &t
	}
	return w
}
