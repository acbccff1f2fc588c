package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/h1"
	"github.com/bulwarkhq/bulwark/wire"
)

// requestIDName is wire.RequestIDField as a field name.
var requestIDName = []byte(wire.RequestIDField)

// The fast path
//
// ServeHTTP1 forwards a request of the host's fast engine (package h1)
// without net/http: the connection's goroutine writes the request to a
// pooled upstream connection, reads the response and relays it, all on
// buffers that belong to the two connections. There is no goroutine per
// upstream connection, no context and no timer per request: timeouts are
// socket deadlines. It keeps every promise of ServeHTTP (see the package
// documentation): the same targets in the same round robin, the four
// timeouts, retries under the same rules, the same hop-by-hop removal and
// forwarding headers, the same answers and outcomes when something
// fails. What differs: a client that goes away while the upstream is
// thinking is noticed only when its answer is written.
//
// This file is the exchange; the upstream connections it takes and puts
// back are pool.go's, and the rules it shares with ServeHTTP (retries,
// failure answers, forwarding fields) are rules.go's.

// Forward is what the caller decides for one request forwarded by
// ServeHTTP1. The zero value forwards every field and trusts nobody.
type Forward struct {
	// Strip reports fields removed from the request (the gateway's
	// strip list). Nil removes none.
	Strip func(name []byte) bool
	// Protected reports field names a Connection token may not remove
	// (asserted and identity fields, Idempotency-Key).
	Protected func(name []byte) bool
	// Trusted reports that the forwarding fields came from a trusted
	// proxy: they are extended rather than replaced
	// (Options.TrustForwarded).
	Trusted bool
	// OnHeader, when set, is called once the response head was handed
	// to the client, with the time since the proxy started.
	OnHeader func(d time.Duration)
	// Asserted are fields set last, after hop-by-hop removal, replacing
	// any of the same name the client sent: what Options.Assert sets on
	// the net/http path (an identity established by forward-auth).
	Asserted []AssertedField
	// Buffered reports that the caller read the request body already,
	// in full, into Body (a login throttle reads it for the username):
	// it is sent from Body with a Content-Length (an empty one as no
	// body), and may be sent again, as the net/http path sends a body
	// with GetBody.
	Buffered bool
	Body     []byte
	// Head holds response fields the caller sets on the answer, as
	// HTTP/1.1 field lines each ending in CRLF (a login throttle's
	// X-RateLimit-* fields): written before the upstream's, or added to
	// the gateway's own answer when no upstream answered.
	Head []byte
}

// AssertedField is a request field the caller asserts (Forward.Asserted).
type AssertedField struct{ Name, Value string }

// slack is the lateness allowed on a deadline of timeout d: 1/16 of it,
// at most 250 ms (the timeouts are bounds, not appointments).
func slack(d time.Duration) time.Duration { return min(d/16, 250*time.Millisecond) }

// scratch buffers for body copies; at most one per request in flight.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// hopByHop reports the fields the fast engine does not relay, in either
// direction: the hop-by-hop ones (h1.HopByHop, the list net/http's
// ReverseProxy removes on the other engine) and Content-Length, which it
// writes itself for the body it sends.
func hopByHop(name []byte) bool {
	return h1.HopByHop(name) || len(name) == 14 && h1.EqualFold(name, "content-length")
}

// exchange1 is the per-request state of ServeHTTP1.
type exchange1 struct {
	p     *Proxy
	x     *h1.Exchange
	f     Forward
	start time.Time
	end   time.Time // min(Total, the request deadline)
	// Connection tokens of the request that may remove a field: the
	// first ones in tokArr (no allocation), more in tokMore.
	tokArr  [8][]byte
	ntok    int
	tokMore [][]byte
	sending chan error // a body being sent concurrently, or nil
	early   bool       // the response head came before the body was all sent
	fp      *fastPools // the pools of the request's engine (a loop's own)
	// The client's traceparent fields: how many, the last one's value,
	// and whether its trace context is forwarded (keepsTraceContext).
	ntp       int
	tp        []byte
	traceKept bool
}

