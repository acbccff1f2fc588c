package h1

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/bulwarkhq/bulwark/wire"
)

// Exchange is one request served by a fast-engine server and the means
// to answer it. The server owns it and reuses it for the connection's
// next request: a handler must not keep it, or anything it returned,
// after the request.
//
// There are two ways to answer. As an http.ResponseWriter (Header,
// WriteHeader, Write), so that code written for net/http (problem+json
// writers, rejections) runs unchanged; or raw: BeginRaw returns the
// connection's writer for a response the caller frames itself (a proxy
// relaying an upstream response), and EndRaw says whether it completed.
type Exchange struct {
	// Req is the parsed head.
	Req Request
	// RemoteAddr is the client's address in net/http's Request.RemoteAddr
	// form ("ip:port"); Remote the same, parsed.
	RemoteAddr string
	Remote     netip.AddrPort
	// RemoteIP is the host part of RemoteAddr (net.SplitHostPort), or
	// "" when it has none.
	RemoteIP string
	// TLS is the state of the connection when it is a TLS one (set by
	// the server once per connection, as net/http's Request.TLS), nil
	// in cleartext.
	TLS *tls.ConnectionState
	// ConnCache is the handler's own per-connection value: kept from one
	// request of the connection to the next, nil on a new connection.
	ConnCache any
	// Start is when the head was parsed.
	Start time.Time
	// Deadline is when the request times out (zero: never).
	Deadline time.Time
	// Loop is set when the connection is served on an event loop (the
	// host's loop engine), nil otherwise. A handler on a loop must not
	// block except in the exchange's own I/O and Loop's methods: any
	// other wait stalls every connection of the loop. A handler that
	// cannot keep that rule declines the request (see host.FastHandler)
	// and is called again for it off the loop.
	Loop Loop
	// Note is set by the host when it calls the handler again, off the
	// event loop, for a request the handler declined on the loop: it is
	// what that decline carried (host.OffLoop). Nil otherwise.
	Note any

	body  Body
	w     *bufio.Writer
	strs  *Strings
	conn  interface{ SetReadDeadline(time.Time) error }
	probe func() bool

	hdr         http.Header
	keys        []string   // the sorted names of the last response's fields
	fieldVals   [][]string // writeFields' scratch, empty between responses
	status      int
	wroteHeader bool
	raw         bool
	chunkedOut  bool
	noBody      bool  // HEAD, or a status without a body
	clLeft      int64 // bytes of a declared Content-Length still to write; -1 unknown
	close       bool  // the connection closes after this response
	broken      bool  // the response is incomplete: the connection must be cut
	unread      bool  // the handler gave up on the body (SetReadDeadline)
	written     int64

	stub     http.Request
	stubbed  bool // stub describes this request
	stubURL  url.URL
	stubBody stubBody

	// The request ID (SetRequestID): its bytes, and the header value
	// that is a string over them.
	id    [wire.MaxRequestIDLen]byte
	idLen int
	idVal [1]string

	// Storage for the response's header values (FieldValues): the
	// first vlen bytes of vbuf and nvals slots of vals are in use.
	vbuf  [fieldBytes]byte
	vlen  int
	vals  [fieldSlots]string
	nvals int
}

// The storage an Exchange lends for header values (FieldValues): room
// for the fields of a refusal (Content-Length, Retry-After, RateLimit,
// RateLimit-Policy and the login layer's three X-RateLimit-* fields,
// about 60 bytes with a short policy name), with margin for longer
// names.
const (
	fieldBytes = 192
	fieldSlots = 8
)

