package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// netHTTPRequest parses b as net/http's server does: http.ReadRequest
// (what conn.readRequest calls) plus the server's own checks (protocol,
// Host, field names and values, Expect). It returns the request and
// the reader positioned after the head, or an error for a request the
// server answers with an error status.
func netHTTPRequest(b []byte) (*http.Request, *bufio.Reader, error) {
	br := bufio.NewReaderSize(bytes.NewReader(b), 4096) // the server's buffer size
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	if req.ProtoMajor != 1 {
		return nil, nil, errors.New("unsupported protocol version")
	}
	// http.ReadRequest removes Host from the fields; the server's own
	// reading keeps it for these checks. Read the fields again.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	_, _ = tp.ReadLine()
	raw, _ := tp.ReadMIMEHeader()
	hosts, haveHost := raw["Host"]
	if req.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && req.Method != "CONNECT" {
		return nil, nil, errors.New("missing required Host header")
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return nil, nil, errors.New("malformed Host header")
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, nil, errors.New("invalid header name")
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, nil, errors.New("invalid header value")
			}
		}
	}
	if e := req.Header.Get("Expect"); e != "" && !strings.EqualFold(e, "100-continue") {
		return nil, nil, errors.New("expectation failed")
	}
	return req, br, nil
}

// compareWithNetHTTP checks the contract of ParseRequest on input b: a
// head it accepts is accepted by net/http and framed the same way
// (method, target, fields, Host, body length or coding, keep-alive,
// body bytes, where the next message starts). A declined head is not
// checked: net/http serves it.
func compareWithNetHTTP(t *testing.T, b []byte) {
	t.Helper()
	var r Request
	n, err := ParseRequest(b, &r, 1<<20)
	if err != nil {
		if !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrDecline) {
			t.Fatalf("ParseRequest: unexpected error %v", err)
		}
		return
	}
	req, br, nerr := netHTTPRequest(b)
	if nerr != nil {
		t.Fatalf("h1 accepts what net/http refuses (%v):\n%q", nerr, b)
	}
	if req.Method != string(r.Method) || req.RequestURI != string(r.Target) || req.Host != string(r.Host) {
		t.Fatalf("request line: net/http %q %q host %q, h1 %q %q host %q", req.Method, req.RequestURI, req.Host, r.Method, r.Target, r.Host)
	}
	// Fields as net/http keeps them: canonical names, Host and
	// Transfer-Encoding taken out, Cache-Control added for Pragma.
	mine := http.Header{}
	for _, f := range r.Fields {
		mine.Add(string(f.Name), string(f.Value))
	}
	mine.Del("Transfer-Encoding")
	mine.Del("Host")
	if mine.Get("Pragma") == "no-cache" && len(mine["Cache-Control"]) == 0 {
		mine["Cache-Control"] = []string{"no-cache"}
	}
	theirs := req.Header.Clone()
	if len(mine) != len(theirs) {
		t.Fatalf("fields: net/http %v, h1 %v", theirs, mine)
	}
	for k, v := range theirs {
		if strings.Join(v, "\x00") != strings.Join(mine[k], "\x00") {
			t.Fatalf("field %s: net/http %q, h1 %q", k, v, mine[k])
		}
	}
	chunked := len(req.TransferEncoding) == 1 && req.TransferEncoding[0] == "chunked"
	if chunked != r.Chunked || (!chunked && req.ContentLength != r.ContentLength) {
		t.Fatalf("framing: net/http CL %d chunked %v, h1 CL %d chunked %v", req.ContentLength, chunked, r.ContentLength, r.Chunked)
	}
	if req.Close != r.close {
		t.Fatalf("keep-alive: net/http close %v, h1 close %v", req.Close, r.close)
	}
	// The body, read to its end by both, and what follows it.
	theirBody, theirErr := io.ReadAll(req.Body)
	theirRest, _ := io.ReadAll(br)
	rd := NewReader(bytes.NewReader(b[n:]), 4096, 4096+2*MaxChunkLine)
	var body Body
	body.Reset(rd, r.ContentLength, r.Chunked, false, -1)
	myBody, myErr := io.ReadAll(&body)
	myRest := append([]byte(nil), rd.Buffered()...)
	tail, _ := io.ReadAll(rd.src)
	myRest = append(myRest, tail...)
	if (theirErr != nil) != (myErr != nil) {
		t.Fatalf("body error: net/http %v, h1 %v\n%q", theirErr, myErr, b)
	}
	if theirErr != nil {
		return // both refuse the body; the connection ends
	}
	if !bytes.Equal(theirBody, myBody) {
		t.Fatalf("body: net/http %q, h1 %q", theirBody, myBody)
	}
	if !bytes.Equal(theirRest, myRest) {
		t.Fatalf("next message: net/http %q, h1 %q", theirRest, myRest)
	}
}

