package host

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulwarkhq/bulwark/internal/admission"
	"github.com/bulwarkhq/bulwark/wire"
)

// connKey keys the per-connection bookkeeping in the connection context.
type connKey struct{}

// connInfo is created once per accepted connection (ConnContext); HTTP/2
// streams of one connection share it.
type connInfo struct {
	requests atomic.Int64
	shard    uint32        // registry shard of this connection's requests
	framing  *framingWatch // an HTTP/1.1 connection's (framing.go), or nil
	// note is the FastHandler's NetHTTP note for the connection's first
	// request on net/http (an HTTP/1.1 connection's: read and cleared by
	// that request's goroutine, the connection's), nil once taken.
	note any
	// tls is the TLS state of an HTTP/1.1 connection net/http serves
	// over a handoffConn (tls.go), which it does not see as TLS.
	tls *tls.ConnectionState
}

// Fixed rejection answers. Titles never carry request data.
var (
	probNotReady = retryable(wire.New(wire.CodeNotReady))
	probDraining = retryable(wire.New(wire.CodeDraining))
	probOverload = retryable(wire.New(wire.CodeOverloaded))
	probURL      = wire.New(wire.CodeURLTooLong)
	probHeaders  = wire.New(wire.CodeTooManyHeaders)
	probBody     = wire.New(wire.CodePayloadTooLarge)
	probMethod   = wire.New(wire.CodeMethodNotAllowed)
	probTimeout  = wire.New(wire.CodeTimeout)
	probInternal = wire.New(wire.CodeInternal)
	// probBodyTimeout answers a request whose body did not arrive in time.
	probBodyTimeout = wire.New(wire.CodeRequestTimeout)
)

var (
	bodyLive  = []byte(`{"status":"live"}` + "\n")
	bodyReady = []byte(`{"status":"ready"}` + "\n")
	lenLive   = strconv.Itoa(len(bodyLive))
	lenReady  = strconv.Itoa(len(bodyReady))
)

// serve is the listener's server's root handler: probes, pre-admission
// bounds, admission, then the activated handler (or the listener's own).
func (l *listener) serve(w http.ResponseWriter, r *http.Request) {
	h := l.h
	if ids := h.cfg.RequestIDs; ids != nil {
		ids.assign(w, r)
	}
	shed := false
	if rh := l.cfg.Requests; rh != nil {
		shed = rh.BeginRequest(w, r)
		defer rh.EndRequest(r)
	}
	var shard uint32
	var note any
	if ci, ok := r.Context().Value(connKey{}).(*connInfo); ok {
		if ci.note != nil {
			note, ci.note = ci.note, nil // the declined request's only
		}
		if r.TLS == nil {
			r.TLS = ci.tls
		}
		if ci.requests.Add(1) >= int64(h.lim.MaxRequestsPerConn) {
			w.Header().Set("Connection", "close")
		}
		if ci.framing != nil && r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 && ci.framing.sawBoth() {
			// Content-Length with Transfer-Encoding (framing.go).
			w.Header().Set("Connection", "close")
		}
		shard = ci.shard
	}
	switch r.URL.Path {
	case "/livez":
		h.probe(w, r, true)
		return
	case "/readyz":
		h.probe(w, r, false)
		return
	}
	if reason, p := h.gate(shed, len(r.RequestURI), headerCount(r.Header), r.ContentLength); reason != "" {
		h.reject(w, r, reason, p)
		return
	}
	h.run(w, r, &h.shards[shard], note, l.cfg.Handler)
}

// gate runs the checks every request passes before its handler, on
// both engines and in this order: not ready or draining (then nothing
// else matters and nothing is read), shed by the overload hooks, URL
// length, header count, declared body length, and admission. It returns
// "" when the request is admitted, holding an in-flight slot the caller
// releases, else the rejection reason and its problem.
func (h *Host) gate(shed bool, urlBytes, headers int, contentLength int64) (string, wire.Problem) {
	switch stateOf(h.word.Load()) {
	case stateActive:
	case stateNotReady:
		return RejectNotReady, probNotReady
	default:
		return RejectDraining, probDraining
	}
	switch {
	case shed:
		return RejectShed, probOverload
	case urlBytes > h.lim.MaxURLBytes:
		return RejectURLTooLong, probURL
	case headers > h.lim.MaxHeaders:
		return RejectTooManyHeaders, probHeaders
	case contentLength > h.lim.MaxBodyBytes:
		return RejectBodyTooLarge, probBody
	}
	switch reason := h.admit(); reason {
	case "":
		return "", wire.Problem{}
	case RejectNotReady:
		return reason, probNotReady
	case RejectInFlight:
		return reason, probOverload
	default:
		return reason, probDraining
	}
}

