package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/ipset"
	"github.com/bulwarkhq/bulwark/ratelimit"
	"github.com/bulwarkhq/bulwark/wire"
)

// bodyType reports whether a request that changes something declares its
// body as JSON (or, when form, as an urlencoded form), with identity
// coding. A bodiless request must still say application/json: only a
// script of the console's own pages can send that type without a CORS
// preflight.
func bodyType(r *http.Request, form bool) bool {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return false
			}
		}
	}
	cts := r.Header.Values("Content-Type")
	if len(cts) != 1 {
		return false
	}
	mt, params, err := mime.ParseMediaType(cts[0])
	if err != nil || (mt != "application/json" && !(form && mt == "application/x-www-form-urlencoded")) {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

func isForm(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded"
}

// readBody reads at most MaxBodyBytes; on failure it has answered.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > MaxBodyBytes {
		wire.WriteClose(w, r, wire.New(wire.CodePayloadTooLarge))
		return nil, false
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r.Body, MaxBodyBytes+1))
	var mbe *http.MaxBytesError
	switch {
	case n > MaxBodyBytes || errors.As(err, &mbe):
		wire.WriteClose(w, r, wire.New(wire.CodePayloadTooLarge))
		return nil, false
	case err != nil:
		wire.WriteClose(w, r, wire.New(wire.CodeInvalidRequest))
		return nil, false
	}
	return buf.Bytes(), true
}

