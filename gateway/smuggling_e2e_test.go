package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A request-smuggling table, run against both engines. Each input is
// written raw to the gateway, followed by a sentinel request that closes
// the connection if it is still usable (and is misread if the body was
// framed wrongly). Observed: every status line the client gets, whether
// the connection is closed, and what the upstream saw (method, target,
// body of each request). The expected answers were written by running
// net/http (listen.engine nethttp); the test checks that both engines
// give exactly them, and that both upstreams saw the same requests.

const sentinel = "GET /__end HTTP/1.1\r\nHost: end.example\r\nConnection: close\r\n\r\n"

type smugglingCase struct {
	name string
	in   string
	want string // the status lines, ";"-separated, then "|closed" or "|open"
}

var smugglingCases = []smugglingCase{
	{"plain", "GET /a HTTP/1.1\r\nHost: a\r\n\r\n", "200;200|closed"},
	{"cl_body", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", "200;200|closed"},
	{"chunked_body", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "200;200|closed"},
	{"chunk_extension", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;name=\"v\";x\r\nhello\r\n0\r\n\r\n", "200;200|closed"},
	{"chunk_trailer", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", "200;200|closed"},
	// Content-Length with Transfer-Encoding: framed by the latter, and
	// the connection is closed after the answer (RFC 9112 §6.1; the
	// host's framingWatch on net/http, which every engine hands these
	// to), so whatever follows is never read as a request.
	{"cl_te", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", "200|closed"},
	{"te_cl", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n", "200|closed"},
	{"cl_te_lower_case", "POST /a HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "200|closed"},
	{"cl_te_after_keepalive", "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "200;200|closed"},
	{"cl_duplicate_equal", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "200;200|closed"},
	{"cl_duplicate_differ", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "400|closed"},
	{"cl_comma", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", "400|closed"},
	{"cl_signed", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", "400|closed"},
	{"cl_negative", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", "400|closed"},
	{"cl_hex", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello", "400|closed"},
	{"cl_empty", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", "400|closed"},
	{"cl_huge", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", "400|closed"},
	{"obs_fold", "GET /a HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\n\r\n", "200;200|closed"},
	{"obs_fold_te", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", "200;200|closed"},
	{"leading_space_field", "GET /a HTTP/1.1\r\n Host: a\r\n\r\n", "400|closed"},
	{"bare_lf", "GET /a HTTP/1.1\nHost: a\n\n", "200;200|closed"},
	{"bare_lf_end", "GET /a HTTP/1.1\r\nHost: a\r\n\n", "200;200|closed"},
	{"bare_cr", "GET /a HTTP/1.1\r\nHost: a\r\nX-A: 1\r2\r\n\r\n", "400|closed"},
	{"nul_value", "GET /a HTTP/1.1\r\nHost: a\r\nX-A: 1\x002\r\n\r\n", "400|closed"},
	{"nul_name", "GET /a HTTP/1.1\r\nHost: a\r\nX\x00A: 1\r\n\r\n", "400|closed"},
	{"nul_target", "GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", "400|closed"},
	{"ctl_target", "GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n", "400|closed"},
	{"del_value", "GET /a HTTP/1.1\r\nHost: a\r\nX-A: 1\x7f\r\n\r\n", "400|closed"},
	{"space_before_colon", "GET /a HTTP/1.1\r\nHost: a\r\nX-A : 1\r\n\r\n", "400|closed"},
	{"chunk_size_invalid", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", "400|closed"},
	{"chunk_size_negative", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", "400|closed"},
	// More than 16 hex digits is refused whatever the value: wrapped
	// to 64 bits, these would read as 5.
	{"chunk_size_17_digits_wraps", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n", "400|closed"},
	{"chunk_size_17_digits_zeros", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n0\r\n\r\n", "400|closed"},
	{"chunk_size_16_digits", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000005\r\nhello\r\n0\r\n\r\n", "200;200|closed"},
	{"chunk_size_oversized", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nhello\r\n0\r\n\r\n", "400|closed"},
	{"chunk_size_space", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 ;x\r\nhello\r\n0\r\n\r\n", "400|closed"},
	{"chunk_bare_lf", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", "400|closed"},
	{"chunk_no_crlf", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", "400|closed"},
	{"chunk_extension_long", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;" + strings.Repeat("x", 5000) + "\r\nhello\r\n0\r\n\r\n", "400|closed"},
	{"te_gzip_chunked", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "501|closed"},
	{"te_chunked_identity", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", "501|closed"},
	{"te_xchunked", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", "501|closed"},
	{"te_identity", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello", "501|closed"},
	{"te_twice", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "501|closed"},
	{"te_uppercase", "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n", "200;200|closed"},
	{"te_http10", "POST /a HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello", "200|closed"},
	{"absolute_form", "GET http://a/abs HTTP/1.1\r\nHost: other\r\n\r\n", "200;200|closed"},
	{"absolute_form_https", "GET https://a/abs HTTP/1.1\r\nHost: a\r\n\r\n", "200;200|closed"},
	{"asterisk_form", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "200;200|closed"},
	{"missing_host", "GET /a HTTP/1.1\r\n\r\n", "400|closed"},
	{"two_hosts", "GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400|closed"},
	{"bad_host", "GET /a HTTP/1.1\r\nHost: a b\r\n\r\n", "400|closed"},
	{"http10_no_host", "GET /a HTTP/1.0\r\n\r\n", "200|closed"},
	{"http09", "GET /a\r\n\r\n", "400|closed"},
	{"http2_line", "GET /a HTTP/2.0\r\nHost: a\r\n\r\n", "505|closed"},
	{"http_lowercase", "GET /a http/1.1\r\nHost: a\r\n\r\n", "400|closed"},
	{"version_garbage", "GET /a HTTP/1.1x\r\nHost: a\r\n\r\n", "400|closed"},
	{"long_request_line", "GET /" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: a\r\n\r\n", "414|closed"},
	{"long_field_line", "GET /a HTTP/1.1\r\nHost: a\r\nX-A: " + strings.Repeat("a", 70000) + "\r\n\r\n", "431|closed"},
	{"expect_continue", "POST /a HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", "100;200;200|closed"},
	{"expect_other", "POST /a HTTP/1.1\r\nHost: a\r\nExpect: something\r\nContent-Length: 5\r\n\r\nhello", "417|closed"},
	{"upgrade_h2c", "GET /a HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", "200;200|closed"},
	{"leading_crlf", "\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n", "400|closed"},
	{"pipelined", "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n", "200;200;200|closed"},
	{"connection_close", "GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "200|closed"},
	{"method_lowercase", "get /a HTTP/1.1\r\nHost: a\r\n\r\n", "200;200|closed"},
	{"method_ctl", "G\x01T /a HTTP/1.1\r\nHost: a\r\n\r\n", "400|closed"},
	{"bad_escape", "GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n", "400|closed"},
	// A raw '#' is the gateway's invalid_path (target_e2e_test.go).
	{"fragment", "GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", "400;200|closed"},
	// The sentinel becomes part of the body; the rest never comes.
	{"short_body", "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nhello", "|open"},
}

// smugglingUpstream records every request it is sent.
type smugglingUpstream struct {
	*httptest.Server
	hits atomic.Int64 // every request, its body read in full or not
	mu   sync.Mutex
	log  map[string][]string // by the test case's marker header
}

func newSmugglingUpstream(t *testing.T) *smugglingUpstream {
	u := &smugglingUpstream{log: map[string][]string{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		b, err := io.ReadAll(r.Body)
		u.mu.Lock()
		k := r.Header.Get("X-Case")
		if err == nil {
			// Requests whose body failed (the client's fault) are not
			// compared: when the gateway gives up on them is timing.
			u.log[k] = append(u.log[k], fmt.Sprintf("%s %s %q", r.Method, r.RequestURI, b))
		}
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *smugglingUpstream) seen(k string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.log[k], " / ")
}

// exchangeRaw writes in (then the sentinel) and reads every response until
// the connection closes or stays silent.
func exchangeRaw(t *testing.T, addr, in string) string {
	return exchangeOver(t, func() (net.Conn, error) { return net.Dial("tcp", addr) }, in)
}

// exchangeOver is exchangeRaw over a connection dial opens.
func exchangeOver(t *testing.T, dial func() (net.Conn, error), in string) string {
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		_, _ = io.WriteString(c, in)
		time.Sleep(10 * time.Millisecond)
		_, _ = io.WriteString(c, sentinel)
	}()
	br := bufio.NewReader(c)
	var statuses []string
	state := "closed"
	for {
		_ = c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				state = "open"
			}
			break
		}
		// How many 100 Continue a client gets before the answer is
		// timing (the gateway's own, and the upstream's relayed when it
		// arrives first), not framing: a run of one interim code counts
		// once.
		code := fmt.Sprint(res.StatusCode)
		if n := len(statuses); res.StatusCode >= 200 || n == 0 || statuses[n-1] != code {
			statuses = append(statuses, code)
		}
		if res.StatusCode >= 200 {
			_, _ = io.Copy(io.Discard, res.Body)
		}
		res.Body.Close()
	}
	return strings.Join(statuses, ";") + "|" + state
}

// TestSmugglingTable answers every row exactly as net/http does, on the
// fast engine with goroutines and on event loops, and the upstream sees
// the same requests from each.
func TestSmugglingTable(t *testing.T) {
	up := newSmugglingUpstream(t)
	addrs := map[string]string{}
	for _, e := range []string{EngineAuto, EngineGoroutine, EngineNetHTTP} {
		cfg, err := Parse("smuggling.yaml", []byte(strings.ReplaceAll(`
limits: {max_url_bytes: 8192, max_header_bytes: 65536}
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
control: {enabled: false}
`, "{{APP}}", up.URL)), nil)
		if err != nil {
			t.Fatal(err)
		}
		setEngine(cfg, e)
		tg := startConfig(t, cfg, gwOpts{})
		addrs[e] = strings.TrimPrefix(tg.url, "http://")
	}
	for _, c := range smugglingCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{}
			seen := map[string]string{}
			for _, e := range []string{EngineNetHTTP, EngineAuto, EngineGoroutine} {
				// Every request of the case carries the case's marker,
				// so the upstream's log can be told apart.
				in := markCase(c.in, c.name+"/"+e)
				got[e] = exchangeRaw(t, addrs[e], in)
				seen[e] = up.seen(c.name + "/" + e)
			}
			if got[EngineNetHTTP] != c.want {
				t.Errorf("net/http answered %q, table says %q", got[EngineNetHTTP], c.want)
			}
			for _, e := range []string{EngineAuto, EngineGoroutine} {
				if got[e] != got[EngineNetHTTP] {
					t.Errorf("engine %s answered %q, net/http %q", e, got[e], got[EngineNetHTTP])
				}
				if seen[e] != seen[EngineNetHTTP] {
					t.Errorf("upstream saw\n  %s: %s\n  nethttp: %s", e, seen[e], seen[EngineNetHTTP])
				}
			}
		})
	}
}

// TestSmugglingTableOverTLS: the table over a TLS listener speaking
// HTTP/1.1, on every engine, gets the very answers it gets in cleartext:
// a request with both Content-Length and Transfer-Encoding is framed by
// Transfer-Encoding and its connection closed after the answer (issue
// 24: over TLS net/http kept it open), and every other row is framed and
// answered alike.
func TestSmugglingTableOverTLS(t *testing.T) {
	up := newSmugglingUpstream(t)
	dir := t.TempDir()
	pool := writeCert(t, dir)
	engs := []string{EngineNetHTTP, EngineAuto, EngineGoroutine}
	addrs := map[string]string{}
	for _, e := range engs {
		cfg, err := Parse("smuggling.yaml", []byte(strings.ReplaceAll(`
listen: {tls: {cert_file: `+filepath.Join(dir, "cert.pem")+`, key_file: `+filepath.Join(dir, "key.pem")+`}}
limits: {max_url_bytes: 8192, max_header_bytes: 65536}
upstreams: [{name: app, targets: ["{{APP}}"]}]
routes: [{name: all, match: {path: /}, upstream: app}]
control: {enabled: false}
`, "{{APP}}", up.URL)), nil)
		if err != nil {
			t.Fatal(err)
		}
		setEngine(cfg, e)
		tg := startConfig(t, cfg, gwOpts{})
		addrs[e] = tg.g.Addr().String()
	}
	for _, c := range smugglingCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, e := range engs {
				in := markCase(c.in, "tls/"+c.name+"/"+e)
				got := exchangeOver(t, func() (net.Conn, error) {
					return tls.Dial("tcp", addrs[e], &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
				}, in)
				if got != c.want {
					t.Errorf("engine %s over TLS answered %q, in cleartext %q", e, got, c.want)
				}
				if e != EngineNetHTTP {
					if s, n := up.seen("tls/"+c.name+"/"+e), up.seen("tls/"+c.name+"/"+EngineNetHTTP); s != n && n != "" {
						t.Errorf("upstream saw\n  %s: %s\n  nethttp: %s", e, s, n)
					}
				}
			}
		})
	}
}

// markCase adds "X-Case: mark" after every request line of in that
// starts a head (the first line, and every line after an empty one), so
// the upstream's log can be sorted by case and engine.
func markCase(in, mark string) string {
	var b strings.Builder
	lines := strings.SplitAfter(in, "\n")
	head := true
	for _, l := range lines {
		b.WriteString(l)
		if head && strings.Contains(l, "HTTP/") && strings.HasSuffix(l, "\n") {
			b.WriteString("X-Case: " + mark + "\r\n")
			head = false
		}
		if l == "\r\n" || l == "\n" {
			head = true
		}
	}
	return b.String()
}

// A chunked upload answered once the upstream has the whole body leaves
// the client's connection open for the next request, every time: the
// upstream's answer can arrive before the proxy's body sender has
// returned (likelier with many connections busy at once), and that used
// to close the connection now and then.
func TestChunkedUploadsKeepTheConnection(t *testing.T) {
	up := newSmugglingUpstream(t)
	engines(t, func(t *testing.T) {
		tg := startGateway(t, oneRoute+"control: {enabled: false}\n", map[string]string{"APP": up.URL}, gwOpts{})
		const conns, n = 16, 100
		var wg sync.WaitGroup
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				br := bufio.NewReader(c)
				for i := range n {
					if _, err := io.WriteString(c, "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"); err != nil {
						t.Errorf("request %d: %v", i+1, err)
						return
					}
					res, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Errorf("request %d of %d on one connection: %v", i+1, n, err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 || res.Close {
						t.Errorf("request %d of %d: %d, close %v; want 200 on a kept connection", i+1, n, res.StatusCode, res.Close)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}
