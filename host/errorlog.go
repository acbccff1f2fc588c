package host

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// newErrorLog returns the http.Server ErrorLog. net/http's messages embed
// the client's address ("TLS handshake error from 1.2.3.4:5: ...", "panic
// serving 1.2.3.4:5: ..."), which must not reach logs; they are mapped to
// fixed messages and the text is dropped.
func newErrorLog(l *slog.Logger) *log.Logger {
	return log.New(errorLogWriter{l}, "", 0)
}

type errorLogWriter struct{ l *slog.Logger }

var errorLogClasses = []struct {
	needle, msg string
	level       slog.Level
}{
	{"TLS handshake error", "host: tls handshake failed", slog.LevelDebug},
	{"panic serving", "host: handler panic (net/http)", slog.LevelError},
	{"Accept error", "host: accept error", slog.LevelWarn},
	{"http2:", "host: http2 connection error", slog.LevelDebug},
	{"superfluous response.WriteHeader", "host: handler wrote the header twice", slog.LevelWarn},
}

func (w errorLogWriter) Write(p []byte) (int, error) {
	for _, c := range errorLogClasses {
		if bytes.Contains(p, []byte(c.needle)) {
			w.l.Log(context.Background(), c.level, c.msg)
			return len(p), nil
		}
	}
	w.l.Warn("host: http server error")
	return len(p), nil
}