// ServeHTTP1 forwards a request of the host's fast engine to the next
// target and relays the answer, with ServeHTTP's timeouts, retries,
// header rules and error answers. It differs in one thing: a client
// that goes away while the upstream has not answered is noticed within a
// second (a client still sending its body, when its body read fails). It does not
// call Options.TrustForwarded or Options.Assert: the caller decides them
// in f.
func (p *Proxy) ServeHTTP1(x *h1.Exchange, f Forward) {
	start := x.Start
	if start.IsZero() {
		start = time.Now()
	}
	e := exchange1{p: p, x: x, f: f, start: start, fp: p.poolsFor(x)}
	e.end = e.start.Add(p.timeouts.Total)
	if !x.Deadline.IsZero() && x.Deadline.Before(e.end) {
		e.end = x.Deadline
	}
	for _, fl := range x.Req.Fields {
		if len(fl.Name) == len("traceparent") && h1.EqualFold(fl.Name, "traceparent") {
			e.ntp++
			e.tp = fl.Value
		}
		if h1.EqualFold(fl.Name, "connection") {
			for tok, rest := h1.NextToken(fl.Value); len(tok) > 0; tok, rest = h1.NextToken(rest) {
				if f.Protected == nil || !f.Protected(tok) {
					if e.ntok < len(e.tokArr) {
						e.tokArr[e.ntok] = tok
						e.ntok++
					} else {
						e.tokMore = append(e.tokMore, tok)
					}
				}
			}
		}
	}
	e.traceKept = keepsTraceContext(e.ntp, e.tp)
	outcome := e.serve()
	if p.observe != nil {
		p.observe(p.name, outcome, time.Since(e.start))
	}
}

// serve runs the attempts and relays the response; it returns the
// outcome.
func (e *exchange1) serve() string {
	p, x := e.p, e.x
	// A streamed body cannot be sent again; an upgrade never reaches
	// the fast engine (h1 declines it).
	retry := mayRetry(x.Method(), e.hasBody(), e.f.Buffered, false)
	first, attempts := p.attempts(retry)
	var lastErr error
	staleRetry := true
	for i := 0; i < attempts; i++ {
		if i > 0 {
			if !time.Now().Before(e.end) {
				break
			}
			p.logRetry(i, lastErr)
		}
		target, ok := p.pick(first, i)
		if !ok {
			if i == 0 {
				lastErr = errNoHealthy
			}
			break
		}
		pl := e.fp.pools[target]
		now := e.start
		if i > 0 {
			now = time.Now()
		}
		uc, err := e.attempt(pl, now, false)
		if err != nil && errors.Is(err, errStale) && staleRetry {
			// A kept-alive connection the upstream had closed: once,
			// on a new connection (as net/http's Transport does).
			staleRetry = false
			uc, err = e.attempt(pl, time.Now(), true)
		}
		if err == nil {
			p.health.answered(target, uc.resp.Status)
			return e.relay(pl, uc)
		}
		lastErr = err
		if errors.Is(err, errClientGone) {
			break
		}
		if body := x.Body(); x.HasBody() && body.Err() != nil && !errors.Is(err, errUpstreamWrite) {
			break // the client's body failed: no retry
		}
		if !retry {
			break
		}
	}
	return e.fail(lastErr)
}

var (
	errStale         = errors.New("proxy: kept-alive connection closed by the upstream")
	errUpstreamWrite = errors.New("proxy: writing to the upstream failed")
	errBadResponse   = errors.New("proxy: malformed upstream response")
)

