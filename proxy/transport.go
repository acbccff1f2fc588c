package proxy

// ServeHTTP's upstream client. ReverseProxy (proxy.go) sends each
// attempt through roundTrip, which carries it on the fast path's pooled
// connections (pool.go), reads the answer with the fast path's response
// parser (h1.ParseResponse, upConn.readHead) and body framing (h1.Body),
// and puts the connection back only under the fast path's reuse rule
// (upConn.complete). How an upstream's response is framed, which
// response is refused as invalid, and when a connection may carry
// another request are decided once, for every engine; net/http's
// Transport is not used. The request is written by net/http's own
// writer (http.Request.Write, what its Transport writes).

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/internal/deadline"
)

// roundTrip sends req to target i and returns the response; reading
// its body reads the rest of the response from the connection, which
// goes back to the pool, or is closed, once the body is read or closed.
// A kept-alive connection the upstream had closed is replaced once by a
// new one, under replaysOnStale (as the fast path does).
func (p *Proxy) roundTrip(req *http.Request, i int) (*http.Response, error) {
	pl := p.fast.pools[i]
	resp, err := p.roundTrip1(req, pl, false)
	if err != nil && errors.Is(err, errStale) {
		resp, err = p.roundTrip1(req, pl, true)
	}
	return resp, err
}

// trip is one exchange of roundTrip on an upstream connection.
type trip struct {
	p       *Proxy
	pl      *fastPool
	uc      *upConn
	reqBody bool
	hasBody bool       // the response may have a body (h1.BodyAllowed)
	sending chan error // the request being written, or nil once it was
	body    *sentBody  // the request body as written, or nil
	early   bool       // the response head came before the request was all sent
	watch   func() bool
	mu      sync.Mutex
	done    bool
}

// sentBody is the request body as roundTrip writes it: whether it was
// read to its end, and its read error (the client's fault).
type sentBody struct {
	io.ReadCloser
	eof atomic.Bool
	err atomic.Pointer[error]
}

func (b *sentBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil:
		b.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (p *Proxy) roundTrip1(req *http.Request, pl *fastPool, fresh bool) (*http.Response, error) {
	ctx := req.Context()
	now := time.Now()
	end, _ := ctx.Deadline() // Total; none for an upgrade
	tryEnd := now.Add(p.timeouts.PerTry)
	if !end.IsZero() && end.Before(tryEnd) {
		tryEnd = end
	}
	connectBy := now.Add(p.timeouts.Connect)
	if tryEnd.Before(connectBy) {
		connectBy = tryEnd
	}
	if err := ctx.Err(); err != nil {
		// The client went away (an HTTP/2 stream reset, its connection
		// closed) or a timeout ran out before this attempt took a
		// connection: nothing is dialed or sent, and no kept-alive
		// connection is taken only to be closed.
		return nil, err
	}
	uc, err := p.fast.get(pl, nil, now, tryEnd, connectBy, fresh)
	if err != nil {
		return nil, err
	}
	t := &trip{p: p, pl: pl, uc: uc, reqBody: req.Body != nil && req.Body != http.NoBody}
	// The request's end (the client gone, PerTry, Total) ends the
	// exchange: its connection is closed under whatever waits on it.
	// (So its writes and body reads have no deadline of their own: a
	// timeout is the context's, observed as such.)
	t.watch = context.AfterFunc(ctx, func() { _ = uc.c.Close() })
	setDeadline(&uc.wdl, uc.c, time.Time{})

	out := *req
	if t.reqBody {
		t.body = &sentBody{ReadCloser: req.Body}
		out.Body = t.body
		t.sending = make(chan error, 1)
		uc.sent.Store(false)
		go t.send(&out, t.sending)
	} else if err := t.write(&out); err != nil {
		t.discard()
		if uc.reused && replaysOnStale(req.Method, false, keyed(req)) {
			return nil, errStale
		}
		return nil, errors.Join(errUpstreamWrite, err)
	}

	headBy := now.Add(p.timeouts.ResponseHeader)
	if tryEnd.Before(headBy) {
		headBy = tryEnd
	}
	uc.rdl.Set(uc.c, headBy, slack(p.timeouts.ResponseHeader))
	upgrade := isUpgrade(req)
	for {
		n, err := uc.readHead()
		if err == nil && uc.resp.Status == 101 && !upgrade {
			err = errBadResponse // no upgrade was asked for
		}
		if err == nil && uc.resp.Status >= 200 {
			err = uc.bodyStart(h1.BodyAllowed([]byte(req.Method), uc.resp.Status))
		}
		if err == nil && uc.resp.Status < 200 && uc.resp.Status != 101 {
			// Informational: handed to ReverseProxy, which relays it,
			// and read on.
			if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
				err = trace.Got1xxResponse(uc.resp.Status, textproto.MIMEHeader(header(uc.resp.Fields)))
			}
			if err == nil {
				uc.rd.Discard(uc.resp.HeadLen)
				continue
			}
		}
		if err != nil {
			t.stopSending()
			t.discard()
			switch {
			case isTimeout(err) && headBy.Before(tryEnd):
				return nil, errResponseHeaderTimeout
			case isTimeout(err):
				return nil, errPerTryTimeout
			case uc.reused && n == 0 && replaysOnStale(req.Method, t.reqBody, keyed(req)):
				return nil, errStale
			}
			return nil, err
		}
		break
	}
	// An answer before the whole request was sent: the upstream may
	// never read the rest, or read it as a request of its own.
	t.early = t.sending != nil && !uc.sent.Load()
	resp := t.response(req)
	uc.rd.Discard(uc.resp.HeadLen)
	if uc.resp.Status == 101 {
		setDeadline(&uc.rdl, uc.c, time.Time{})
		resp.Body = &upgraded{t: t}
		return resp, nil
	}
	untilEOF := !uc.resp.Chunked && uc.resp.ContentLength < 0
	if t.hasBody {
		uc.body.Reset(uc.rd, uc.resp.ContentLength, uc.resp.Chunked, untilEOF, -1)
	} else {
		uc.body.Reset(uc.rd, 0, false, false, -1)
	}
	// The body is bounded by Total (the request's context), not by the
	// response head's deadline.
	setDeadline(&uc.rdl, uc.c, time.Time{})
	resp.Body = &tripBody{t: t}
	return resp, nil
}

// keyed reports an idempotency key field on req (replaysOnStale), as
// the fast engines' replayable does.
func keyed(req *http.Request) bool {
	for _, f := range idempotencyKeyFields {
		if _, ok := req.Header[f]; ok {
			return true
		}
	}
	return false
}

// write writes req on the connection: its head and body as net/http's
// Transport writes them.
func (t *trip) write(req *http.Request) error {
	if err := req.Write(t.uc.bw); err != nil {
		return err
	}
	return t.uc.bw.Flush()
}

// send writes a request with a body beside the response read: an
// upstream that answers as it reads must not stall on a proxy that
// only reads once it has written everything. A failing client body
// closes the connection, so that the response read ends too.
func (t *trip) send(req *http.Request, done chan<- error) {
	err := t.write(req)
	if err == nil {
		t.uc.sent.Store(true)
	} else if t.body.err.Load() != nil {
		_ = t.uc.c.Close()
	}
	done <- err
}

// stopSending ends the request write, as the fast path's does: at once
// if it is done; when the client's body was read to its end and only
// the flush to the upstream is left, after at most flushGrace; else by
// closing the connection. It returns the write's error.
func (t *trip) stopSending() error {
	if t.sending == nil {
		return nil
	}
	ch := t.sending
	t.sending = nil
	select {
	case err := <-ch:
		return err
	default:
	}
	if t.body.eof.Load() {
		// (Through wdl: a connection that goes back to the pool must
		// not keep it; setDeadline removes it on the next exchange.)
		t.uc.wdl.Set(t.uc.c, time.Now().Add(flushGrace), 0)
		return <-ch
	}
	_ = t.uc.c.Close()
	if err := <-ch; err != nil {
		return err
	}
	return errUpstreamWrite
}

// finish disposes of the connection once the response body was read
// or closed: back to the pool if the exchange provably completed
// (upConn.complete), else closed.
func (t *trip) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	sendErr := t.stopSending()
	uc := &t.uc.resp
	untilEOF := !uc.Chunked && uc.ContentLength < 0 && t.hasBody
	if t.watch() && sendErr == nil && !untilEOF && t.uc.complete(t.hasBody, t.reqBody, t.early) {
		t.p.fast.put(t.pl, nil, t.uc, time.Now())
		return
	}
	t.p.fast.discard(t.pl, t.uc)
}

// discard closes the connection of an exchange that failed before it
// had a response.
func (t *trip) discard() {
	t.watch()
	t.p.fast.discard(t.pl, t.uc)
}

// response returns the http.Response for the head parsed on the
// connection (its body still to be set).
func (t *trip) response(req *http.Request) *http.Response {
	r := &t.uc.resp
	t.hasBody = r.Status != 101 && h1.BodyAllowed([]byte(req.Method), r.Status)
	resp := &http.Response{
		Status:     strconv.Itoa(r.Status) + " " + http.StatusText(r.Status),
		StatusCode: r.Status,
		// (The version of the head is the framing's business, done
		// here; ReverseProxy does not look at it.)
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        header(r.Fields),
		ContentLength: r.ContentLength,
		Close:         r.Close,
		Request:       req,
	}
	if r.Chunked && t.hasBody {
		resp.TransferEncoding = []string{"chunked"}
	}
	if !t.hasBody && req.Method != http.MethodHead {
		resp.ContentLength = 0
	}
	return resp
}

// header returns fields as an http.Header (canonical keys, values in
// order, as net/http's Transport reads them). Every value is a slice of
// one string and every field's value list a slice of one array, and
// the names most responses carry take no copy: a response head costs a
// handful of allocations, not three per field.
func header(fields []h1.Field) http.Header {
	h := make(http.Header, len(fields))
	if len(fields) == 0 {
		return h
	}
	n := 0
	for _, f := range fields {
		n += len(f.Value)
	}
	var b strings.Builder
	b.Grow(n)
	for _, f := range fields {
		b.Write(f.Value)
	}
	all := b.String()
	vals := make([]string, len(fields))
	off := 0
	for i, f := range fields {
		vals[i] = all[off : off+len(f.Value)]
		off += len(f.Value)
		k := commonName(f.Name)
		if k == "" {
			k = textproto.CanonicalMIMEHeaderKey(string(f.Name))
		}
		if prev, ok := h[k]; ok {
			h[k] = append(prev, vals[i])
		} else {
			h[k] = vals[i : i+1 : i+1]
		}
	}
	return h
}

// commonNames are response field names common enough to be worth not
// copying, in canonical form.
var commonNames = [...]string{
	"Accept-Ranges", "Age", "Cache-Control", "Connection", "Content-Encoding",
	"Content-Language", "Content-Length", "Content-Type", "Date", "Etag",
	"Expires", "Keep-Alive", "Last-Modified", "Location", "Server",
	"Set-Cookie", "Transfer-Encoding", "Vary", "Via",
}

// commonName returns the canonical form of name when it is one of
// commonNames in any case (what textproto.CanonicalMIMEHeaderKey
// returns for it), else "".
func commonName(name []byte) string {
	for _, c := range commonNames {
		if asciiEqualFold(name, c) {
			return c
		}
	}
	return ""
}

// asciiEqualFold reports whether b and s are equal under ASCII case
// folding (and only ASCII: no other byte matches a letter).
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y || x < 'a' || x > 'z' {
			return false
		}
	}
	return true
}

// tripBody is the response body of a trip.
type tripBody struct{ t *trip }

func (b *tripBody) Read(p []byte) (int, error) {
	n, err := b.t.uc.body.Read(p)
	if err == io.EOF {
		b.t.finish()
	}
	return n, err
}

func (b *tripBody) Close() error {
	b.t.finish()
	return nil
}

// upgraded is the connection of a 101 answer to an upgrade: ReverseProxy
// reads and writes it as the response body. It is never reused.
type upgraded struct{ t *trip }

func (u *upgraded) Read(p []byte) (int, error)  { return u.t.uc.rd.Read(p) }
func (u *upgraded) Write(p []byte) (int, error) { return u.t.uc.c.Write(p) }

func (u *upgraded) Close() error {
	u.t.mu.Lock()
	defer u.t.mu.Unlock()
	if !u.t.done {
		u.t.done = true
		u.t.stopSending()
		u.t.discard()
	}
	return nil
}

// setDeadline sets l's deadline on c to at exactly, or removes it (at
// zero).
func setDeadline(l *deadline.Lazy, c net.Conn, at time.Time) {
	if !at.IsZero() {
		l.Set(c, at, 0)
		return
	}
	if !l.At().IsZero() {
		if l.Write {
			_ = c.SetWriteDeadline(time.Time{})
		} else {
			_ = c.SetReadDeadline(time.Time{})
		}
		l.Forget()
	}
}