func headerCount(hd http.Header) int {
	n := 0
	for _, v := range hd {
		n += len(v)
	}
	return n
}

// probe answers /livez and /readyz. Probes consume no admission budget and
// are never gated.
func (h *Host) probe(w http.ResponseWriter, r *http.Request, live bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.reject(w, r, RejectProbeMethod, probMethod)
		return
	}
	if r.ContentLength != 0 && r.ProtoMajor == 1 {
		// A probe carrying a body is odd; do not read it.
		closeUnread(w)
	}
	var body []byte
	var n string
	st := stateOf(h.word.Load()) // one load: one consistent answer
	unready := ""
	if st == stateActive && !live && h.cfg.ReadyCheck != nil && !h.retired.Load() {
		unready = h.cfg.ReadyCheck()
	}
	switch {
	case live:
		body, n = bodyLive, lenLive
	case unready != "":
		writeProblem(w, r, retryable(wire.New(unready)))
		return
	case st == stateActive && !h.retired.Load():
		body, n = bodyReady, lenReady
		if f := h.cfg.ReadyDetail; f != nil {
			if deps := f(); len(deps) > 0 {
				b, err := json.Marshal(struct {
					Status       string            `json:"status"`
					Dependencies map[string]string `json:"dependencies"`
				}{"ready", deps})
				if err == nil {
					body = append(b, '\n')
					n = strconv.Itoa(len(body))
				}
			}
		}
	case st == stateNotReady:
		writeProblem(w, r, probNotReady)
		return
	default:
		writeProblem(w, r, probDraining)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", n)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// reject reports reason and answers p without reading the body.
func (h *Host) reject(w http.ResponseWriter, r *http.Request, reason string, p wire.Problem) {
	h.report(reason)
	writeProblem(w, r, p)
}

func (h *Host) report(reason string) {
	if h.onReject == nil {
		return
	}
	defer func() { _ = recover() }()
	h.onReject(reason)
}

// retryable returns p with Retry-After: 1 (the 503s of a starting,
// draining or saturated process are worth retrying soon, elsewhere).
func retryable(p wire.Problem) wire.Problem {
	p.RetryAfter = 1
	return p
}

// writeProblem answers p for a request whose body was not (fully) read.
// Over HTTP/1.1 the connection is closed after the answer (wire.WriteClose
// also expires the read side, so that net/http does not wait for an
// announced body it would otherwise try to drain). Over HTTP/2 only the
// stream ends (closing would tear down every other stream), except when
// draining, where a GOAWAY is what the client needs.
func writeProblem(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	if r.ProtoMajor == 1 {
		wire.WriteClose(w, r, p)
		return
	}
	if p.Code == wire.CodeDraining {
		w.Header().Set("Connection", "close")
	}
	wire.Write(w, p)
}

// closeUnread makes the server give up on the rest of an HTTP/1.1 body:
// after the response is flushed, net/http would otherwise read up to 256
// KiB of unread body looking for EOF before closing.
func closeUnread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0)) // any past instant
}

// numShards is the number of in-flight registry shards.
const numShards = 16

// shard is one part of the in-flight registry: an intrusive list of
// admitted requests in admission order. Because every request gets the same
// timeout, that is also deadline order, so one timer per shard, armed for
// the head, enforces every request timeout: there is no timer per request.
// Padded so shards do not share cache lines.
type shard struct {
	mu         sync.Mutex
	head, tail *request
	timer      *time.Timer
	armed      bool
	closed     bool
	epoch      time.Time // the host's epoch; deadlines are monotonic offsets from it
	_          [64]byte
}

// now is the monotonic time since the epoch: one clock read, cheaper than
// time.Now on hosts where reading the clock is slow.
func (s *shard) now() int64 { return int64(time.Since(s.epoch)) }