// attempt sends the request on a connection from pl and reads the
// response head. On success the connection holds the parsed head.
func (e *exchange1) attempt(pl *fastPool, now time.Time, fresh bool) (*upConn, error) {
	p, x := e.p, e.x
	tryEnd := now.Add(p.timeouts.PerTry)
	if e.end.Before(tryEnd) {
		tryEnd = e.end
	}
	connectBy := now.Add(p.timeouts.Connect)
	if tryEnd.Before(connectBy) {
		connectBy = tryEnd
	}
	uc, err := e.fp.get(pl, e.x.Loop, now, tryEnd, connectBy, fresh)
	if err != nil {
		if errors.Is(err, errPoolWait) {
			return nil, e.timeoutCause(err, nil, tryEnd, tryEnd)
		}
		return nil, e.timeoutCause(err, errConnectTimeout, connectBy, tryEnd)
	}
	uc.wdl.Set(uc.c, tryEnd, slack(p.timeouts.PerTry))
	e.writeHead(uc, pl)
	e.sending = nil
	if e.hasBody() {
		if e.f.Buffered {
			if _, err := uc.bw.Write(e.f.Body); err != nil {
				e.fp.discard(pl, uc)
				return nil, e.timeoutCause(errors.Join(errUpstreamWrite, err), nil, tryEnd, tryEnd)
			}
		} else if sentConcurrently(x) && x.Loop == nil {
			// A long body is sent while the response is read: an
			// upstream that answers as it reads must not stall on a
			// proxy that only reads once it has written everything.
			// (On an event loop, which ServesOnLoop keeps such bodies
			// off, it is sent before: a loop cannot start a goroutine
			// on its connections.)
			if err := uc.bw.Flush(); err != nil {
				e.fp.discard(pl, uc)
				return nil, e.timeoutCause(errors.Join(errUpstreamWrite, err), nil, tryEnd, tryEnd)
			}
			e.sending = make(chan error, 1)
			uc.bodyRead.Store(false)
			uc.sent.Store(false)
			go sendConcurrently(x, uc, e.sending)
		} else if err := sendBody(x, uc, nil); err != nil {
			e.fp.discard(pl, uc)
			return nil, err
		}
	}
	if e.sending == nil {
		if err := uc.bw.Flush(); err != nil {
			e.fp.discard(pl, uc)
			if uc.reused && e.replayable() {
				return nil, errStale
			}
			return nil, e.timeoutCause(errors.Join(errUpstreamWrite, err), nil, tryEnd, tryEnd)
		}
	}
	headBy := now.Add(p.timeouts.ResponseHeader)
	if tryEnd.Before(headBy) {
		headBy = tryEnd
	}
	// While the upstream thinks, the client is looked at every
	// clientCheck: a client that went away gets nothing written, and its
	// upstream connection is freed (as net/http's cancellation does).
	sl := slack(p.timeouts.ResponseHeader)
	checkAt := now.Add(clientCheck)
	for {
		if checkAt.Before(headBy) {
			uc.rdl.Set(uc.c, checkAt, min(sl, clientCheck/4))
		} else {
			uc.rdl.Set(uc.c, headBy, sl)
		}
		n, err := uc.readHead()
		if err != nil && isTimeout(err) && n == 0 && time.Now().Before(headBy) {
			// The client check's deadline, not the upstream's. (While a
			// body is being sent, the client is the sender's to read.)
			if e.sending == nil && x.ClientGone() {
				e.fp.discard(pl, uc)
				return nil, errClientGone
			}
			checkAt = time.Now().Add(clientCheck)
			continue
		}
		if err == nil && uc.resp.Status == 101 {
			err = errBadResponse // no upgrade was asked for
		}
		if err == nil && uc.resp.Status >= 200 {
			err = uc.bodyStart(h1.BodyAllowed(x.Req.Method, uc.resp.Status))
		}
		if err != nil {
			if serr := e.stopSending(uc); errors.Is(serr, errClientBody) {
				err = errClientBody
			}
			e.fp.discard(pl, uc)
			if uc.reused && n == 0 && e.replayable() && !isTimeout(err) {
				return nil, errStale
			}
			return nil, e.timeoutCause(err, errResponseHeaderTimeout, headBy, tryEnd)
		}
		if st := uc.resp.Status; st < 200 {
			// Informational: relay it (net/http's ReverseProxy does) and
			// read on.
			e.relayInformational(uc)
			uc.rd.Discard(uc.resp.HeadLen)
			continue
		}
		// An answer before the whole body was sent: the upstream may
		// never read the rest, or read it as a request of its own.
		e.early = e.sending != nil && !uc.sent.Load()
		return uc, nil
	}
}

// clientCheck is how often a client is looked at while the upstream has
// not answered.
const clientCheck = time.Second

// flushGrace bounds the wait for a concurrent body send whose client
// body is all read (the last bytes to the upstream) once the response
// has been relayed.
const flushGrace = time.Second

// errClientGone: the client went away while the upstream was thinking.
var errClientGone = errors.New("proxy: client went away")

// syncBodyMax is the largest Content-Length sent before the response is
// read; longer and chunked bodies are sent concurrently.
const syncBodyMax = 64 << 10

// sentConcurrently reports whether x's body is sent while the response
// is read (chunked, or longer than syncBodyMax).
func sentConcurrently(x *h1.Exchange) bool {
	return x.Req.Chunked || x.Req.ContentLength > syncBodyMax
}

