package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// timeoutErr is a read deadline's error.
type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

// script is a source that returns its steps in order: bytes, or an
// error.
type script struct{ steps []any }

func (s *script) Read(p []byte) (int, error) {
	if len(s.steps) == 0 {
		return 0, io.EOF
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	switch v := st.(type) {
	case string:
		return copy(p, v), nil
	case error:
		return 0, v
	}
	return 0, nil // an empty read
}

// The Reader keeps pinned bytes in place, grows up to its bound, moves
// unconsumed bytes down to the pin, and treats a timeout as not final.
func TestReaderBuffering(t *testing.T) {
	src := &script{steps: []any{"abcd", "efgh", timeoutErr{}, "ijkl"}}
	r := NewReader(src, 4, 2) // max below size: raised to size
	if err := r.Fill(); err != nil || string(r.Buffered()) != "abcd" {
		t.Fatalf("first fill %q %v", r.Buffered(), err)
	}
	r.Pin()
	pinned := r.Buffered()[:1]
	r.Discard(1)
	r.Unread(1)
	if string(r.Buffered()) != "abcd" {
		t.Fatalf("after Unread %q", r.Buffered())
	}
	if err := r.Fill(); !errors.Is(err, ErrBufferFull) {
		t.Fatalf("full buffer at its bound: %v", err)
	}
	r.SetMax(16)
	if err := r.Fill(); err != nil || string(r.Buffered()) != "abcdefgh" || string(pinned) != "a" {
		t.Fatalf("grown: %q %v (pinned %q)", r.Buffered(), err, pinned)
	}
	if err := r.Fill(); !errors.Is(err, timeoutErr{}) || r.err != nil {
		t.Fatalf("timeout: %v, sticky %v", err, r.err)
	}
	r.Unpin()
	r.Discard(len(r.Buffered()))
	if err := r.Fill(); err != nil || string(r.Buffered()) != "ijkl" {
		t.Fatalf("after the timeout: %q %v", r.Buffered(), err)
	}
	if err := r.Fill(); err != io.EOF || r.err != io.EOF || r.Fill() != io.EOF {
		t.Fatalf("EOF: %v, sticky %v", err, r.err)
	}

	// Unconsumed bytes move down to the pin (here the start).
	r = NewReader(strings.NewReader("0123456789"), 4, 4)
	_ = r.Fill()
	r.Discard(3)
	if err := r.Fill(); err != nil || string(r.Buffered()) != "3456" {
		t.Fatalf("compacted: %q %v", r.Buffered(), err)
	}

	// A source that never returns anything is cut.
	r = NewReader(&script{steps: make([]any, 200)}, 4, 4) // 200 empty reads
	if err := r.Fill(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("no progress: %v", err)
	}

	// Data and an error in one read: the data, the error next time.
	r = NewReader(iotest.DataErrReader(strings.NewReader("xy")), 4, 4)
	if err := r.Fill(); err != nil || string(r.Buffered()) != "xy" {
		t.Fatalf("data with EOF: %q %v", r.Buffered(), err)
	}

	// Reads: buffered first, large ones straight from the source.
	r = NewReader(strings.NewReader("hello, world"), 4, 4)
	p := make([]byte, 2)
	if n, err := r.Read(p); n != 2 || err != nil || string(p) != "he" {
		t.Fatalf("small read %q %v", p[:n], err)
	}
	if n, _ := r.Read(nil); n != 0 {
		t.Fatal("empty read")
	}
	if n, err := r.Read(p); n != 2 || err != nil || string(p) != "ll" {
		t.Fatalf("buffered read %q %v", p[:n], err)
	}
	big := make([]byte, 64)
	if n, err := r.Read(big); err != nil || string(big[:n]) != "o, world" {
		t.Fatalf("large read %q %v", big[:n], err)
	}
	if _, err := r.Read(big); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	if _, err := r.Read(p); err != io.EOF {
		t.Fatalf("sticky end: %v", err)
	}
	r.Reset(strings.NewReader("again"))
	if n, err := r.Read(p); n != 2 || err != nil || string(p) != "ag" {
		t.Fatalf("after Reset %q %v", p[:n], err)
	}
	r.Reset(errReader{})
	if _, err := r.Read(p); err == nil {
		t.Fatal("a failing source read nothing and no error")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

// Bodies decode as net/http decodes them: the same bytes, and an error
// exactly where net/http fails (length, chunked coding, trailers).
func TestBodyAsNetHTTP(t *testing.T) {
	cases := []struct {
		name, fields, body string
	}{
		{"length", "Content-Length: 5", "hello"},
		{"length short", "Content-Length: 9", "hello"},
		{"chunked", "Transfer-Encoding: chunked", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"},
		{"chunked ext", "Transfer-Encoding: chunked", "5;name=v\r\nhello\r\n0\r\n\r\n"},
		{"chunked trailer", "Transfer-Encoding: chunked", "5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"},
		{"chunked bad trailer", "Transfer-Encoding: chunked", "5\r\nhello\r\n0\r\nnot a field\r\n\r\n"},
		{"chunked folded trailer", "Transfer-Encoding: chunked", "5\r\nhello\r\n0\r\n X-T: 1\r\n\r\n"},
		{"chunked trailer never ends", "Transfer-Encoding: chunked", "5\r\nhello\r\n0\r\nX-T: 1\r\n"},
		{"chunked no end", "Transfer-Encoding: chunked", "5\r\nhello\r\n"},
		{"chunked cut", "Transfer-Encoding: chunked", "5\r\nhel"},
		{"chunked bad size", "Transfer-Encoding: chunked", "zz\r\nhello\r\n0\r\n\r\n"},
		{"chunked size overflow", "Transfer-Encoding: chunked", "fffffffffffffffff\r\nx\r\n0\r\n\r\n"},
		{"chunked bare LF", "Transfer-Encoding: chunked", "5\nhello\r\n0\r\n\r\n"},
		{"chunked CR inside", "Transfer-Encoding: chunked", "5\r\r\nhello\r\n0\r\n\r\n"},
		{"chunked missing CRLF after data", "Transfer-Encoding: chunked", "5\r\nhelloXX0\r\n\r\n"},
		{"chunked long line", "Transfer-Encoding: chunked", "5;" + strings.Repeat("e", 5000) + "\r\nhello\r\n0\r\n\r\n"},
		{"chunked empty", "Transfer-Encoding: chunked", "0\r\n\r\n"},
		{"chunked upper hex", "Transfer-Encoding: chunked", "A\r\n0123456789\r\n0\r\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := "POST / HTTP/1.1\r\nHost: x\r\n" + c.fields + "\r\n\r\n" + c.body
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
			if err != nil {
				t.Fatal(err)
			}
			want, wantErr := io.ReadAll(req.Body)

			var r Request
			n, err := ParseRequest([]byte(raw), &r, 8192)
			if err != nil {
				t.Fatal(err)
			}
			var b Body
			b.Reset(NewReader(iotest.OneByteReader(strings.NewReader(raw[n:])), 16, 8192), r.ContentLength, r.Chunked, false, -1)
			got, gotErr := io.ReadAll(&b)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("error %v, net/http %v", gotErr, wantErr)
			}
			if wantErr == nil && !bytes.Equal(got, want) {
				t.Fatalf("body %q, net/http %q", got, want)
			}
			if gotErr != nil && b.Err() == nil {
				t.Fatalf("Err() nil after %v", gotErr)
			}
			if gotErr == nil && (!b.Done() || b.Err() != nil) {
				t.Fatalf("Done %v Err %v at the end", b.Done(), b.Err())
			}
		})
	}
}

// A bounded body: exactly the bound is fine, one byte more is
// ErrBodyTooLarge; a body to the end of the connection; no body.
func TestBodyBoundsAndModes(t *testing.T) {
	read := func(src string, length int64, chunked, eof bool, limit int64) ([]byte, error) {
		var b Body
		b.Reset(NewReader(strings.NewReader(src), 8, 64), length, chunked, eof, limit)
		return io.ReadAll(&b)
	}
	if got, err := read("hello", 5, false, false, 5); err != nil || string(got) != "hello" {
		t.Fatalf("at the bound: %q %v", got, err)
	}
	if _, err := read("hello", 5, false, false, 4); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("over the bound: %v", err)
	}
	if _, err := read("3\r\nabc\r\n0\r\n\r\n", -1, true, false, 2); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("chunked over the bound: %v", err)
	}
	if got, err := read("until the end", 0, false, true, -1); err != nil || string(got) != "until the end" {
		t.Fatalf("until EOF: %q %v", got, err)
	}
	if got, err := read("ignored", 0, false, false, -1); err != nil || len(got) != 0 {
		t.Fatalf("no body: %q %v", got, err)
	}
	var b Body
	if b.Buffered() != 0 {
		t.Fatal("a body without a reader has buffered input")
	}
	b.Reset(NewReader(strings.NewReader("abcdef"), 8, 8), 6, false, false, -1)
	p := make([]byte, 2)
	if n, err := b.Read(p); n != 2 || err != nil || b.Buffered() != 4 {
		t.Fatalf("partial read: %d %v, buffered %d", n, err, b.Buffered())
	}
	if n, err := b.Read(nil); n != 0 || err != nil {
		t.Fatal("empty read", n, err)
	}
	b.Reset(NewReader(errReader{}, 8, 8), 6, false, false, -1)
	if _, err := io.ReadAll(&b); err == nil || b.Err() == nil {
		t.Fatal("a failing source ended the body cleanly")
	}
	b.Reset(NewReader(errReader{}, 8, 8), 0, false, true, -1)
	if _, err := io.ReadAll(&b); err == nil {
		t.Fatal("a failing source ended an until-EOF body cleanly")
	}
}