// add registers rq with a deadline timeout from now.
func (s *shard) add(rq *request, timeout time.Duration) {
	s.mu.Lock()
	rq.expireAt = s.now() + int64(timeout)
	rq.prev = s.tail
	if s.tail != nil {
		s.tail.next = rq
	} else {
		s.head = rq
	}
	s.tail = rq
	if !s.armed && !s.closed {
		s.armLocked(timeout)
	}
	s.mu.Unlock()
}

func (s *shard) armLocked(d time.Duration) {
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
	} else {
		s.timer.Reset(d)
	}
	s.armed = true
}

// remove unregisters rq (a no-op if its timeout already unlinked it).
func (s *shard) remove(rq *request) {
	s.mu.Lock()
	s.unlinkLocked(rq)
	s.mu.Unlock()
}

func (s *shard) unlinkLocked(rq *request) {
	if rq.unlinked {
		return
	}
	if rq.prev != nil {
		rq.prev.next = rq.next
	} else {
		s.head = rq.next
	}
	if rq.next != nil {
		rq.next.prev = rq.prev
	} else {
		s.tail = rq.prev
	}
	rq.prev, rq.next, rq.unlinked = nil, nil, true
}

// expire is the shard timer: it cancels (cause ErrRequestTimeout) and
// unlinks every request whose deadline passed, then re-arms for the next.
// A timed-out request needs no drain cancellation: it is already cancelled.
func (s *shard) expire() {
	var due []context.CancelCauseFunc
	s.mu.Lock()
	s.armed = false
	now := s.now()
	for s.head != nil && s.head.expireAt <= now {
		rq := s.head
		s.unlinkLocked(rq)
		due = append(due, rq.cancel)
	}
	if s.head != nil && !s.closed {
		s.armLocked(time.Duration(s.head.expireAt - now))
	}
	s.mu.Unlock()
	for _, c := range due {
		c(ErrRequestTimeout)
	}
}

// cancelAll is step (b) of the drain: it cancels every registered request
// with cause. Requests registering concurrently see drainCause and cancel
// themselves (see run), so none is missed.
func (h *Host) cancelAll(cause error) {
	h.drainCause.CompareAndSwap(nil, &cause)
	var cancels []context.CancelCauseFunc
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		for rq := s.head; rq != nil; rq = rq.next {
			cancels = append(cancels, rq.cancel)
		}
		s.mu.Unlock()
	}
	for _, c := range cancels {
		c(cause)
	}
}

// stopTimers stops the shard timers at the end of a stop.
func (h *Host) stopTimers() {
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		s.closed = true
		if s.timer != nil {
			s.timer.Stop()
		}
		s.mu.Unlock()
	}
}

// request is everything the host keeps for one admitted request, allocated
// together.
type request struct {
	h      *Host
	refs   atomic.Int32 // ServeHTTP itself plus Holds; the slot is freed at 0
	ctx    reqCtx
	rw     responseWriter
	body   bodyReader
	cancel context.CancelCauseFunc
	note   any // NoteOf
	// expireAt is the request timeout as an offset from the host's epoch,
	// written once by shard.add before the handler runs.
	expireAt int64
	// Held under the shard's mutex.
	prev, next *request
	unlinked   bool
}

// reqCtx is the admitted handler's context: a cancel context under the
// request context, cancelled at the request timeout (ErrRequestTimeout)
// and at drain (ErrDraining). It reports the timeout as its deadline and
// carries the request for Hold.
type reqCtx struct {
	context.Context
	rq *request
}