// stopSending ends a concurrent body send: at once if it is done, else
// by cutting the upstream connection and the client's body read. It
// returns the send's error (nil when there was none to wait for or it
// completed).
func (e *exchange1) stopSending(uc *upConn) error {
	if e.sending == nil {
		return nil
	}
	ch := e.sending
	e.sending = nil
	select {
	case err := <-ch:
		return err
	default:
	}
	if uc.bodyRead.Load() {
		// The client's body was read to its end and only the flush to
		// the upstream is left: an upstream that answered once it had
		// the whole body often does so before the sender has returned,
		// and cutting here would close a client connection that can
		// carry the next request. An upstream that answered early and
		// reads no more gets flushGrace, then its connection fails.
		if want := time.Now().Add(flushGrace); uc.wdl.At().IsZero() || want.Before(uc.wdl.At()) {
			uc.wdl.Set(uc.c, want, 0)
		}
		return <-ch
	}
	_ = uc.c.Close()
	e.x.InterruptBody()
	if err := <-ch; err != nil {
		return err
	}
	return errUpstreamWrite
}

// replayable: see replaysOnStale.
func (e *exchange1) replayable() bool {
	x := e.x
	keyed := false
	if !e.hasBody() && !idempotent(x.Method()) {
		for _, f := range idempotencyKeyFields {
			if _, keyed = x.Req.Lookup(f); keyed {
				break
			}
		}
	}
	return replaysOnStale(x.Method(), e.hasBody(), keyed)
}

// hasBody reports whether the request has a body to send.
func (e *exchange1) hasBody() bool {
	if e.f.Buffered {
		return len(e.f.Body) > 0
	}
	return e.x.HasBody()
}

// readHead reads and parses a response head; n is the number of bytes
// received.
func (uc *upConn) readHead() (int, error) {
	for {
		buf := uc.rd.Buffered()
		if len(buf) > 0 {
			_, err := h1.ParseResponse(buf, &uc.resp, MaxResponseHeaderBytes)
			if err == nil {
				return len(buf), nil
			}
			if !errors.Is(err, h1.ErrIncomplete) {
				return len(buf), errors.Join(errBadResponse, err)
			}
		}
		if err := uc.rd.Fill(); err != nil {
			if err == io.EOF && len(uc.rd.Buffered()) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return len(uc.rd.Buffered()), err
		}
	}
}

// bodyStart refuses a final response whose chunked body is malformed
// from its first line, when that line came with the head (hasBody: the
// response may have a body): it is answered as an invalid response
// (502) rather than relayed and cut. Both engines ask it.
func (uc *upConn) bodyStart(hasBody bool) error {
	if !hasBody || !uc.resp.Chunked {
		return nil
	}
	if err := h1.ChunkStart(uc.rd.Buffered()[uc.resp.HeadLen:]); err != nil {
		return errors.Join(errBadResponse, err)
	}
	return nil
}

// timeoutCause names the deadline that expired when err is a timeout:
// the request's own timeout (the host answers), Total, the phase's own
// timeout (phaseErr: connect or response header) when its deadline
// (phaseEnd) came before the attempt's (tryEnd), else PerTry.
func (e *exchange1) timeoutCause(err, phaseErr error, phaseEnd, tryEnd time.Time) error {
	if !isTimeout(err) {
		return err
	}
	switch {
	case e.requestExpired():
		return errRequestTimeout
	case !time.Now().Before(e.end):
		return errTotalTimeout
	case phaseErr != nil && phaseEnd.Before(tryEnd):
		return phaseErr
	}
	return errPerTryTimeout
}

// errResponseHeaderTimeout: the upstream did not answer within
// ResponseHeader (net/http's Transport says the same words).
var errResponseHeaderTimeout = &timeoutError{"timeout awaiting response headers"}

func (e *exchange1) requestExpired() bool {
	d := e.x.Deadline
	return !d.IsZero() && !time.Now().Before(d) && !e.end.After(d)
}