// Loop is what a handler served on an event loop may wait on besides
// its exchange's connection. Its connections belong to the calling
// request: they are closed when the connection it came on is done,
// unless released first.
type Loop interface {
	// DialTCP connects to addr, waiting until deadline (zero: none).
	DialTCP(addr netip.AddrPort, deadline time.Time) (net.Conn, error)
	// Release gives up a connection DialTCP or Adopt returned, keeping
	// it open for a later request of the same loop to Adopt (an
	// idle pooled connection).
	Release(c net.Conn)
	// Adopt makes a released connection of the same loop this
	// request's; it fails for any other.
	Adopt(c net.Conn) error
	// Sleep waits until t (nil) or until the client's connection is
	// closed (an error).
	Sleep(t time.Time) error
	// Yield lets the loop serve its other connections first (nil), or
	// fails once the client's connection is closed. A handler that may
	// go on without waiting for long (a large body relayed between two
	// fast peers) yields every so often.
	Yield() error
	// Key identifies the loop: connections released on one loop can be
	// adopted on that loop only.
	Key() any
}

// Strings caches per-connection strings of the request head, so that a
// client repeating its method, target and host allocates them once.
type Strings struct {
	method, target, host string
}

type stubBody struct{ b *Body }

func (s stubBody) Read(p []byte) (int, error) { return s.b.Read(p) }
func (stubBody) Close() error                 { return nil }

// Init prepares x for a connection c: w writes to it, strs caches its
// strings, probe (optional) tells whether the client went away (see
// ClientGone). Called once per connection.
func (x *Exchange) Init(c interface{ SetReadDeadline(time.Time) error }, w *bufio.Writer, strs *Strings, probe func() bool) {
	x.conn, x.w, x.strs, x.probe = c, w, strs, probe
	if x.hdr == nil {
		x.hdr = make(http.Header)
	}
	x.stubBody = stubBody{&x.body}
}

// Reset prepares x for a new request whose head is already in x.Req:
// rd frames the body, bounded by maxBody bytes.
func (x *Exchange) Reset(rd *Reader, maxBody int64, start time.Time) {
	clear(x.hdr)
	x.status, x.wroteHeader, x.raw, x.chunkedOut, x.noBody = 0, false, false, false, false
	x.clLeft, x.close, x.broken, x.unread, x.written = -1, x.Req.close, false, false, 0
	x.Start, x.Deadline = start, time.Time{}
	x.stubbed = false
	x.idLen, x.idVal[0] = 0, ""
	x.vlen, x.nvals = 0, 0
	x.body.Reset(rd, x.Req.ContentLength, x.Req.Chunked, false, maxBody)
}

// SetRequestID makes id the request's ID (the host sets it before the
// handler runs; see wire.RequestIDField): RequestID returns it, the
// response header holds it in wire.RequestIDField (so that whatever
// answers through the http.ResponseWriter methods sends it, and
// wire.Write puts it in a problem document), and Request's header
// holds it in place of the client's. It is copied into the exchange,
// without allocating; an id longer than wire.MaxRequestIDLen is cut
// there.
//
// The header value is a string over the exchange's own bytes, valid
// during the request only: code that keeps it past the request must
// copy it (strings.Clone).
func (x *Exchange) SetRequestID(id []byte) {
	x.idVal[0] = ""
	n := copy(x.id[:], id)
	x.idLen = n
	if n == 0 {
		delete(x.hdr, wire.RequestIDField)
		return
	}
	x.idVal[0] = unsafe.String(&x.id[0], n)
	x.hdr[wire.RequestIDField] = x.idVal[:]
}

// FieldValues implements wire.FieldStore: it lends size bytes and n
// empty value slots of the exchange's own storage for header values of
// this response (the writers of refusals set theirs so, without
// allocating); ok is false when the storage has no room left. Like the
// request ID's, the values are valid during the request only: the
// connection's next request reuses the storage.
func (x *Exchange) FieldValues(size, n int) (buf []byte, vals []string, ok bool) {
	if size < 0 || n < 0 || size > len(x.vbuf)-x.vlen || n > len(x.vals)-x.nvals {
		return nil, nil, false
	}
	buf = x.vbuf[x.vlen : x.vlen+size : x.vlen+size]
	x.vlen += size
	vals = x.vals[x.nvals : x.nvals+n : x.nvals+n]
	clear(vals)
	x.nvals += n
	return buf, vals, true
}

var _ wire.FieldStore = (*Exchange)(nil)

// RequestID returns the request's ID (SetRequestID), or nil. The bytes
// are the exchange's: valid during the request only.
func (x *Exchange) RequestID() []byte { return x.id[:x.idLen] }

// Body returns the request body: decoded, bounded (ErrBodyTooLarge past
// the server's bound), failing with an error matching ErrMalformedBody
// when the client framed it badly.
func (x *Exchange) Body() *Body { return &x.body }

// HasBody reports whether the request announced a body.
func (x *Exchange) HasBody() bool { return x.Req.ContentLength != 0 }

// Method returns the request method (interned for the common ones).
func (x *Exchange) Method() string {
	switch string(x.Req.Method) {
	case "GET":
		return http.MethodGet
	case "POST":
		return http.MethodPost
	case "HEAD":
		return http.MethodHead
	case "PUT":
		return http.MethodPut
	case "DELETE":
		return http.MethodDelete
	case "PATCH":
		return http.MethodPatch
	case "OPTIONS":
		return http.MethodOptions
	}
	if string(x.Req.Method) != x.strs.method {
		x.strs.method = string(x.Req.Method)
	}
	return x.strs.method
}

// Target returns the request target as sent.
func (x *Exchange) Target() string {
	if string(x.Req.Target) != x.strs.target {
		x.strs.target = string(x.Req.Target)
	}
	return x.strs.target
}

// Host returns the Host field's value.
func (x *Exchange) Host() string {
	if string(x.Req.Host) != x.strs.host {
		x.strs.host = string(x.Req.Host)
	}
	return x.strs.host
}

// Stub returns a minimal *http.Request describing x for code that
// inspects a request's protocol, method, target and framing (writers of
// rejections): Method, Proto 1.1, RequestURI, URL (path and query as
// sent, not decoded), Host, RemoteAddr, ContentLength, TLS and a Body
// that is non-nil when one was announced. Its Header is empty. It is built once
// per request and reused for the next one; callers must not modify it.
func (x *Exchange) Stub() *http.Request {
	r := &x.stub
	if x.stubbed {
		return r
	}
	x.stubbed = true
	*r = http.Request{
		Method:        x.Method(),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		RequestURI:    x.Target(),
		Host:          x.Host(),
		RemoteAddr:    x.RemoteAddr,
		ContentLength: x.Req.ContentLength,
		Close:         x.Req.close,
		Body:          http.NoBody,
		TLS:           x.TLS,
	}
	p, q := x.Target(), ""
	for i := 0; i < len(p); i++ {
		if p[i] == '?' {
			p, q = p[:i], p[i+1:]
			break
		}
	}
	x.stubURL = url.URL{Path: p, RawQuery: q}
	r.URL = &x.stubURL
	if x.HasBody() {
		r.Body = x.stubBody
	}
	return r
}

// Request returns a complete *http.Request for x, built as net/http
// builds one (header fields canonicalized, Host removed from Header,
// the URL parsed): for code that needs every header field. The request
// ID (SetRequestID) replaces any the client sent. It allocates; the
// Body is x's body.
func (x *Exchange) Request() (*http.Request, error) {
	u, err := url.ParseRequestURI(x.Target())
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(x.Req.Fields))
	for _, f := range x.Req.Fields {
		k := http.CanonicalHeaderKey(string(f.Name))
		if k == "Host" {
			continue
		}
		h[k] = append(h[k], string(f.Value))
	}
	if x.idLen > 0 {
		h[wire.RequestIDField] = []string{string(x.id[:x.idLen])}
	}
	if h.Get("Pragma") == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	r := &http.Request{
		Method:        x.Method(),
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Host:          x.Host(),
		RemoteAddr:    x.RemoteAddr,
		RequestURI:    x.Target(),
		ContentLength: x.Req.ContentLength,
		Close:         x.Req.close,
		Body:          http.NoBody,
		TLS:           x.TLS,
	}
	if x.Req.Chunked {
		r.TransferEncoding = []string{"chunked"}
	}
	if x.HasBody() {
		r.Body = x.stubBody
	}
	return r, nil
}

