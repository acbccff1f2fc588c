package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bulwarkhq/bulwark/wire"
)

// deadlineRec is a connection that records its read deadlines.
type deadlineRec struct{ last time.Time }

func (d *deadlineRec) SetReadDeadline(t time.Time) error { d.last = t; return nil }

// exchangeFor parses raw (a request head and its body) into a fresh
// Exchange that writes its response to out.
func exchangeFor(t *testing.T, raw string, out *bytes.Buffer) (*Exchange, *deadlineRec, *bufio.Writer) {
	t.Helper()
	x := &Exchange{}
	n, err := ParseRequest([]byte(raw), &x.Req, 8192)
	if err != nil {
		t.Fatalf("ParseRequest(%q): %v", raw, err)
	}
	rd := NewReader(strings.NewReader(raw[n:]), 64, 4096)
	conn := &deadlineRec{}
	w := bufio.NewWriter(out)
	x.Init(conn, w, &Strings{}, func() bool { return true })
	x.RemoteAddr, x.Remote = "192.0.2.1:1234", netip.MustParseAddrPort("192.0.2.1:1234")
	x.Reset(rd, 1<<20, time.Now())
	return x, conn, w
}

// responseCase is a handler written for net/http, run on net/http's
// server and on an Exchange: what the client reads must match.
type responseCase struct {
	name, req string
	h         func(w http.ResponseWriter)
}