// seeds are heads the fuzzer starts from: ordinary requests and the
// classic smuggling shapes.
var seeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a/b?c=d&e HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: x\r\nAccept: */*\r\n\r\n",
	"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 4\r\n\r\nabcd",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
	"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
	"GET http://evil/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Spaces: \t v \t \r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX Bad: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xe9\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nBad Trailer\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n continued\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\nabcdefg",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\na",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n",
}

// FuzzEngineDifferential feeds raw bytes to h1's parser and to
// net/http's: whatever the fast engine accepts, net/http accepts and
// frames identically (see compareWithNetHTTP). Run it with
//
//	go test -run XXX -fuzz FuzzEngineDifferential -fuzztime 60s ./h1
func FuzzEngineDifferential(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		compareWithNetHTTP(t, b)
	})
}

func TestSeedsAgreeWithNetHTTP(t *testing.T) {
	for _, s := range seeds {
		compareWithNetHTTP(t, []byte(s))
	}
}

func TestParseRequestAccepts(t *testing.T) {
	var r Request
	in := "POST /a?b HTTP/1.1\r\nHost: x.example:81\r\nContent-Length: 3\r\nConnection: keep-alive, close\r\nX-A:  v1 \r\n\r\nabc"
	n, err := ParseRequest([]byte(in), &r, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(in)-3 || r.HeadLen != n {
		t.Errorf("head length %d (HeadLen %d), want %d", n, r.HeadLen, len(in)-3)
	}
	if string(r.Method) != "POST" || string(r.Target) != "/a?b" || string(r.Path()) != "/a" || string(r.Host) != "x.example:81" {
		t.Errorf("line: %q %q %q", r.Method, r.Target, r.Host)
	}
	if r.ContentLength != 3 || r.Chunked || !r.close {
		t.Errorf("framing: CL %d chunked %v close %v", r.ContentLength, r.Chunked, r.close)
	}
	if v, ok := r.Lookup("x-a"); !ok || string(v) != "v1" {
		t.Errorf("X-A = %q %v", v, ok)
	}
	if len(r.Fields) != 4 {
		t.Errorf("%d fields", len(r.Fields))
	}
	chunked := "PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"
	if _, err := ParseRequest([]byte(chunked), &r, 4096); err != nil || !r.Chunked || r.ContentLength != -1 {
		t.Errorf("chunked: %v %v %d", err, r.Chunked, r.ContentLength)
	}
}

// Every shape of the smuggling table is declined (net/http answers it),
// with the reason named.
func TestParseRequestDeclines(t *testing.T) {
	for _, c := range []struct{ name, in, reason string }{
		{"cl_and_te", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", "transfer_encoding"},
		{"te_and_cl", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", "transfer_encoding"},
		{"duplicate_cl", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n", "content_length"},
		{"comma_cl", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4, 4\r\n\r\n", "content_length"},
		{"signed_cl", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +4\r\n\r\n", "content_length"},
		{"huge_cl", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n", "content_length"},
		{"obs_fold", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", "obs_fold"},
		{"leading_space", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", "obs_fold"},
		{"bare_lf_line", "GET / HTTP/1.1\nHost: a\r\n\r\n", "bare_lf"},
		{"bare_lf_field", "GET / HTTP/1.1\r\nHost: a\n\r\n", "bare_lf"},
		{"bare_lf_end", "GET / HTTP/1.1\r\nHost: a\r\n\n", "bare_lf"},
		{"nul_value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", "field_value"},
		{"cr_value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", "field_value"},
		{"ctl_name", "GET / HTTP/1.1\r\nHost: a\r\nX\x01: a\r\n\r\n", "field_name"},
		{"space_name", "GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n", "field_name"},
		{"empty_name", "GET / HTTP/1.1\r\nHost: a\r\n: a\r\n\r\n", "field_name"},
		{"nul_target", "GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"ctl_target", "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"bad_escape", "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"fragment", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"te_gzip_chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "transfer_encoding"},
		{"te_chunked_identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n", "transfer_encoding"},
		{"te_xchunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", "transfer_encoding"},
		{"te_twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "transfer_encoding"},
		{"absolute_form", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"asterisk_form", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"authority_form", "CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", "target"},
		{"http10", "GET / HTTP/1.0\r\nHost: a\r\n\r\n", "version"},
		{"http10_te", "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "version"},
		{"http2_preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "version"},
		{"lower_version", "GET / http/1.1\r\nHost: a\r\n\r\n", "version"},
		{"missing_host", "GET / HTTP/1.1\r\n\r\n", "host"},
		{"two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "host"},
		{"empty_host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "host"},
		{"odd_host", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", "host"},
		{"expect", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", "expect"},
		{"upgrade", "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", "upgrade"},
		{"leading_crlf", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "leading_crlf"},
		{"method_ctl", "G\x01T / HTTP/1.1\r\nHost: a\r\n\r\n", "method"},
		{"extra_space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", "version"},
		{"long_line", "GET /" + strings.Repeat("a", 5000) + " HTTP/1.1\r\nHost: a\r\n\r\n", "head_too_large"},
		{"long_field", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", "head_too_large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r Request
			_, err := ParseRequest([]byte(c.in), &r, 4096)
			var de *declineError
			if !errors.As(err, &de) || !errors.Is(err, ErrDecline) {
				t.Fatalf("err %v, want a decline", err)
			}
			if de.Reason != c.reason {
				t.Errorf("reason %q, want %q", de.Reason, c.reason)
			}
		})
	}
}

func TestParseRequestIncomplete(t *testing.T) {
	in := "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n"
	var r Request
	for i := 0; i < len(in); i++ {
		if _, err := ParseRequest([]byte(in[:i]), &r, 4096); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("prefix %q: %v, want ErrIncomplete", in[:i], err)
		}
	}
	// A head that can no longer fit is declined, not awaited.
	long := "GET /" + strings.Repeat("a", 100)
	if _, err := ParseRequest([]byte(long), &r, 64); !errors.Is(err, ErrDecline) {
		t.Fatalf("unfinished long head: %v, want a decline", err)
	}
}

func TestParseResponse(t *testing.T) {
	var r Response
	for _, c := range []struct {
		in      string
		status  int
		cl      int64
		chunked bool
		close   bool
		err     bool
	}{
		{in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", status: 200, cl: 3},
		{in: "HTTP/1.1 204\r\n\r\n", status: 204, cl: -1},
		{in: "HTTP/1.0 200 OK\r\n\r\n", status: 200, cl: -1, close: true},
		{in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", status: 200, cl: 0},
		{in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", status: 200, cl: -1, chunked: true},
		{in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n", err: true},
		{in: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: chunked\r\n\r\n", err: true},
		{in: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", err: true},
		{in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", status: 200, cl: 3},
		{in: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", status: 200, cl: -1, close: true},
		{in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", err: true},
		{in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: true},
		{in: "HTTP/1.1 200 OK\nContent-Length: 3\r\n\r\n", err: true},
		{in: "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", err: true},
		{in: "HTTP/2 200 OK\r\n\r\n", err: true},
		{in: "HTTP/1.1 2000 OK\r\n\r\n", err: true},
	} {
		_, err := ParseResponse([]byte(c.in), &r, 4096)
		if c.err {
			if !errors.Is(err, ErrMalformedResponse) {
				t.Errorf("%q: %v, want ErrMalformedResponse", c.in, err)
			}
			continue
		}
		if err != nil || r.Status != c.status || r.ContentLength != c.cl || r.Chunked != c.chunked || r.Close != c.close {
			t.Errorf("%q: err %v status %d CL %d chunked %v close %v", c.in, err, r.Status, r.ContentLength, r.Chunked, r.Close)
		}
	}
}

// The chunked decoder refuses and accepts what net/http's does; the
// fuzzer covers the rest.
func TestChunkedBodies(t *testing.T) {
	for _, c := range []struct {
		in   string
		body string
		err  bool
	}{
		{in: "5\r\nhello\r\n0\r\n\r\n", body: "hello"},
		{in: "5;a=b;c\r\nhello\r\n00\r\n\r\n", body: "hello"},
		{in: "5 \r\nhello\r\n0\r\n\r\n", body: "hello"},
		{in: "0\r\nX-T: 1\r\nY: 2\r\n\r\n", body: ""},
		{in: "5\nhello\r\n0\r\n\r\n", err: true},
		{in: "5\r\nhelloXX0\r\n\r\n", err: true},
		{in: "g\r\n", err: true},
		{in: "\r\n", err: true},
		{in: "11111111111111111\r\n", err: true},
		{in: "5\r\nhel", err: true},
		{in: "5 ;x\r\nhello\r\n0\r\n\r\n", err: true},
		{in: strings.Repeat("0", 4095) + "\r\n\r\n", err: true},
		{in: "zz\r\nHTTP/1.1 200 OK\r\n\r\n", err: true},
	} {
		var b Body
		b.Reset(NewReader(strings.NewReader(c.in), 4096, 4096+2*MaxChunkLine), -1, true, false, -1)
		got, err := io.ReadAll(&b)
		// ChunkStart refuses exactly the bodies whose first line is
		// malformed: never a body that reads, and the first line's
		// errors with the same error.
		if serr := ChunkStart([]byte(c.in)); serr != nil && (serr != err || !errors.Is(serr, ErrMalformedBody)) {
			t.Errorf("%q: ChunkStart %v, Body %v", c.in, serr, err)
		}
		if c.err {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil || string(got) != c.body {
			t.Errorf("%q: %q %v", c.in, got, err)
		}
	}
}

// A body read past its bound fails with ErrBodyTooLarge; exactly the
// bound is fine.
func TestBodyLimit(t *testing.T) {
	for _, c := range []struct {
		in      string
		chunked bool
		limit   int64
		err     error
	}{
		{"hello", false, 5, nil},
		{"5\r\nhello\r\n0\r\n\r\n", true, 5, nil},
		{"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n", true, 5, ErrBodyTooLarge},
	} {
		var b Body
		cl := int64(len(c.in))
		b.Reset(NewReader(strings.NewReader(c.in), 64, 64), cl, c.chunked, false, c.limit)
		_, err := io.ReadAll(&b)
		if !errors.Is(err, c.err) && err != c.err {
			t.Errorf("%q limit %d: %v, want %v", c.in, c.limit, err, c.err)
		}
	}
}

// Parsing a head and framing its body allocate nothing.
func TestNoRaceParseAllocs(t *testing.T) {
	in := []byte("POST /a/b?c=d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: x\r\nAccept: */*\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello")
	var r Request
	var b Body
	rd := NewReader(bytes.NewReader(nil), 4096, 4096)
	if _, err := ParseRequest(in, &r, 4096); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		if _, err := ParseRequest(in, &r, 4096); err != nil {
			t.Fatal(err)
		}
		b.Reset(rd, r.ContentLength, r.Chunked, false, 1<<20)
	}); allocs != 0 {
		t.Fatalf("%.0f allocations, want 0", allocs)
	}
}

// ChunkStart: a whole, malformed first chunk-size line is refused; a
// well-formed one, or one not all there yet, is not.
func TestChunkStart(t *testing.T) {
	for in, bad := range map[string]bool{
		"zz\r\n": true, "g\r\n": true, "\r\n": true, "5\n": true, "5\rx\r\n": true,
		"11111111111111111\r\n": true, strings.Repeat("0", MaxChunkLine): true,
		"5\r\nhel": false, "5;a=b\r\n": false, "0\r\n": false, "zz": false, "": false,
	} {
		if err := ChunkStart([]byte(in)); (err != nil) != bad || err != nil && !errors.Is(err, ErrMalformedBody) {
			t.Errorf("%q: %v, want refused %v", in, err, bad)
		}
	}
}