// KeepAlive reports whether the connection stays open after this
// response; a response written raw must carry "Connection: close"
// otherwise.
func (x *Exchange) KeepAlive() bool { return !x.close }

// SetClose makes the connection close after this response.
func (x *Exchange) SetClose() { x.close = true }

// Written reports whether a response was begun.
func (x *Exchange) Written() bool { return x.wroteHeader }

// Status returns the status of the response begun, or 0.
func (x *Exchange) Status() int { return x.status }

// Broken reports that the response was cut short: the connection must
// be closed without writing more.
func (x *Exchange) Broken() bool { return x.broken }

// BeginRaw commits a response with status that the caller writes itself
// (status line, fields, framing, body) to the returned writer. Whether
// the response completed is told with EndRaw.
func (x *Exchange) BeginRaw(status int) *bufio.Writer {
	x.status, x.wroteHeader, x.raw = status, true, true
	return x.w
}

// ClientGone reports whether the client closed or reset the connection,
// without waiting: a handler waiting on something slow polls it to give
// up on a request nobody will read the answer of. It reports false while
// the request body is still being read, and when the server cannot tell.
func (x *Exchange) ClientGone() bool {
	if x.probe == nil || x.HasBody() && !x.body.Done() {
		return false
	}
	return x.probe()
}

// Informational returns the connection's writer for an informational
// (1xx) response head, which does not commit the response.
func (x *Exchange) Informational() *bufio.Writer { return x.w }

// InterruptBody makes a read of the body blocked in another goroutine
// return (with a timeout error); the connection closes after the
// response.
func (x *Exchange) InterruptBody() {
	x.close = true
	if x.conn != nil {
		_ = x.conn.SetReadDeadline(time.Unix(1, 0))
	}
}

// EndRaw ends a raw response: ok false means it is incomplete and the
// connection must be cut.
func (x *Exchange) EndRaw(ok bool) {
	if !ok {
		x.broken, x.close = true, true
	}
}

// Header implements http.ResponseWriter.
func (x *Exchange) Header() http.Header { return x.hdr }