// errRequestTimeout: the host's request timeout expired (its context
// cause on the net/http path); the host answers.
var errRequestTimeout = &timeoutError{"request timeout"}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// writeHead writes the request head for pl's target.
func (e *exchange1) writeHead(uc *upConn, pl *fastPool) {
	p, x, f := e.p, e.x, e.f
	w := uc.bw
	_, _ = w.Write(x.Req.Method)
	_ = w.WriteByte(' ')
	t := p.targets[0]
	for i, pp := range e.fp.pools {
		if pp == pl {
			t = p.targets[i]
		}
	}
	// The path the gateway matched its route on (h1.Request.Path); the
	// query follows as sent.
	path := x.Req.Path()
	query := x.Req.Target[len(path):]
	if prefix := t.EscapedPath(); prefix != "" && prefix != "/" {
		writeJoined(w, prefix, path)
	} else {
		_, _ = w.Write(path)
	}
	_, _ = w.Write(query)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.Write(x.Req.Host)
	_, _ = w.WriteString("\r\n")

	var te, pragmaNoCache, cacheControl bool
	var xff [][]byte
	var xfh, xfp [][]byte
	var fwd [][]byte
	var buf [4][]byte
	xff = buf[:0]
	id := x.RequestID()
	for _, fl := range x.Req.Fields {
		name := fl.Name
		switch {
		case h1.EqualFold(name, "host"):
			continue
		case len(id) > 0 && h1.EqualFold(name, wire.RequestIDField):
			continue // the request's own, written below
		case hopByHop(name):
			if h1.EqualFold(name, "te") && hasTokenBytes(fl.Value, "trailers") {
				te = true
			}
			continue
		case f.Strip != nil && f.Strip(name):
			continue
		case e.asserted(name):
			continue
		case !e.traceKept && (h1.EqualFold(name, "traceparent") || h1.EqualFold(name, "tracestate")):
			continue
		case e.named(name):
			continue
		}
		switch forwarding(name, f.Trusted) {
		case fwdDrop:
			continue
		case fwdFor:
			xff = append(xff, fl.Value)
			continue
		case fwdHost:
			xfh = append(xfh, fl.Value)
			continue
		case fwdProto:
			xfp = append(xfp, fl.Value)
			continue
		case fwdForwarded:
			if f.Trusted {
				fwd = append(fwd, fl.Value)
			}
			continue
		}
		switch {
		case h1.EqualFold(name, "pragma"):
			pragmaNoCache = pragmaNoCache || string(fl.Value) == "no-cache"
		case h1.EqualFold(name, "cache-control"):
			cacheControl = true
		}
		h1.WriteField(w, name, fl.Value)
	}
	if te {
		_, _ = w.WriteString("Te: trailers\r\n")
	}
	if pragmaNoCache && !cacheControl {
		// net/http's server adds it (fixPragmaCacheControl).
		_, _ = w.WriteString("Cache-Control: no-cache\r\n")
	}
	// Forwarding fields, as ServeHTTP's rewrite sets them.
	if clientIP := x.RemoteIP; clientIP != "" {
		_, _ = w.WriteString("X-Forwarded-For: ")
		for _, v := range xff {
			_, _ = w.Write(v)
			_, _ = w.WriteString(", ")
		}
		_, _ = w.WriteString(clientIP)
		_, _ = w.WriteString("\r\n")
	}
	_, _ = w.WriteString("X-Forwarded-Host: ")
	if v, ok := edgeValue(xfh); ok {
		_, _ = w.Write(v)
	} else {
		_, _ = w.Write(x.Req.Host)
	}
	proto := "http"
	if x.TLS != nil {
		proto = "https"
	}
	_, _ = w.WriteString("\r\nX-Forwarded-Proto: ")
	if v, ok := edgeValue(xfp); ok {
		_, _ = w.Write(v)
	} else {
		_, _ = w.WriteString(proto)
	}
	_, _ = w.WriteString("\r\nForwarded: ")
	if len(fwd) > 0 {
		if all := joinFields(fwd); validForwarded(all) {
			_, _ = w.WriteString(all)
			_, _ = w.WriteString(", ")
		}
	}
	if w.Available() < 256 {
		_ = w.Flush()
	}
	_, _ = w.Write(appendForwardedNode(w.AvailableBuffer(), x.RemoteIP, x.Host(), proto))
	_, _ = w.WriteString("\r\n")
	if len(id) > 0 && (f.Strip == nil || !f.Strip(requestIDName)) {
		// The request ID the host gave the request (a trusted proxy's or
		// its own), as the net/http path forwards the request's field.
		h1.WriteField(w, requestIDName, id)
	}
	for _, a := range f.Asserted {
		h1.WriteFieldString(w, a.Name, a.Value)
	}
	switch {
	case f.Buffered && len(f.Body) > 0:
		h1.WriteContentLength(w, int64(len(f.Body)))
	case f.Buffered:
		e.noBodyLength(w)
	case x.Req.Chunked:
		_, _ = w.WriteString("Transfer-Encoding: chunked\r\n")
	case x.Req.ContentLength > 0:
		h1.WriteContentLength(w, x.Req.ContentLength)
	default:
		e.noBodyLength(w)
	}
	_, _ = w.WriteString("\r\n")
}

