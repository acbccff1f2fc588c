package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Client calls a running gateway's control API.
type Client struct {
	// BaseURL is the API's base, e.g. "http://127.0.0.1:9091".
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
	// Errors lists configuration problems of a rejected reload.
	Errors []string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("control: %d %s", e.Status, e.Code)
	if e.Title != "" {
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
			Errors []string `json:"errors"`
		}
		if json.Unmarshal(b, &p) == nil {
			ae.Code, ae.Title, ae.Errors = p.Code, p.Title, p.Errors
		}
		if ae.Code == "" && len(ae.Errors) > 0 {
			ae.Code = "invalid_config"
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

const ctlUsage = `usage: bulwark ctl [--addr URL] [--token TOKEN] [--json] COMMAND [ARGS]

Commands:
  block PREFIX [--ttl DURATION] [--reason TEXT]   add to the deny list
  unblock PREFIX                                   remove from the deny list
  allow PREFIX [--ttl DURATION] [--reason TEXT]   add to the allow list
  disallow PREFIX                                  remove from the allow list
  list blocklist|allowlist [--limit N]             show a list
  status                                           show the gateway's status
  reload                                           re-read the configuration file
  xdp status                                       show the XDP layer's status
  xdp config [--flags F] [--k K] [--defense auto|on|off]
                                                   change it; F is a comma-separated
                                                   list of flag names or a flag word

The address defaults to $BULWARK_CONTROL_ADDR or http://127.0.0.1:9091, the
token to $BULWARK_CONTROL_TOKEN. A PREFIX is an address or a CIDR prefix.
`

// RunCtl implements "bulwark ctl": it parses args (everything after
// "ctl"), calls the API and prints human output or, with --json, JSON. It
// returns the process exit code: 0 success, 1 API or connection error, 2
// usage error.
func RunCtl(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "", "control API base URL")
	token := fs.String("token", "", "bearer token")
	asJSON := fs.Bool("json", false, "print JSON")
	ttl := fs.Duration("ttl", 0, "entry lifetime (0 = no expiry)")
	reason := fs.String("reason", "", "reason recorded with the entry")
	limit := fs.Int("limit", 0, "maximum entries to list")
	xflags := fs.String("flags", "", "xdp: flag names (comma-separated) or a flag word")
	xk := fs.Float64("k", 0, "xdp: standard deviations above the mean SYN rate")
	xdefense := fs.String("defense", "", "xdp: defense mode auto, on or off")
	pos, err := parseInterspersed(fs, args)
	if err != nil || len(pos) == 0 {
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "bulwark ctl: %v\n", err)
		}
		fmt.Fprint(stderr, ctlUsage)
		return 2
	}
	if *addr == "" {
		*addr = getenv("BULWARK_CONTROL_ADDR")
	}
	if *addr == "" {
		*addr = "http://" + DefaultAddr
	}
	if !strings.Contains(*addr, "://") {
		*addr = "http://" + *addr
	}
	if *token == "" {
		*token = getenv("BULWARK_CONTROL_TOKEN")
	}
	c := &Client{BaseURL: *addr, Token: *token}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "bulwark ctl: %s\n%s", msg, ctlUsage)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "bulwark ctl: %v\n", err)
		return 1
	}
	print := func(v any, human func(w io.Writer)) int {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(v)
			return 0
		}
		human(stdout)
		return 0
	}
	cmd, rest := pos[0], pos[1:]
	switch cmd {
	case "block", "allow":
		if len(rest) != 1 {
			return usage(cmd + " takes exactly one PREFIX")
		}
		list := map[string]string{"block": "blocklist", "allow": "allowlist"}[cmd]
		e, err := c.Add(ctx, list, rest[0], *ttl, *reason)
		if err != nil {
			return fail(err)
		}
		return print(e, func(w io.Writer) {
			exp := "never expires"
			if e.ExpiresAt != nil {
				exp = "expires " + e.ExpiresAt.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s %s (%s)\n", map[string]string{"block": "blocked", "allow": "allowed"}[cmd], e.IP, exp)
		})
	case "unblock", "disallow":
		if len(rest) != 1 {
			return usage(cmd + " takes exactly one PREFIX")
		}
		list := map[string]string{"unblock": "blocklist", "disallow": "allowlist"}[cmd]
		if err := c.Remove(ctx, list, rest[0]); err != nil {
			return fail(err)
		}
		return print(map[string]string{"removed": rest[0]}, func(w io.Writer) {
			fmt.Fprintf(w, "removed %s from the %s\n", rest[0], list)
		})
	case "list":
		if len(rest) != 1 || (rest[0] != "blocklist" && rest[0] != "allowlist") {
			return usage("list takes blocklist or allowlist")
		}
		l, err := c.List(ctx, rest[0], *limit)
		if err != nil {
			return fail(err)
		}
		return print(l, func(w io.Writer) {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PREFIX\tEXPIRES\tREASON")
			for _, e := range l.Entries {
				exp := "never"
				if e.ExpiresAt != nil {
					exp = e.ExpiresAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", e.IP, exp, e.Reason)
			}
			tw.Flush()
			fmt.Fprintf(w, "%d of %d entries (capacity %d)\n", l.Count, l.Total, l.Capacity)
		})
	case "status":
		if len(rest) != 0 {
			return usage("status takes no arguments")
		}
		st, err := c.Status(ctx)
		if err != nil {
			return fail(err)
		}
		return print(st, func(w io.Writer) {
			b, _ := json.MarshalIndent(st, "", "  ")
			fmt.Fprintln(w, string(b))
		})
	case "reload":
		if len(rest) != 0 {
			return usage("reload takes no arguments")
		}
		if err := c.Reload(ctx); err != nil {
			return fail(err)
		}
		return print(ReloadResult{Reloaded: true}, func(w io.Writer) { fmt.Fprintln(w, "configuration reloaded") })
	case "xdp":
		if len(rest) != 1 || (rest[0] != "status" && rest[0] != "config") {
			return usage("xdp takes status or config")
		}
		var st map[string]any
		var err error
		if rest[0] == "status" {
			st, err = c.XDPStatus(ctx)
		} else {
			var cfg XDPConfig
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if set["flags"] {
				cfg.Flags = xdpFlags(*xflags)
			}
			if set["k"] {
				cfg.K = xk
			}
			if set["defense"] {
				cfg.Defense = xdefense
			}
			if cfg.Flags == nil && cfg.K == nil && cfg.Defense == nil {
				return usage("xdp config takes --flags, --k or --defense")
			}
			st, err = c.SetXDP(ctx, cfg)
		}
		if err != nil {
			return fail(err)
		}
		return print(st, func(w io.Writer) {
			b, _ := json.MarshalIndent(st, "", "  ")
			fmt.Fprintln(w, string(b))
		})
	}
	return usage(fmt.Sprintf("unknown command %q", cmd))
}

// xdpFlags turns --flags into the wire form: a flag word when it is a
// number, else the list of names.
func xdpFlags(s string) any {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseUint(s, 0, 32); err == nil {
		return n
	}
	names := []string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			names = append(names, f)
		}
	}
	return names
}

// parseInterspersed parses flags that may appear before, between or after
// positional arguments ("block 10.0.0.0/8 --ttl 10m").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
