package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
)

// responseSeeds are upstream responses the proxy must frame as net/http
// does (and misbehaviours it must refuse or frame exactly).
var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nLEAK",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 03\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\n\r\nuntil the end",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nab",
	"HTTP/1.0 200 OK\r\n\r\nuntil the end",
	"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nabcde",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 999 Whatever\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab",
}

// FuzzParseResponse feeds raw bytes, answering a GET or a HEAD, to
// ParseResponse and to net/http's ReadResponse: whatever ParseResponse
// accepts, net/http accepts with the same status and the same framing
// (no body for HEAD, 1xx, 204 and 304; a length, the chunked coding or
// the end of the connection), and both decode the same body bytes. Run it
// with
//
//	go test -run XXX -fuzz FuzzParseResponse -fuzztime 60s ./h1
func FuzzParseResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, head bool) {
		compareResponseWithNetHTTP(t, b, head)
	})
}

func TestResponseSeedsAgreeWithNetHTTP(t *testing.T) {
	for _, s := range responseSeeds {
		compareResponseWithNetHTTP(t, []byte(s), false)
		compareResponseWithNetHTTP(t, []byte(s), true)
	}
}

func compareResponseWithNetHTTP(t *testing.T, b []byte, head bool) {
	t.Helper()
	const maxHead = 4096
	method := "GET"
	if head {
		method = "HEAD"
	}
	var r Response
	n, err := ParseResponse(b, &r, maxHead)
	if err != nil {
		if !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrMalformedResponse) {
			t.Fatalf("%q: error %v matches neither ErrIncomplete nor ErrMalformedResponse", b, err)
		}
		return // refusing (or waiting) is never framing differently
	}
	if n != r.HeadLen || n > len(b) {
		t.Fatalf("%q: head length %d, HeadLen %d", b, n, r.HeadLen)
	}
	resp, nerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: method})
	if nerr != nil {
		t.Fatalf("%q (%s): ParseResponse accepts, net/http refuses: %v", b, method, nerr)
	}
	defer resp.Body.Close()
	if resp.StatusCode != r.Status || resp.ProtoMinor != r.minor {
		t.Fatalf("%q: status %d HTTP/1.%d, net/http %d HTTP/1.%d", b, r.Status, r.minor, resp.StatusCode, resp.ProtoMinor)
	}
	hasBody := BodyAllowed([]byte(method), r.Status)
	untilEOF := hasBody && !r.Chunked && r.ContentLength < 0
	netChunked := slices.Equal(resp.TransferEncoding, []string{"chunked"})
	switch {
	case !hasBody:
		if resp.Body != http.NoBody {
			t.Fatalf("%q (%s): no body, net/http reads one", b, method)
		}
		return
	case r.Chunked:
		if !netChunked || resp.ContentLength != -1 {
			t.Fatalf("%q: chunked, net/http TE %v CL %d", b, resp.TransferEncoding, resp.ContentLength)
		}
	case untilEOF:
		if netChunked || resp.ContentLength != -1 || !resp.Close {
			t.Fatalf("%q: until the end, net/http TE %v CL %d close %v", b, resp.TransferEncoding, resp.ContentLength, resp.Close)
		}
	default:
		if netChunked || resp.ContentLength != r.ContentLength {
			t.Fatalf("%q: length %d, net/http TE %v CL %d", b, r.ContentLength, resp.TransferEncoding, resp.ContentLength)
		}
	}
	if !untilEOF && resp.Close != r.Close {
		t.Fatalf("%q: close %v, net/http %v", b, r.Close, resp.Close)
	}
	// The same body bytes, or both fail.
	var body Body
	body.Reset(NewReader(bytes.NewReader(b[n:]), 512, 1<<16), r.ContentLength, r.Chunked, untilEOF, 1<<20)
	got, gerr := io.ReadAll(&body)
	want, werr := io.ReadAll(resp.Body)
	if (gerr == nil) != (werr == nil) || gerr == nil && !bytes.Equal(got, want) {
		t.Fatalf("%q: body %q (%v), net/http %q (%v)", b, got, gerr, want, werr)
	}
	// A chunked body ChunkStart refuses from its first line is one
	// net/http fails to read too.
	if r.Chunked && ChunkStart(b[n:]) != nil && werr == nil {
		t.Fatalf("%q: ChunkStart refuses a body net/http reads", b)
	}
}