// Deadline reports the request timeout, or the parent's deadline if that
// is earlier.
func (c *reqCtx) Deadline() (time.Time, bool) {
	d := c.rq.h.epoch.Add(time.Duration(c.rq.expireAt))
	if pd, ok := c.Context.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

func (c *reqCtx) Value(key any) any {
	if key == (admission.ContextKey{}) {
		return c.rq
	}
	return c.Context.Value(key)
}

// NoteOf returns the note of the NetHTTP verdict with which the
// activated handler's ServeHTTP1 declined r on the fast engine (see
// Verdict), or nil: for any other request, including the later ones of
// the connection net/http serves from then on. r is the request the
// host gave the handler, or one derived from it (its context's values
// kept).
func NoteOf(r *http.Request) any {
	if rq, ok := r.Context().Value(admission.ContextKey{}).(*request); ok {
		return rq.note
	}
	return nil
}

// unref drops one reference; the last one frees the admission slot.
func (rq *request) unref() {
	if rq.refs.Add(-1) == 0 {
		rq.h.release()
	}
}

// run serves an admitted request, with note (NoteOf), by own when set
// (the listener's Handler), else the activated handler. The admission
// slot is held until the handler and every Hold it took have returned.
func (h *Host) run(w http.ResponseWriter, r *http.Request, sh *shard, note any, own http.Handler) {
	rq := &request{h: h, note: note}
	rq.refs.Store(1)
	parent := r.Context()
	var cctx context.Context
	cctx, rq.cancel = context.WithCancelCause(parent)
	rq.ctx = reqCtx{Context: cctx, rq: rq}
	rq.rw.w = w
	sh.add(rq, h.lim.RequestTimeout)
	if c := h.drainCause.Load(); c != nil {
		// The drain walked this shard before we registered.
		rq.cancel(*c)
	}

	r2 := r.WithContext(&rq.ctx)
	if r.Body != nil && r.Body != http.NoBody {
		rq.body.rc = http.MaxBytesReader(w, r.Body, h.lim.MaxBodyBytes)
		r2.Body = &rq.body
	}
	handler := own
	if handler == nil {
		handler = h.handler.Load().h
	}

	defer func() {
		// Runs last, also while a panic unwinds.
		cause := context.Cause(cctx)
		sh.remove(rq)
		rq.cancel(context.Canceled)
		if !rq.rw.wrote {
			switch {
			case rq.body.tooLarge.Load():
				h.report(RejectBodyTooLarge)
				writeProblem(w, r, probBody)
			case rq.body.timedOut.Load():
				h.report(RejectBodyTimeout)
				writeProblem(w, r, probBodyTimeout)
			case cause == ErrRequestTimeout:
				h.report(RejectTimeout)
				writeProblem(w, r, probTimeout)
			case errors.Is(cause, ErrDraining) || errors.Is(cause, ErrStopped):
				writeProblem(w, r, probDraining)
			}
		}
		rq.unref()
	}()
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler {
			panic(p)
		}
		h.report(RejectPanic)
		h.log.Error("host: handler panicked")
		if rq.rw.wrote {
			// Part of an answer is out; abort the connection (net/http
			// does not log ErrAbortHandler).
			panic(http.ErrAbortHandler)
		}
		rq.rw.wrote = true
		writeProblem(w, r, probInternal)
	}()
	handler.ServeHTTP(&rq.rw, r2)
}

// responseWriter records whether the handler committed an answer, so the
// host can send a fallback (413, 408, 504, 503, 500) only when nothing was
// written. It keeps http.ResponseController working through Unwrap.
type responseWriter struct {
	w     http.ResponseWriter
	wrote bool
}

func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

func (rw *responseWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		rw.wrote = true
	}
	rw.w.WriteHeader(code)
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	rw.wrote = true
	return rw.w.Write(p)
}

// ReadFrom keeps sendfile/splice paths of the underlying writer.
func (rw *responseWriter) ReadFrom(src io.Reader) (int64, error) {
	rw.wrote = true
	return io.Copy(rw.w, src)
}

// Flush implements http.Flusher.
func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError is used by http.ResponseController.
func (rw *responseWriter) FlushError() error {
	rw.wrote = true
	return http.NewResponseController(rw.w).Flush()
}

// Hijack implements http.Hijacker (HTTP/1.1 only).
func (rw *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	rw.wrote = true
	return http.NewResponseController(rw.w).Hijack()
}

// Unwrap returns the server's ResponseWriter for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }

// bodyReader is the admitted request's body: http.MaxBytesReader bound to
// Limits.MaxBodyBytes, recording whether the bound was hit or a read timed
// out (the client was too slow: 408 request_timeout). It may be read
// from another goroutine (a proxy's transport), hence the atomic.
type bodyReader struct {
	rc       io.ReadCloser
	tooLarge atomic.Bool
	timedOut atomic.Bool // the client did not send the body in time
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			b.tooLarge.Store(true)
		case errors.As(err, &ne) && ne.Timeout():
			b.timedOut.Store(true)
		}
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.rc.Close() }
