package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

// Client calls a running gateway's control API. It sends no Origin and
// declares its bodies as application/json, so the API's browser checks
// let it through; BaseURL's host must be one the API accepts (a loopback
// name, its listen address or one of its allowed hosts).
type Client struct {
	// BaseURL is the API's base, e.g. "http://127.0.0.1:7922".
	BaseURL string
	// Token is sent as a bearer token when set.
	Token string
	// HTTP is the client used; nil means one with a 10 s timeout.
	HTTP *http.Client
}

// APIError is a non-2xx answer from the API.
type APIError struct {
	Status int
	Code   string
	Title  string
	// Detail is the server's explanation, when it sent one.
	Detail string
	// Errors lists configuration problems of a rejected reload.
	Errors []string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("control: %d %s", e.Status, e.Code)
	switch {
	case e.Detail != "":
		s += ": " + e.Detail
	case e.Title != "":
		s += ": " + e.Title
	}
	for _, p := range e.Errors {
		s += "\n  " + p
	}
	return s
}

const maxClientResponse = MaxResponseBytes + 1024

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, body)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("control: cannot reach %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxClientResponse))
	if err != nil {
		return fmt.Errorf("control: reading answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Status: resp.StatusCode}
		var p struct {
			Code   string   `json:"code"`
			Title  string   `json:"title"`
			Detail string   `json:"detail"`
			Errors []string `json:"errors"`
		}
		if json.Unmarshal(b, &p) == nil {
			ae.Code, ae.Title, ae.Detail, ae.Errors = p.Code, p.Title, p.Detail, p.Errors
		}
		if ae.Code == "" && len(ae.Errors) > 0 {
			ae.Code = wire.CodeInvalidConfig
		}
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("control: malformed answer: %w", err)
		}
	}
	return nil
}

// Status fetches the status document.
func (c *Client) Status(ctx context.Context) (map[string]any, error) {
	var m map[string]any
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &m)
	return m, err
}

// Add puts prefix on list ("blocklist" or "allowlist") for ttl (0 = no
// expiry) with reason.
func (c *Client) Add(ctx context.Context, list, prefix string, ttl time.Duration, reason string) (Entry, error) {
	var e Entry
	err := c.do(ctx, http.MethodPost, "/v1/"+list, AddRequest{IP: prefix, TTLMs: ttl.Milliseconds(), Reason: reason}, &e)
	return e, err
}

// AddClient puts the client behind fingerprint fp (as the access log
// writes it) on list for ttl (0 = no expiry) with reason. The answer
// names the entry by its fingerprint only.
func (c *Client) AddClient(ctx context.Context, list, fp string, ttl time.Duration, reason string) (Entry, error) {
	var e Entry
	err := c.do(ctx, http.MethodPost, "/v1/"+list, AddRequest{Client: fp, TTLMs: ttl.Milliseconds(), Reason: reason}, &e)
	return e, err
}

// RemoveClient deletes the entry of the client behind fingerprint fp
// from list.
func (c *Client) RemoveClient(ctx context.Context, list, fp string) error {
	return c.do(ctx, http.MethodDelete, "/v1/"+list+"?client="+url.QueryEscape(fp), nil, nil)
}

// TopClients returns up to limit (0 = the server's default) of the
// clients the gateway's layers refused most.
func (c *Client) TopClients(ctx context.Context, limit int) ([]TopClient, error) {
	var out struct {
		Clients []TopClient `json:"clients"`
	}
	path := "/v1/clients"
	if limit > 0 {
		path += fmt.Sprintf("?limit=%d", limit)
	}
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out.Clients, err
}

// TopClient is one row of GET /v1/clients.
type TopClient struct {
	Client   string    `json:"client"`
	Layer    string    `json:"layer"`
	Count    uint64    `json:"count"`
	LastSeen time.Time `json:"last_seen"`
}

// Remove deletes prefix from list.
func (c *Client) Remove(ctx context.Context, list, prefix string) error {
	return c.do(ctx, http.MethodDelete, "/v1/"+list+"?ip="+url.QueryEscape(prefix), nil, nil)
}

// List returns up to limit entries of list (0 = the server's default).
func (c *Client) List(ctx context.Context, list string, limit int) (List, error) {
	var l List
	path := "/v1/" + list
	if limit > 0 {
		path += fmt.Sprintf("?limit=%d", limit)
	}
	err := c.do(ctx, http.MethodGet, path, nil, &l)
	return l, err
}

// Reload asks the gateway to re-read its configuration. A rejected
// configuration is an *APIError whose Errors list every problem.
func (c *Client) Reload(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/reload", nil, nil)
}

// XDPConfig is the body of PUT /v1/xdp/config; nil fields are left alone.
type XDPConfig struct {
	// Flags is a list of flag names (syn_flood, syn_proxy, rst_validate,
	// ack_flood, udp_stats, udp_rate_limit, cidr_lookup, drop_fragments,
	// syn_proxy_always) or an integer flag word.
	Flags   any      `json:"flags,omitempty"`
	K       *float64 `json:"k,omitempty"`
	Defense *string  `json:"defense,omitempty"`
}

// XDPStatus fetches the XDP layer's status.
func (c *Client) XDPStatus(ctx context.Context) (map[string]any, error) {
	var m map[string]any
	err := c.do(ctx, http.MethodGet, "/v1/xdp/status", nil, &m)
	return m, err
}

// SetXDP changes the XDP layer's flags, k or defense override and returns
// its new status.
func (c *Client) SetXDP(ctx context.Context, cfg XDPConfig) (map[string]any, error) {
	var m map[string]any
	err := c.do(ctx, http.MethodPut, "/v1/xdp/config", cfg, &m)
	return m, err
}

// Unlock lifts the login lockout of username on every login route with
// a lockout, or on route only when it is not empty. An account with
// nothing to lift is an *APIError with Code account_not_locked.
func (c *Client) Unlock(ctx context.Context, username, route string) (UnlockResult, error) {
	var res UnlockResult
	err := c.do(ctx, http.MethodPost, "/v1/unlock", UnlockRequest{Username: username, Route: route}, &res)
	return res, err
}

// QuotaShow returns the usage of a quota bucket. A bucket never charged
// is an *APIError with Code quota_bucket_not_found.
func (c *Client) QuotaShow(ctx context.Context, b QuotaBucket) (QuotaUsage, error) {
	var u QuotaUsage
	err := c.do(ctx, http.MethodPost, "/v1/quota/show", b, &u)
	return u, err
}

// QuotaReset forgets the receipts of a quota bucket's current window
// and returns its usage after the reset (UsedBefore: before).
func (c *Client) QuotaReset(ctx context.Context, b QuotaBucket) (QuotaUsage, error) {
	var u QuotaUsage
	err := c.do(ctx, http.MethodPost, "/v1/quota/reset", b, &u)
	return u, err
}