// noBodyLength frames a request without a body as net/http's Transport
// does: it announces an empty body for the methods that usually have
// one.
func (e *exchange1) noBodyLength(w *bufio.Writer) {
	switch e.x.Method() {
	case "POST", "PUT", "PATCH":
		_, _ = w.WriteString("Content-Length: 0\r\n")
	}
}

// asserted reports whether the caller asserts the field named name.
func (e *exchange1) asserted(name []byte) bool {
	for _, a := range e.f.Asserted {
		if h1.EqualFold(name, a.Name) {
			return true
		}
	}
	return false
}

// named reports whether a Connection token of the request names the
// field.
func (e *exchange1) named(name []byte) bool {
	for _, t := range e.tokArr[:e.ntok] {
		if len(t) == len(name) && h1.EqualFold(name, string(t)) {
			return true
		}
	}
	for _, t := range e.tokMore {
		if len(t) == len(name) && h1.EqualFold(name, string(t)) {
			return true
		}
	}
	return false
}

func hasTokenBytes(v []byte, tok string) bool {
	for t, rest := h1.NextToken(v); len(t) > 0; t, rest = h1.NextToken(rest) {
		if h1.EqualFold(t, tok) {
			return true
		}
	}
	return false
}

func joinFields(vs [][]byte) string {
	n := 0
	for _, v := range vs {
		n += len(v) + 2
	}
	b := make([]byte, 0, n)
	for i, v := range vs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, v...)
	}
	return string(b)
}

// writeJoined writes a target path prefix and the request path with one
// slash between them (joinSlash).
func writeJoined(w *bufio.Writer, prefix string, path []byte) {
	add, drop := joinSlash(prefix, path)
	_, _ = w.WriteString(prefix)
	if add {
		_ = w.WriteByte('/')
	}
	_, _ = w.Write(path[drop:])
}

// sendConcurrently sends the body beside the response read, and reports
// the outcome on ch; a failing client body cuts the upstream connection
// so that the response read ends too.
func sendConcurrently(x *h1.Exchange, uc *upConn, ch chan<- error) {
	err := sendBody(x, uc, &uc.bodyRead)
	if err == nil {
		if err = uc.bw.Flush(); err != nil {
			err = errors.Join(errUpstreamWrite, err)
		} else {
			uc.sent.Store(true)
		}
	}
	if errors.Is(err, errClientBody) {
		_ = uc.c.Close() // stop waiting for an answer
	}
	ch <- err
}

// sendBody streams the client's body to the upstream: as received
// (Content-Length) or re-chunked. read, if not nil, is set when the
// client's body has been read to its end.
func sendBody(x *h1.Exchange, uc *upConn, read *atomic.Bool) error {
	body := x.Body()
	sp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(sp)
	buf := *sp
	for {
		if body.Buffered() == 0 && uc.bw.Buffered() > 0 && !body.Done() {
			// The client's next bytes are not here yet: what came so far
			// goes on, as a streaming proxy's would.
			if err := uc.bw.Flush(); err != nil {
				return errors.Join(errUpstreamWrite, err)
			}
		}
		n, err := body.Read(buf)
		if n > 0 {
			if x.Req.Chunked {
				h1.WriteChunkHeader(uc.bw, n)
			}
			if _, werr := uc.bw.Write(buf[:n]); werr != nil {
				return errors.Join(errUpstreamWrite, werr)
			}
			if x.Req.Chunked {
				_, _ = uc.bw.WriteString("\r\n")
			}
		}
		if err == io.EOF {
			if read != nil {
				read.Store(true)
			}
			break
		}
		if err != nil {
			return errClientBody
		}
	}
	if x.Req.Chunked {
		if _, err := uc.bw.WriteString("0\r\n\r\n"); err != nil {
			return errors.Join(errUpstreamWrite, err)
		}
	}
	return nil
}

// errClientBody: the client's body failed (malformed, too large, cut
// short or too slow).
var errClientBody = errors.New("proxy: client body failed")

// relayInformational writes a 1xx response head to the client.
func (e *exchange1) relayInformational(uc *upConn) {
	w := e.x.Informational()
	h1.WriteStatusLine(w, uc.resp.Status)
	for _, fl := range uc.resp.Fields {
		if !hopByHop(fl.Name) && !namedIn(uc.resp.Fields, fl.Name) {
			h1.WriteField(w, fl.Name, fl.Value)
		}
	}
	_, _ = w.WriteString("\r\n")
	_ = w.Flush()
}

