package xdp

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
)

// HandlerConfig configures the XDP routes of the control API.
type HandlerConfig struct {
	// Audit receives one line per configuration change. Nil discards.
	Audit *slog.Logger
	// Who identifies the caller in audit lines (e.g. control.TokenID of
	// the API token); default "anonymous".
	Who string
}

// Handler serves the XDP part of the control API:
//
//	GET /v1/xdp/status   the manager's Status
//	PUT /v1/xdp/config   {"flags": ["syn_flood", …] or 3, "k": 3.5, "defense": "auto"|"on"|"off"}
//
// PUT takes at least one member and no unknown ones, applies all or
// nothing, and answers with the new Status; an invalid value answers 400
// invalid_request naming the member and its range. Mount Routes on the
// control API (control.Config.Routes), behind its bearer token.
type Handler struct {
	m     *Manager
	audit *slog.Logger
	who   string
}

// NewHandler returns the XDP routes for m.
func NewHandler(m *Manager, cfg HandlerConfig) *Handler {
	h := &Handler{m: m, audit: cfg.Audit, who: cfg.Who}
	if h.audit == nil {
		h.audit = slog.New(slog.DiscardHandler)
	}
	if h.who == "" {
		h.who = "anonymous"
	}
	return h
}

// Routes returns the handler's routes, to mount with control.Config.Routes.
func (h *Handler) Routes() map[string]control.Endpoint {
	return map[string]control.Endpoint{
		"GET /v1/xdp/status": h.status,
		"PUT /v1/xdp/config": h.config,
	}
}

func (h *Handler) status(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	return http.StatusOK, h.m.Status(), nil
}

// ConfigRequest is the body of PUT /v1/xdp/config.
type ConfigRequest struct {
	// Flags is a JSON array of flag names or a flag word.
	Flags   json.RawMessage `json:"flags,omitempty"`
	K       *float64        `json:"k,omitempty"`
	Defense *string         `json:"defense,omitempty"`
}

func bad(title string) error {
	return &control.Error{Code: wire.CodeInvalidRequest, Detail: title}
}

// parseRequest turns a PUT body into a ConfigUpdate.
func parseRequest(body []byte) (ConfigUpdate, error) {
	var u ConfigUpdate
	if body == nil {
		return u, bad(`A JSON body with "flags", "k" or "defense" is required.`)
	}
	var req ConfigRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return u, bad(`Body must be {"flags": [names] or integer, "k": number, "defense": "auto"|"on"|"off"}.`)
	}
	if req.Flags == nil && req.K == nil && req.Defense == nil {
		return u, bad(`Set at least one of "flags", "k" and "defense".`)
	}
	if req.Flags != nil {
		var f Flags
		var names []string
		var word uint64
		switch {
		case json.Unmarshal(req.Flags, &names) == nil:
			for _, n := range names {
				g, err := FlagByName(n)
				if err != nil || g == FlagDefense {
					return u, bad(`flags: unknown flag name (see GET /v1/xdp/status for the names; "defense" is set with "defense").`)
				}
				f |= g
			}
		case json.Unmarshal(req.Flags, &word) == nil && Flags(word)&^AllFlags == 0 && word <= uint64(AllFlags):
			f = Flags(word) &^ FlagDefense
		default:
			return u, bad(fmt.Sprintf("flags must be an array of flag names or an integer flag word within 0x%x.", uint32(AllFlags)))
		}
		u.Flags = &f
	}
	if req.K != nil {
		k := *req.K
		if !(k >= MinK && k <= MaxK) {
			return u, bad(fmt.Sprintf("k must be a number in [%v, %v].", MinK, MaxK))
		}
		u.K = &k
	}
	if req.Defense != nil {
		switch *req.Defense {
		case DefenseAuto, DefenseOn, DefenseOff:
		default:
			return u, bad(`defense must be "auto", "on" or "off".`)
		}
		u.Defense = req.Defense
	}
	return u, nil
}

func (h *Handler) config(ctx context.Context, r *http.Request, body json.RawMessage) (int, any, error) {
	u, err := parseRequest(body)
	if err != nil {
		return 0, nil, err
	}
	if err := h.m.Update(u); err != nil {
		h.audit.Info("control audit", "who", h.who, "action", "xdp_config", "result", "error")
		if strings.HasPrefix(err.Error(), ErrInvalidConfig.Error()) {
			return 0, nil, bad("The configuration was rejected; see GET /v1/xdp/status for the current one.")
		}
		return 0, nil, &control.Error{Code: wire.CodeXDPUnavailable, Err: err}
	}
	st := h.m.Status()
	h.audit.Info("control audit", "who", h.who, "action", "xdp_config", "flags", strings.Join(st.Flags, ","),
		"k", st.K, "defense", st.DefenseOverride, "result", "ok")
	return http.StatusOK, st, nil
}
