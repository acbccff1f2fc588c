package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
)

// A lenient upstream routes the way permissive web frameworks do, all at
// once: Express ignores letter case and a trailing slash; many servers
// decode %2F and read "\" as "/"; Tomcat drops ";" path parameters (and
// reads "..;" as ".."); everything resolves dot segments and collapses
// "//"; Flask and Servlet read parameters from the query string first,
// then the form; some JSON binders ignore the Content-Type (gin's
// ShouldBindJSON) and compare keys case-insensitively (Jackson with
// ACCEPT_CASE_INSENSITIVE_PROPERTIES). It is written independently of
// package canon on purpose: the suite checks the gateway against what a
// framework does, not against itself.

// seen is what one request looked like to the lenient upstream.
type seen struct {
	Handler  string // login, admin, exports, other
	Username string // as the login handler read it (first wins, lower-cased, trimmed)
	Header   http.Header
	Method   string
	URI      string
}

type lenient struct {
	mu   sync.Mutex
	reqs []seen
	srv  *httptest.Server
	// status is what the login handler answers (401 by default: a wrong
	// password), for the lockout.
	status int
}

func newLenient(t testing.TB) *lenient {
	t.Helper()
	l := &lenient{status: http.StatusUnauthorized}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *lenient) URL() string { return l.srv.URL }

// lenientPath is the path a permissive framework dispatches on.
func lenientPath(raw string) string {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			raw = rest[j:]
		} else {
			raw = "/"
		}
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		p = raw
	}
	p = strings.ReplaceAll(p, "\\", "/")
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if k := strings.IndexByte(s, ';'); k >= 0 {
			segs[i] = s[:k]
		}
	}
	p = path.Clean("/" + strings.Join(segs, "/"))
	return strings.ToLower(strings.TrimSuffix(p, "/"))
}

func lenientHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimRight(h, "."))
}

// lenientUsername reads the username the way the union of frameworks
// would accept it: query first, then a JSON object (any content type,
// case-insensitive key), then form, then multipart.
func lenientUsername(r *http.Request, body []byte) string {
	norm := func(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
	if v := r.URL.Query().Get("username"); v != "" {
		return norm(v)
	}
	var obj map[string]any
	if json.Unmarshal(body, &obj) == nil {
		for k, v := range obj {
			if s, ok := v.(string); ok && strings.EqualFold(k, "username") {
				return norm(s)
			}
		}
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/x-www-form-urlencoded":
		if vals, err := url.ParseQuery(string(body)); err == nil {
			if vs := vals["username"]; len(vs) > 0 {
				return norm(vs[len(vs)-1]) // some frameworks keep the last
			}
		}
	case "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			if p.FormName() == "username" {
				b, _ := io.ReadAll(p)
				return norm(string(b))
			}
		}
	}
	return ""
}

func (l *lenient) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p := lenientPath(r.RequestURI)
	s := seen{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Handler: "other"}
	switch {
	case lenientHost(r.Host) == "admin.example.com":
		s.Handler = "admin"
	case p == "/login":
		s.Handler = "login"
		s.Username = lenientUsername(r, body)
	case p == "/api/exports":
		s.Handler = "exports"
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, s)
	status := l.status
	l.mu.Unlock()
	w.Header().Set("X-Handler", s.Handler)
	if s.Handler == "login" {
		w.WriteHeader(status)
	}
	io.WriteString(w, s.Handler)
}

// count returns how many requests reached handler (as user, if not "").
func (l *lenient) count(handler, user string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.reqs {
		if s.Handler == handler && (user == "" || s.Username == user) {
			n++
		}
	}
	return n
}

func (l *lenient) last() seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reqs) == 0 {
		return seen{}
	}
	return l.reqs[len(l.reqs)-1]
}

func (l *lenient) reset() {
	l.mu.Lock()
	l.reqs = nil
	l.mu.Unlock()
}

// rawRequest is one request of a corpus file, sent byte for byte.
type rawRequest struct {
	name string
	head string // request line and header lines, "\r\n"-terminated each
	body []byte
}

// loadCorpus reads testdata/bypass/NAME.http (format in the files).
func loadCorpus(t testing.TB, name string) []rawRequest {
	t.Helper()
	data, err := os.ReadFile("testdata/bypass/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return parseCorpus(string(data))
}

func parseCorpus(data string) []rawRequest {
	var out []rawRequest
	for _, block := range strings.Split("\n"+data, "\n### ")[1:] {
		name, rest, _ := strings.Cut(block, "\n")
		head, body, _ := strings.Cut(rest, "\n\n")
		body = strings.TrimRight(body, "\n")
		lines := strings.Split(strings.TrimRight(head, "\n"), "\n")
		var h strings.Builder
		chunked, multi := false, false
		for _, ln := range lines {
			h.WriteString(ln + "\r\n")
			lower := strings.ToLower(ln)
			chunked = chunked || strings.HasPrefix(lower, "transfer-encoding:") && strings.Contains(lower, "chunked")
			multi = multi || strings.HasPrefix(lower, "content-type:") && strings.Contains(lower, "multipart/")
		}
		b := []byte(body)
		if multi {
			b = []byte(strings.ReplaceAll(body, "\n", "\r\n") + "\r\n")
		}
		switch {
		case chunked:
			var cb bytes.Buffer
			for len(b) > 0 {
				n := min(len(b), 7)
				fmt.Fprintf(&cb, "%x\r\n%s\r\n", n, b[:n])
				b = b[n:]
			}
			cb.WriteString("0\r\n\r\n")
			b = cb.Bytes()
		case len(b) > 0:
			fmt.Fprintf(&h, "Content-Length: %d\r\n", len(b))
		}
		out = append(out, rawRequest{name: name, head: h.String(), body: b})
	}
	return out
}

// sendRaw sends rr to addr from the local address src ("" for any) and
// returns the response.
func sendRaw(t testing.TB, addr, src string, rr rawRequest) (*http.Response, []byte) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("%s: dial: %v", rr.name, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a safety deadline only
	if _, err := io.WriteString(c, rr.head+"\r\n"); err != nil {
		t.Fatalf("%s: write: %v", rr.name, err)
	}
	if _, err := c.Write(rr.body); err != nil {
		t.Fatalf("%s: write body: %v", rr.name, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: read: %v", rr.name, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func problemCode(b []byte) string {
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// The lenient upstream really does route every corpus variant to the
// handler the suite says: otherwise the suite would prove nothing.
func TestLenientUpstreamRoutesVariants(t *testing.T) {
	l := newLenient(t)
	addr := strings.TrimPrefix(l.URL(), "http://")
	for _, c := range []struct{ file, handler, user string }{{"login.http", "login", "alice"}, {"host.http", "admin", ""}} {
		for _, rr := range loadCorpus(t, c.file) {
			l.reset()
			resp, _ := sendRaw(t, addr, "", rr)
			if got := l.last(); got.Handler != c.handler || got.Username != c.user {
				t.Errorf("%s/%s: upstream saw handler %q user %q (status %d)", c.file, rr.name, got.Handler, got.Username, resp.StatusCode)
			}
		}
	}
}