// relay writes the response to the client and disposes of the
// connection.
func (e *exchange1) relay(pl *fastPool, uc *upConn) string {
	x := e.x
	resp := &uc.resp
	w := x.BeginRaw(resp.Status)
	h1.WriteStatusLine(w, resp.Status)
	_, _ = w.Write(e.f.Head)
	hasBody := h1.BodyAllowed(x.Req.Method, resp.Status)
	date := false
	ownID := len(x.RequestID()) > 0
	for _, fl := range resp.Fields {
		if ownID && h1.EqualFold(fl.Name, wire.RequestIDField) {
			continue // the request's ID is the exchange's (below)
		}
		if hopByHop(fl.Name) {
			if resp.Chunked && hasBody && h1.EqualFold(fl.Name, "trailer") {
				continue // trailers are not relayed
			}
			if !hasBody && h1.EqualFold(fl.Name, "content-length") {
				h1.WriteField(w, fl.Name, fl.Value) // HEAD, 204, 304: as sent
			}
			continue
		}
		if namedIn(resp.Fields, fl.Name) {
			continue
		}
		if !date && h1.EqualFold(fl.Name, "date") {
			date = true
		}
		h1.WriteField(w, fl.Name, fl.Value)
	}
	// Fields the caller set on the exchange before forwarding (the
	// gateway's RateLimit fields on an allowed request) follow the
	// upstream's, as net/http's path adds them to the upstream's. The
	// framing and connection fields stay the relay's own.
	for k, vs := range x.Header() {
		switch k {
		case "Connection", "Content-Length", "Transfer-Encoding", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade", "Date":
			continue
		}
		for _, v := range vs {
			h1.WriteFieldString(w, k, v)
		}
	}
	now := time.Now()
	if !date {
		_, _ = w.Write(h1.DateLine(now))
	}
	chunkedOut := false
	if hasBody {
		if resp.ContentLength >= 0 && !resp.Chunked {
			h1.WriteContentLength(w, resp.ContentLength)
		} else {
			chunkedOut = true
			_, _ = w.WriteString("Transfer-Encoding: chunked\r\n")
		}
	}
	if e.early && !uc.bodyRead.Load() {
		// An early answer while the client is still sending: the rest
		// of its body will not be forwarded, so its connection cannot
		// carry another request (stopSending cuts it); say so.
		x.SetClose()
	}
	if !x.KeepAlive() {
		_, _ = w.WriteString("Connection: close\r\n")
	}
	_, _ = w.WriteString("\r\n")
	uc.rd.Discard(resp.HeadLen)
	if e.f.OnHeader != nil {
		e.f.OnHeader(now.Sub(e.start))
	}

	untilEOF := !resp.Chunked && resp.ContentLength < 0
	if !hasBody {
		uc.body.Reset(uc.rd, 0, false, false, -1)
	} else {
		uc.body.Reset(uc.rd, resp.ContentLength, resp.Chunked, untilEOF, -1)
	}
	outcome, ok := e.copyBody(uc, w, chunkedOut)
	x.EndRaw(ok)
	sendErr := e.stopSending(uc)
	if ok && sendErr == nil && !untilEOF && uc.complete(hasBody, e.hasBody(), e.early) {
		e.fp.put(pl, e.x.Loop, uc, now)
	} else {
		e.fp.discard(pl, uc)
	}
	return outcome
}

// complete reports whether the exchange on uc provably ended where the
// next one begins, so that the connection can carry another request
// (RFC 9112 §9.3): the response body was read to its end, nothing came
// after it, the upstream keeps the connection, and it read the whole
// request. hasBody says the response may have a body (BodyAllowed),
// reqBody that the request had one, early that the response head came
// before the request body was all sent. Anything else closes the
// connection; reusing it would hand one client's leftovers (or an
// answer to bytes the upstream took for a request) to the next. Both
// engines' exchanges (ServeHTTP1's relay, ServeHTTP's roundTrip) decide
// by it.
func (uc *upConn) complete(hasBody, reqBody, early bool) bool {
	resp := &uc.resp
	switch {
	case resp.Close || !uc.body.Done():
		return false
	case len(uc.rd.Buffered()) > 0:
		// Bytes after the response: a body to a HEAD, 204 or 304, more
		// than Content-Length, a second response.
		return false
	case !hasBody && resp.Status == 204 && (resp.Chunked || resp.ContentLength > 0):
		// A 204 announcing a body (which it may not have): its bytes
		// may still be on their way.
		return false
	case reqBody && !keepsAfterBody(!early, resp.Status):
		// An answer that came before the whole body was sent, or an
		// error answer to a request with a body (401 or 413 to an
		// upload is typically sent without reading it): the upstream
		// may read the rest of the body as a request of its own.
		return false
	}
	return true
}

