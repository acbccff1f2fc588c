package h2

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/bulwarkhq/bulwark/h1"
)

// testStream returns a connection without a socket and its stream 1,
// whose request has ended, with windows that never block: what the
// stream's response writer queues is left in c.wbuf.
func testStream(head bool) (*Conn, *Stream) {
	c := &Conn{cfg: (&Config{}).withDefaults(), streams: map[uint32]*Stream{}, sendWin: maxWindow,
		peerWin: maxWindow, peerMax: initialFrameSize, idle: make(chan struct{}, 1), maxID: 1}
	c.wake = sync.NewCond(&c.mu)
	s := newStream(c, 1)
	s.sendWin, s.reqEnded, s.isHead = maxWindow, true, head
	c.streams[1] = s
	c.handlers = 1
	return c, s
}

// sent is a response as the frames queued carry it.
type sent struct {
	status    string
	fields    []hpack.HeaderField
	data      []byte
	ended     bool
	afterEnd  bool // a frame of the stream came after END_STREAM
	rstStream bool
}

// decode reads the frames queued on c, failing t on any that does not
// parse or whose header block does not decode.
func decode(t *testing.T, c *Conn) sent {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(c.wbuf))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.SetMaxReadFrameSize(maxFrameSize)
	var r sent
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			t.Fatalf("queued frames do not parse: %v", err)
		}
		if f.Header().StreamID == 1 && r.ended {
			r.afterEnd = true
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if st := f.PseudoValue("status"); st != "" && (len(st) != 3 || st[0] >= '2') {
				r.status = st
				r.fields = f.RegularFields()
			}
			r.ended = r.ended || f.StreamEnded()
		case *http2.DataFrame:
			r.data = append(r.data, f.Data()...)
			r.ended = r.ended || f.StreamEnded()
		case *http2.RSTStreamFrame:
			r.rstStream = true
		}
	}
}

// FuzzResponseFrames feeds a handler's output, in two writes cut at an
// arbitrary point, to a stream's response writer: whatever the bytes,
// the frames queued parse, their header blocks decode, nothing follows
// END_STREAM, and a response h1.ParseResponse frames with a
// Content-Length arrives with exactly its body.
func FuzzResponseFrames(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello"), uint16(20), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), uint16(50), false)
	f.Add([]byte("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"), uint16(7), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), uint16(0), true)
	f.Fuzz(func(t *testing.T, raw []byte, cut uint16, head bool) {
		c, s := testStream(head)
		n := min(int(cut), len(raw))
		_, err := s.Write(raw[:n])
		if err == nil {
			_, err = s.Write(raw[n:])
		}
		complete := s.rw.finish(s)
		r := decode(t, c)
		if r.afterEnd {
			t.Fatal("a frame after END_STREAM")
		}
		if complete != r.ended {
			t.Fatalf("finish says complete=%v, END_STREAM sent=%v", complete, r.ended)
		}
		var resp h1.Response
		hl, perr := h1.ParseResponse(raw, &resp, maxRespHead)
		if perr != nil || resp.Status < 200 || resp.Chunked || resp.ContentLength < 0 || resp.Status == 101 {
			return
		}
		method := []byte("GET")
		if head {
			method = []byte("HEAD")
		}
		want := resp.ContentLength
		if !h1.BodyAllowed(method, resp.Status) {
			want = 0
		}
		if int64(len(raw)-hl) < want {
			return // incomplete
		}
		if err != nil && int64(len(raw)-hl) == want {
			t.Fatalf("a complete response failed: %v", err)
		}
		if r.status != strconv.Itoa(resp.Status) || !r.ended || !bytes.Equal(r.data, raw[hl:hl+int(want)]) {
			t.Fatalf("sent status %q ended %v, %d bytes; want %d and %d bytes", r.status, r.ended, len(r.data), resp.Status, want)
		}
		for _, hf := range r.fields {
			if connectionSpecific([]byte(hf.Name)) || hf.Name != string(bytes.ToLower([]byte(hf.Name))) {
				t.Fatalf("field %q sent", hf.Name)
			}
		}
	})
}

// FuzzChunkedBody: a chunked response body, chunked at sizes taken from
// the input and written step bytes at a time, arrives whole and ends
// the stream.
func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("hello, world"), []byte{3, 1, 200}, uint8(0))
	f.Add([]byte{}, []byte{}, uint8(9))
	f.Add(bytes.Repeat([]byte("z"), 40000), []byte{255, 255}, uint8(255))
	f.Fuzz(func(t *testing.T, body, sizes []byte, step uint8) {
		var w bytes.Buffer
		w.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		rest := body
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(sizes) > 0 {
				n = min(n, int(sizes[i%len(sizes)])*97+1)
			}
			w.WriteString(strconv.FormatInt(int64(n), 16))
			if i%3 == 1 {
				w.WriteString(";ext=1")
			}
			w.WriteString("\r\n")
			w.Write(rest[:n])
			w.WriteString("\r\n")
			rest = rest[n:]
		}
		w.WriteString("0\r\nTrailer-Field: x\r\n\r\n")
		c, s := testStream(false)
		out := w.Bytes()
		for len(out) > 0 {
			n := min(len(out), int(step)+1)
			if _, err := s.Write(out[:n]); err != nil {
				t.Fatal(err)
			}
			out = out[n:]
		}
		if !s.rw.finish(s) {
			t.Fatal("a complete chunked response is not complete")
		}
		r := decode(t, c)
		if !r.ended || r.afterEnd || !bytes.Equal(r.data, body) {
			t.Fatalf("ended %v, %d bytes of %d", r.ended, len(r.data), len(body))
		}
	})
}
