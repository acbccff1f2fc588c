package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/bulwarkhq/bulwark/gateway"
)

// Bounds of `bulwark health`.
const (
	defaultHealthTimeout = 3 * time.Second
	maxHealthTimeout     = time.Minute
	maxHealthBody        = 4 << 10
)

// health implements `bulwark health`: a container's (or any
// supervisor's) health check. It asks a running gateway's /readyz and
// exits 0 when it answers 200, 1 when it answers anything else or
// cannot be reached in time, 2 on a usage error.
//
//	bulwark health [--addr HOST:PORT | --url URL] [--timeout D]
func health(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bulwark health", flag.ContinueOnError)
	setUsage(fs, "bulwark health [--addr HOST:PORT | --url URL] [--timeout D]")
	def := gateway.DefaultConfig().Listen[0].Addr
	addr := fs.String("addr", "", "the gateway's client listener (default "+def+"; an unspecified host such as 0.0.0.0 is asked on loopback)")
	rawURL := fs.String("url", "", "the full /readyz URL instead (http or https)")
	timeout := durationFlag(fs, "timeout", defaultHealthTimeout, fmt.Sprintf("bound on the whole check, at most %s", maxHealthTimeout))
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bulwark health: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *timeout <= 0 || *timeout > maxHealthTimeout {
		fmt.Fprintf(stderr, "bulwark health: --timeout %s out of range (0, %s]\n", *timeout, maxHealthTimeout)
		return 2
	}
	if *addr != "" && *rawURL != "" {
		fmt.Fprintln(stderr, "bulwark health: --addr and --url are exclusive")
		return 2
	}
	target, err := readyzURL(*addr, *rawURL, def)
	if err != nil {
		fmt.Fprintf(stderr, "bulwark health: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "bulwark health: %v\n", err)
		return 2
	}
	c := &http.Client{
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	res, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "bulwark health: not ready: %v\n", err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxHealthBody))
	if res.StatusCode == http.StatusOK {
		fmt.Fprintln(stdout, "ready")
		return 0
	}
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	if p.Code == "" {
		p.Code = "-"
	}
	fmt.Fprintf(stderr, "bulwark health: not ready: %d %s\n", res.StatusCode, p.Code)
	return 1
}

// readyzURL is the /readyz URL `bulwark health` asks: rawURL as given,
// else http://addr/readyz (def when addr is empty), an unspecified host
// replaced by loopback.
func readyzURL(addr, rawURL, def string) (string, error) {
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--url %q: want an http or https URL", rawURL)
		}
		return u.String(), nil
	}
	if addr == "" {
		addr = def
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("--addr %q: want host:port", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: "/readyz"}).String(), nil
}
