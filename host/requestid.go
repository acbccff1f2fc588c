package host

import (
	"net/http"
	"net/netip"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/wire"
)

// The request ID of a request, on both engines (see RequestIDs): the
// trusted peer's own when it sent exactly one valid ID, else a new one.

// assign gives a request net/http serves its ID, in its header (the
// client's replaced) and in the response's.
func (ids *RequestIDs) assign(w http.ResponseWriter, r *http.Request) {
	id := ""
	if v := r.Header[wire.RequestIDField]; len(v) == 1 && wire.ValidRequestID(v[0]) {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && ids.keeps(ap.Addr()) {
			id = v[0]
		}
	}
	if id == "" {
		var b [wire.RequestIDLen]byte
		id = string(wire.AppendRequestID(b[:0]))
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header[wire.RequestIDField] = []string{id}
	w.Header()[wire.RequestIDField] = []string{id}
}

// assignFast gives a request of the fast engine its ID
// (h1.Exchange.SetRequestID), without allocating.
func (ids *RequestIDs) assignFast(x *h1.Exchange) {
	if ids.Trusted != nil {
		var kept []byte
		n := 0
		for i := range x.Req.Fields {
			f := &x.Req.Fields[i]
			if len(f.Name) == len(wire.RequestIDField) && h1.EqualFold(f.Name, wire.RequestIDField) {
				kept = f.Value
				n++
			}
		}
		if n == 1 && wire.ValidRequestID(kept) && ids.keeps(x.Remote.Addr()) {
			x.SetRequestID(kept)
			return
		}
	}
	var b [wire.RequestIDLen]byte
	x.SetRequestID(wire.AppendRequestID(b[:0]))
}
