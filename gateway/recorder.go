package gateway

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// recorder remembers the status of a response and whether a policy
// rejected the request. It passes Flush, Hijack and the rest of
// http.ResponseController through, so streaming and upgrades work.
type recorder struct {
	http.ResponseWriter
	status   int
	rejected bool
	start    time.Time
	timed    *routeMetrics
}

var recorders = sync.Pool{New: func() any { return new(recorder) }}

func getRecorder(w http.ResponseWriter) *recorder {
	rec := recorders.Get().(*recorder)
	*rec = recorder{ResponseWriter: w, status: http.StatusOK}
	return rec
}

func putRecorder(rec *recorder) {
	*rec = recorder{}
	recorders.Put(rec)
}

// markRejected records that a policy answered instead of the upstream.
func markRejected(w http.ResponseWriter) {
	if rec, ok := w.(*recorder); ok {
		rec.rejected = true
	}
}

func (rec *recorder) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		rec.status = code
		rec.headerDone()
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.headerDone()
	return rec.ResponseWriter.Write(b)
}

func (rec *recorder) headerDone() {
	if rec.timed != nil {
		rec.timed.observe(time.Since(rec.start))
		rec.timed = nil
	}
}

// Flush implements http.Flusher.
func (rec *recorder) Flush() {
	rec.headerDone()
	_ = http.NewResponseController(rec.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	rec.headerDone()
	return http.NewResponseController(rec.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }
