package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bulwarkhq/bulwark/control"
	"github.com/bulwarkhq/bulwark/wire"
)

// envControlAddr is the default of ctl's --addr.
const envControlAddr = "BULWARK_CONTROL_ADDR"

const ctlUsage = `usage: bulwark ctl [--addr URL] [--token TOKEN | --token-file FILE] [--json] COMMAND [ARGS]

Commands:
  block PREFIX [--ttl DURATION] [--reason TEXT] [--force]
                                                   add to the deny list
  block --client FP [--ttl DURATION] [--reason TEXT]
                                                   block the client behind a fingerprint
                                                   of the access log (its address is
                                                   never shown)
  unblock PREFIX | --client FP                     remove from the deny list
  allow PREFIX [--ttl DURATION] [--reason TEXT] [--force]
                                                   add to the allow list
  disallow PREFIX                                  remove from the allow list
  clients [--limit N]                              the clients the layers refused most,
                                                   by fingerprint
  list blocklist|allowlist [--limit N]             show a list
  unlock USERNAME [--route NAME]                   lift the login lockout of an account
                                                   (every login route, or NAME only)
  quota show PROJECT SUBJECT_TYPE SUBJECT_ID OPERATION
                                                   show a quota bucket's usage
  quota reset PROJECT SUBJECT_TYPE SUBJECT_ID OPERATION
                                                   forget the bucket's receipts: its whole
                                                   limit is available again
  status                                           show the gateway's status
  reload                                           re-read the configuration file
  xdp status                                       show the XDP layer's status
  xdp config [--flags F] [--k K] [--defense auto|on|off]
                                                   change it; F is a comma-separated
                                                   list of flag names or a flag word

The address defaults to $BULWARK_CONTROL_ADDR, else http://127.0.0.1:7922.
The token is --token, else --token-file, else $BULWARK_CONTROL_TOKEN, else
the token the gateway on that address generated and stored in its state
directory ($BULWARK_STATE_DIR, /var/lib/bulwark as root, else
~/.local/state/bulwark; run ctl as the gateway's user or as root).
A PREFIX is an address or a CIDR prefix. One wider than /8 (IPv4) or /16
(IPv6), such as 0.0.0.0/0 (every client), needs --force.
`

// widePrefix reports whether s is a prefix wider than /8 (IPv4) or /16
// (IPv6), which a block or allow takes only with --force, and says how
// much of the address space it holds. The API decides whether s is
// valid at all.
func widePrefix(s string) (bool, string) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return false, ""
	}
	switch {
	case p.Bits() == 0:
		return true, "every " + map[bool]string{true: "IPv4", false: "IPv6"}[p.Addr().Is4()] + " client"
	case p.Addr().Is4() && p.Bits() < 8, !p.Addr().Is4() && p.Bits() < 16:
		return true, fmt.Sprintf("1/%d of all %s addresses", 1<<p.Bits(), map[bool]string{true: "IPv4", false: "IPv6"}[p.Addr().Is4()])
	}
	return false, ""
}

// runCtl implements "bulwark ctl": it parses args (everything after
// "ctl"), calls the API and prints human output or, with --json, JSON. It
// returns the process exit code: 0 success, 1 API or connection error, 2
// usage error.
func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	set := flag.NewFlagSet("ctl", flag.ContinueOnError)
	set.SetOutput(io.Discard)
	addr := set.String("addr", "", "control API base URL or host:port")
	token := set.String("token", "", "bearer token (visible to other local users in the process list; prefer the others)")
	tokenFile := set.String("token-file", "", "file holding the bearer token (mode 0600)")
	asJSON := set.Bool("json", false, "print JSON")
	ttl := durationFlag(set, "ttl", 0, "entry lifetime (0 = no expiry)")
	reason := set.String("reason", "", "reason recorded with the entry")
	limit := set.Int("limit", 0, "maximum entries to list")
	force := set.Bool("force", false, "block or allow a prefix wider than /8 (IPv4) or /16 (IPv6), 0.0.0.0/0 and ::/0 included")
	clientFP := set.String("client", "", "a client fingerprint from the access log, instead of a PREFIX")
	route := set.String("route", "", "unlock: the login route (default: every login route with a lockout)")
	xflags := set.String("flags", "", "xdp: flag names (comma-separated) or a flag word")
	xk := set.Float64("k", 0, "xdp: standard deviations above the mean SYN rate")
	xdefense := set.String("defense", "", "xdp: defense mode auto, on or off")
	pos, err := parseInterspersed(set, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, ctlUsage)
		return 0
	}
	if err != nil || len(pos) == 0 {
		if err != nil {
			fmt.Fprintf(stderr, "bulwark ctl: %v\n", err)
		}
		fmt.Fprint(stderr, ctlUsage)
		return 2
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "bulwark ctl: %s\n%s", msg, ctlUsage)
		return 2
	}
	base, hostPort, err := ctlBase(*addr, getenv)
	if err != nil {
		return usage(err.Error())
	}
	if *token != "" && *tokenFile != "" {
		return usage("--token and --token-file are exclusive")
	}
	src, err := ctlToken(*token, *tokenFile, hostPort, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "bulwark ctl: %v\n", err)
		if errors.Is(err, fs.ErrPermission) {
			fmt.Fprintln(stderr, "bulwark ctl: run as the gateway's user or as root, or pass the token with $BULWARK_CONTROL_TOKEN")
		}
		return 1
	}
	c := &control.Client{BaseURL: base, Token: src.token}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "bulwark ctl: %v\n", err)
		if hint := src.hint(err, base); hint != "" {
			fmt.Fprintf(stderr, "bulwark ctl: %s\n", hint)
		}
		return 1
	}
	print := func(v any, human func(w io.Writer)) int {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(v)
			return 0
		}
		human(stdout)
		return 0
	}
	cmd, rest := pos[0], pos[1:]
	switch cmd {
	case "block", "allow":
		if (len(rest) == 1) == (*clientFP != "") || len(rest) > 1 {
			return usage(cmd + " takes exactly one PREFIX or --client FP")
		}
		list := map[string]string{"block": "blocklist", "allow": "allowlist"}[cmd]
		var e control.Entry
		var err error
		if *clientFP != "" {
			e, err = c.AddClient(ctx, list, *clientFP, *ttl, *reason)
		} else {
			if wide, n := widePrefix(rest[0]); wide && !*force {
				fmt.Fprintf(stderr, "bulwark ctl: %s %s would %s %s; pass --force if that is what you mean\n", cmd, rest[0],
					map[string]string{"block": "block", "allow": "exempt from the shield and rate limits"}[cmd], n)
				return 2
			}
			e, err = c.Add(ctx, list, rest[0], *ttl, *reason)
		}
		if err != nil {
			return fail(err)
		}
		return print(e, func(w io.Writer) {
			exp := "never expires"
			if e.ExpiresAt != nil {
				exp = "expires " + e.ExpiresAt.Format(time.RFC3339)
			}
			what := e.IP
			if e.Client != "" {
				what = "client " + e.Client
			}
			fmt.Fprintf(w, "%s %s (%s)\n", map[string]string{"block": "blocked", "allow": "allowed"}[cmd], what, exp)
		})
	case "unblock", "disallow":
		if (len(rest) == 1) == (*clientFP != "") || len(rest) > 1 {
			return usage(cmd + " takes exactly one PREFIX or --client FP")
		}
		list := map[string]string{"unblock": "blocklist", "disallow": "allowlist"}[cmd]
		what := ""
		if *clientFP != "" {
			what = "client " + *clientFP
			err = c.RemoveClient(ctx, list, *clientFP)
		} else {
			what = rest[0]
			err = c.Remove(ctx, list, rest[0])
		}
		if err != nil {
			return fail(err)
		}
		return print(map[string]string{"removed": what}, func(w io.Writer) {
			fmt.Fprintf(w, "removed %s from the %s\n", what, list)
		})
	case "clients":
		if len(rest) != 0 {
			return usage("clients takes no arguments")
		}
		l, err := c.TopClients(ctx, *limit)
		if err != nil {
			return fail(err)
		}
		return print(map[string]any{"clients": l}, func(w io.Writer) {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLIENT\tLAYER\tCOUNT\tLAST SEEN")
			for _, r := range l {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.Client, r.Layer, r.Count, r.LastSeen.Format(time.RFC3339))
			}
			_ = tw.Flush()
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
				what := e.IP
				if e.Client != "" {
					what = "client " + e.Client
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", what, exp, e.Reason)
			}
			_ = tw.Flush()
			fmt.Fprintf(w, "%d of %d entries (capacity %d)\n", l.Count, l.Total, l.Capacity)
		})
	case "unlock":
		if len(rest) != 1 {
			return usage("unlock takes exactly one USERNAME")
		}
		res, err := c.Unlock(ctx, rest[0], *route)
		if err != nil {
			return fail(err)
		}
		return print(res, func(w io.Writer) {
			for _, r := range res.Routes {
				switch {
				case r.Locked:
					fmt.Fprintf(w, "route %s: unlocked (%d failed passwords forgotten)\n", r.Route, r.Failures)
				case r.Failures > 0:
					fmt.Fprintf(w, "route %s: not locked; %d failed passwords forgotten\n", r.Route, r.Failures)
				default:
					fmt.Fprintf(w, "route %s: nothing to unlock\n", r.Route)
				}
			}
			var window int64
			for _, r := range res.Routes {
				window = max(window, r.RateLimitWindowSeconds)
			}
			if window > 0 {
				fmt.Fprintf(w, "not lifted: the rate limit per (client address, username); a client that used up its attempts waits up to %ds\n", window)
			}
		})
	case "quota":
		if len(rest) != 5 || (rest[0] != "show" && rest[0] != "reset") {
			return usage("quota takes show or reset, then PROJECT SUBJECT_TYPE SUBJECT_ID OPERATION")
		}
		b := control.QuotaBucket{Project: rest[1], SubjectType: rest[2], SubjectID: rest[3], Operation: rest[4]}
		var u control.QuotaUsage
		var err error
		if rest[0] == "show" {
			u, err = c.QuotaShow(ctx, b)
		} else {
			u, err = c.QuotaReset(ctx, b)
		}
		if err != nil {
			return fail(err)
		}
		return print(u, func(w io.Writer) {
			if u.UsedBefore != nil {
				fmt.Fprintf(w, "reset: %d receipts forgotten\n", *u.UsedBefore)
			}
			fmt.Fprintf(w, "%s: %d of %d used, %d remaining per %v", u.Operation, u.Used, u.Limit, u.Remaining, time.Duration(u.WindowMs)*time.Millisecond)
			if u.ResetsAt != nil {
				fmt.Fprintf(w, "; window resets %s", u.ResetsAt.Format(time.RFC3339))
			}
			fmt.Fprintln(w)
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
		return print(control.ReloadResult{Reloaded: true}, func(w io.Writer) { fmt.Fprintln(w, "configuration reloaded") })
	case "xdp":
		if len(rest) != 1 || (rest[0] != "status" && rest[0] != "config") {
			return usage("xdp takes status or config")
		}
		var st map[string]any
		var err error
		if rest[0] == "status" {
			st, err = c.XDPStatus(ctx)
		} else {
			var cfg control.XDPConfig
			given := map[string]bool{}
			set.Visit(func(f *flag.Flag) { given[f.Name] = true })
			if given["flags"] {
				cfg.Flags = xdpFlags(*xflags)
			}
			if given["k"] {
				cfg.K = xk
			}
			if given["defense"] {
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

// ctlBase turns --addr (or $BULWARK_CONTROL_ADDR, or the default) into
// the API's base URL and its host:port, which names the token file.
func ctlBase(addr string, getenv func(string) string) (base, hostPort string, err error) {
	if addr == "" {
		addr = getenv(envControlAddr)
	}
	if addr == "" {
		addr = control.DefaultAddr
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("--addr %q: want http://host:port or host:port", addr)
	}
	hostPort = u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		hostPort = net.JoinHostPort(u.Hostname(), port)
	}
	return strings.TrimSuffix(u.String(), "/"), hostPort, nil
}

// tokenSource is the token ctl sends and where it came from.
type tokenSource struct {
	token string
	file  string   // the file it was read from, if any
	tried []string // the token files looked for, when none was found
}

// ctlToken finds the token: --token, --token-file, $BULWARK_CONTROL_TOKEN,
// then the file the gateway on hostPort stored. No file found is not an
// error: the API may run without a token.
func ctlToken(flagToken, flagFile, hostPort string, getenv func(string) string) (tokenSource, error) {
	switch {
	case flagToken != "":
		return tokenSource{token: flagToken}, nil
	case flagFile != "":
		tok, err := control.ReadTokenFile(flagFile)
		return tokenSource{token: tok, file: flagFile}, err
	case getenv(control.EnvToken) != "":
		return tokenSource{token: getenv(control.EnvToken)}, nil
	}
	tok, path, err := control.LookupToken(hostPort, getenv)
	switch {
	case err == nil:
		return tokenSource{token: tok, file: path}, nil
	case errors.Is(err, fs.ErrNotExist):
		dir, derr := control.StateDir(getenv)
		ts := tokenSource{tried: []string{control.TokenPath(control.SystemStateDir, hostPort)}}
		if derr == nil && dir != control.SystemStateDir {
			ts.tried = append([]string{control.TokenPath(dir, hostPort)}, ts.tried...)
		}
		return ts, nil
	default:
		return tokenSource{file: path}, err
	}
}

// hint explains a refusal by where the token came from.
func (s tokenSource) hint(err error, base string) string {
	var ae *control.APIError
	if !errors.As(err, &ae) {
		return ""
	}
	switch {
	case ae.Code == wire.CodeUnauthorized && s.file != "":
		return fmt.Sprintf("the token in %s was refused: was it written by the gateway listening on %s?", s.file, base)
	case ae.Code == wire.CodeUnauthorized && s.token == "":
		return "no token: pass --token-file or $BULWARK_CONTROL_TOKEN; no generated token was found at " + strings.Join(s.tried, " or ")
	case ae.Code == wire.CodeForbidden:
		return "the API answers only under a loopback name, its listen address or a name in control.allowed_hosts"
	}
	return ""
}

// parseInterspersed parses flags that may appear before, between or after
// positional arguments ("block 10.0.0.0/8 --ttl 10m").
func parseInterspersed(set *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := set.Parse(args); err != nil {
			return nil, err
		}
		args = set.Args()
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