// copyBody relays the response body; it flushes the client's writer
// before waiting on the upstream, so streamed answers flow.
func (e *exchange1) copyBody(uc *upConn, w *bufio.Writer, chunkedOut bool) (string, bool) {
	sp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(sp)
	buf := *sp
	// The body is read from the socket by Total (or the request
	// timeout), not by the response-header deadline still in force: that
	// is set before the first read that can reach the socket, which is
	// any read but of a Content-Length body all buffered with the head (a
	// read of a chunked body goes on to the socket when a chunk outruns
	// the buffer).
	resp := &uc.resp
	bodyDeadline := resp.ContentLength >= 0 && !resp.Chunked && int64(len(uc.rd.Buffered())) >= resp.ContentLength
	sinceYield := 0
	for {
		if uc.body.Done() {
			if chunkedOut {
				_, _ = w.WriteString("0\r\n\r\n")
			}
			return "ok", true
		}
		if len(uc.rd.Buffered()) == 0 && w.Buffered() > 0 {
			if err := w.Flush(); err != nil {
				return "canceled", false // the client went away
			}
		}
		if !bodyDeadline {
			bodyDeadline = true
			uc.rdl.Set(uc.c, e.end, 0)
		}
		n, err := uc.body.Read(buf)
		if lp := e.x.Loop; lp != nil && n > 0 {
			// Two fast peers never make the relay wait: let the
			// loop's other connections in every loopYieldBytes.
			if sinceYield += n; sinceYield >= loopYieldBytes {
				sinceYield = 0
				if lp.Yield() != nil {
					return "canceled", false
				}
			}
		}
		if n > 0 {
			if chunkedOut {
				h1.WriteChunkHeader(w, n)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return "canceled", false
			}
			if chunkedOut {
				_, _ = w.WriteString("\r\n")
			}
		}
		if err == io.EOF {
			if chunkedOut {
				_, _ = w.WriteString("0\r\n\r\n")
			}
			return "ok", true
		}
		if err != nil {
			if isTimeout(err) {
				if e.requestExpired() {
					return "canceled", false
				}
				return "timeout", false
			}
			return "error", false
		}
	}
}

// loopYieldBytes is how much of a response body is relayed on an event
// loop before it yields to the loop's other connections.
const loopYieldBytes = 256 << 10

// namedIn reports whether a Connection field of fields names name.
func namedIn(fields []h1.Field, name []byte) bool {
	for _, fl := range fields {
		if h1.EqualFold(fl.Name, "connection") && hasTokenBytes(fl.Value, string(name)) {
			return true
		}
	}
	return false
}

// fail answers a request no attempt could serve, as ServeHTTP's error
// handler does, and returns the outcome.
func (e *exchange1) fail(err error) string {
	p, x := e.p, e.x
	addHead(x.Header(), e.f.Head)
	if x.HasBody() && (errors.Is(err, errClientBody) || x.Body().Err() != nil) && !errors.Is(err, errRequestTimeout) {
		if e.requestExpired() {
			return failCanceled.outcome // the host answers 504
		}
		return p.answer(x, x.Stub(), failInvalidBody, describeBody(x.Body().Err()))
	}
	if errors.Is(err, errClientGone) {
		outcome := p.answer(x, nil, failCanceled, "")
		x.EndRaw(false) // nobody reads an answer: cut the connection
		return outcome
	}
	if errors.Is(err, errRequestTimeout) || e.requestExpired() {
		return p.answer(x, nil, failCanceled, "") // the host answers 504 timeout
	}
	return p.answer(x, nil, upstreamFailure(err), describe(err))
}

// addHead adds the field lines of head (Forward.Head) to h.
func addHead(h http.Header, head []byte) {
	for len(head) > 0 {
		line, rest, _ := bytes.Cut(head, []byte("\r\n"))
		head = rest
		if name, value, ok := bytes.Cut(line, []byte(": ")); ok {
			h.Add(string(name), string(value))
		}
	}
}

func describeBody(err error) string {
	if err == nil {
		return "body ended early"
	}
	return err.Error()
}