var responseCases = []responseCase{
	{"plain", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello")
	}},
	{"content-length", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	}},
	{"status text", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"code":"rate_limited"}`)
	}},
	{"unknown status", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(299)
	}},
	{"no content", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusNoContent)
		_, _ = io.WriteString(w, "dropped")
	}},
	{"not modified", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Etag", `"v1"`)
		w.WriteHeader(http.StatusNotModified)
	}},
	{"head", "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "5")
		_, _ = io.WriteString(w, "hello")
	}},
	{"fields sorted, many values, CR LF replaced", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		h := w.Header()
		h.Set("Content-Type", "text/plain")
		h["X-B"] = []string{"2", "3"}
		h.Set("X-A", "1")
		h["X-Split"] = []string{"a\r\nInjected: yes", "b\nc"}
		_, _ = io.WriteString(w, "ok")
	}},
	{"handler closes", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	}},
	{"client closes", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "bye")
	}},
	{"flushed, then more", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "second")
	}},
	{"flush before anything", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.(http.Flusher).Flush()
	}},
	{"informational first", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Link", "</s.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "final")
	}},
	{"second WriteHeader ignored", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "accepted")
	}},
	{"date kept", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
		_, _ = io.WriteString(w, "dated")
	}},
	{"refusal, its values in the exchange's storage", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		wire.SetRateLimitOn(w, wire.RateLimit{Policy: "api", Limit: 10, Window: time.Minute, Reset: 3 * time.Second})
		p := wire.New(wire.CodeRateLimited)
		p.RetryAfter = 3
		wire.Write(w, p)
	}},
	{"big body", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		for range 10 {
			_, _ = io.WriteString(w, strings.Repeat("z", 1000))
		}
	}},
}

// readFrom reads one response from raw, with its status line as sent.
func readFrom(t *testing.T, raw []byte, method string) (statusLine string, resp *http.Response, body []byte) {
	t.Helper()
	// Skip 1xx heads: http.ReadResponse returns them as responses.
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no status line in %q", raw)
		}
		statusLine = line
		if !strings.HasPrefix(line, "HTTP/1.1 1") {
			break
		}
		for l, _ := br.ReadString('\n'); l != "\r\n" && l != ""; l, _ = br.ReadString('\n') {
		}
	}
	rest := io.MultiReader(strings.NewReader(statusLine), br)
	resp, err := http.ReadResponse(bufio.NewReader(rest), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading %q: %v", raw, err)
	}
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of %q: %v", raw, err)
	}
	return statusLine, resp, body
}

// netHTTPResponse serves req with h on net/http's server and returns the
// raw bytes the client read.
func netHTTPResponse(t *testing.T, c responseCase) []byte {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.h(w) }))
	defer s.Close()
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := c.req
	if !strings.Contains(req, "Connection: close") {
		req = strings.Replace(req, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1) // read to EOF
	}
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(conn)
	return b
}

// The Exchange, as an http.ResponseWriter, answers as net/http's server
// does: the same status line, header fields (Date aside), body and
// connection persistence. (The framing may differ: net/http gives a
// small body it buffered a Content-Length where the Exchange chunks.)
func TestExchangeWritesAsNetHTTP(t *testing.T) {
	for _, c := range responseCases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			x, _, w := exchangeFor(t, c.req, &out)
			c.h(x)
			keep := x.Finish()
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			method := strings.Fields(c.req)[0]
			gotLine, got, gotBody := readFrom(t, out.Bytes(), method)
			wantLine, want, wantBody := readFrom(t, netHTTPResponse(t, c), method)
			if gotLine != wantLine {
				t.Errorf("status line %q, net/http %q", gotLine, wantLine)
			}
			if !bytes.Equal(gotBody, wantBody) {
				t.Errorf("body %q, net/http %q", gotBody, wantBody)
			}
			norm := func(h http.Header) http.Header {
				h = h.Clone()
				for _, k := range []string{"Date", "Content-Length", "Transfer-Encoding"} {
					delete(h, k)
				}
				if h.Get("Connection") == "close" && !strings.Contains(c.name, "closes") {
					delete(h, "Connection") // the net/http side asked to close
				}
				return h
			}
			if g, w := norm(got.Header), norm(want.Header); !reflect.DeepEqual(g, w) {
				t.Errorf("fields %v, net/http %v", g, w)
			}
			if _, ok := got.Header["Date"]; !ok {
				t.Error("no Date field")
			}
			if strings.Contains(c.name, "closes") != !keep {
				t.Errorf("keep-alive %v", keep)
			}
			if strings.Contains(c.name, "closes") && !got.Close {
				t.Error("the response does not say Connection: close")
			}
			if x.Status() != got.StatusCode || !x.Written() {
				t.Errorf("Status() %d Written() %v, sent %d", x.Status(), x.Written(), got.StatusCode)
			}
		})
	}
}

// Writing more than the declared Content-Length fails as on net/http,
// and breaks the connection; writing less breaks it at Finish.
func TestExchangeContentLengthMismatch(t *testing.T) {
	var out bytes.Buffer
	x, _, _ := exchangeFor(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	x.Header().Set("Content-Length", "3")
	if _, err := x.WriteString("abcd"); !errors.Is(err, http.ErrContentLength) {
		t.Fatalf("long write: %v", err)
	}
	if !x.Broken() || x.KeepAlive() || x.Finish() {
		t.Fatal("a response longer than declared did not break the connection")
	}
	x, _, _ = exchangeFor(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	x.Header().Set("Content-Length", "3")
	if n, err := x.WriteString("ab"); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	if x.Finish() || !x.Broken() {
		t.Fatal("a response shorter than declared did not break the connection")
	}
	x, _, _ = exchangeFor(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	if n, err := x.Write(nil); n != 0 || err != nil || x.Status() != 200 {
		t.Fatal("empty write", n, err, x.Status())
	}
	defer func() {
		if recover() == nil {
			t.Error("WriteHeader(42) did not panic, as net/http's does")
		}
	}()
	x, _, _ = exchangeFor(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	x.WriteHeader(42)
}

// The request accessors: interned methods, cached strings, the stub and
// the full *http.Request as net/http builds it.
func TestExchangeRequestViews(t *testing.T) {
	raw := "POST /p/a%20th?q=1&r=2 HTTP/1.1\r\nHost: Example.com\r\nx-custom: a\r\nX-Custom: b\r\nPragma: no-cache\r\nContent-Length: 5\r\n\r\nhello"
	var out bytes.Buffer
	x, _, _ := exchangeFor(t, raw, &out)
	want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := x.Request()
	if err != nil {
		t.Fatal(err)
	}
	if r.Method != want.Method || r.URL.String() != want.URL.String() || r.Host != want.Host || r.RequestURI != want.RequestURI ||
		r.ContentLength != want.ContentLength || !reflect.DeepEqual(r.Header, want.Header) || r.Proto != want.Proto {
		t.Fatalf("Request() %+v\nnet/http %+v", r, want)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != "hello" {
		t.Fatalf("body %q", b)
	}
	if !x.HasBody() || !x.Body().Done() || x.Body().Err() != nil || x.Body().Buffered() != 0 {
		t.Fatal("body state after reading it")
	}
	s := x.Stub()
	if s != x.Stub() || s.Method != "POST" || s.URL.Path != "/p/a%20th" || s.URL.RawQuery != "q=1&r=2" || s.Host != "Example.com" || s.RemoteAddr != "192.0.2.1:1234" || s.Body == http.NoBody {
		t.Fatalf("Stub() %+v", s)
	}
	if err := s.Body.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND"} {
		x, _, _ := exchangeFor(t, m+" / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", &out)
		first := x.Method()
		if first != m || x.Method() != first || x.Target() != "/" || x.Host() != "x" {
			t.Fatalf("%s: Method %q Target %q Host %q", m, x.Method(), x.Target(), x.Host())
		}
		r, err := x.Request()
		if err != nil || !reflect.DeepEqual(r.TransferEncoding, []string{"chunked"}) {
			t.Fatalf("%s: %v %v", m, r, err)
		}
	}
	x, _, _ = exchangeFor(t, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	x.Req.Target = []byte("not a target")
	x.strs.target = ""
	if _, err := x.Request(); err == nil {
		t.Fatal("a bad target gave a request")
	}
}

// Raw responses, informational heads, giving up on a body, interrupting
// it, and the client-gone probe.
func TestExchangeRawAndControl(t *testing.T) {
	var out bytes.Buffer
	x, _, w := exchangeFor(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", &out)
	if x.ClientGone() {
		t.Fatal("client gone while its body is unread")
	}
	if _, err := io.ReadAll(x.Body()); err != nil {
		t.Fatal(err)
	}
	if !x.ClientGone() {
		t.Fatal("the probe was not asked once the body was read")
	}
	_, _ = x.Informational().WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	rw := x.BeginRaw(502)
	_, _ = rw.WriteString("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
	if _, err := x.Write([]byte("raw")); err != nil || x.Status() != 502 || !x.Written() {
		t.Fatal("raw write", err)
	}
	x.EndRaw(true)
	if !x.Finish() {
		t.Fatal("a completed raw response closed the connection")
	}
	_ = w.Flush()
	if got := out.String(); got != "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\nraw" {
		t.Fatalf("raw output %q", got)
	}
	x.EndRaw(false)
	if x.Finish() || !x.Broken() {
		t.Fatal("an incomplete raw response kept the connection")
	}

	x, conn, _ := exchangeFor(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", &out)
	if err := x.SetReadDeadline(time.Now().Add(time.Hour)); err != nil || x.unread {
		t.Fatal("a future deadline gave up the body")
	}
	_ = x.SetReadDeadline(time.Now().Add(-time.Second))
	if !x.unread || x.KeepAlive() {
		t.Fatal("a past deadline did not give up the body")
	}
	x.SetClose()
	if x.Finish() {
		t.Fatal("SetClose kept the connection")
	}
	x.InterruptBody()
	if !conn.last.Equal(time.Unix(1, 0)) {
		t.Fatalf("InterruptBody set the read deadline %v", conn.last)
	}
	x.conn = nil
	x.InterruptBody() // no connection: nothing to do
	x.probe = nil
	if x.ClientGone() {
		t.Fatal("no probe: client gone")
	}
}

// Reset clears everything a previous request left: fields, status, the
// stub.
func TestExchangeResetForNextRequest(t *testing.T) {
	var out bytes.Buffer
	x, _, _ := exchangeFor(t, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	x.Header().Set("X-One", "1")
	x.WriteHeader(404)
	_ = x.Stub()
	_ = x.FlushError()
	next := "GET /two HTTP/1.1\r\nHost: y\r\n\r\n"
	n, err := ParseRequest([]byte(next), &x.Req, 8192)
	if err != nil {
		t.Fatal(err)
	}
	x.Reset(NewReader(strings.NewReader(next[n:]), 64, 64), 0, time.Now())
	if len(x.Header()) != 0 || x.Status() != 0 || x.Written() || x.Stub().RequestURI != "/two" || x.Host() != "y" {
		t.Fatalf("after Reset: %v %d %v %q", x.Header(), x.Status(), x.Written(), x.Stub().RequestURI)
	}
}

// The exchange lends storage for header values (wire.FieldStore):
// copies, bounded, reused from the next request on.
func TestExchangeFieldValues(t *testing.T) {
	var out bytes.Buffer
	x, _, _ := exchangeFor(t, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	for req := range 2 {
		var lent [][]byte
		buf, vals, ok := x.FieldValues(3, 2)
		if !ok || len(buf) != 3 || cap(buf) != 3 || len(vals) != 2 || cap(vals) != 2 || vals[0] != "" || vals[1] != "" {
			t.Fatalf("request %d: FieldValues(3, 2) = %d/%d bytes, %q (cap %d), %v", req, len(buf), cap(buf), vals, cap(vals), ok)
		}
		copy(buf, "abc")
		vals[0], vals[1] = "x", "y"
		lent = append(lent, buf)
		bytesUsed, slotsUsed := 3, 2
		for i := 0; ; i++ {
			buf, vals, ok := x.FieldValues(10, 1)
			if !ok {
				break
			}
			if len(buf) != 10 || cap(buf) != 10 || len(vals) != 1 || cap(vals) != 1 || vals[0] != "" {
				t.Fatalf("request %d: FieldValues(10, 1) = %d/%d bytes, %q", req, len(buf), cap(buf), vals)
			}
			copy(buf, strings.Repeat(string(rune('0'+i)), 10))
			vals[0] = "v"
			lent = append(lent, buf)
			bytesUsed, slotsUsed = bytesUsed+10, slotsUsed+1
		}
		if bytesUsed > fieldBytes || slotsUsed > fieldSlots || (fieldBytes-bytesUsed >= 10 && slotsUsed != fieldSlots) {
			t.Fatalf("request %d: %d bytes and %d slots lent, of %d and %d", req, bytesUsed, slotsUsed, fieldBytes, fieldSlots)
		}
		// What was lent does not overlap.
		if string(lent[0]) != "abc" {
			t.Fatalf("request %d: first loan %q", req, lent[0])
		}
		for i, b := range lent[1:] {
			if want := strings.Repeat(string(rune('0'+i)), 10); string(b) != want {
				t.Fatalf("request %d: loan %d holds %q, want %q", req, i+1, b, want)
			}
		}
		if _, _, ok := x.FieldValues(0, -1); ok {
			t.Fatal("FieldValues(0, -1) lent storage")
		}
		if _, _, ok := x.FieldValues(-1, 0); ok {
			t.Fatal("FieldValues(-1, 0) lent storage")
		}
		if _, _, ok := x.FieldValues(fieldBytes+1, 0); ok {
			t.Fatal("FieldValues lent more bytes than it has")
		}
		next := "GET /two HTTP/1.1\r\nHost: y\r\n\r\n"
		n, err := ParseRequest([]byte(next), &x.Req, 8192)
		if err != nil {
			t.Fatal(err)
		}
		x.Reset(NewReader(strings.NewReader(next[n:]), 64, 64), 0, time.Now())
	}
}

// The fields of each response are written in sorted order, whether the
// connection's previous response had the same fields (their order is
// reused), others of the same number, fewer or more.
func TestExchangeFieldOrderAcrossRequests(t *testing.T) {
	var out bytes.Buffer
	x, _, w := exchangeFor(t, "GET /0 HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	for i, fields := range [][]string{
		{"X-C", "X-A", "X-B"},
		{"X-B", "X-C", "X-A"}, // the same fields
		{"X-B", "X-D", "X-A"}, // as many, one other
		{"X-D", "X-A"},
		{"X-D", "X-A", "Transfer-Encoding"}, // framed by the server: not one of them
		{"X-E", "X-D", "X-A", "Trailer"},
		{},
		{"X-A"},
	} {
		if i > 0 {
			next := "GET /" + itoa(i) + " HTTP/1.1\r\nHost: x\r\n\r\n"
			n, err := ParseRequest([]byte(next), &x.Req, 8192)
			if err != nil {
				t.Fatal(err)
			}
			x.Reset(NewReader(strings.NewReader(next[n:]), 64, 64), 0, time.Now())
		}
		out.Reset()
		var want []string
		for _, f := range fields {
			x.Header().Set(f, "v")
			if f != "Transfer-Encoding" && f != "Trailer" {
				want = append(want, f)
			}
		}
		sort.Strings(want)
		x.Header().Set("Content-Length", "0")
		want = append([]string{"Content-Length"}, want...)
		sort.Strings(want)
		x.WriteHeader(http.StatusTeapot)
		x.Finish()
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(out.String(), "\r\n")[1:] {
			name, _, ok := strings.Cut(line, ":")
			if !ok || name == "Date" {
				continue
			}
			got = append(got, name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("response %d (fields %q): written %q, want %q", i, fields, got, want)
		}
	}
}

// The fields the server frames itself (Connection, Content-Length,
// Date) are seen when a response has the same field names as the
// previous one (written without sorting again) as when it does not:
// the same names with other values frame each response by its own.
func TestExchangeFramingFieldsAcrossRequests(t *testing.T) {
	var out bytes.Buffer
	x, _, w := exchangeFor(t, "GET /0 HTTP/1.1\r\nHost: x\r\n\r\n", &out)
	for i, c := range []struct {
		conn, length, date string // field values ("" unset)
		want               string // the head written after the status line
	}{
		{conn: "keep-alive", length: "2", want: "Connection: keep-alive\r\nContent-Length: 2\r\nDate: D\r\n\r\n"},
		{conn: "close", length: "2", want: "Connection: close\r\nContent-Length: 2\r\nDate: D\r\n\r\n"}, // same names
		{conn: "keep-alive", length: "3", date: "Mon, 01 Jan 2001 00:00:00 GMT", want: "Connection: keep-alive\r\nContent-Length: 3\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\n\r\n"},
		{conn: "keep-alive", length: "4", date: "Mon, 01 Jan 2001 00:00:00 GMT", want: "Connection: keep-alive\r\nContent-Length: 4\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\n\r\n"}, // same names
		{length: "2", want: "Content-Length: 2\r\nDate: D\r\n\r\n"},
		{length: "", want: "Date: D\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		if i > 0 {
			next := "GET /" + itoa(i) + " HTTP/1.1\r\nHost: x\r\n\r\n"
			n, err := ParseRequest([]byte(next), &x.Req, 8192)
			if err != nil {
				t.Fatal(err)
			}
			x.Reset(NewReader(strings.NewReader(next[n:]), 64, 64), 0, time.Now())
		}
		out.Reset()
		h := x.Header()
		for _, f := range [][2]string{{"Connection", c.conn}, {"Content-Length", c.length}, {"Date", c.date}} {
			if f[1] != "" {
				h.Set(f[0], f[1])
			}
		}
		x.WriteHeader(http.StatusOK)
		if c.length != "" {
			_, _ = x.Write([]byte(strings.Repeat("x", int(c.length[0]-'0'))))
		}
		x.Finish()
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		head, _, _ := strings.Cut(out.String(), "\r\n\r\n")
		_, head, _ = strings.Cut(head+"\r\n\r\n", "\r\n") // past the status line
		if c.date == "" {
			head = regexp.MustCompile(`Date: [^\r]*`).ReplaceAllString(head, "Date: D")
		}
		if head != c.want {
			t.Errorf("response %d: head %q, want %q", i, head, c.want)
		}
		if gotClose, wantClose := x.close, c.conn == "close"; gotClose != wantClose {
			t.Errorf("response %d: closes the connection %v, want %v", i, gotClose, wantClose)
		}
	}
}

// The writer helpers produce what net/http writes.
func TestWriterHelpers(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriterSize(&out, 32)
	codes := []int{100, 200, 204, 299, 404, 418, 599, 999, 7}
	for _, code := range codes {
		WriteStatusLine(w, code)
	}
	WriteField(w, []byte("X-A"), []byte("1"))
	WriteFieldString(w, "X-B", "2")
	WriteFieldString(w, "X-Long", strings.Repeat("v", 40)) // more than the writer holds
	WriteContentLength(w, 1234567890)
	WriteChunkHeader(w, 0x1f)
	_ = w.Flush()
	var want strings.Builder
	for _, code := range codes {
		text := http.StatusText(code)
		if text == "" {
			text = "status code " + itoa(code)
		}
		c := itoa(code)
		for len(c) < 3 {
			c = "0" + c
		}
		want.WriteString("HTTP/1.1 " + c + " " + text + "\r\n")
	}
	want.WriteString("X-A: 1\r\nX-B: 2\r\nX-Long: " + strings.Repeat("v", 40) + "\r\nContent-Length: 1234567890\r\n1f\r\n")
	if out.String() != want.String() {
		t.Fatalf("wrote\n%q\nwant\n%q", out.String(), want.String())
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := DateLine(now)
	if string(line) != "Date: "+now.Format(http.TimeFormat)+"\r\n" {
		t.Fatalf("DateLine %q", line)
	}
	if again := DateLine(now.Add(time.Millisecond)); &again[0] != &line[0] {
		t.Error("DateLine within the same second rendered again")
	}
	if next := DateLine(now.Add(time.Second)); string(next) == string(line) {
		t.Error("DateLine a second later unchanged")
	}
}

// net/http's own rendering of a status code outside its table, to
// compare with.
func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// The body and head errors say what they are and match their sentinels.
func TestErrorsMatchSentinels(t *testing.T) {
	for _, c := range []struct {
		err, target error
	}{
		{malformed("x"), ErrMalformedBody},
		{errLineTooLong, ErrMalformedBody},
		{&declineError{"x"}, ErrDecline},
		{errStatusLine, ErrMalformedResponse},
	} {
		if !errors.Is(c.err, c.target) || !strings.HasPrefix(c.err.Error(), "h1: ") || errors.Is(c.err, io.EOF) {
			t.Errorf("%v vs %v", c.err, c.target)
		}
	}
	var names []string
	for _, e := range []error{errStatusLine, errRespLF, errRespFold, errRespField, errRespLength, errRespTE, errRespFields, errRespLarge} {
		names = append(names, e.Error())
	}
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			t.Errorf("two response errors say %q", names[i])
		}
	}
}

// BenchmarkExchangeRefusal is one connection answering the same
// refusal again and again through the http.ResponseWriter methods (a
// flood's 429s: eleven fields, a problem body), the exchange reset
// for each request as the server resets it.
func BenchmarkExchangeRefusal(b *testing.B) {
	const req = "POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
	x := &Exchange{}
	if _, err := ParseRequest([]byte(req), &x.Req, 8192); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(io.Discard, 4096)
	x.Init(&deadlineRec{}, w, &Strings{}, nil)
	rd := NewReader(strings.NewReader(""), 64, 64)
	fields := [][2]string{
		{"Cache-Control", "no-store"}, {"Content-Type", "application/problem+json"},
		{"X-Content-Type-Options", "nosniff"}, {"Retry-After", "42"},
		{"Ratelimit", `"login";r=0;t=42`}, {"Ratelimit-Policy", `"login";q=5;w=60`},
		{"X-Ratelimit-Limit", "5"}, {"X-Ratelimit-Remaining", "0"},
		{"X-Ratelimit-Reset", "2026-12-07T23:00:00Z"}, {"X-Request-Id", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"Content-Length", "180"},
	}
	vals := make([][]string, len(fields))
	for i, f := range fields {
		vals[i] = []string{f[1]}
	}
	body := []byte(strings.Repeat("x", 180))
	b.ReportAllocs()
	for b.Loop() {
		x.Reset(rd, 1<<20, time.Time{})
		h := x.Header()
		for i, f := range fields {
			h[f[0]] = vals[i]
		}
		x.WriteHeader(http.StatusTooManyRequests)
		_, _ = x.Write(body)
		x.Finish()
		w.Reset(io.Discard)
	}
}