// decodeJSON decodes exactly one JSON object into v, refusing unknown
// members and trailing data. An empty body decodes as {} when emptyOK.
func decodeJSON(b []byte, v any, emptyOK bool) bool {
	if len(bytes.TrimSpace(b)) == 0 {
		return emptyOK
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}

func badRequest(w http.ResponseWriter, detail string) {
	p := wire.New(wire.CodeInvalidRequest)
	p.Detail = detail
	wire.Write(w, p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		wire.Write(w, wire.New(wire.CodeInternal))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// LoginRequest is the body of POST /ui/api/login (or token=... in a form).
type LoginRequest struct {
	Token string `json:"token"`
}

// parseLogin reads the token from a JSON body or a form with exactly one
// field, token, given once.
func parseLogin(r *http.Request, body []byte) (string, bool) {
	if isForm(r) {
		v, err := url.ParseQuery(string(body))
		if err != nil || len(v) != 1 || len(v["token"]) != 1 {
			return "", false
		}
		return v["token"][0], true
	}
	var req LoginRequest
	if !decodeJSON(body, &req, false) {
		return "", false
	}
	return req.Token, true
}

func (c *console) login(w http.ResponseWriter, r *http.Request, _ *session) {
	// Every attempt counts, before the token is even read.
	var d ratelimit.Decision
	if a, ok := clientAddr(r); ok {
		d = c.logins.AllowAddr(a, 1)
	} else {
		d = c.logins.Allow("unknown")
	}
	if !d.Allowed {
		c.audit.Warn("console audit", "action", "login", "result", "rate_limited")
		p := wire.New(wire.CodeRateLimited)
		p.RetryAfter = wire.RetryAfterSeconds(d.RetryAfter)
		wire.WriteClose(w, r, p)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	tok, ok := parseLogin(r, body)
	if !ok {
		badRequest(w, `Body must be {"token": string} (or the form field token).`)
		return
	}
	if !c.tokenOK(tok) {
		c.audit.Warn("console audit", "action", "login", "result", "invalid_token")
		wire.Write(w, wire.New(wire.CodeInvalidToken))
		return
	}
	now := c.clock.Now()
	// A fresh id at every login (no session fixation); this browser's
	// previous session ends.
	if old := c.session(r); old != nil {
		c.sessions.remove(old)
	}
	id, s, evicted, err := c.sessions.create(now)
	if err != nil {
		c.audit.Error("console audit", "who", c.who, "action", "login", "result", "error", "error", err.Error())
		wire.Write(w, wire.New(wire.CodeInternal))
		return
	}
	if evicted != nil {
		c.audit.Info("console audit", "who", c.who, "session", evicted.tag, "action", "session_evicted", "result", "ok")
	}
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    id,
		Path:     strings.TrimSuffix(Prefix, "/"),
		MaxAge:   int(c.cfg.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	c.audit.Info("console audit", "who", c.who, "session", s.tag, "action", "login", "result", "ok")
	if isForm(r) {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "expires_at": now.Add(c.cfg.SessionTTL).UTC().Round(time.Second)})
}

func (c *console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if body, ok := readBody(w, r); !ok {
		return
	} else if !decodeJSON(body, &struct{}{}, true) {
		badRequest(w, "POST /ui/api/logout takes no body (or {}).")
		return
	}
	c.sessions.remove(s)
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: "", Path: strings.TrimSuffix(Prefix, "/"), MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	c.audit.Info("console audit", "who", c.who, "session", s.tag, "action", "logout", "result", "ok")
	w.WriteHeader(http.StatusNoContent)
}

func (c *console) status(w http.ResponseWriter, r *http.Request, _ *session) {
	writeJSON(w, http.StatusOK, c.view(c.clock.Now()))
}

// listOf returns the set an API path names ("lists/deny").
func (c *console) listOf(r *http.Request) (*ipset.Set, string) {
	if strings.HasSuffix(r.URL.Path, "/allow") {
		return c.cfg.Allow, "allow"
	}
	return c.cfg.Deny, "deny"
}

func (c *console) listGet(w http.ResponseWriter, r *http.Request, _ *session) {
	s, _ := c.listOf(r)
	limit := DefaultListLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			badRequest(w, fmt.Sprintf("limit must be an integer in [1, %d].", MaxListLimit))
			return
		}
		limit = n
	}
	out := control.List{Entries: []control.Entry{}, Capacity: s.Capacity(), Total: s.Len()}
	for _, e := range s.Entries(limit) {
		out.Entries = append(out.Entries, control.WireEntry(e, c.cfg.Fingerprint))
	}
	slices.SortFunc(out.Entries, func(a, b control.Entry) int { return strings.Compare(a.IP+a.Client, b.IP+b.Client) })
	out.Count = len(out.Entries)
	writeJSON(w, http.StatusOK, out)
}

// Actions in audit lines, by list.
var (
	addAction    = map[string]string{"deny": "block", "allow": "allow"}
	removeAction = map[string]string{"deny": "unblock", "allow": "disallow"}
)

func (c *console) listAdd(w http.ResponseWriter, r *http.Request, sess *session) {
	s, name := c.listOf(r)
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req control.AddRequest
	if !decodeJSON(body, &req, false) {
		badRequest(w, `Body must be {"ip" or "client": string, "ttl_ms": integer, "reason": string} with no other members.`)
		return
	}
	action := addAction[name]
	t, err := control.ParseTarget(req.IP, req.Client, c.cfg.Client)
	if err == nil {
		err = control.CheckAdd(t, req.TTLMs, req.Reason)
	}
	if err != nil {
		c.targetError(w, sess, action, err)
		return
	}
	if err := s.Add(t.Prefix, time.Duration(req.TTLMs)*time.Millisecond, t.Reason(req.Reason)); err != nil {
		c.audit.Info("console audit", "who", c.who, "session", sess.tag, "action", action, "target", t.String(), "result", "error")
		if errors.Is(err, ipset.ErrFull) {
			wire.Write(w, wire.New(wire.CodeListFull))
			return
		}
		badRequest(w, detailFor(err, "reason must be at most 64 bytes of printable ASCII."))
		return
	}
	c.audit.Info("console audit", "who", c.who, "session", sess.tag, "action", action, "target", t.String(),
		"ttl_ms", req.TTLMs, "reason", req.Reason, "result", "ok")
	c.changed(r, name, t.Prefix)
	e, _ := s.Get(t.Prefix)
	writeJSON(w, http.StatusCreated, control.WireEntry(e, c.cfg.Fingerprint))
}

// targetError answers a bad target (control.ParseTarget, CheckAdd).
func (c *console) targetError(w http.ResponseWriter, sess *session, action string, err error) {
	var ce *control.Error
	if !errors.As(err, &ce) {
		wire.Write(w, wire.New(wire.CodeInternal))
		return
	}
	if ce.Code == wire.CodeUnknownClient {
		c.audit.Info("console audit", "who", c.who, "session", sess.tag, "action", action, "target", "client", "result", "unknown_client")
	}
	wire.Write(w, ce.Problem())
}

// RemoveRequest is the body of DELETE /ui/api/lists/{list}: ip or client.
type RemoveRequest struct {
	IP     string `json:"ip,omitempty"`
	Client string `json:"client,omitempty"`
}

func (c *console) listRemove(w http.ResponseWriter, r *http.Request, sess *session) {
	s, name := c.listOf(r)
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req RemoveRequest
	if !decodeJSON(body, &req, false) {
		badRequest(w, `Body must be {"ip" or "client": string} with no other members.`)
		return
	}
	t, err := control.ParseTarget(req.IP, req.Client, c.cfg.Client)
	if err != nil {
		c.targetError(w, sess, removeAction[name], err)
		return
	}
	if !s.Remove(t.Prefix) {
		p := wire.New(wire.CodeNotFound)
		p.Detail = "No such entry."
		wire.Write(w, p)
		return
	}
	c.audit.Info("console audit", "who", c.who, "session", sess.tag, "action", removeAction[name], "target", t.String(), "result", "ok")
	c.changed(r, name, t.Prefix)
	removed := t.Client
	if removed == "" {
		removed = t.Prefix.String()
	}
	writeJSON(w, http.StatusOK, map[string]string{"removed": removed})
}

// changed tells Config.Changed about a change of a list.
func (c *console) changed(r *http.Request, list string, p netip.Prefix) {
	if c.cfg.Changed != nil {
		c.cfg.Changed(r.Context(), list, p)
	}
}

// clients serves the top limited clients.
func (c *console) clients(w http.ResponseWriter, r *http.Request, _ *session) {
	out := []control.TopClient{}
	if c.cfg.TopClients != nil {
		out = c.cfg.TopClients(MaxTopClients)
		if len(out) > MaxTopClients {
			out = out[:MaxTopClients]
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"clients": out})
}

// detailFor turns an ipset validation error into a detail: the ipset
// messages quote only the operator's own input and bounds; anything
// longer or unprintable gets the fallback.
func detailFor(err error, fallback string) string {
	msg := strings.TrimPrefix(err.Error(), ipset.ErrInvalid.Error()+": ")
	if len(msg) > 110 {
		return fallback
	}
	for i := 0; i < len(msg); i++ {
		if msg[i] < 0x20 || msg[i] > 0x7e {
			return fallback
		}
	}
	return msg
}

func (c *console) reload(w http.ResponseWriter, r *http.Request, sess *session) {
	if body, ok := readBody(w, r); !ok {
		return
	} else if !decodeJSON(body, &struct{}{}, true) {
		badRequest(w, "POST /ui/api/reload takes no body (or {}).")
		return
	}
	if c.cfg.Reload == nil {
		wire.Write(w, wire.New(wire.CodeReloadUnsupported))
		return
	}
	err := c.cfg.Reload(r.Context())
	var re *control.ReloadError
	switch {
	case err == nil:
		c.audit.Info("console audit", "who", c.who, "session", sess.tag, "action", "reload", "result", "ok")
		writeJSON(w, http.StatusOK, control.ReloadResult{Reloaded: true})
	case errors.As(err, &re):
		c.audit.Info("console audit", "who", c.who, "session", sess.tag, "action", "reload", "result", "rejected", "problems", len(re.Problems))
		p := wire.New(wire.CodeInvalidConfig)
		p.Extra = map[string]any{"reloaded": false, "errors": re.Problems}
		wire.Write(w, p)
	default:
		c.audit.Error("console audit", "who", c.who, "session", sess.tag, "action", "reload", "result", "error", "error", err.Error())
		wire.Write(w, wire.New(wire.CodeReloadFailed))
	}
}

// unlock lifts a login lockout (Config.Unlock).
func (c *console) unlock(w http.ResponseWriter, r *http.Request, sess *session) {
	if c.cfg.Unlock == nil {
		wire.Write(w, wire.New(wire.CodeNotFound))
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, err := control.ParseUnlock(body)
	if err != nil {
		c.answerError(w, err)
		return
	}
	res, err := c.cfg.Unlock(r.Context(), req)
	control.AuditUnlock(c.audit, "console audit", c.who, res, err, "session", sess.tag)
	if err != nil {
		c.answerError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// quotaShow and quotaReset read and reset a quota bucket
// (Config.QuotaShow, QuotaReset).
func (c *console) quotaShow(w http.ResponseWriter, r *http.Request, sess *session) {
	c.quota(w, r, sess, c.cfg.QuotaShow, false)
}

func (c *console) quotaReset(w http.ResponseWriter, r *http.Request, sess *session) {
	c.quota(w, r, sess, c.cfg.QuotaReset, true)
}

func (c *console) quota(w http.ResponseWriter, r *http.Request, sess *session, fn func(context.Context, control.QuotaBucket) (control.QuotaUsage, error), reset bool) {
	if fn == nil {
		wire.Write(w, wire.New(wire.CodeNotFound))
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	b, err := control.ParseQuotaBucket(body)
	if err != nil {
		c.answerError(w, err)
		return
	}
	u, err := fn(r.Context(), b)
	if reset {
		control.AuditQuotaReset(c.audit, "console audit", c.who, b, u, err, "session", sess.tag)
	}
	if err != nil {
		c.answerError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

// answerError answers an operator action's error: the problem of a
// *control.Error, else 500 internal (its text goes nowhere).
func (c *console) answerError(w http.ResponseWriter, err error) {
	var ce *control.Error
	if !errors.As(err, &ce) {
		wire.Write(w, wire.New(wire.CodeInternal))
		return
	}
	wire.Write(w, ce.Problem())
}
