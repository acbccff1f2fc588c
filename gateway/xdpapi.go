package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/wire"
	"github.com/bulwarkhq/bulwark/xdp"
)

// The XDP part of the control API: the gateway adapts an xdp.Manager to
// control endpoints, so the kernel layer knows nothing of the API.

// XDPRoutes returns the XDP part of the control API for m, to mount with
// control.Config.Routes (behind its bearer token):
//
//	GET /v1/xdp/status   the manager's Status
//	PUT /v1/xdp/config   {"flags": ["syn_flood", …] or 3, "k": 3.5, "defense": "auto"|"on"|"off"}
//
// PUT takes at least one member and no unknown ones, applies all or
// nothing, and answers with the new Status; an invalid value answers 400
// invalid_request naming the member and its range. audit receives one
// line per configuration change (nil discards); who identifies the
// caller in those lines (e.g. control.TokenID of the API token; default
// "anonymous").
func XDPRoutes(m *xdp.Manager, audit *slog.Logger, who string) map[string]control.Endpoint {
	h := &xdpAPI{m: m, audit: audit, who: who}
	if h.audit == nil {
		h.audit = slog.New(slog.DiscardHandler)
	}
	if h.who == "" {
		h.who = "anonymous"
	}
	return map[string]control.Endpoint{
		"GET /v1/xdp/status": h.status,
		"PUT /v1/xdp/config": h.config,
	}
}

// xdpAPI serves the XDP routes over one manager.
type xdpAPI struct {
	m     *xdp.Manager
	audit *slog.Logger
	who   string
}

func (h *xdpAPI) status(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	return http.StatusOK, h.m.Status(), nil
}

// xdpConfigRequest is the body of PUT /v1/xdp/config.
type xdpConfigRequest struct {
	// Flags is a JSON array of flag names or a flag word.
	Flags   json.RawMessage `json:"flags,omitempty"`
	K       *float64        `json:"k,omitempty"`
	Defense *string         `json:"defense,omitempty"`
}

func badXDP(title string) error {
	return &control.Error{Code: wire.CodeInvalidRequest, Detail: title}
}

// parseXDPRequest turns a PUT body into an xdp.ConfigUpdate.
func parseXDPRequest(body []byte) (xdp.ConfigUpdate, error) {
	var u xdp.ConfigUpdate
	if body == nil {
		return u, badXDP(`A JSON body with "flags", "k" or "defense" is required.`)
	}
	var req xdpConfigRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return u, badXDP(`Body must be {"flags": [names] or integer, "k": number, "defense": "auto"|"on"|"off"}.`)
	}
	if req.Flags == nil && req.K == nil && req.Defense == nil {
		return u, badXDP(`Set at least one of "flags", "k" and "defense".`)
	}
	if req.Flags != nil {
		var f xdp.Flags
		var names []string
		var word uint64
		switch {
		case json.Unmarshal(req.Flags, &names) == nil:
			for _, n := range names {
				g, err := xdp.FlagByName(n)
				if err != nil || g == xdp.FlagDefense {
					return u, badXDP(`flags: unknown flag name (see GET /v1/xdp/status for the names; "defense" is set with "defense").`)
				}
				f |= g
			}
		case json.Unmarshal(req.Flags, &word) == nil && xdp.Flags(word)&^xdp.AllFlags == 0 && word <= uint64(xdp.AllFlags):
			f = xdp.Flags(word) &^ xdp.FlagDefense
		default:
			return u, badXDP(fmt.Sprintf("flags must be an array of flag names or an integer flag word within 0x%x.", uint32(xdp.AllFlags)))
		}
		u.Flags = &f
	}
	if req.K != nil {
		k := *req.K
		if !(k >= xdp.MinK && k <= xdp.MaxK) {
			return u, badXDP(fmt.Sprintf("k must be a number in [%v, %v].", xdp.MinK, xdp.MaxK))
		}
		u.K = &k
	}
	if req.Defense != nil {
		switch *req.Defense {
		case xdp.DefenseAuto, xdp.DefenseOn, xdp.DefenseOff:
		default:
			return u, badXDP(`defense must be "auto", "on" or "off".`)
		}
		u.Defense = req.Defense
	}
	return u, nil
}

func (h *xdpAPI) config(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	u, err := parseXDPRequest(body)
	if err != nil {
		return 0, nil, err
	}
	if err := h.m.Update(u); err != nil {
		h.audit.Info("control audit", "who", h.who, "action", "xdp_config", "result", "error")
		if strings.HasPrefix(err.Error(), xdp.ErrInvalidConfig.Error()) {
			return 0, nil, badXDP("The configuration was rejected; see GET /v1/xdp/status for the current one.")
		}
		return 0, nil, &control.Error{Code: wire.CodeXDPUnavailable, Err: err}
	}
	st := h.m.Status()
	h.audit.Info("control audit", "who", h.who, "action", "xdp_config", "flags", strings.Join(st.Flags, ","),
		"k", st.K, "defense", st.DefenseOverride, "result", "ok")
	return http.StatusOK, st, nil
}
