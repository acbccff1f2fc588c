package h1_test

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/bulwarkhq/bulwark/h1"
)

// Parse a request head, then read its chunked body; a head outside the
// strict subset is declined, to be served by net/http.
func Example() {
	in := "POST /upload?x=1 HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	rd := h1.NewReader(strings.NewReader(in), 4096, 16384)
	if err := rd.Fill(); err != nil {
		panic(err)
	}
	var req h1.Request
	n, err := h1.ParseRequest(rd.Buffered(), &req, 4096)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s host=%s chunked=%v\n", req.Method, req.Target, req.Host, req.Chunked)
	rd.Discard(n)
	var body h1.Body
	body.Reset(rd, req.ContentLength, req.Chunked, false, 1<<20)
	b, err := io.ReadAll(&body)
	fmt.Printf("body %q, err %v\n", b, err)

	_, err = h1.ParseRequest([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), &req, 4096)
	fmt.Println(errors.Is(err, h1.ErrDecline), err)
	// Output:
	// POST /upload?x=1 host=example.com chunked=true
	// body "hello", err <nil>
	// true h1: head declined: transfer_encoding
}