// Lookup, Path and EqualFold on a parsed head.
func TestRequestAccessors(t *testing.T) {
	var r Request
	if _, err := ParseRequest([]byte("GET /p?q HTTP/1.1\r\nHost: h\r\nX-Key: v\r\n\r\n"), &r, 1024); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Lookup("x-key"); !ok || string(v) != "v" {
		t.Fatalf("Lookup %q %v", v, ok)
	}
	if _, ok := r.Lookup("missing"); ok {
		t.Fatal("Lookup found a missing field")
	}
	if string(r.Path()) != "/p" {
		t.Fatalf("Path %q", r.Path())
	}
	r.Target = []byte("/no-query")
	if string(r.Path()) != "/no-query" {
		t.Fatalf("Path %q", r.Path())
	}
	for _, c := range []struct {
		b, s string
		want bool
	}{{"Host", "host", true}, {"HOST", "host", true}, {"Hosts", "host", false}, {"Hast", "host", false}, {"", "", true}} {
		if got := EqualFold([]byte(c.b), c.s); got != c.want {
			t.Errorf("EqualFold(%q, %q) = %v", c.b, c.s, got)
		}
	}
}

// ParseResponse frames a response head as net/http's client does where
// both accept it (status, length, chunked, persistence), and refuses
// what it must not guess at.
func TestParseResponseAsNetHTTP(t *testing.T) {
	for _, c := range []struct {
		head   string
		refuse bool // ParseResponse refuses it (net/http may be lenient)
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"HTTP/1.1 204 No Content\r\n\r\n", false},
		{"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", false},
		{"HTTP/1.1 299 Whatever\r\nContent-Length: 0\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", true},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", true},
		{"HTTP/1.1 200 OK\nContent-Length: 0\n\n", true},
		{"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n", true},
		{"HTTP/1.1 200 OK\r\nBad Field: 1\r\n\r\n", true},
		{"HTTP/2 200 OK\r\n\r\n", true},
		{"HTTP/1.1 20 OK\r\n\r\n", true},
	} {
		var r Response
		n, err := ParseResponse([]byte(c.head), &r, 4096)
		if c.refuse {
			if !errors.Is(err, ErrMalformedResponse) {
				t.Errorf("%q: %v, want a refusal", c.head, err)
			}
			continue
		}
		if err != nil || n != len(c.head) || r.HeadLen != n {
			t.Errorf("%q: %d %v", c.head, n, err)
			continue
		}
		want, err := http.ReadResponse(bufio.NewReader(strings.NewReader(c.head)), &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("net/http refuses %q: %v", c.head, err)
		}
		chunked := len(want.TransferEncoding) > 0
		if r.Status != want.StatusCode || r.Chunked != chunked || r.Close != want.Close || !chunked && r.ContentLength != want.ContentLength && want.StatusCode != 204 {
			t.Errorf("%q: %+v, net/http status %d length %d chunked %v close %v", c.head, r, want.StatusCode, want.ContentLength, chunked, want.Close)
		}
	}
	var r Response
	if _, err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nX-A: 1\r\n"), &r, 4096); !errors.Is(err, ErrIncomplete) {
		t.Errorf("incomplete head: %v", err)
	}
	if _, err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nX-A: "+strings.Repeat("a", 100)), &r, 64); !errors.Is(err, ErrMalformedResponse) {
		t.Errorf("incomplete head over the bound: %v", err)
	}
	if _, err := ParseResponse([]byte("HTTP/1.1 200 OK\r\nX-A: "+strings.Repeat("a", 100)+"\r\n\r\n"), &r, 64); !errors.Is(err, ErrMalformedResponse) {
		t.Errorf("complete head over the bound: %v", err)
	}
	for _, c := range []struct {
		method string
		status int
		want   bool
	}{{"GET", 200, true}, {"HEAD", 200, false}, {"GET", 100, false}, {"GET", 204, false}, {"GET", 304, false}, {"POST", 404, true}} {
		if got := BodyAllowed([]byte(c.method), c.status); got != c.want {
			t.Errorf("BodyAllowed(%s, %d) = %v", c.method, c.status, got)
		}
	}
}