// WriteHeader implements http.ResponseWriter: the status line and
// fields go out as net/http writes them (its reason phrase, a Date,
// Content-Length when the handler set it, else the chunked coding).
func (x *Exchange) WriteHeader(code int) {
	if x.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	w := x.w
	if code < 200 {
		WriteStatusLine(w, code)
		x.writeFields()
		_, _ = w.WriteString("\r\n")
		return
	}
	x.status, x.wroteHeader = code, true
	x.noBody = !BodyAllowed(x.Req.Method, code)
	WriteStatusLine(w, code)
	f := x.writeFields()
	if len(f.conn) > 0 && hasToken([]byte(f.conn[0]), "close") {
		x.close = true
	}
	if !f.date {
		_, _ = w.Write(DateLine(time.Now()))
	}
	if cl := f.contentLength; cl != "" {
		// A response without a body (HEAD, 204, 304) may state the
		// length of the body it would have: nothing is owed.
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 && !x.noBody {
			x.clLeft = n
		}
	} else if !x.noBody {
		x.chunkedOut = true
		_, _ = w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if x.close && !f.hasConn {
		_, _ = w.WriteString("Connection: close\r\n")
	}
	_, _ = w.WriteString("\r\n")
}

// written says what writeFields saw of the fields the server frames
// by itself: whether Connection is set and its values, the first value
// of Content-Length ("" when none), and whether Date is set.
type written struct {
	conn          []string
	hasConn       bool
	contentLength string
	date          bool
}

// writeFields writes the header map in sorted order, as net/http does,
// leaving out the fields the server frames itself, and says what it saw
// of Connection, Content-Length and Date. Each field is looked up once.
// The sorted names are kept for the connection's next response: one
// with the same fields (a flood's refusals) is written in that order
// without sorting again.
func (x *Exchange) writeFields() (f written) {
	vals := x.fieldVals[:0]
	same := len(x.hdr) == len(x.keys) // (keys never holds Transfer-Encoding or Trailer)
	if same {
		for _, k := range x.keys {
			v, ok := x.hdr[k]
			if !ok {
				same = false
				break
			}
			vals = append(vals, v)
		}
	}
	if !same {
		x.keys, vals = x.keys[:0], vals[:0]
		for k := range x.hdr {
			switch k {
			case "Transfer-Encoding", "Trailer":
				continue
			}
			x.keys = append(x.keys, k)
		}
		slices.Sort(x.keys)
		for _, k := range x.keys {
			vals = append(vals, x.hdr[k])
		}
	}
	for i, k := range x.keys {
		v := vals[i]
		switch k {
		case "Connection":
			f.conn, f.hasConn = v, true
		case "Content-Length":
			if len(v) > 0 {
				f.contentLength = v[0]
			}
		case "Date":
			f.date = true
		}
		for _, s := range v {
			WriteFieldString(x.w, k, sanitize(s))
		}
	}
	clear(vals) // keep nothing of this response's values
	x.fieldVals = vals[:0]
	return f
}

// sanitize replaces CR and LF in a field value by spaces, as net/http's
// header writer does.
func sanitize(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			b := []byte(v)
			for j := range b {
				if b[j] == '\r' || b[j] == '\n' {
					b[j] = ' '
				}
			}
			return string(b)
		}
	}
	return v
}

// Write implements http.ResponseWriter.
func (x *Exchange) Write(p []byte) (int, error) {
	if !x.wroteHeader {
		x.WriteHeader(http.StatusOK)
	}
	if x.raw {
		return x.w.Write(p)
	}
	if x.noBody || len(p) == 0 {
		return len(p), nil
	}
	if x.clLeft >= 0 {
		if int64(len(p)) > x.clLeft {
			x.broken, x.close = true, true
			return 0, http.ErrContentLength
		}
		x.clLeft -= int64(len(p))
	}
	if x.chunkedOut {
		WriteChunkHeader(x.w, len(p))
	}
	n, err := x.w.Write(p)
	if x.chunkedOut {
		_, _ = x.w.WriteString("\r\n")
	}
	x.written += int64(n)
	return n, err
}

// WriteString writes s as Write does.
func (x *Exchange) WriteString(s string) (int, error) {
	return io.WriteString(struct{ io.Writer }{x}, s)
}

// Flush implements http.Flusher.
func (x *Exchange) Flush() { _ = x.FlushError() }

// FlushError flushes the response written so far (http.ResponseController).
func (x *Exchange) FlushError() error {
	if !x.wroteHeader {
		x.WriteHeader(http.StatusOK)
	}
	return x.w.Flush()
}

// SetReadDeadline is http.ResponseController's: a deadline in the past
// means the handler will not read the rest of the body, so the
// connection closes after the response (the server does not wait for a
// body the client may never send).
func (x *Exchange) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		x.unread, x.close = true, true
	}
	return nil
}

// Finish completes a response written through the http.ResponseWriter
// methods (the last chunk) and reports whether the connection may carry
// another request. The server calls it after the handler.
func (x *Exchange) Finish() (keepAlive bool) {
	if x.wroteHeader && !x.raw {
		if x.chunkedOut {
			_, _ = x.w.WriteString("0\r\n\r\n")
		} else if x.clLeft > 0 {
			x.broken, x.close = true, true // shorter than declared
		}
	}
	return !x.close && !x.broken
}
